"""Durations by the monotonic clock, instants shown on the wall clock, and telling when the wall clock jumps.

A board without a real-time clock (a Raspberry Pi) boots with its wall clock at 1970 or at its last
shutdown, and NTP or an operator sets it minutes later: a duration taken as the difference of two
wall-clock readings is then off by the jump. Durations and deadlines are measured on the monotonic
clock; the wall clock only says when something happened, to people and records.
"""

from __future__ import annotations

import time
from collections.abc import Callable

JUMP_TOLERANCE_S = 60.0
"""How far the wall clock may move against the monotonic clock between two looks before it counts as
set (NTP slews a few milliseconds a minute; a step or an operator's `date -s` moves it at once)."""


def wall_time_of(monotonic_instant: float) -> float:
    """The wall-clock time (unix s) of a past monotonic instant, as the wall clock reads now: right once
    the clock is set, whatever it read at that instant."""
    return time.time() - (time.monotonic() - monotonic_instant)


def jump_words(seconds: float) -> str:
    """A jump of the wall clock as people read it: "forward by 120 d 0 h 5 min", "back by 1 h 0 min"."""
    way = "forward" if seconds > 0 else "back"
    left = round(abs(seconds))
    days, left = divmod(left, 86_400)
    hours, left = divmod(left, 3600)
    minutes, secs = divmod(left, 60)
    if days:
        amount = f"{days} d {hours} h {minutes} min"
    elif hours:
        amount = f"{hours} h {minutes} min"
    else:
        amount = f"{minutes} min {secs} s"
    return f"{way} by {amount}"


class WallClockWatch:
    """Compares how far the wall clock and the monotonic clock moved since the last look."""

    def __init__(
        self,
        tolerance_s: float = JUMP_TOLERANCE_S,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tolerance_s = tolerance_s
        self._wall = wall
        self._monotonic = monotonic
        self._last = (wall(), monotonic())

    def jumped(self) -> float | None:
        """Seconds the wall clock jumped since the last look (positive: forward), or None when it kept
        within tolerance_s of the monotonic clock."""
        wall, monotonic = self._wall(), self._monotonic()
        last_wall, last_monotonic = self._last
        self._last = (wall, monotonic)
        jump = (wall - last_wall) - (monotonic - last_monotonic)
        return jump if abs(jump) > self.tolerance_s else None
