"""States that count once (a confirmation's requestState, a confirmed call's continuation): each used one
is remembered until it expires, so none is used twice, and counted per caller, so one caller filling
its share leaves everyone else's room."""

from __future__ import annotations

from typing import Literal

Full = Literal["per_caller", "all"]
"""Which bound a new state would pass: the caller's share, or the table's whole size."""


class UsedStates:
    def __init__(self) -> None:
        self._until: dict[str, tuple[int, str]] = {}
        """Each used state's key, with when it expires (the owner's clock, ms) and its caller."""
        self._by: dict[str, int] = {}
        """How many of them each caller used."""

    def __contains__(self, key: str) -> bool:
        return key in self._until

    def __len__(self) -> int:
        return len(self._until)

    def held_by(self, caller: str) -> int:
        return self._by.get(caller, 0)

    def full(self, caller: str, limit: int, per_caller: int, now_ms: int) -> Full | None:
        """Which bound one more state of `caller` would pass, expired states forgotten first (they are
        refused as expired anyway); None when it fits."""
        if len(self._until) >= limit or self.held_by(caller) >= per_caller:
            for key in [key for key, (until, _) in self._until.items() if until <= now_ms]:
                self.forget(key)
        if self.held_by(caller) >= per_caller:
            return "per_caller"
        return "all" if len(self._until) >= limit else None

    def oldest(self, caller: str | None = None) -> int:
        """When the first of the states (of `caller`, or of anyone) expires; call only when one is held."""
        return min(until for until, who in self._until.values() if caller is None or who == caller)

    def add(self, key: str, until_ms: int, caller: str) -> None:
        self._until[key] = (until_ms, caller)
        self._by[caller] = self.held_by(caller) + 1

    def forget(self, key: str) -> None:
        remembered = self._until.pop(key, None)
        if remembered is None:
            return
        caller = remembered[1]
        left = self.held_by(caller) - 1
        if left > 0:
            self._by[caller] = left
        else:
            self._by.pop(caller, None)
