"""The aiohttp WebSocket response of both WebSocket ways in (providers and raw clients): the frame cap.

aiohttp enforces the cap itself, as it reads a frame's header (nothing of an oversized message is
buffered), and then closes the socket with 1009 and an empty reason from inside `receive()`. This
subclass fills in the gateway's reason on that close, so the peer reads what to do (WIRE.md §2.2).
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from gateway.core.link import CLOSE_NORMAL, CLOSE_TOO_BIG, close_reason, frame_too_big_reason


def is_too_big(error: object) -> bool:
    """Whether an error aiohttp reported on a socket (an ERROR message's data, ws.exception()) is its
    1009 close for a message over the frame cap."""
    return getattr(error, "code", None) == CLOSE_TOO_BIG


class CappedWebSocketResponse(web.WebSocketResponse):
    """A WebSocket that takes messages of up to `max_frame_bytes` and closes 1009 with a reason beyond."""

    def __init__(
        self,
        max_frame_bytes: int,
        *,
        autoping: bool = True,
        heartbeat: float | None = None,
        protocols: Iterable[str] = (),
    ) -> None:
        # aiohttp refuses a message of max_msg_size bytes or more; limits.max_frame_bytes is the
        # largest message accepted.
        super().__init__(
            max_msg_size=max_frame_bytes + 1,
            autoping=autoping,
            heartbeat=heartbeat,
            protocols=protocols,
            decode_text=False,
            compress=False,
        )
        self.too_big_reason = close_reason(frame_too_big_reason(max_frame_bytes))

    async def close(self, *, code: int = CLOSE_NORMAL, message: bytes = b"", drain: bool = True) -> bool:
        if code == CLOSE_TOO_BIG and not message:
            message = self.too_big_reason.encode()
        return await super().close(code=code, message=message, drain=drain)
