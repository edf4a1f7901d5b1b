"""The counters of one rule: a set per group (windows and calls in flight), at most max_keys groups.

A group whose windows are empty and which has no call in flight is the same as a new one, so it is
dropped. When a rule holds max_keys groups and none is idle, a new group is refused (fail closed)
rather than evicting one: evicting a busy group would hand its caller a fresh quota.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.policy.execution.rules import GroupKey, LimitRule
from gateway.policy.execution.windows import SlidingWindow

STATUS_GROUPS = 10
"""Groups of a rule that status() shows (the busiest first)."""


class GroupCounters:
    """One group of one rule: a window per windowed limit, and its calls in flight."""

    __slots__ = ("in_flight", "windows")

    def __init__(self, rule: LimitRule) -> None:
        self.windows = {spec.kind: SlidingWindow(spec) for spec in rule.windows}
        self.in_flight = 0

    def idle_at(self, now_ms: float) -> float | None:
        """When the group becomes idle (now or later); None while a call is in flight (time alone does not do it)."""
        if self.in_flight:
            return None
        latest = now_ms
        for window in self.windows.values():
            window.expire(now_ms)
            empty = window.empty_at()
            if empty is not None:
                latest = max(latest, empty)
        return latest

    def load(self, now_ms: float) -> int:
        """How busy the group is, to order status() (units in its windows and calls in flight)."""
        return self.in_flight + sum(window.expire(now_ms) for window in self.windows.values())

    def status(self, now_ms: float) -> dict[str, Any]:
        shown: dict[str, Any] = {kind: window.expire(now_ms) for kind, window in self.windows.items()}
        if self.in_flight:
            shown["in_flight"] = self.in_flight
        return shown


class RuleCounters:
    """The groups of one rule, keyed by the rule's group_by values."""

    def __init__(self, rule: LimitRule) -> None:
        self.rule = rule
        self.groups: dict[GroupKey, GroupCounters] = {}
        self._next_sweep_ms = 0.0
        """When dropping idle groups may free one; before it a full table refuses at once."""

    def find(self, key: GroupKey) -> GroupCounters | None:
        return self.groups.get(key)

    def room_wait(self, now_ms: float) -> float:
        """0 when a new group fits now (idle groups dropped to make room); else the milliseconds until
        one may (math.inf when only ending calls can free one)."""
        if len(self.groups) < self.rule.max_keys:
            return 0.0
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
            if len(self.groups) < self.rule.max_keys:
                return 0.0
        return self._next_sweep_ms - now_ms

    def _sweep(self, now_ms: float) -> None:
        # O(groups), and at most once until the next group may be idle: a full table of busy groups
        # costs one comparison per refused request.
        earliest = math.inf
        for key, group in list(self.groups.items()):
            idle = group.idle_at(now_ms)
            if idle is None:
                continue
            if idle <= now_ms:
                del self.groups[key]
            else:
                earliest = min(earliest, idle)
        self._next_sweep_ms = earliest

    def add(self, key: GroupKey) -> GroupCounters:
        group = self.groups[key] = GroupCounters(self.rule)
        return group

    def ended(self, key: GroupKey, group: GroupCounters, now_ms: float) -> None:
        """A call of `group` ended: free its place, and drop the group when that leaves it idle."""
        group.in_flight = max(0, group.in_flight - 1)
        if group.in_flight == 0:
            self._next_sweep_ms = min(self._next_sweep_ms, now_ms)
            idle = group.idle_at(now_ms)
            if idle is not None and idle <= now_ms and self.groups.get(key) is group:
                del self.groups[key]

    def status(self, now_ms: float) -> dict[str, Any]:
        rule = self.rule
        busiest = sorted(self.groups.items(), key=lambda item: item[1].load(now_ms), reverse=True)
        limits: dict[str, Any] = {
            spec.kind: {
                "max": spec.max,
                "window_ms": spec.window_ms,
                **({"unit": spec.unit} if spec.kind == "budget" else {}),
            }
            for spec in rule.windows
        }
        if rule.concurrency is not None:
            limits["concurrency"] = rule.concurrency
        return {
            "id": rule.id,
            "group_by": list(rule.group_by),
            "limits": limits,
            "groups": len(self.groups),
            "max_keys": rule.max_keys,
            "in_flight": sum(group.in_flight for group in self.groups.values()),
            "busiest": [
                {"group": dict(zip(rule.group_by, key, strict=True)), **group.status(now_ms)}
                for key, group in busiest[:STATUS_GROUPS]
            ],
        }
