"""The SDK session's outgoing messages as frames on the provider link."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import orjson
from mcp.shared.message import ServerMessageMetadata, SessionMessage

from gateway.core.relay import RELATED_REQUEST_KEY

SendBytes = Callable[[bytes], Awaitable[None]]


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
        self.closed = False

    async def send(self, message: SessionMessage, /) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        data = encode(message)
        # Shielded: aiohttp's WebSocket writer has one flow-control waiter per connection, which
        # every sender held up by a backed-up link awaits. A call cancelled in that wait (its caller
        # sent notifications/cancelled while the tool reported progress) would cancel the shared
        # waiter and fail every other sender's wait with it. The frame is in the buffer already;
        # the cancel lands right after the wait. A link that dies ends the wait (reset, dropped).
        with anyio.CancelScope(shield=True):
            await self._send(data)

    async def send_unshielded(self, data: bytes) -> None:
        """A frame from a task nothing but the link's end can cancel (FrameDispatcher's results)."""
        await self._send(data)

    async def aclose(self) -> None:
        self.closed = True

    async def __aenter__(self) -> FrameWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
