"""Why an execution limit refuses (LimitRefusal: the -32029 answer's words and data), and the bounded
record of recent refusals that broker_info and broker_diagnose show."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

RECENT_REFUSALS = 50
"""Refusals kept for diagnosis (the oldest goes first); the log keeps every one, the audit trail every refused call."""

# data.reason of a refusal. The token buckets of [limits.rate] answer -32029 with reason "rate_limited";
# these reasons are the execution limits' own.
LIMIT_EXCEEDED = "limit_exceeded"
"""A rate, calls or budget window is full; time alone frees it (retryAfterMs)."""
QUANTITY_EXCEEDS_LIMIT = "quantity_exceeds_limit"
"""A reservation asks for more than the budget's max: it can never pass."""
CONCURRENCY_EXCEEDED = "concurrency_exceeded"
"""As many calls as the rule allows are in flight; one ending frees a place (no retryAfterMs, unless only
places kept by cancelled or timed-out calls block it: then when their holds end)."""
LIMIT_KEYS_FULL = "limit_keys_full"
"""The rule holds max_keys groups, none idle; retryAfterMs when time alone idles one."""
LEDGER_FULL = "ledger_full"
NO_BUDGET_RULE = "no_budget_rule"
IDEMPOTENCY_CONFLICT = "idempotency_conflict"
RESERVATION_EXPIRED_OR_SETTLED = "reservation_expired_or_settled"
UNKNOWN_RESERVATION = "unknown_reservation"
SETTLEMENT_CONFLICT = "settlement_conflict"
INVALID_USAGE = "invalid_usage"
CALLER_RESERVATIONS_FULL = "caller_reservations_full"
"""The caller holds MAX_LIVE_PER_CALLER live (unsettled, unexpired) reservations already."""
# A reservation outside the reserving provider's live declaration: broker/authorize's reason names.
UNDECLARED_CAPABILITY = "undeclared-capability"
UNDECLARED_UNIT = "undeclared-unit"
UNDECLARED_RESOURCE = "undeclared-resource"


def duration(ms: int) -> str:
    """A window in the words of a refusal: 1 h, 90 s, 250 ms."""
    for size, unit in ((3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


@dataclass(frozen=True)
class LimitRefusal:
    """One refusal: `reason` (data.reason), the rule, and when to try again (None: time alone does not help)."""

    reason: str
    text: str
    """What happened, in words the caller can act on."""
    rule_id: str | None = None
    retry_after_ms: int | None = None
    kind: str | None = None
    """Which limit of the rule: "rate", "calls", "concurrency", "budget" (None: not one of them)."""

    def message(self) -> str:
        retry = f"; retry after {self.retry_after_ms} ms" if self.retry_after_ms is not None else ""
        return self.text + retry

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"reason": self.reason}
        if self.rule_id is not None:
            data["ruleId"] = self.rule_id
        if self.retry_after_ms is not None:
            data["retryAfterMs"] = self.retry_after_ms
        if self.kind is not None:
            data["kind"] = self.kind
        return data


def deciding(refusals: Iterable[LimitRefusal]) -> LimitRefusal | None:
    """The refusal to answer with when several rules refuse: one that time alone does not resolve,
    else the longest wait (retrying sooner would be refused again)."""
    found = list(refusals)
    if not found:
        return None
    timeless = [refusal for refusal in found if refusal.retry_after_ms is None]
    if timeless:
        return timeless[0]
    return max(found, key=lambda refusal: refusal.retry_after_ms or 0)


class RefusalLog:
    """The count of refusals and the last RECENT_REFUSALS of them, for status and diagnosis (each rule's
    own count lives with its counters)."""

    def __init__(self, keep: int = RECENT_REFUSALS) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.total = 0

    def add(self, refusal: LimitRefusal, time_ms: int, **context: Any) -> None:
        self.total += 1
        self.recent.append({"time_ms": time_ms, **refusal.data(), **context})

    def status(self) -> dict[str, Any]:
        return {"total": self.total, "recent": list(self.recent)}
