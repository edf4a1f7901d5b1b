"""The pace of provider WebSockets: a few upgrades per turn of the event loop, and sends bounded in time.

When every board of a plant dials at once (the gateway restarted), their WebSocket upgrades become
ready together, and asyncio runs every ready callback of a turn before it looks at any socket again:
a thousand upgrades (each attaches a slot and starts a provider session) would hold `/healthz` and
every client for a third of a second. A turn lets `per_turn` upgrades through; the rest wait, already
connected at the TCP level, for the turns after, while other work interleaves.

A provider that stops reading its socket (while it still sends, so it looks alive) leaves every send
waiting for the socket to drain, each frame held in memory: a send that waits longer than
limits.provider_send_timeout_s cuts the connection (SocketSender), whether its caller still waits
for it or not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from aiohttp import WSMsgType, web

from gateway.core.link import close_reason


class TurnPacer:
    """At most `per_turn` callers of `turn()` go on in one turn of the event loop."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self._turns: asyncio.Semaphore | None = None  # made in the running loop, on first use

    async def turn(self) -> None:
        turns = self._turns
        if turns is None:
            turns = self._turns = asyncio.Semaphore(self.per_turn)
        await turns.acquire()  # no suspension while this turn has room
        asyncio.get_running_loop().call_soon(turns.release)  # the room comes back next turn


def stalled_reason(timeout_s: float) -> str:
    """Why a provider socket was cut for not reading (the close reason and the callers' error say it)."""
    return f"provider stopped reading: a send waited {timeout_s:g} s (limits.provider_send_timeout_s)"


class SocketSender:
    """The frames sent on one provider WebSocket, each allowed `timeout_s` to leave.

    A send that waits longer aborts the connection (no close handshake can pass the full buffer), so
    the frames held for it are dropped, and `on_cut` ends every slot the socket carries at once.

    A frame that may have to wait is sent by a task of its own, which the caller awaits shielded:
    every send waiting on a socket shares one drain future in aiohttp, so a caller that stops waiting
    (its deadline passed, or it left) must not cancel it under the others; and its frame, already in
    the buffer, stays under the bound whether anyone waits for it or not."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        transport: asyncio.Transport | None,
        timeout_s: float,
        on_stall: Callable[[], None] = lambda: None,
    ) -> None:
        self.ws = ws
        self.transport = transport
        self.timeout_s = timeout_s
        self.on_stall = on_stall
        """Told first when a send waits too long (counts the limit hit)."""
        self.on_cut: Callable[[str], object] = lambda reason: None
        """Ends the slots the socket carries (set once they exist)."""
        self.cut_reason: str | None = None
        """Why the socket was cut for not reading; None while it was not."""
        self._high_water = transport.get_write_buffer_limits()[1] if transport is not None else 0
        self._sending: set[asyncio.Task[None]] = set()

    async def send(self, data: bytes) -> None:
        """Send one text frame; ConnectionError when the socket is closed or was cut for waiting too long."""
        if self.cut_reason is not None:
            raise ConnectionError(self.cut_reason)
        if self.ws.closed:
            raise ConnectionError("WebSocket closed")
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size() + len(data) < self._high_water:
            # Below the buffer's high-water mark aiohttp writes the frame and returns without waiting.
            await self.ws.send_frame(data, WSMsgType.TEXT)
            return
        task = asyncio.get_running_loop().create_task(self._send_bounded(data))
        self._sending.add(task)
        task.add_done_callback(self._sent)
        await asyncio.shield(task)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled():
            task.exception()  # its caller may have stopped waiting: its failure is the link's, told elsewhere

    async def _send_bounded(self, data: bytes) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.ws.send_frame(data, WSMsgType.TEXT)
        except TimeoutError:
            reason = stalled_reason(self.timeout_s)
            self.cut(reason)
            raise ConnectionError(reason) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # The shared drain future was cancelled under this send (another send timed out and cut
            # the socket): a failure of the link, not a cancellation of the caller.
            raise ConnectionError(self.cut_reason or "WebSocket send interrupted") from None

    def cut(self, reason: str) -> None:
        """Abort the connection now and end its slots with `reason` (once)."""
        if self.cut_reason is None:
            self.cut_reason = reason
            self.abort()
            self.on_stall()
            self.on_cut(reason)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def backed_up(self) -> bool:
        """Whether frames wait in the connection's buffer (the peer is not taking what was sent)."""
        return self.transport is not None and self.transport.get_write_buffer_size() > 0

    async def close(self, code: int, reason: str) -> None:
        """Close with `code` and `reason` when the peer takes frames, within `timeout_s`; else abort:
        a close frame would wait behind the frames the peer does not read."""
        if self.ws.closed:
            return
        if self.cut_reason is not None or self.backed_up():
            self.abort()
            return
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.ws.close(code=code, message=close_reason(reason).encode())
        except TimeoutError:
            self.abort()

    async def quiet_ping(self) -> None:
        """A ping frame, bounded like any send; a failure shows as a missed heartbeat."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.timeout_s):
                await self.ws.ping()
