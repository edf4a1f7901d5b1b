"""Caller references: what a declaring provider gets instead of its caller's identity.

A reference is unguessable (`cr_` and 24 random bytes), resolves only for the provider of the slot the
call went to (same slot, same identity, same connection), and only while the call is pending and for
a short grace after it ended. Bounded: past `max_refs` the oldest reference goes.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from gateway.policy.declarations.wire import new_id

REF_BYTES = 24


@dataclass
class CallerEntry:
    slot: str
    identity: str
    link: object
    subjects: frozenset[str]
    correlation_id: str
    trace_id: str
    ended_at: float | None = None


class CallerRefs:
    def __init__(self, max_refs: int, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_refs = max_refs
        self.grace_s = grace_s
        self.clock = clock
        self._entries: dict[str, CallerEntry] = {}
        self._ended: deque[tuple[float, str]] = deque()
        """(when it stops resolving, ref), in that order: ended references are purged from the front."""
        self._per_link: Counter[object] = Counter()
        self.issued = 0
        self.evicted = 0
        """References dropped while still live, to stay within max_refs."""

    def __len__(self) -> int:
        return len(self._entries)

    def issue(
        self, slot: str, identity: str, link: object, subjects: frozenset[str], correlation_id: str, trace_id: str
    ) -> str:
        self._purge()
        while len(self._entries) >= self.max_refs:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.evicted += 1
        ref = new_id("cr_", REF_BYTES)
        self._entries[ref] = CallerEntry(slot, identity, link, subjects, correlation_id, trace_id)
        self._per_link[link] += 1
        self.issued += 1
        return ref

    def end(self, ref: str) -> None:
        """The call `ref` came with ended: it resolves for `grace_s` more."""
        entry = self._entries.get(ref)
        if entry is None or entry.ended_at is not None:
            return
        now = self.clock()
        entry.ended_at = now
        if self.grace_s <= 0:
            self._drop(ref)
            return
        self._ended.append((now + self.grace_s, ref))
        self._purge()

    def resolve(self, ref: str, slot: str, identity: str | None, link: object) -> CallerEntry | None:
        """The caller behind `ref`, when it was issued for this slot, identity and connection and is
        live or in its grace; None otherwise (the same answer whatever the reason: nothing to probe)."""
        self._purge()
        entry = self._entries.get(ref)
        if entry is None or entry.slot != slot or entry.identity != identity or entry.link is not link:
            return None
        return entry

    def drop_link(self, link: object) -> None:
        """Every reference issued for `link`: its connection is gone."""
        if not self._per_link.get(link):
            return
        for ref in [ref for ref, entry in self._entries.items() if entry.link is link]:
            self._drop(ref)

    def _drop(self, ref: str) -> None:
        entry = self._entries.pop(ref, None)
        if entry is None:
            return
        self._per_link[entry.link] -= 1
        if self._per_link[entry.link] <= 0:
            del self._per_link[entry.link]

    def _purge(self) -> None:
        now = self.clock()
        ended = self._ended
        while ended and ended[0][0] <= now:
            _, ref = ended.popleft()
            entry = self._entries.get(ref)
            if entry is not None and entry.ended_at is not None:
                self._drop(ref)
