"""Which attach and leave lines of a slot are written (gateway/core/slot_flaps.py): the first ones as
they come, then one summary per logging.repeat_interval_s while the slot flaps."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.core.slot_flaps import HOSTS_NAMED, SlotFlapLog, host_of

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
    assert flaps.attached("pump", clock.now - 0.01, "b over mqtt")  # one quick attach (a reboot): written
    assert flaps.left("pump", "rebooted")  # no quiet yet: written
    clock.now += 0.01
    assert flaps.attached("pump", clock.now - 0.01, "b over mqtt")  # quick again: written, and quiet begins
    assert not flaps.left("pump", "pushed off again")
    assert flaps.attached("pump", clock.now, "a over mqtt")  # a host new to this run of windows: written
    assert not flaps.left("pump", "pushed off a third time")
    assert not flaps.attached("pump", clock.now, "b over mqtt")
    assert not flaps.left("pump", "pushed off a fourth time")
    await asyncio.sleep(INTERVAL_S * 1.5)
    assert summaries(caplog) == [
        "slot pump attached and left 3 times in the last 0.1 s (vacant now); attaches from b over mqtt (2), a over "
        "mqtt (1); last reason: pushed off a fourth time; last attach from b over mqtt; two providers on one slot "
        "push each other off (docs/device-mqtt.md, Troubleshooting)"
    ]
    assert not flaps.attached("pump", clock.now, "b over mqtt")  # the next window counts it
    await asyncio.sleep(INTERVAL_S)
    assert summaries(caplog)[1].startswith("slot pump attached 1 time and left 0 times in the last 0.1 s")
    await asyncio.sleep(INTERVAL_S * 1.5)  # a window with nothing in it ends the quiet
    assert flaps.left("pump", "gone")
    assert len(summaries(caplog)) == 2


async def test_one_quick_attach_is_a_reboot_or_a_takeover_and_its_leave_is_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: False, clock)
    assert flaps.attached("pump", None, "a over websocket")
    assert flaps.left("pump", "rebooting")
    clock.now += 1
    assert flaps.attached("pump", clock.now - 1, "a over websocket")  # back within the interval, once
    clock.now += 0.5
    assert flaps.left("pump", "switched off")  # written as it comes, not held for a summary
    clock.now += INTERVAL_S
    assert flaps.attached("pump", clock.now - INTERVAL_S, "a over websocket")  # a later return: no quiet either
    await asyncio.sleep(INTERVAL_S * 1.5)
    flaps.close()
    assert not summaries(caplog)


async def test_a_reconnect_after_the_interval_opens_no_window(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: True, clock)
    assert flaps.attached("pump", clock.now - 2 * INTERVAL_S, "a over websocket")
    assert flaps.left("pump", "reset")
    flaps.close()
    assert not summaries(caplog)


async def test_an_attach_from_another_host_is_written_while_a_slot_flaps(caplog: pytest.LogCaptureFixture) -> None:
    """A peer that keeps flapping hides no other host taking the slot: each host's first attach in a run
    of windows is written (the run carries across windows), the rest counted and named by host."""
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: True, clock)
    board = ("192.0.2.7:40001 over websocket", "192.0.2.7")
    assert flaps.attached("pump", None, *board)
    assert flaps.left("pump", "closed")
    assert flaps.attached("pump", clock.now, "192.0.2.7:40001 over websocket", "192.0.2.7")  # one quick attach
    assert flaps.left("pump", "closed")
    assert flaps.attached("pump", clock.now, "192.0.2.7:40002 over websocket", "192.0.2.7")  # quiet begins
    for port in range(40003, 40006):
        assert not flaps.left("pump", "closed")
        assert not flaps.attached("pump", clock.now, f"192.0.2.7:{port} over websocket", "192.0.2.7")
    assert not flaps.left("pump", "closed")
    assert flaps.attached("pump", clock.now, "198.51.100.9:5555 over websocket", "198.51.100.9")
    assert not flaps.left("pump", "taken")
    assert not flaps.attached("pump", clock.now, "198.51.100.9:5556 over websocket", "198.51.100.9")
    await asyncio.sleep(INTERVAL_S * 1.5)
    (summary,) = summaries(caplog)
    assert (
        "; attaches from 192.0.2.7 (4), 198.51.100.9 (2); last reason: taken; last attach from 198.51.100.9:5556"
        in (summary)
    )
    # The next window of the same run: the hosts are known, nothing is written as it comes.
    assert not flaps.left("pump", "closed")
    assert not flaps.attached("pump", clock.now, "198.51.100.9:5557 over websocket", "198.51.100.9")
    assert not flaps.attached("pump", clock.now, "192.0.2.7:40009 over websocket", "192.0.2.7")
    flaps.close()


async def test_the_hosts_of_a_run_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flaps = SlotFlapLog(lambda: INTERVAL_S, lambda slot: True, clock)
    assert flaps.attached("pump", clock.now, "host-0 over serial", "host-0")  # one quick attach: written
    assert flaps.attached("pump", clock.now, "host-0 over serial", "host-0")  # quiet begins
    written = [flaps.attached("pump", clock.now, f"host-{n} over serial", f"host-{n}") for n in range(1, 12)]
    assert written == [True] * (HOSTS_NAMED - 1) + [False] * (12 - HOSTS_NAMED)
    assert not flaps.attached("pump", clock.now, "host-11 over serial", "host-11")
    await asyncio.sleep(INTERVAL_S * 1.5)
    (summary,) = summaries(caplog)
    named = ", ".join(f"host-{n} (1)" for n in range(HOSTS_NAMED))
    assert f"; attaches from {named}, and 5 from other hosts; last reason: (none); last attach from host-11" in summary
    flaps.close()


def test_the_host_of_a_peer_is_its_address_without_the_port() -> None:
    assert host_of("127.0.0.2:51000") == "127.0.0.2"
    assert host_of("::1:51000") == "::1"  # how the WebSocket endpoints write an IPv6 peer
    assert host_of("[2001:db8::5]:51000") == "2001:db8::5"
    assert host_of("/dev/ttyUSB0") == "/dev/ttyUSB0"
    assert host_of("pid 4242") == "pid 4242"
    assert host_of("local mcpb/pump") == "local mcpb/pump"
    assert host_of("example.org:1883") == "example.org:1883"
