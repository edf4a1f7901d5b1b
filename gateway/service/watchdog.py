"""WATCHDOG=1 from a task on the event loop, every half of WATCHDOG_USEC: a loop that is blocked stops
sending it, and systemd restarts the service (WatchdogSec= in the unit)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping

from gateway.service.notify import Notifier

WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between two WATCHDOG=1 (half the timeout systemd set); None when the watchdog is off, or is
    meant for another process (WATCHDOG_PID names one that is not this)."""
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get(WATCHDOG_USEC, ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    owner = env.get(WATCHDOG_PID, "")
    if owner:
        try:
            if int(owner) != (os.getpid() if pid is None else pid):
                return None
        except ValueError:
            return None
    return usec / 2 / 1_000_000


class Watchdog:
    """Pings the service manager from the event loop; the pings stop whenever the loop stops turning."""

    def __init__(self, notifier: Notifier, interval_s: float) -> None:
        self.notifier = notifier
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="systemd watchdog")

    async def _run(self) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
