"""The aiohttp WebSocket response of both WebSocket ways in (providers and raw clients): the frame cap,
and the deadline of an upgraded socket's first exchange.

aiohttp enforces the cap itself, as it reads a frame's header (nothing of an oversized message is
buffered), and then closes the socket with 1009 and an empty reason from inside `receive()`. This
subclass fills in the gateway's reason on that close, so the peer reads what to do (docs/protocol.md, "Size").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from gateway.core.link import CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TOO_BIG, close_reason, frame_too_big_reason
from gateway.http_answers import STREAMED_STATUS_KEY
from gateway.policy.connection_limits import CUT_LIMIT_KEYS, HANDSHAKE_TIMEOUT
from gateway.telemetry.metrics import Metrics

_closing: set[asyncio.Task[None]] = set()
"""Closes started by a handshake deadline, held until they finish."""


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

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        writer = await super().prepare(request)
        request[STREAMED_STATUS_KEY] = 101  # the entry gate counts this exchange as 101, however it ends
        return writer

    async def upgrade(self, request: web.BaseRequest) -> bool:
        """prepare(), or False when the peer left before the 101 could be written (a board that gave up
        waiting on a busy gateway): the handler then returns peer_left(), which aiohttp cannot send either
        and drops quietly; a ConnectionResetError out of the handler would be logged as an error."""
        try:
            await self.prepare(request)
        except ConnectionResetError:
            return False
        return True

    async def close(self, *, code: int = CLOSE_NORMAL, message: bytes = b"", drain: bool = True) -> bool:
        if code == CLOSE_TOO_BIG and not message:
            message = self.too_big_reason.encode()
        return await super().close(code=code, message=message, drain=drain)


def peer_left() -> web.Response:
    """What a handler returns for an upgrade whose peer is gone (CappedWebSocketResponse.upgrade)."""
    return web.Response(status=400, text="the peer closed the connection before the upgrade was answered")


def handshake_deadline(
    ws: web.WebSocketResponse, timeout_s: float, done: Callable[[], bool], reason: str, metrics: Metrics
) -> asyncio.TimerHandle:
    """Close `ws` with 1008 and `reason` unless `done()` holds `timeout_s` after the upgrade
    (limits.connections.handshake_timeout_s). An upgraded socket that never starts its exchange (a client
    that never sends initialize, a /providers socket that claims no slot) is not held; the caller
    cancels the returned timer when the socket ends."""
    loop = asyncio.get_running_loop()

    def expire() -> None:
        if ws.closed or done():
            return
        metrics.connection_cuts.labels(HANDSHAKE_TIMEOUT).inc()
        metrics.limit_hit(CUT_LIMIT_KEYS[HANDSHAKE_TIMEOUT])
        task = loop.create_task(_close(ws, close_reason(reason)))
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    return loop.call_later(timeout_s, expire)


async def _close(ws: web.WebSocketResponse, reason: str) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code=CLOSE_POLICY, message=reason.encode())
