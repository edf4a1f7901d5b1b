"""STATUS= with the number of connected slots, sent when it changes, at most once per status_interval_s."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.service.notify import Notifier


def slots_text(connected: int) -> str:
    return f"{connected} slot{'' if connected == 1 else 's'} connected"


class SlotStatus:
    """A membership listener of the slot registry: each change schedules one STATUS= (coalesced)."""

    def __init__(self, notifier: Notifier, connected: Callable[[], int], interval_s: float) -> None:
        self.notifier = notifier
        self.connected = connected
        self.interval_s = interval_s
        self.shown: int | None = None
        self._sent_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def text(self) -> str:
        return slots_text(self.connected())

    def shown_now(self) -> str:
        """The status sent with READY=1: what is shown is what the next change is compared with."""
        self.shown = self.connected()
        self._sent_at = asyncio.get_running_loop().time()
        return slots_text(self.shown)

    def changed(self, _slot: str | None = None) -> None:
        """The connected slots may have changed (the registry calls this; the slot is not needed)."""
        if self._closed or self._timer is not None or not self.notifier.enabled:
            return
        loop = asyncio.get_running_loop()
        wait = 0.0 if self._sent_at is None else max(self._sent_at + self.interval_s - loop.time(), 0.0)
        self._timer = loop.call_later(wait, self._send)

    def _send(self) -> None:
        self._timer = None
        count = self.connected()
        if count == self.shown or self._closed:
            return
        self.shown = count
        self._sent_at = asyncio.get_running_loop().time()
        self.notifier.status(slots_text(count))

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
