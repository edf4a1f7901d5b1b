"""Run one SDK server session over any message pipe: raw JSON-RPC bytes in, raw bytes out."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
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
    """The SDK session's write stream: each message is sent as one frame by the task that wrote it.

    No queue and no writer task in between: a frame write is atomic on the transports that use this
    (one WebSocket frame, one loopback delivery), and one task switch less per answer is latency
    the caller sees. A message written after the stream closed raises as a closed memory stream
    would."""

    def __init__(self, send: SendBytes) -> None:
        self._send = send
        self._closed = False

    async def send(self, message: SessionMessage) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._send(encode(message))

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> FrameWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def parse(data: bytes | str) -> SessionMessage | Exception:
    """One incoming frame as the SDK session reads it; a malformed one is handed over as the error,
    which the SDK answers itself."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(data, by_name=False))
    except Exception as exc:
        return exc


class FrameReader:
    """The SDK session's read stream straight from a link's frames: the SDK's own receive loop reads
    the link, instead of a reader task handing each frame over through a queue."""

    def __init__(self, frames: AsyncGenerator[bytes | str, None]) -> None:
        self._frames = frames

    async def receive(self) -> SessionMessage | Exception:
        try:
            return parse(await anext(self._frames))
        except StopAsyncIteration:
            raise anyio.EndOfStream from None

    def __aiter__(self) -> FrameReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._frames.aclose()

    async def __aenter__(self) -> FrameReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SdkSession:
    """One SDK server session fed by `feed()` and answering through `send`."""

    def __init__(self, server: SdkServer, send: SendBytes) -> None:
        self.server = lowlevel(server)
        self.send = send
        self._in_send: MemoryObjectSendStream[SessionMessage | Exception]
        self._in_recv: MemoryObjectReceiveStream[SessionMessage | Exception]
        self._in_send, self._in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        self._out = FrameWriter(send)

    async def feed(self, data: bytes | str) -> None:
        await self._in_send.send(parse(data))

    async def close_input(self) -> None:
        await self._in_send.aclose()

    async def run(self) -> None:
        """Serve what `feed()` hands over until the input closes."""
        async with self._in_recv, self._out:
            await self.server.run(self._in_recv, self._out, self.server.create_initialization_options())

    async def serve(self, frames: AsyncGenerator[bytes | str, None]) -> None:
        """Serve the frames of one link until they end (instead of `feed()` and `run()`); the SDK
        cancels the calls still running then, whose answers would have no link to go out on."""
        async with FrameReader(frames) as reader, self._out:
            await self.server.run(reader, self._out, self.server.create_initialization_options())
