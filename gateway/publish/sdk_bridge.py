"""Run one SDK server session over any message pipe: raw JSON-RPC bytes in, raw bytes out."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_connection

from gateway.publish.frame_dispatcher import FrameDispatcher, parse
from gateway.publish.frame_writer import FrameWriter, SendBytes

log = logging.getLogger("gateway.publish")

SdkServer = Server[Any] | MCPServer


def lowlevel(server: SdkServer) -> Server[Any]:
    """The low-level server behind either SDK server class."""
    if isinstance(server, MCPServer):
        return server._lowlevel_server
    return server


class SdkSession:
    """One SDK server session fed by `feed()` and answering through `send`.

    `run()` must have reported itself started (`await group.start(session.run)`) before the first
    `feed()`: the publishers read the link only from then on."""

    def __init__(self, server: SdkServer, send: SendBytes) -> None:
        self.server = lowlevel(server)
        self._dispatcher = FrameDispatcher(FrameWriter(send))

    async def feed(self, data: bytes | str) -> None:
        """One frame from the gateway, dispatched in the calling task (see FrameDispatcher)."""
        await self._dispatcher.deliver(parse(data))

    async def close_input(self) -> None:
        self._dispatcher.end_input()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until the input closes.

        The SDK's handshake-era kernel (`serve_connection`, what its `serve_loop` and its own
        Streamable HTTP manager drive a session with) over a FrameDispatcher, rather than
        `Server.run`: that one first waits to see which era the client opens with and then relays
        every later message through a task and a second memory stream of its own. The gateway (and
        mcp-broker) always opens a provider link with `initialize` (WIRE.md §2.5), so there is no era
        to detect."""
        server = self.server
        dispatcher = self._dispatcher
        async with server.lifespan(server) as lifespan_state:
            await serve_connection(
                server,
                dispatcher,
                connection=Connection.for_loop(dispatcher),
                lifespan_state=lifespan_state,
                init_options=server.create_initialization_options(),
                task_status=task_status,
            )
