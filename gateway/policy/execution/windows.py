"""A sliding window of debits with a fixed memory per window (rate, calls and budget limits).

A window admits at most `max` units in any `window_ms`. Debits are kept as pieces: a debit that comes
less than window_ms / WINDOW_PIECES after the first debit of the newest piece joins that piece, which
then expires with its latest debit. So a window holds at most WINDOW_PIECES + 1 pieces whatever the
traffic, never admits more than `max` in any window_ms, and gives capacity back at most
window_ms / WINDOW_PIECES later than an exact log would.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

WINDOW_PIECES = 64
"""Pieces a window is cut into: its memory bound, and how late (window_ms / WINDOW_PIECES) capacity may return."""


@dataclass(frozen=True)
class WindowSpec:
    """One windowed limit of a rule: `kind` is "rate", "calls" or "budget"; `unit` names a budget's units."""

    kind: str
    max: int
    window_ms: int
    unit: str = "calls"

    @property
    def resolution_ms(self) -> float:
        return max(1.0, self.window_ms / WINDOW_PIECES)


class _Piece:
    __slots__ = ("amount", "first_ms", "last_ms")

    def __init__(self, now_ms: float, amount: int) -> None:
        self.first_ms = now_ms
        self.last_ms = now_ms
        self.amount = amount


class SlidingWindow:
    """The debits of one group of one rule within the last `spec.window_ms`."""

    __slots__ = ("_pieces", "spec", "used")

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        self._pieces: deque[_Piece] = deque()
        self.used = 0
        """Units debited within the window as of the last `expire`."""

    def expire(self, now_ms: float) -> int:
        """Drop the pieces the window has passed; returns the units still in it."""
        pieces, window = self._pieces, self.spec.window_ms
        while pieces and pieces[0].last_ms + window <= now_ms:
            self.used -= pieces.popleft().amount
        return self.used

    def wait_ms(self, now_ms: float, quantity: int) -> int | None:
        """0 when `quantity` fits now; else the whole milliseconds until it fits, None when it never can
        (more than `max` at once). Pieces expire oldest first, so the first that frees enough decides."""
        if quantity > self.spec.max:
            return None
        excess = self.expire(now_ms) + quantity - self.spec.max
        if excess <= 0:
            return 0
        freed = 0
        for piece in self._pieces:
            freed += piece.amount
            if freed >= excess:
                return max(1, math.ceil(piece.last_ms + self.spec.window_ms - now_ms))
        return None  # unreachable: every piece freed is the whole window, which leaves room for <= max

    def debit(self, now_ms: float, quantity: int) -> None:
        """Count `quantity` units now (the caller has checked `wait_ms` first)."""
        pieces = self._pieces
        if pieces and now_ms - pieces[-1].first_ms < self.spec.resolution_ms:
            newest = pieces[-1]
            newest.last_ms = max(newest.last_ms, now_ms)
            newest.amount += quantity
        else:
            pieces.append(_Piece(now_ms, quantity))
        self.used += quantity

    def empty_at(self) -> float | None:
        """When the window will hold nothing (None: it holds nothing now, as of the last expire)."""
        return self._pieces[-1].last_ms + self.spec.window_ms if self._pieces else None

    @property
    def pieces(self) -> int:
        return len(self._pieces)
