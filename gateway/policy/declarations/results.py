"""Decisions waiting for their `broker/audit/result`: one result per decision, from the identity that
asked for it; the decisions of `resultsRequired` capabilities still waiting past the timeout are
overdue (broker_diagnose shows them). Bounded in age and in count."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_OVERDUE_SHOWN = 20


@dataclass(frozen=True)
class Tracked:
    decision_id: str
    record_id: int | None
    """Its row in the audit trail (None: [audit] is off, or the trail could not take it)."""
    identity: str
    slot: str
    capability: str
    resource: str
    correlation_id: str
    awaited: bool
    """The provider promised a result (`resultsRequired`) for this allowed decision."""
    issued: float


class DecisionTracker:
    def __init__(
        self,
        max_tracked: int,
        retention_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_tracked = max_tracked
        self.retention_s = retention_s
        self.timeout_s = timeout_s
        self.clock = clock
        self._tracked: dict[str, Tracked] = {}
        """In issue order: the oldest is first, so expiry stops at the first young one."""
        self.reported = 0
        self.unmatched = 0
        self.expired = 0
        """Decisions that stopped waiting before a result came: too old, or past max_tracked."""
        self.overdue_expired = 0
        """Of those, decisions whose result was promised."""

    def track(self, tracked: Tracked) -> None:
        self._expire()
        while len(self._tracked) >= self.max_tracked:
            self._forget(next(iter(self._tracked)))
        self._tracked[tracked.decision_id] = tracked

    def take(self, decision_id: object, identity: str | None) -> Tracked | None:
        """The decision a result reports on, when this identity asked for it; it waits no more."""
        self._expire()
        tracked = self._tracked.get(decision_id) if isinstance(decision_id, str) else None
        if tracked is None or tracked.identity != identity:
            self.unmatched += 1
            return None
        del self._tracked[tracked.decision_id]
        self.reported += 1
        return tracked

    def age_ms(self, tracked: Tracked) -> float:
        return (self.clock() - tracked.issued) * 1000

    def overdue(self) -> list[Tracked]:
        """Promised results not received within the timeout, oldest first."""
        self._expire()
        limit = self.clock() - self.timeout_s
        return [tracked for tracked in self._tracked.values() if tracked.awaited and tracked.issued < limit]

    def status(self) -> dict[str, Any]:
        overdue = self.overdue()
        now = self.clock()
        return {
            "result_timeout_s": self.timeout_s,
            "tracked": len(self._tracked),
            "awaited": sum(1 for tracked in self._tracked.values() if tracked.awaited),
            "reported": self.reported,
            "unmatched": self.unmatched,
            "expired": self.expired,
            "overdue_count": len(overdue),
            "overdue": [
                {
                    "decisionId": tracked.decision_id,
                    "slot": tracked.slot,
                    "identity": tracked.identity,
                    "capability": tracked.capability,
                    "resource": tracked.resource,
                    "correlationId": tracked.correlation_id,
                    "age_s": round(now - tracked.issued, 1),
                }
                for tracked in overdue[:MAX_OVERDUE_SHOWN]
            ],
        }

    def _expire(self) -> None:
        oldest = self.clock() - self.retention_s
        while self._tracked:
            first = next(iter(self._tracked.values()))
            if first.issued >= oldest:
                return
            self._forget(first.decision_id)

    def _forget(self, decision_id: str) -> None:
        tracked = self._tracked.pop(decision_id)
        self.expired += 1
        if tracked.awaited:
            self.overdue_expired += 1
