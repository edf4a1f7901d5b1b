"""What `mcp-gateway run` tells systemd over its life: the watchdog from the start, READY=1 with STATUS=
once the listener and the configured upstreams are up, STATUS= as slots come and go, RELOADING=1 and
READY=1 around a reload, STOPPING=1 when shutdown begins."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from gateway.config import SystemdConfig
from gateway.service.notify import Notifier
from gateway.service.readiness import Settling, unsettled, wait_settled
from gateway.service.status import SlotStatus
from gateway.service.watchdog import Watchdog, watchdog_interval

log = logging.getLogger("gateway.service")


class SystemdService:
    """The gateway's side of the unit's `Type=notify` and `WatchdogSec=`; all of it is a no-op without
    NOTIFY_SOCKET (a gateway run from a terminal)."""

    def __init__(
        self,
        notifier: Notifier,
        config: SystemdConfig,
        connected: Callable[[], int],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`connected`: how many slots have a ready provider now (the count STATUS= shows)."""
        self.notifier = notifier
        self.config = config
        self.slots = SlotStatus(notifier, connected, config.status_interval_s)
        interval = watchdog_interval(environ) if notifier.enabled else None
        self.watchdog = Watchdog(notifier, interval) if interval is not None else None
        self._reloads: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        """From here on the event loop pings the watchdog (when the unit has one)."""
        if self.watchdog is not None:
            self.watchdog.start()

    async def announce_ready(self, upstreams: Mapping[str, Settling]) -> list[str]:
        """READY=1 once every upstream has connected or finished its first attempt, or ready_wait_s has
        passed; the names of those still in their first attempt then."""
        if not self.notifier.enabled:
            return []
        waiting = unsettled(upstreams)
        if waiting:
            self.notifier.status(f"starting: waiting for {len(waiting)} of {len(upstreams)} upstreams")
        pending = await wait_settled(upstreams, self.config.ready_wait_s)
        if pending:
            log.warning(
                "ready (READY=1) after systemd.ready_wait_s = %gs with upstreams still in their first attempt: %s",
                self.config.ready_wait_s,
                ", ".join(pending),
            )
        self.notifier.ready(self.slots.shown_now())
        return pending

    def reloaded(self) -> None:
        """READY=1 after a reload, with the slots connected now."""
        self.notifier.ready(self.slots.shown_now())

    def stopping(self) -> None:
        """STOPPING=1: shutdown has begun (no STATUS= after it but "stopping")."""
        self.slots.close()
        self.notifier.stopping()

    async def close(self) -> None:
        if self.watchdog is not None:
            await self.watchdog.stop()
        self.notifier.close()
