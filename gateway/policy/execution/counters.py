"""The counters of one rule: a set per group (windows and calls in flight), at most max_keys groups.

A group whose windows are empty and which has no call in flight is the same as a new one, so it is
dropped. Groups wait in a heap ordered by when they may go idle, so finding idle groups costs a few
heap steps, never a scan of all groups. When a rule holds max_keys groups and none is idle, a new
group is refused (fail closed) rather than evicting one: evicting a busy group would hand its caller
a fresh quota.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

from gateway.policy.execution.rules import GroupKey, LimitRule
from gateway.policy.execution.windows import SlidingWindow

STATUS_GROUPS = 10
"""Groups of a rule that status() shows (the busiest first)."""
PRUNE_PER_DEBIT = 8
"""Due entries of the idle heap an admission looks at in passing, so that one call never pays for
thousands of groups going idle at once; each admission adds at most two, so the backlog still drains.
A full rule looks at as many as it takes to find room."""


class GroupCounters:
    """One group of one rule: a window per windowed limit, and its calls in flight."""

    __slots__ = ("in_flight", "kept", "scheduled", "windows")

    def __init__(self, rule: LimitRule) -> None:
        self.windows = {spec.kind: SlidingWindow(spec) for spec in rule.windows}
        self.in_flight = 0
        self.kept: list[tuple[float, float]] = []
        """Of the places in flight, those kept by cancelled or timed-out calls: (when the hold ends in ms,
        the hold's length in s), so a refusal can say when time alone frees them."""
        self.scheduled = False
        """The group has an entry in its rule's idle heap."""

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


_Entry = tuple[float, int, GroupKey, GroupCounters]


class RuleCounters:
    """The groups of one rule, keyed by the rule's group_by values, and the refusals since it started."""

    def __init__(self, rule: LimitRule) -> None:
        self.rule = rule
        self.groups: dict[GroupKey, GroupCounters] = {}
        self.refused = 0
        """Refusals this rule gave under its current definition (a changed rule starts from zero)."""
        self._idle_heap: list[_Entry] = []
        """(when the group may be idle, order, key, group), soonest first: every group with no call in
        flight has one entry (an ending call gives it one). An entry may be early, because the group was
        used after it was pushed (it is pushed again, later, when it comes due), never late, so popping in
        order finds every idle group. Entries of dropped groups are skipped when they come up."""
        self._order = itertools.count()

    def find(self, key: GroupKey) -> GroupCounters | None:
        return self.groups.get(key)

    def room_wait(self, now_ms: float) -> float:
        """0 when a new group fits now (idle groups dropped to make room); else the milliseconds until
        time alone idles one (math.inf when only ending calls can free one)."""
        if len(self.groups) < self.rule.max_keys:
            return 0.0
        self.prune(now_ms)
        if len(self.groups) < self.rule.max_keys:
            return 0.0
        return max(1.0, self._next_idle(now_ms) - now_ms)

    def prune(self, now_ms: float, most: int | None = None) -> None:
        """Drop the groups that are idle by now, looking at the due heap entries in order (at most
        `most` of them; None: every one). A due group that was used since is pushed again for later."""
        heap = self._idle_heap
        looked = 0
        while heap and heap[0][0] <= now_ms and (most is None or looked < most):
            _, _, key, group = heapq.heappop(heap)
            looked += 1
            if self.groups.get(key) is group:
                group.scheduled = False
                self.settle(key, group, now_ms)

    def settle(self, key: GroupKey, group: GroupCounters, now_ms: float) -> None:
        """After a group changed: drop it when it is idle, else make sure the heap holds it (a group
        with a call in flight waits for the call's end instead)."""
        idle = group.idle_at(now_ms)
        if idle is None or self.groups.get(key) is not group:
            return
        if idle <= now_ms:
            del self.groups[key]
        elif not group.scheduled:
            heapq.heappush(self._idle_heap, (idle, next(self._order), key, group))
            group.scheduled = True

    def _next_idle(self, now_ms: float) -> float:
        """When time alone idles the first group (math.inf: none, each has a call in flight). Called
        after prune: the heap holds no due entry, and early entries at its top are pushed again."""
        heap = self._idle_heap
        while heap:
            due, _, key, group = heap[0]
            if self.groups.get(key) is not group:
                heapq.heappop(heap)
                continue
            idle = group.idle_at(now_ms)
            if idle is not None and idle <= due:
                return idle
            heapq.heappop(heap)
            group.scheduled = False
            self.settle(key, group, now_ms)
        return math.inf

    def add(self, key: GroupKey) -> GroupCounters:
        group = self.groups[key] = GroupCounters(self.rule)
        return group

    def ended(self, key: GroupKey, group: GroupCounters, now_ms: float) -> None:
        """A call of `group` ended: free its place, and drop the group when that leaves it idle."""
        group.in_flight = max(0, group.in_flight - 1)
        self.settle(key, group, now_ms)

    def status(self, now_ms: float) -> dict[str, Any]:
        self.prune(now_ms)
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
            "refused": self.refused,
        }
