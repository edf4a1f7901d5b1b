"""The warning for a WebSocket provider refused a slot: at once, then once per interval per slot and reason."""

from __future__ import annotations

import logging

import pytest

from gateway.southbound.websocket.refusal_log import KEYS_KEPT, RefusalLog

HELD = 'Slot already held by a live provider; call provider_status on _broker. Slot: "pump-1"'


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_the_first_refusal_is_warned_of_with_its_slot_link_and_reason(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    RefusalLog(60, clock).refused("pump-1", "held", HELD, "websocket", "127.0.0.1:40112")
    assert warnings(caplog) == [f"provider refused for slot pump-1 over websocket from 127.0.0.1:40112: {HELD}"]
    assert caplog.records[0].__dict__["slot"] == "pump-1"
    assert caplog.records[0].__dict__["refusal"] == "held"


def test_repeats_within_the_interval_are_counted_and_told_with_the_next_warning(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(60, clock)
    for _ in range(5):
        refusals.refused("pump-1", "held", HELD, "websocket", "127.0.0.1:40112")
        clock.now += 10
    assert len(warnings(caplog)) == 1
    clock.now += 10  # 60 s after the first
    refusals.refused("pump-1", "held", HELD, "websocket", "127.0.0.1:40200")
    assert warnings(caplog)[1].endswith(f"{HELD} (4 more refused since the last warning)")
    clock.now += 60
    refusals.refused("pump-1", "held", HELD, "websocket", "127.0.0.1:40300")
    assert not warnings(caplog)[2].endswith("warning)")


def test_each_slot_and_reason_has_its_own_interval(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(60, clock)
    refusals.refused("pump-1", "held", HELD, "websocket", "a")
    refusals.refused("pump-2", "held", HELD, "websocket", "a")
    refusals.refused("pump-1", "slot_limit", "Too many slots", "websocket-mux", "a")
    refusals.refused("pump-1", "held", HELD, "websocket", "a")
    assert len(warnings(caplog)) == 3


def test_an_invalid_name_is_not_logged_and_a_shutdown_is_no_news(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(60, clock)
    refusals.refused("bad\u202ename", "bad_name", "Slot name contains bidirectional controls", "websocket-mux", "a")
    refusals.refused("pump-1", "shutdown", "Gateway is shutting down; reconnect later", "websocket", "a")
    assert warnings(caplog) == [
        "provider refused for slot (invalid name) over websocket-mux from a: Slot name contains bidirectional controls"
    ]


def test_the_pairs_remembered_are_bounded(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(60, clock)
    for n in range(KEYS_KEPT + 1):
        refusals.refused(f"pump-{n}", "slot_limit", "Too many slots", "websocket", "a")
    refusals.refused("pump-0", "slot_limit", "Too many slots", "websocket", "a")  # forgotten: warned again
    refusals.refused(f"pump-{KEYS_KEPT}", "slot_limit", "Too many slots", "websocket", "a")  # remembered
    assert len(warnings(caplog)) == KEYS_KEPT + 2


def test_a_peer_without_a_valid_secret_cannot_vary_the_slot_to_be_warned_of_again(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(60, clock)
    for number in range(5):
        refusals.refused(
            f"probe-{number}",
            "unknown_secret",
            "HTTP 401 invalid_provider_token",
            "websocket",
            f"10.0.0.9:{40000 + number}",
        )
    refusals.refused("probe-9", "unknown_secret", "HTTP 401 invalid_provider_token", "websocket", "10.0.0.7:40000")
    assert len(warnings(caplog)) == 2  # one per peer address, not per slot name it asked for
    clock.now += 61
    refusals.refused("probe-10", "unknown_secret", "HTTP 401 invalid_provider_token", "websocket", "10.0.0.9:41000")
    assert warnings(caplog)[-1].endswith("(4 more refused since the last warning)")
