"""Reconnect back-off shared by everything that dials a gateway (SDK publishers, the simulator).

Pure policy, no I/O and no dependencies, so the simulator can use it without the `mcp` SDK.
"""

from __future__ import annotations

import random


class Backoff:
    """Full-jitter exponential back-off: a random wait up to a ceiling that doubles per failure."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.failures = 0

    def next_delay(self) -> float:
        ceiling = min(self.max_s, self.initial_s * (2**self.failures))
        self.failures += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
