"""Reconnect back-off shared by everything that dials a gateway (SDK publishers, the simulator).

Pure policy, no I/O and no dependencies, so the simulator can use it without the `mcp` SDK.
"""

from __future__ import annotations

import random

MAX_DOUBLINGS = 256
"""Past this many failures the ceiling no longer doubles (it reached max_s long before)."""


class Backoff:
    """Exponential back-off with equal jitter: a random wait between half a ceiling and the ceiling,
    which doubles per failure (never a near-zero wait, as full jitter would allow)."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.failures = 0

    def next_delay(self) -> float:
        # The exponent stops growing long before 2**1024, which no float holds (OverflowError at the
        # 1025th failure in a row: some six hours of a port, broker or upstream away at max_s 30 s).
        doubled = self.initial_s * 2.0 ** min(self.failures, MAX_DOUBLINGS)
        ceiling = min(self.max_s, doubled)
        self.failures += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
