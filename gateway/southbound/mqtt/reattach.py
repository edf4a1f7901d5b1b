"""Devices whose announcement stands but whose slot this broker does not serve: attach them again.

A retained status (plain profile) or presence (MCP over MQTT) says a device is on the broker. Its slot
can still be without it: the core let the link go (a missed heartbeat, a failed initialize, a
takeover) or refused the attach (another provider holds the slot, the slot limit). Nothing on the
wire would bring it back: a board speaks only when asked, and a retained announcement is not sent
again. So the profile tries again, for each such slot:

- after the broker's jittered, doubling back-off (reconnect_initial_s to reconnect_max_s, the
  gateway's Backoff), reset when a link of the slot had become ready;
- at once when a slot that was refused as held frees (the slot registry's membership listeners
  run on every attach and detach).

It stops when the announcement is cleared, when the broker is lost (the retained announcements come
again after the next subscription) and at shutdown; the slots it tracks are the profile's announced
ones, so they are bounded by max_instances. Per slot it also remembers whether a refusal was reported
(`first_refusal`): once per announcement, however often the profile tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.core.backoff import Backoff
from gateway.core.jsonrpc import JsonObject
from gateway.core.slots import SlotRegistry

RETRIED_REFUSALS = frozenset({"held", "slot_limit"})
"""SlotRefused kinds that can end while the gateway runs (reserved, undeclared, managed need a new config)."""


@dataclass
class _Slot:
    backoff: Backoff
    due: float | None = None
    """time.monotonic() of the next attempt while one is scheduled."""
    held: bool = False
    """The last attempt was refused because another provider holds the slot: try at once when it frees."""
    attempts: int = 0
    last_reason: str = ""
    told: bool = False
    """A refusal of the slot was reported (counted, and on the plain profile told to the board) since its
    announcement or its last attach: attempts again for the same announcement are not news."""


class Reattach:
    """One profile's slots waiting to be attached again; `attempt(slot)` is the profile's way to try.

    Scheduling only records when (no event loop needed); `run()`, started with the broker, makes the
    attempts, outside the handlers and listeners that schedule them."""

    def __init__(
        self,
        registry: SlotRegistry,
        initial_s: float,
        max_s: float,
        attempt: Callable[[str], None],
    ) -> None:
        self.registry = registry
        self.initial_s = initial_s
        self.max_s = max_s
        self.attempt = attempt
        self.slots: dict[str, _Slot] = {}
        self._wake = asyncio.Event()

    def _entry(self, slot: str) -> _Slot:
        entry = self.slots.get(slot)
        if entry is None:
            entry = self.slots[slot] = _Slot(Backoff(self.initial_s, self.max_s))
        return entry

    def later(self, slot: str, reason: str, *, held: bool = False, was_ready: bool = False) -> None:
        """Try `slot` again after the back-off (reset first when its link had been ready)."""
        entry = self._entry(slot)
        if was_ready:
            entry.backoff.reset()
        entry.held = held
        entry.last_reason = reason
        entry.due = time.monotonic() + entry.backoff.next_delay()
        self._wake.set()

    def now(self, slot: str, *, new_announcement: bool = True) -> None:
        """Attached at once by the profile: the back-off starts over. A new announcement also makes a
        refusal news again; a device only heard from again (`new_announcement=False`) does not."""
        entry = self.slots.get(slot)
        if entry is not None:
            entry.due = None
            entry.held = False
            entry.backoff.reset()
            if new_announcement:
                entry.told = False

    def first_refusal(self, slot: str, *, announced: bool) -> bool:
        """Whether a refusal of `slot` is news (report it): the first since its announcement or its last
        attach. Remembered only while the slot is `announced`, so the slots tracked stay the announced ones."""
        entry = self.slots.get(slot)
        if entry is not None and entry.told:
            return False
        if announced:
            self._entry(slot).told = True
        return True

    def attached(self, slot: str) -> None:
        """A link of `slot` was attached: its next refusal is news again."""
        entry = self.slots.get(slot)
        if entry is not None:
            entry.told = False

    def forget(self, slot: str) -> None:
        """The announcement is gone: nothing to attach any more."""
        self.slots.pop(slot, None)

    def clear(self) -> None:
        self.slots.clear()

    def slots_changed(self) -> None:
        """The registry's membership listener: a slot refused as held that is free now is tried at once."""
        for slot, entry in self.slots.items():
            if entry.due is None or not entry.held:
                continue
            current = self.registry.slots.get(slot)
            if current is None or current.live is None:
                entry.due = time.monotonic()
                self._wake.set()

    async def run(self) -> None:
        """Make every attempt that is due, then sleep until the next one (or until woken)."""
        while True:
            now = time.monotonic()
            for slot, entry in list(self.slots.items()):
                if entry.due is not None and entry.due <= now and self.slots.get(slot) is entry:
                    entry.due = None
                    entry.attempts += 1
                    self.attempt(slot)
            pending = [entry.due for entry in self.slots.values() if entry.due is not None]
            self._wake.clear()
            timeout = max(min(pending) - time.monotonic(), 0.0) if pending else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def status(self) -> JsonObject:
        """The slots waiting for another attempt: why, how often tried, and when next."""
        now = time.monotonic()
        return {
            slot: {
                "reason": entry.last_reason,
                "attempts": entry.attempts,
                "waiting_for_free_slot": entry.held,
                "next_attempt_in_s": round(max(entry.due - now, 0.0), 3),
            }
            for slot, entry in sorted(self.slots.items())
            if entry.due is not None
        }
