"""Repeats of a kind of event let through once per interval, the ones between counted: for log lines a
peer or a provider can make as often as it likes (malformed requests, export failures, refused
declarations)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping


class RepeatCounter:
    """Which repeats of a kind of line pass: the first, then one every `repeat_interval_s`; the ones
    between are left out, counted and (`numbers`) summed, and the next that passes learns how many.
    At most `max_kinds` kinds are tracked: past that all are forgotten, costing each one line again."""

    def __init__(self, repeat_interval_s: float, clock: Callable[[], float], max_kinds: int) -> None:
        self.repeat_interval_s = repeat_interval_s
        self.clock = clock
        self.max_kinds = max_kinds
        # kind -> (when its last line was written, how many were left out since, their sums)
        self.quiet: dict[Hashable, tuple[float, int, dict[str, int]]] = {}
        self.lock = threading.Lock()  # the OpenTelemetry SDK's export threads log side by side

    def admit(self, kind: Hashable, numbers: Mapping[str, int] | None = None) -> tuple[int, dict[str, int]] | None:
        """None when this repeat of `kind` is left out; else how many were left out before it, and their sums."""
        now = self.clock()
        with self.lock:
            last = self.quiet.get(kind)
            if last is not None and now - last[0] < self.repeat_interval_s:
                totals = last[2]
                for name, number in (numbers or {}).items():
                    totals[name] = totals.get(name, 0) + number
                self.quiet[kind] = (last[0], last[1] + 1, totals)
                return None
            if len(self.quiet) >= self.max_kinds:
                self.quiet.clear()
            self.quiet[kind] = (now, 0, {})
        return (last[1], last[2]) if last is not None else (0, {})
