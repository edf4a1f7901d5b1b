"""Asking a running gateway to let go of a serial port for a flash, and to take it back after.

The gateway's serial way in holds its ports open and locked (gateway/southbound/serial/ports.py). The
flash asks the gateway's `_broker` provider, over the same MCP endpoint `mcp-gateway reload` uses:

  broker_serial_release {"port": "<path>"}   close the port and keep it closed (its slots detach, as
                                             when a board is unplugged) until resumed
  broker_serial_resume  {"port": "<path>"}   open it again now (the board re-registers)

A gateway that is not running, refuses, or does not have these tools (older versions) counts as "did
not release": the flash then reports port-in-use.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

RELEASE_TOOL = "broker_serial_release"
RESUME_TOOL = "broker_serial_resume"


class Handover(Protocol):
    def release(self, port: str) -> bool:
        """True when the holder let go of `port` (it may take a moment to close it)."""
        ...

    def resume(self, port: str) -> None: ...


class GatewayHandover:
    """The running gateway at `url`, reached as a client (token as for the other client commands)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url
        self.token = token

    def _call(self, tool: str, port: str) -> bool:
        from gateway.client import GatewayCallError, GatewayClient

        async def go() -> bool:
            async with GatewayClient(self.url, "_broker", timeout_s=10.0, token=self.token) as client:
                result = await client.call_tool(tool, {"port": port})
            return not result.get("isError")

        try:
            return asyncio.run(go())
        except (GatewayCallError, OSError, TimeoutError):
            return False

    def release(self, port: str) -> bool:
        return self._call(RELEASE_TOOL, port)

    def resume(self, port: str) -> None:
        self._call(RESUME_TOOL, port)
