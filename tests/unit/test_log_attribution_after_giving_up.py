"""A client request the gateway gave up is held as a possible owner of log lines naming no request until
the provider answers it, its hold passes, or newer ones push it out (gateway/core/request_notices.py;
docs/upstreams.md, "Log messages")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core import jsonrpc, request_notices
from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.provider_state import Pending
from gateway.core.relay import NoRelay
from gateway.core.request_notices import GivenUpRequests

LINE = jsonrpc.notification("notifications/message", {"level": "info", "data": "secret"})


def call(request_id: str, heard: list[JsonObject] | None = None) -> Pending:
    """A client's tools/call (its own request id stands for its client, as for a 2026-07-28 caller)."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    return Pending(
        request_id=request_id,
        future=future,
        method="tools/call",
        started=time.monotonic(),
        timeout_ms=60_000,
        sink=None if heard is None else heard.append,
        relay=NoRelay("test"),
    )


@dataclass
class Slot:
    """What routing reads of a provider session."""

    given_up: GivenUpRequests
    pending: Mapping[JsonId, Pending] = field(default_factory=dict)
    slot: str = "worker"
    warned_faults: set[str] = field(default_factory=set)


def log_line(slot: Slot) -> JsonObject | None:
    return request_notices.route(slot, LINE, "notifications/message", LINE["params"])


async def test_a_held_request_keeps_lines_from_listeners_and_other_callers_until_answered() -> None:
    slot = Slot(GivenUpRequests(hold_ms=60_000))
    slot.given_up.hold(call("brk-1"))
    assert log_line(slot) is None  # not the server's own: it may be brk-1's caller's
    heard: list[JsonObject] = []
    slot.pending = {"brk-2": call("brk-2", heard)}
    assert log_line(slot) is None and heard == []
    slot.given_up.answered("brk-1")
    assert log_line(slot) is None and heard == [LINE]
    slot.pending = {}
    assert log_line(slot) is LINE


async def test_a_held_request_is_released_when_its_hold_passes() -> None:
    slot = Slot(GivenUpRequests(hold_ms=50))
    slot.given_up.hold(call("brk-1"))
    assert log_line(slot) is None
    await asyncio.sleep(0.2)
    assert len(slot.given_up) == 0 and log_line(slot) is LINE


async def test_past_the_count_bound_the_oldest_held_request_is_released_first() -> None:
    given_up = GivenUpRequests(hold_ms=60_000, max_held=2)
    for number in range(3):
        given_up.hold(call(f"brk-{number}"))
    assert len(given_up) == 2
    given_up.answered("brk-0")  # already released: nothing changes
    given_up.answered("brk-1")
    given_up.answered("brk-2")
    assert len(given_up) == 0 and given_up.clients == {}
    given_up.close()


async def test_the_gateways_own_requests_are_not_held() -> None:
    given_up = GivenUpRequests(hold_ms=60_000)
    own = call("brk-1")
    own.relay = None
    given_up.hold(own)
    assert len(given_up) == 0
