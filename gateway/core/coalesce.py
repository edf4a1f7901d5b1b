"""One catalog rebuild per burst of changes, however many boards come or go in it.

`_all` and the tool-group endpoints list the tools of every ready slot. Rebuilding a catalog on each
board's arrival costs work proportional to every board's tools, so a plant's boards reconnecting at
once (a gateway restart) would cost the square of their number. A catalog marks itself stale instead,
and rebuilds once: `delay_s` after the first change of a burst when someone listens for its
announcements, else when it is next read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class CoalescedRebuild:
    """A stale flag, the slots whose providers announced a change meanwhile, and the timer that ends a burst."""

    def __init__(self, rebuild: Callable[[frozenset[str]], None], delay_s: float, announce: Callable[[], bool]) -> None:
        self._rebuild = rebuild
        self.delay_s = delay_s
        self._announce = announce
        """Whether a rebuild must not wait for a read (someone listens for the catalog's changes)."""
        self.stale = False
        self.rebuilds = 0
        self._noticed: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None

    def changed(self, noticed_slot: str | None = None) -> None:
        """The ready slots changed, or `noticed_slot`'s provider announced a change of its tools."""
        self.stale = True
        if noticed_slot is not None:
            self._noticed.add(noticed_slot)
        if self._timer is not None or not self._announce():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a catalog used outside the gateway): at once
            self.flush()
            return
        self._timer = loop.call_later(self.delay_s, self.flush)

    def flush(self) -> None:
        """Rebuild now if anything changed since the last rebuild (a read calls this first)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.stale:
            return
        self.stale = False
        noticed, self._noticed = frozenset(self._noticed), set()
        self.rebuilds += 1
        self._rebuild(noticed)
