"""[[execution_limits]] compiled: who and what each rule selects, how it partitions its counters, its limits."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from gateway.policy.execution.bounds import DEFAULT_MAX_KEYS
from gateway.policy.execution.windows import WindowSpec
from gateway.policy.rules.model import ExecutionLimit
from gateway.policy.rules.paths import PathPattern, compile_pattern
from gateway.policy.rules.subjects import ANYONE, identity_of

GroupKey = tuple[str, ...]


@dataclass(frozen=True)
class Target:
    """What a call or a reservation is: who, on which slot, with which capabilities, at which resource."""

    subjects: frozenset[str]
    slot: str
    capabilities: frozenset[str]
    """Every capability it counts as (a tools/call: mcp.tools.call, tool:<name> and the tool's class)."""
    capability: str
    """The one group_by = ["capability"] partitions by (a tools/call: tool:<name>)."""
    resource: str


@dataclass(frozen=True)
class LimitRule:
    """One [[execution_limits]] entry, ready to match and count."""

    id: str
    definition: ExecutionLimit
    """As written, to tell an unchanged rule on reload (its counters are kept)."""
    subject: str | None
    provider: str | None
    capability: str | None
    resource: PathPattern | None
    group_by: tuple[str, ...]
    call_windows: tuple[WindowSpec, ...]
    """rate and calls: debited by each admitted tools/call."""
    concurrency: int | None
    budget: WindowSpec | None
    """Debited by reservations (broker/budget/reserve) only."""
    max_keys: int

    @property
    def limits_calls(self) -> bool:
        return bool(self.call_windows) or self.concurrency is not None

    @property
    def windows(self) -> tuple[WindowSpec, ...]:
        return (*self.call_windows, self.budget) if self.budget is not None else self.call_windows

    def matches(self, target: Target) -> bool:
        """Every selector the rule sets holds for `target` (an omitted one matches everyone)."""
        return (
            (self.subject is None or self.subject == ANYONE or self.subject in target.subjects)
            and (self.provider is None or fnmatch.fnmatchcase(target.slot, self.provider))
            and (self.capability is None or self.capability in target.capabilities)
            and (self.resource is None or self.resource.matches(target.resource))
        )

    def key(self, target: Target) -> GroupKey:
        """The group `target` counts in: () when the rule is shared by everyone it matches."""
        return tuple(_group_value(name, target) for name in self.group_by)

    def describe_group(self, key: GroupKey) -> str:
        """ "provider pump-1, subject token:agent" ("" for a shared rule), for the words of a refusal."""
        return ", ".join(f"{name} {value}" for name, value in zip(self.group_by, key, strict=True))


def _group_value(name: str, target: Target) -> str:
    if name == "subject":
        return identity_of(target.subjects)
    if name == "provider":
        return target.slot
    if name == "capability":
        return target.capability
    return target.resource


def compile_limit(entry: ExecutionLimit) -> LimitRule:
    """A checked entry as a rule (the policy checks guarantee its patterns compile)."""
    match = entry.match
    windows = tuple(
        WindowSpec(kind, window.max, window.window_ms)
        for kind, window in (("rate", entry.rate), ("calls", entry.calls))
        if window is not None
    )
    budget = entry.budget
    return LimitRule(
        id=entry.id,
        definition=entry,
        subject=match.subject,
        provider=match.provider,
        capability=match.capability,
        resource=compile_pattern(match.resource) if match.resource is not None else None,
        group_by=tuple(entry.group_by),
        call_windows=windows,
        concurrency=entry.concurrency,
        budget=WindowSpec("budget", budget.max, budget.window_ms, budget.unit) if budget is not None else None,
        max_keys=entry.max_keys if entry.max_keys is not None else DEFAULT_MAX_KEYS,
    )
