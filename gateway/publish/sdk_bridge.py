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


class SdkSession:
    """One SDK server session fed by `feed()` and answering through `send`."""

    def __init__(self, server: SdkServer, send: SendBytes) -> None:
        self.server = lowlevel(server)
        self.send = send
        self._in_send: MemoryObjectSendStream[SessionMessage | Exception]
        self._in_recv: MemoryObjectReceiveStream[SessionMessage | Exception]
        self._in_send, self._in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        self._out_send: MemoryObjectSendStream[SessionMessage]
        self._out_recv: MemoryObjectReceiveStream[SessionMessage]
        self._out_send, self._out_recv = anyio.create_memory_object_stream[SessionMessage](64)

    async def feed(self, data: bytes | str) -> None:
        try:
            message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
        except Exception as exc:  # the SDK answers a malformed message itself
            await self._in_send.send(exc)
            return
        await self._in_send.send(SessionMessage(message))

    async def close_input(self) -> None:
        await self._in_send.aclose()

    async def run(self) -> None:
        """Serve until the input closes."""

        async def writer() -> None:
            async with self._out_recv:
                async for message in self._out_recv:
                    await self.send(encode(message))

        async with anyio.create_task_group() as group:
            group.start_soon(writer)
            async with self._in_recv, self._out_send:
                await self.server.run(self._in_recv, self._out_send, self.server.create_initialization_options())
            group.cancel_scope.cancel()
