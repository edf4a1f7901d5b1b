"""ExecutionLimits: the [[execution_limits]] in force and their counters; admits each tools/call
against every matching rule at once, and gives a call's concurrency places back when it ends.

Counters live in memory only. A reload keeps the counters of every rule whose id and definition are
unchanged, and starts the others from zero; a restart starts all of them from zero.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gateway.core.names import BROKER_SLOT
from gateway.policy.execution import debits
from gateway.policy.execution.counters import RuleCounters
from gateway.policy.execution.ledger import DEFAULT_MAX_RESERVATIONS, DEFAULT_RETENTION_MS, BudgetLedger
from gateway.policy.execution.refusals import RECENT_REFUSALS, LimitRefusal, RefusalLog
from gateway.policy.execution.rules import Target, compile_limit
from gateway.policy.rules.capabilities import TOOL_PREFIX, TOOLS_CALL, tool_class
from gateway.policy.rules.model import ExecutionLimit
from gateway.policy.rules.subjects import identity_of

log = logging.getLogger("gateway.policy.limits")

Clock = Callable[[], float]

KEPT_AFTER_CANCEL_S = 60.0
"""How long a cancelled or timed-out call keeps its concurrency places at most while the gateway waits
for the device's late answer (the device may still be working): limits.cancelled_call_hold_s's default."""

DEVICE_MAY_GO_ON = frozenset({"cancelled", "timeout"})
"""How a call ends while its device may still be working on it; the gateway's own tools (_broker) stop
with their call."""


@dataclass
class Admission:
    """An admitted call's hold on the rules' concurrency, given back once by `ExecutionLimits.release`."""

    held: tuple[debits.Held, ...] = ()
    released: bool = False
    slot: str = ""
    """The slot the call went to."""
    kept: asyncio.TimerHandle | None = None
    """While a cancelled call keeps its places (`ExecutionLimits.keep`): the bound that gives them back."""
    kept_until: tuple[float, float] | None = None
    """While kept: (when the bound ends, on the limits' clock in ms; the bound in s), noted in each group."""


class ExecutionLimits:
    """The rules in force and their counters. Not thread-safe: the event loop is its one caller."""

    def __init__(
        self,
        entries: Iterable[ExecutionLimit] = (),
        *,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        recent_refusals: int = RECENT_REFUSALS,
        max_reservations: int = DEFAULT_MAX_RESERVATIONS,
        reservation_retention_ms: int = DEFAULT_RETENTION_MS,
        kept_after_cancel_s: float = KEPT_AFTER_CANCEL_S,
    ) -> None:
        self._clock = clock
        self.kept_after_cancel_s = kept_after_cancel_s
        self.rules: tuple[RuleCounters, ...] = ()
        self.refusals = RefusalLog(recent_refusals)
        self.budget = BudgetLedger(
            lambda: self.rules,
            self._refused,
            clock=clock,
            wall_clock=wall_clock,
            max_reservations=max_reservations,
            retention_ms=reservation_retention_ms,
        )
        self._wall_clock = wall_clock
        self.swap(entries)

    def now_ms(self) -> float:
        return self._clock() * 1000

    def swap(self, entries: Iterable[ExecutionLimit]) -> None:
        """Use these rules from now on. A rule whose id and definition are unchanged keeps its counters
        (and calls in flight); any other starts from zero. Calls admitted under a rule that is gone
        still give their places back to it when they end, which no longer affects anything."""
        kept = {counters.rule.id: counters for counters in self.rules}
        rules = []
        for entry in entries:
            old = kept.get(entry.id)
            rules.append(
                old if old is not None and old.rule.definition == entry else RuleCounters(compile_limit(entry))
            )
        self.rules = tuple(rules)

    def admit_call(
        self, subjects: frozenset[str], slot: str, tool: str, read_only: bool | None, resource: str
    ) -> Admission | LimitRefusal:
        """Debit one tools/call of `tool` on `slot` (at `resource`) from every rule matching it, or none
        of them and say why. The admission is given back with `release` when the call ends."""
        if not self.rules:
            return Admission()
        named = TOOL_PREFIX + tool
        target = Target(subjects, slot, frozenset({TOOLS_CALL, named, tool_class(read_only)}), named, resource)
        matching = [
            (counters, counters.rule.call_windows, True)
            for counters in self.rules
            if counters.rule.limits_calls and counters.rule.matches(target)
        ]
        if not matching:
            return Admission()
        now = self.now_ms()
        planned = debits.plan(matching, target, 1, now)
        if isinstance(planned, LimitRefusal):
            self._refused(planned, target, tool=tool)
            return planned
        return Admission(debits.commit(planned, 1, now), slot=slot)

    def bound(self, kept_after_cancel_s: float, max_reservations: int, max_live_per_caller: int) -> None:
        """The [limits] bounds in force (at start and at each reload): how long a cancelled call keeps its
        places, and the budget ledger's records in all and live per caller."""
        self.kept_after_cancel_s = kept_after_cancel_s
        self.budget.max_reservations = max_reservations
        self.budget.max_live_per_caller = max_live_per_caller

    def release(self, admission: Admission) -> None:
        """The call ended (answered, failed, or was never forwarded; a kept call's late answer came or its
        bound passed): its concurrency places are free again. Releasing twice is harmless."""
        if admission.kept is not None:
            admission.kept.cancel()
            admission.kept = None
        if admission.kept_until is not None:
            for place in admission.held:
                if admission.kept_until in place.group.kept:
                    place.group.kept.remove(admission.kept_until)
            admission.kept_until = None
        if not admission.released and admission.held:
            debits.release(admission.held, self.now_ms())
        admission.released = True

    def ended(self, admission: Admission, outcome: str) -> None:
        """The gateway's call ended with `outcome`: its places are given back, or kept (`keep`) when the
        call was cancelled or timed out on a device that may still be working on it."""
        if outcome in DEVICE_MAY_GO_ON and admission.slot != BROKER_SLOT:
            self.keep(admission)
        else:
            self.release(admission)

    def keep(self, admission: Admission) -> None:
        """The call was cancelled or passed its deadline while the device may still be working: its
        places stay taken until `release` (the device's late answer) or kept_after_cancel_s, whichever
        comes first. Without places to keep it is released now."""
        if admission.released or admission.kept is not None:
            return
        if not admission.held:
            admission.released = True
            return
        loop = asyncio.get_running_loop()
        hold_s = self.kept_after_cancel_s
        admission.kept = loop.call_later(hold_s, self.release, admission)
        admission.kept_until = (self.now_ms() + hold_s * 1000, hold_s)
        for place in admission.held:
            place.group.kept.append(admission.kept_until)

    def _refused(self, refusal: LimitRefusal, target: Target, **context: Any) -> None:
        who = identity_of(target.subjects)
        for counters in self.rules:
            if counters.rule.id == refusal.rule_id:
                counters.refused += 1  # kept with the rule's counters: a changed rule counts from zero
        self.refusals.add(refusal, int(self._wall_clock() * 1000), slot=target.slot, subject=who, **context)
        log.info("execution limit refused %s on %s: %s", who, target.slot, refusal.message())

    def status(self) -> dict[str, Any]:
        """For broker_info and broker_diagnose: each rule with its busiest groups, the reservations,
        and the recent refusals."""
        now = self.now_ms()
        shown = [counters.status(now) for counters in self.rules]
        return {"rules": shown, "reservations": self.budget.status(), "refusals": self.refusals.status()}
