"""When the gateway is ready to tell systemd READY=1: every configured upstream has connected or finished
its first attempt, or the configured wait ([systemd] ready_wait_s) is over."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

UNSETTLED_STATES = frozenset({"idle", "starting", "connecting", "opening"})
"""The states of a stdio upstream (idle, starting), a remote upstream and an MQTT broker connection
(idle, connecting) and a serial port (idle, opening) before their first attempt has ended either way."""
POLL_S = 0.05
"""How often the states are looked at while waiting: far below any upstream's own timeout."""


class Settling(Protocol):
    @property
    def state(self) -> str: ...


def unsettled(upstreams: Mapping[str, Settling]) -> list[str]:
    return [name for name, upstream in upstreams.items() if upstream.state in UNSETTLED_STATES]


async def wait_settled(upstreams: Mapping[str, Settling], wait_s: float, poll_s: float = POLL_S) -> list[str]:
    """Wait until no upstream is in its first attempt, at most `wait_s`; the names still in it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        pending = unsettled(upstreams)
        left = deadline - loop.time()
        if not pending or left <= 0:
            return pending
        await asyncio.sleep(min(poll_s, left))
