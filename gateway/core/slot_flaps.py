"""The log of a slot whose provider attaches and leaves over and over: one summary line per interval.

Two boards on one MQTT slot push each other off at the broker, and the gateway attaches and lets go of
the slot about once a second. A slot's attach and leave are logged as they come, until it attaches again
within `logging.repeat_interval_s` of its last leave: that attach is logged too, and opens a quiet
window of one interval in which the slot's attaches and leaves are counted instead. When the window
closes, one warning says how many there were and the last reason it left, and the next window opens;
a window with nothing in it ends the quiet, and the slot's next attach or leave is logged again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gateway.slots")

HINT = "two providers on one slot push each other off (docs/device-mqtt.md, Troubleshooting)"


@dataclass
class _Window:
    timer: asyncio.TimerHandle
    attaches: int = 0
    leaves: int = 0
    unlogged: int = 0
    """Attach and leave lines not written in this window."""
    last_reason: str = ""
    last_from: str = ""


class SlotFlapLog:
    """Decides which attach and leave lines of a slot are written, and writes the summaries."""

    def __init__(
        self,
        interval_s: Callable[[], float],
        held: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        """logging.repeat_interval_s, read at each decision (a reload may change it)."""
        self.held = held
        """Whether a slot has a provider now, for the summary."""
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        """Slots in a quiet window; one entry per slot, gone once a window passes with nothing in it."""

    def attached(self, slot: str, left_at: float | None, came_from: str) -> bool:
        """A provider attached to `slot` (whose last provider left at monotonic `left_at`, None if
        none has); True when the line is to be written."""
        window = self._windows.get(slot)
        if window is not None:
            window.attaches += 1
            window.unlogged += 1
            window.last_from = came_from
            return False
        interval = self.interval_s()
        if left_at is not None and self.clock() - left_at < interval:
            # This attach is written, and counted in the window's summary: it happened within it.
            window = self._open(slot, interval)
            window.attaches, window.last_from = 1, came_from
        return True

    def left(self, slot: str, reason: str) -> bool:
        """The provider of `slot` left for `reason`; True when the line is to be written."""
        window = self._windows.get(slot)
        if window is None:
            return True
        window.leaves += 1
        window.unlogged += 1
        window.last_reason = reason
        return False

    def close(self) -> None:
        """Stop every window's timer (the gateway is shutting down); what they counted is not written."""
        for window in self._windows.values():
            window.timer.cancel()
        self._windows.clear()

    def _open(self, slot: str, interval: float) -> _Window:
        timer = asyncio.get_running_loop().call_later(interval, self._expire, slot, interval)
        window = self._windows[slot] = _Window(timer)
        return window

    def _expire(self, slot: str, interval: float) -> None:
        window = self._windows.pop(slot, None)
        if window is None or not window.unlogged:
            return
        if window.attaches == window.leaves:
            times = f"attached and left {_times(window.attaches)}"
        else:
            times = f"attached {_times(window.attaches)} and left {_times(window.leaves)}"
        log.warning(
            "slot %s %s in the last %g s (%s now); last reason: %s; last attach from %s; %s",
            slot,
            times,
            interval,
            "held" if self.held(slot) else "vacant",
            window.last_reason or "(none)",
            window.last_from or "(none)",
            HINT,
            extra={"slot": slot, "fault": "flapping"},
        )
        self._open(slot, self.interval_s())


def _times(count: int) -> str:
    return "1 time" if count == 1 else f"{count} times"
