"""Letting go of one served serial port and taking it back (gateway/core/serial_handover.py):
`mcp-gateway flash` and a board update open the port themselves while the gateway keeps it closed.

A port is found by the path it is served under or by its real path (a /dev/serial/by-id link names
the same tty). Let go, it closes within one pass of the event loop: its slots detach as when a board
is unplugged, its exclusive lock goes, and supervision waits, state "held", without reopening it,
until it is taken back (or the gateway stops). Nothing of this survives a restart: a gateway that
starts opens every configured port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from gateway.core.jsonrpc import JsonObject
from gateway.southbound.serial.ports import SerialLines, SerialPort

CLOSE_WAIT_S = 5.0
"""How long release() waits for the port to be closed before it answers anyway (with its state)."""


class SerialPortHandover:
    def __init__(self, lines: SerialLines) -> None:
        self.lines = lines

    def _find(self, name: str) -> SerialPort:
        port = self.lines.ports.get(name)
        if port is not None:
            return port
        real = os.path.realpath(name)
        for served in self.lines.ports.values():
            if os.path.realpath(served.spec.path) == real:
                return served
        served_now = ", ".join(sorted(self.lines.ports)) or "none"
        raise LookupError(f"this gateway serves no serial port {name!r} (served now: {served_now})")

    async def release(self, port: str) -> JsonObject:
        found = self._find(port)
        found.let_go("released for another program (broker_serial_release)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(found.shut.wait(), CLOSE_WAIT_S)
        return {"port": found.spec.path, "state": found.state, "closed": found.shut.is_set()}

    async def resume(self, port: str) -> JsonObject:
        found = self._find(port)
        found.take_back()
        return {"port": found.spec.path, "state": found.state}
