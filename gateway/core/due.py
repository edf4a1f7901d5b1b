"""Things that fall due a fixed interval after they were added, under one timer for all of them.

Every relayed call is watched twice: by its request deadline, and by the clock that commits a slow
answer to SSE. An asyncio timer per watch costs about nine function calls to arm and cancel, on
every call. Here a watch is one dict insert and forgetting it one dict pop: since every key waits
the same interval, keys fall due in the order they were added, the oldest still watched is always
the next one due, and the one timer is armed for it alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class DueQueue(Generic[K]):
    """Calls `on_due(key)` once for each key still watched `interval` seconds after `watch(key)`."""

    TOLERANCE_S = 0.001
    """A timer may fire a hair early (the loop's clock resolution); a key this close is due."""

    def __init__(self, interval: float, on_due: Callable[[K], None]) -> None:
        self.interval = interval
        self.on_due = on_due
        self.watched: dict[K, float] = {}
        """Each key watched, with when it falls due; oldest first."""
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, key: K) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.interval
        self.watched[key] = due
        if self._timer is None:
            self._timer = loop.call_at(due, self._tick)

    def forget(self, key: K) -> None:
        # The timer stays armed: when it fires it finds the next key due, or none and stops.
        self.watched.pop(key, None)

    def close(self) -> None:
        """Forget every key and stop the timer (nothing falls due any more)."""
        self.watched.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + self.TOLERANCE_S
        watched = self.watched
        while watched:
            key, due = next(iter(watched.items()))
            if due > now:
                self._timer = loop.call_at(due, self._tick)
                return
            del watched[key]
            self.on_due(key)  # may watch or forget keys; the loop reads the dict afresh each time
