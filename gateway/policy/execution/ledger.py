"""The budget ledger: providers that meter their own units reserve them before native work and settle
after it (broker/budget/reserve and broker/budget/settle; gateway/policy/execution/wire.py).

A reservation debits its full quantity at once from every matching budget rule (all or none), and
nothing is ever refunded: not a settlement that used less, not expiry, not a lost reply. Capacity
comes back as the windows pass. A record is kept for `retention_ms` or its longest window, whichever
is longer (a late settlement finds it; a retried idempotency key cannot open a second operation), and
at most `max_reservations` of them. A full ledger first drops its oldest settled or expired records
(a late settlement of one then answers as unknown); only live ones refuse new reservations. One caller
holds at most `max_live_per_caller` live (unsettled, unexpired) records, so it cannot fill the ledger.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.repeats import RepeatCounter
from gateway.policy.execution import debits
from gateway.policy.execution.counters import RuleCounters
from gateway.policy.execution.refusals import (
    CALLER_RESERVATIONS_FULL,
    IDEMPOTENCY_CONFLICT,
    INVALID_USAGE,
    LEDGER_FULL,
    NO_BUDGET_RULE,
    RESERVATION_EXPIRED_OR_SETTLED,
    SETTLEMENT_CONFLICT,
    UNKNOWN_RESERVATION,
    LimitRefusal,
)
from gateway.policy.execution.rules import Target
from gateway.policy.rules.subjects import identity_of

log = logging.getLogger("gateway.policy.limits")

DEFAULT_MAX_RESERVATIONS = 10_000
"""Reservation records the ledger keeps at most (each for its longest budget window)."""
DEFAULT_RETENTION_MS = 600_000
"""How long a reservation record is kept at least: a settlement may come this late."""
DEFAULT_MAX_LIVE_PER_CALLER = 1_000
"""Live (unsettled, unexpired) reservations one caller (its subjects) holds at most: a tenth of the ledger."""
LOG_REPEAT_S = 10.0
"""A slot's reserved and settled lines are logged once per this; the ones between are counted."""
MAX_LOG_KINDS = 1024
MAX_VALIDITY_MS = 60_000
"""A grant lets native work start for at most this long (and no longer than its shortest window)."""
SETTLE_RESULTS = ("success", "failure", "refused")

Clock = Callable[[], float]


@dataclass(frozen=True)
class Grant:
    """A reservation as the provider gets it; `replayed`: the same grant again, for a retried key."""

    reservation_id: str
    decision_id: str
    quantity: int
    expires_at_ms: int
    """Wall-clock epoch milliseconds: native work may not start after it."""
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "reservationId": self.reservation_id,
            "decisionId": self.decision_id,
            "quantity": self.quantity,
            "expiresAt": self.expires_at_ms,
            "replayed": self.replayed,
        }


@dataclass(frozen=True)
class Settlement:
    reservation_id: str
    used: int
    result: str
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"settled": True, "reservationId": self.reservation_id, "replayed": self.replayed}


@dataclass
class _Record:
    grant: Grant
    slot: str
    caller: frozenset[str]
    scope: tuple[str, str, str]
    """(slot, caller reference, idempotency key): where a retried key finds this record."""
    fingerprint: tuple[Any, ...]
    expires_ms: float
    retain_until_ms: float
    settled: tuple[int, str] | None = None

    def dead(self, now: float) -> bool:
        """Settled or expired: kept only to answer a late or repeated settlement or key."""
        return self.settled is not None or now >= self.expires_ms


class BudgetLedger:
    """Reservations against the budget rules that `rules()` returns (the rules in force)."""

    def __init__(
        self,
        rules: Callable[[], Sequence[RuleCounters]],
        on_refusal: Callable[..., None],
        *,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        max_reservations: int = DEFAULT_MAX_RESERVATIONS,
        retention_ms: int = DEFAULT_RETENTION_MS,
        max_live_per_caller: int = DEFAULT_MAX_LIVE_PER_CALLER,
    ) -> None:
        self._rules = rules
        self.retention_ms = retention_ms
        self._on_refusal = on_refusal
        self._clock = clock
        self._wall_clock = wall_clock
        self.max_reservations = max_reservations
        self.max_live_per_caller = max_live_per_caller
        self._live: dict[frozenset[str], dict[str, None]] = {}
        """Each caller's records that may be live, oldest first (checked when the caller reaches its bound)."""
        self._quiet = RepeatCounter(LOG_REPEAT_S, clock, MAX_LOG_KINDS)
        self._records: dict[str, _Record] = {}
        self._by_scope: dict[tuple[str, str, str], str] = {}
        self._retention: list[tuple[float, str]] = []
        """A heap of (retain_until_ms, reservation id): the record to drop next is first."""

    def reserve(
        self,
        *,
        subjects: frozenset[str],
        slot: str,
        caller_ref: str,
        capability: str,
        resource_path: str,
        unit: str,
        quantity: int,
        idempotency_key: str,
        correlation_id: str = "",
    ) -> Grant | LimitRefusal:
        """Reserve `quantity` `unit`s for the caller `caller_ref` names (its `subjects`, on `slot`, the
        provider's slot) to do `capability` on `resource_path`; the same key again returns the same
        grant (replayed) while it is live."""
        now = self._clock() * 1000
        self._prune(now)
        target = Target(subjects, slot, frozenset({capability}), capability, resource_path)
        scope = (slot, caller_ref, idempotency_key)
        fingerprint = (capability, resource_path, unit, quantity)
        previous = self._records.get(self._by_scope.get(scope, ""))
        if previous is not None:
            return self._replay(previous, fingerprint, now, target)
        matching = [
            (counters, (counters.rule.budget,), False)
            for counters in self._rules()
            if counters.rule.budget is not None and counters.rule.budget.unit == unit and counters.rule.matches(target)
        ]
        if not matching:
            return self._refuse(
                LimitRefusal(NO_BUDGET_RULE, f'No execution limit holds a budget of "{unit}" for this caller here'),
                target,
            )
        full = self._room(subjects, now)
        if full is not None:
            return self._refuse(full, target)
        planned = debits.plan(matching, target, quantity, now)
        if isinstance(planned, LimitRefusal):
            return self._refuse(planned, target)
        debits.commit(planned, quantity, now)
        windows = [counters.rule.budget.window_ms for counters, _, _ in matching if counters.rule.budget is not None]
        validity = min(MAX_VALIDITY_MS, *windows)
        grant = Grant(str(uuid.uuid4()), str(uuid.uuid4()), quantity, int(self._wall_clock() * 1000) + validity)
        retain = now + max(self.retention_ms, *windows)
        record = _Record(grant, slot, subjects, scope, fingerprint, now + validity, retain)
        self._records[grant.reservation_id] = record
        self._by_scope[scope] = grant.reservation_id
        self._live.setdefault(subjects, {})[grant.reservation_id] = None
        heapq.heappush(self._retention, (record.retain_until_ms, grant.reservation_id))
        if len(self._retention) > 2 * self.max_reservations:
            # Entries of records dropped to make room: rebuilt so the heap stays bounded.
            self._retention = [(kept.retain_until_ms, rid) for rid, kept in self._records.items()]
            heapq.heapify(self._retention)
        self._log(
            slot,
            "reserved",
            "budget reserved for %s (correlationId %s): %d %s on %s (reservation %s, decision %s)",
            identity_of(subjects),
            correlation_id or "-",
            quantity,
            unit,
            slot,
            grant.reservation_id,
            grant.decision_id,
        )
        return grant

    def refuse(
        self, refusal: LimitRefusal, subjects: frozenset[str], slot: str, capability: str, resource_path: str
    ) -> LimitRefusal:
        """Count and log a reservation refused before the ledger (outside the provider's declaration)."""
        return self._refuse(refusal, Target(subjects, slot, frozenset({capability}), capability, resource_path))

    def _room(self, subjects: frozenset[str], now: float) -> LimitRefusal | None:
        """None when a new record of the caller `subjects` fits: drops the oldest settled or expired
        record when the ledger is full; else the refusal (the caller's bound, or a ledger all live)."""
        mine = self._live.get(subjects)
        if mine is not None and len(mine) >= self.max_live_per_caller:
            for rid in [rid for rid in mine if (kept := self._records.get(rid)) is None or kept.dead(now)]:
                del mine[rid]
            if len(mine) >= self.max_live_per_caller:
                wait = min(self._records[rid].expires_ms for rid in mine) - now
                text = (
                    f"This caller holds {len(mine)} live reservations, the most one caller may "
                    f"(limits.max_budget_reservations_per_caller {self.max_live_per_caller}); settle some first"
                )
                return LimitRefusal(CALLER_RESERVATIONS_FULL, text, None, max(1, math.ceil(wait)))
        if len(self._records) < self.max_reservations:
            return None
        # Insertion order is age order: the first dead record is the oldest one.
        oldest = next((rid for rid, kept in self._records.items() if kept.dead(now)), None)
        if oldest is not None:
            self._drop(oldest)
            return None
        wait = min(kept.expires_ms for kept in self._records.values()) - now
        text = (
            f"The budget ledger holds its maximum of {self.max_reservations} live reservations "
            "(limits.max_budget_reservations)"
        )
        return LimitRefusal(LEDGER_FULL, text, None, max(1, math.ceil(wait)))

    def _drop(self, reservation_id: str) -> None:
        record = self._records.pop(reservation_id, None)
        if record is None:
            return
        if self._by_scope.get(record.scope) == reservation_id:
            del self._by_scope[record.scope]
        self._forget_live(record.caller, reservation_id)

    def _forget_live(self, caller: frozenset[str], reservation_id: str) -> None:
        mine = self._live.get(caller)
        if mine is not None:
            mine.pop(reservation_id, None)
            if not mine:
                del self._live[caller]

    def _log(self, slot: str, kind: str, text: str, *args: Any) -> None:
        """One line per slot and kind per LOG_REPEAT_S; the next one says how many were left out."""
        admitted = self._quiet.admit((slot, kind))
        if admitted is None:
            return
        left_out = admitted[0]
        suffix = f" ({left_out} more {kind} on this slot not logged)" if left_out else ""
        log.info(text + "%s", *args, suffix)

    def settle(self, reservation_id: str, provider_slot: str, used: int, result: str) -> Settlement | LimitRefusal:
        """Record what a reservation used. Only the slot that reserved may settle it; the same
        settlement again succeeds, a different one is refused. Nothing is refunded."""
        self._prune(self._clock() * 1000)
        record = self._records.get(reservation_id)
        if record is None or record.slot != provider_slot:
            # One answer for a reservation of another slot and one that does not exist: ids cannot be probed.
            return LimitRefusal(UNKNOWN_RESERVATION, f'No reservation "{reservation_id}" of this slot is held')
        quantity = record.grant.quantity
        if result not in SETTLE_RESULTS or not 0 <= used <= quantity:
            return LimitRefusal(
                INVALID_USAGE,
                f"A settlement reports used from 0 to the reserved {quantity} and result "
                f"{', '.join(SETTLE_RESULTS)}; got used {used}, result {result!r}",
            )
        if record.settled is not None:
            if record.settled == (used, result):
                return Settlement(reservation_id, used, result, replayed=True)
            was_used, was_result = record.settled
            return LimitRefusal(
                SETTLEMENT_CONFLICT,
                f'Reservation "{reservation_id}" is settled already (used {was_used}, {was_result})',
            )
        record.settled = (used, result)
        self._forget_live(record.caller, reservation_id)
        self._log(
            provider_slot,
            "settled",
            "budget settled for %s: reservation %s used %d of %d (%s)",
            identity_of(record.caller),
            reservation_id,
            used,
            quantity,
            result,
        )
        return Settlement(reservation_id, used, result)

    def _replay(
        self, previous: _Record, fingerprint: tuple[Any, ...], now: float, target: Target
    ) -> Grant | LimitRefusal:
        if previous.fingerprint != fingerprint:
            text = "This idempotency key reserved a different quantity, unit, capability or resource"
            return self._refuse(LimitRefusal(IDEMPOTENCY_CONFLICT, text), target)
        if previous.settled is not None or now >= previous.expires_ms:
            text = "The reservation of this idempotency key is settled or expired; use a new key for new work"
            return self._refuse(LimitRefusal(RESERVATION_EXPIRED_OR_SETTLED, text), target)
        grant = previous.grant
        return Grant(grant.reservation_id, grant.decision_id, grant.quantity, grant.expires_at_ms, replayed=True)

    def _refuse(self, refusal: LimitRefusal, target: Target) -> LimitRefusal:
        self._on_refusal(refusal, target, capability=target.capability)
        return refusal

    def _prune(self, now: float) -> None:
        retention = self._retention
        while retention and retention[0][0] <= now:
            _, reservation_id = heapq.heappop(retention)
            record = self._records.get(reservation_id)
            if record is not None and record.retain_until_ms <= now:
                self._drop(reservation_id)

    def status(self) -> dict[str, Any]:
        now = self._clock() * 1000
        self._prune(now)
        records = self._records.values()
        return {
            "held": len(self._records),
            "max_reservations": self.max_reservations,
            "unsettled": sum(1 for record in records if record.settled is None),
            "expired_unsettled": sum(1 for record in records if record.settled is None and record.expires_ms <= now),
        }
