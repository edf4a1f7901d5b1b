"""Which attach and leave lines of a slot are written (gateway/core/slot_flaps.py): the first ones as
they come, then one summary per logging.repeat_interval_s while the slot flaps."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.core.slot_flaps import SlotFlapLog

INTERVAL_S = 0.1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


async def test_a_slot_that_flaps_is_summarized_and_then_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: False, clock)
    assert flaps.attached("pump", None, "a over mqtt")  # never held: written
    assert flaps.left("pump", "pushed off")
    clock.now += 0.01
    assert flaps.attached("pump", clock.now - 0.01, "b over mqtt")  # quick again: written, and quiet begins
    assert not flaps.left("pump", "pushed off again")
    assert not flaps.attached("pump", clock.now, "a over mqtt")
    assert not flaps.left("pump", "pushed off a third time")
    await asyncio.sleep(INTERVAL_S * 1.5)
    assert summaries(caplog) == [
        "slot pump attached and left 2 times in the last 0.1 s (vacant now); last reason: pushed off a third time; "
        "last attach from a over mqtt; two providers on one slot push each other off (docs/device-mqtt.md, "
        "Troubleshooting)"
    ]
    assert not flaps.attached("pump", clock.now, "b over mqtt")  # the next window counts it
    await asyncio.sleep(INTERVAL_S)
    assert summaries(caplog)[1].startswith("slot pump attached 1 time and left 0 times in the last 0.1 s")
    await asyncio.sleep(INTERVAL_S * 1.5)  # a window with nothing in it ends the quiet
    assert flaps.left("pump", "gone")
    assert len(summaries(caplog)) == 2


async def test_a_reconnect_after_the_interval_opens_no_window(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: True, clock)
    assert flaps.attached("pump", clock.now - 2 * INTERVAL_S, "a over websocket")
    assert flaps.left("pump", "reset")
    flaps.close()
    assert not summaries(caplog)
