"""What the core asks of the serial way in it does not own (gateway/southbound/serial/handover.py owns
it): let go of one serial port for a while, so that another program (`mcp-gateway flash`, a board
update) can open it, and take it back after. For `_broker`'s broker_serial_release and
broker_serial_resume tools."""

from __future__ import annotations

from typing import Protocol

from gateway.core.jsonrpc import JsonObject


class SerialHandover(Protocol):
    async def release(self, port: str) -> JsonObject:
        """Close `port` (a served path, or another name for it) and keep it closed until resume(): its
        slots detach as when a board is unplugged. The port's state once closed; LookupError when the
        gateway serves no such port."""
        ...

    async def resume(self, port: str) -> JsonObject:
        """Open a released `port` again now; its board registers anew. LookupError as release()."""
        ...
