"""The requests the gateway cancelled at a provider or gave up at their deadline, remembered for a while:
MCP lets a cancel cross the provider's answer, and a slow provider answers after the deadline, so such
an answer is expected, not a fault (nor a sign of ids echoed wrongly); it goes to whoever asked to hear
it (a governed call's audit record) and is dropped.
"""

from __future__ import annotations

import logging
import math
import time
from contextvars import ContextVar
from dataclasses import dataclass

from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.provider_state import NO_DEADLINE, LateAnswerSink, Pending

log = logging.getLogger("gateway.provider")

MAX_CANCELLED_REMEMBERED = 1024
"""Cancelled or given-up request ids one provider session remembers at most; past it the oldest is
forgotten first (an answer to it is then counted as unmatched)."""

late_answer_sink: ContextVar[LateAnswerSink | None] = ContextVar("late_answer_sink", default=None)
"""Set around a forward by a caller that wants to hear an answer arriving after its request was
cancelled (gateway/core/governed.py); the provider session keeps it with the request it sends."""


def cancel_reason(cancel: BaseException) -> str:
    """Why a caller gave up, as it said with `task.cancel(reason)`; "client disconnected" when it said
    nothing (its connection went)."""
    return cancel.args[0] if cancel.args and isinstance(cancel.args[0], str) else "client disconnected"


@dataclass(frozen=True, slots=True)
class Cancelled:
    until: float
    """time.monotonic() at which the request's own deadline would have passed: then it is forgotten
    (math.inf for a request given up at its deadline: only newer ones push it out)."""
    sink: LateAnswerSink | None
    how: str
    """How the gateway let the request go, for the log: "cancelled it", "gave it up at its deadline"."""


class CancelledRequests:
    """Request ids of one provider session the gateway cancelled (its caller cancelled or went away, its
    client session ended), each until its deadline would have passed, and ids it gave up at their
    deadline, each until newer ones push it out; at most `max_remembered` in all."""

    def __init__(self, slot: str, max_remembered: int = MAX_CANCELLED_REMEMBERED) -> None:
        self.slot = slot
        self.max_remembered = max_remembered
        self._by_id: dict[JsonId, Cancelled] = {}
        """In the order they were cancelled: the first is the oldest."""

    def __len__(self) -> int:
        return len(self._by_id)

    def remember(self, entry: Pending, request_timeout_ms: int) -> None:
        """The gateway cancelled `entry` upstream. A request with no deadline of its own (a listen
        stream) is remembered for `request_timeout_ms`."""
        now = time.monotonic()
        timeout_ms = entry.timeout_ms if entry.timeout_ms != NO_DEADLINE else request_timeout_ms
        until = (entry.started if entry.timeout_ms != NO_DEADLINE else now) + timeout_ms / 1000
        self._keep(entry, Cancelled(until, entry.late, "cancelled it"), now)

    def gave_up(self, entry: Pending) -> None:
        """`entry` passed its deadline: the gateway answered its caller and cancelled it upstream. A slow
        provider's answer to it may come at any time after, so only the count bound forgets it."""
        self._keep(entry, Cancelled(math.inf, entry.late, "gave it up at its deadline"), time.monotonic())

    def _keep(self, entry: Pending, cancelled: Cancelled, now: float) -> None:
        by_id = self._by_id
        by_id.pop(entry.request_id, None)
        by_id[entry.request_id] = cancelled
        while by_id:
            oldest = next(iter(by_id))
            if len(by_id) <= self.max_remembered and by_id[oldest].until > now:
                break
            del by_id[oldest]

    def answered(self, request_id: JsonId, body: JsonObject) -> bool:
        """The provider answered `request_id`: True when the gateway had cancelled or given it up (the
        answer is handed to the request's sink, and the id forgotten); False when it names nothing
        remembered."""
        cancelled = self._by_id.pop(request_id, None)
        if cancelled is None or cancelled.until <= time.monotonic():
            return False
        log.debug(
            "provider for slot %s answered id %r after the gateway %s; dropped",
            self.slot,
            request_id,
            cancelled.how,
            extra={"slot": self.slot},
        )
        if cancelled.sink is not None:
            try:
                cancelled.sink(body)
            except Exception:  # a bug in the listener must not break the provider's link
                log.exception("the listener of a late answer on slot %s failed", self.slot)
        return True
