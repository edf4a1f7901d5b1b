"""Run one SDK server session over any message pipe: raw JSON-RPC bytes in, raw bytes out."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_loop
from mcp.shared.message import ServerMessageMetadata, SessionMessage

from gateway.core.provider_session import RELATED_REQUEST_KEY

log = logging.getLogger("gateway.publish")

SdkServer = Server[Any] | MCPServer
SendBytes = Callable[[bytes], Awaitable[None]]


def lowlevel(server: SdkServer) -> Server[Any]:
    """The low-level server behind either SDK server class."""
    if isinstance(server, MCPServer):
        return server._lowlevel_server
    return server


def encode(message: SessionMessage) -> bytes:
    """Serialise an outgoing message; a notification or request sent while serving a request names it.

    Stream transports cannot otherwise tell the gateway which request a log message belongs to, or
    which client a sampling, elicitation or roots request must go to (the SDK marks both with
    `related_request_id` when they are sent on the request's own channel)."""
    body: dict[str, Any] = message.message.model_dump(by_alias=True, exclude_unset=True, mode="json")
    metadata = message.metadata
    if (
        isinstance(message.message, types.JSONRPCNotification | types.JSONRPCRequest)
        and isinstance(metadata, ServerMessageMetadata)
        and metadata.related_request_id is not None
        and body.get("method") != "notifications/progress"
    ):
        params = body.setdefault("params", {})
        meta = params.setdefault("_meta", {})
        meta[RELATED_REQUEST_KEY] = metadata.related_request_id
    return orjson.dumps(body)


class FrameWriter:
    """The SDK session's write stream: each message goes out as one frame from the task that wrote it.

    No queue and no writer task in between: one task switch less on every answer, latency every
    relayed call sees. A frame write is atomic (the whole frame enters the transport's buffer
    before any flow-control wait), so answers from concurrent handlers never interleave."""

    def __init__(self, send: SendBytes) -> None:
        self._send = send
        self._closed = False

    async def send(self, message: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        data = encode(message)
        # Shielded: aiohttp's WebSocket writer has one flow-control waiter per connection, which
        # every sender held up by a backed-up link awaits. A call cancelled in that wait (its caller
        # sent notifications/cancelled while the tool reported progress) would cancel the shared
        # waiter and fail every other sender's wait with it. The frame is in the buffer already;
        # the cancel lands right after the wait. A link that dies ends the wait (reset, dropped).
        with anyio.CancelScope(shield=True):
            await self._send(data)

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> FrameWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SdkSession:
    """One SDK server session fed by `feed()` and answering through `send`."""

    def __init__(self, server: SdkServer, send: SendBytes) -> None:
        self.server = lowlevel(server)
        self._in_send: MemoryObjectSendStream[SessionMessage | Exception]
        self._in_recv: MemoryObjectReceiveStream[SessionMessage | Exception]
        self._in_send, self._in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        self._out = FrameWriter(send)

    async def feed(self, data: bytes | str) -> None:
        item: SessionMessage | Exception
        try:
            item = SessionMessage(types.jsonrpc_message_adapter.validate_json(data, by_name=False))
        except Exception as exc:  # the SDK answers a malformed message itself
            item = exc
        try:
            # Handed straight to the waiting session: anyio's send() would first yield to the event
            # loop once (a checkpoint), one loop turn on the way of every request.
            self._in_send.send_nowait(item)
        except anyio.WouldBlock:
            await self._in_send.send(item)

    async def close_input(self) -> None:
        await self._in_send.aclose()

    async def run(self) -> None:
        """Serve until the input closes.

        The SDK's handshake-era loop, as its own Streamable HTTP manager drives a session, rather than
        `Server.run`: that one first waits to see which era the client opens with and then relays
        every later message through a task and a second memory stream of its own, two event-loop
        turns and about 115 Python calls more on every request. The gateway (and mcp-broker) always
        opens a provider link with `initialize` (WIRE.md §2.5), so there is no era to detect."""
        server = self.server
        async with self._in_recv, self._out, server.lifespan(server) as lifespan_state:
            await serve_loop(
                server,
                self._in_recv,
                self._out,
                lifespan_state=lifespan_state,
                init_options=server.create_initialization_options(),
            )
