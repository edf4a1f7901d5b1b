"""The pace of provider WebSockets: a few upgrades per turn of the event loop, and sends bounded in time.

When every board of a plant dials at once (the gateway restarted), their WebSocket upgrades become
ready together, and asyncio runs every ready callback of a turn before it looks at any socket again:
a thousand upgrades (each attaches a slot and starts a provider session) would hold `/healthz` and
every client for a third of a second. A turn lets `per_turn` upgrades through; the rest wait, already
connected at the TCP level, for the turns after, while other work interleaves.

A provider that stops reading its socket (while it still sends, so it looks alive) leaves every send
waiting for the socket to drain, each frame held in memory: a send during which the socket takes
nothing for limits.provider_send_timeout_s cuts the connection (SocketSender), whether its caller
still waits for it or not; so do frames the kernel accepted at once and the provider never takes. A
provider that reads slowly but steadily is never cut for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import struct
import termios
from collections.abc import Callable

from aiohttp import WSMsgType, web

from gateway.core.link import close_reason

WATCH_TICKS = 4
"""Looks per limits.provider_send_timeout_s a link's watch takes at bytes still outstanding: a link
that takes nothing is cut within a quarter of the bound past it, at one `SIOCOUTQ` call per look."""


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
    return f"provider stopped reading: its socket took nothing for {timeout_s:g} s (limits.provider_send_timeout_s)"


def _kernel_send_queue(transport: asyncio.Transport) -> int:
    """Bytes sent on the connection's socket that its peer has not acknowledged (Linux SIOCOUTQ); 0 where
    that cannot be asked, so progress is then judged by the connection's own buffer alone."""
    sock = transport.get_extra_info("socket")
    if sock is None or not hasattr(termios, "TIOCOUTQ"):
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", answer)[0])


class SocketSender:
    """The frames sent on one provider WebSocket, each allowed `timeout_s` without progress to leave.

    A send during which the socket takes nothing for longer aborts the connection (no close handshake
    can pass the full buffer), so the frames held for it are dropped, and `on_cut` ends every slot the
    socket carries at once.

    A frame that may have to wait is sent by a task of its own, which the caller awaits shielded:
    every send waiting on a socket shares one drain future in aiohttp, so a caller that stops waiting
    (its deadline passed, or it left) must not cancel it under the others; and its frame, already in
    the buffer, stays under the bound whether anyone waits for it or not.

    A frame the kernel accepts at once (it fits in the socket's send buffer, megabytes on a LAN) needs
    no waiting send, so the watch times it: one timer per socket, set by a send when none is set, that
    looks every `timeout_s / WATCH_TICKS` at what is outstanding (the connection's buffer and the
    kernel's send queue) and cuts like a waiting send once the peer took nothing for `WATCH_TICKS`
    looks; it lapses when nothing is outstanding. A send thus costs one test of the timer, never a
    system call."""

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
        self._written = 0
        """Bytes handed to the connection so far (what it has taken is this less what it still buffers)."""
        self._watch: asyncio.TimerHandle | None = None
        """The next look of the watch at outstanding bytes; None while the watch is not set."""
        self._watched_taken = 0
        """What the peer had taken at the watch's last look."""
        self._idle_looks = -1
        """Looks in a row at which the peer had taken nothing more; -1 before the watch's first look."""

    async def send(self, data: bytes) -> None:
        """Send one text frame; ConnectionError when the socket is closed or was cut for waiting too long."""
        if self.cut_reason is not None:
            raise ConnectionError(self.cut_reason)
        if self.ws.closed:
            raise ConnectionError("WebSocket closed")
        transport = self.transport
        self._written += len(data)
        if self._watch is None and transport is not None:
            self._watch = asyncio.get_running_loop().call_later(self.timeout_s / WATCH_TICKS, self._look)
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
        # The bound is on progress, not on the whole send: a provider that reads slowly but steadily
        # (a weak radio link) takes a large frame in its own time; one whose socket takes nothing for
        # `timeout_s` has stopped reading.
        sending = asyncio.ensure_future(self.ws.send_frame(data, WSMsgType.TEXT))
        try:
            taken = self._taken() - len(data)  # counted in _written already, not in the buffer until the task runs
            while not (await asyncio.wait({sending}, timeout=self.timeout_s))[0]:
                now_taken = self._taken()
                if now_taken <= taken:
                    reason = stalled_reason(self.timeout_s)
                    self.cut(reason)
                    raise ConnectionError(reason)
                taken = now_taken
            sending.result()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # The shared drain future was cancelled under this send (another send timed out and cut
            # the socket): a failure of the link, not a cancellation of the caller.
            raise ConnectionError(self.cut_reason or "WebSocket send interrupted") from None
        finally:
            if not sending.done():
                sending.cancel()

    def _look(self) -> None:
        """The watch: cut the socket when what is outstanding on it has not moved for `WATCH_TICKS` looks."""
        self._watch = None
        transport = self.transport
        if transport is None or transport.is_closing() or self.cut_reason is not None:
            return
        outstanding = transport.get_write_buffer_size() + _kernel_send_queue(transport)
        if outstanding <= 0:
            self._idle_looks = -1  # all taken: the next send sets the watch again
            return
        taken = self._written - outstanding
        if self._idle_looks >= 0 and taken <= self._watched_taken:
            self._idle_looks += 1
            if self._idle_looks >= WATCH_TICKS:
                self.cut(stalled_reason(self.timeout_s))
                return
        else:
            self._idle_looks = 0  # the first look, or progress: the clock starts again
        self._watched_taken = taken
        self._watch = asyncio.get_running_loop().call_later(self.timeout_s / WATCH_TICKS, self._look)

    def stop_watch(self) -> None:
        """The socket is gone: no more looks at it."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _taken(self) -> int:
        """Bytes the peer has taken of those sent through this sender (frame headers aside): what is
        neither in the connection's buffer nor in the kernel's send queue. The kernel's queue counts: on
        a LAN it holds megabytes, and a slow reader drains it long before the connection's buffer moves."""
        transport = self.transport
        if transport is None:
            return self._written
        return self._written - transport.get_write_buffer_size() - _kernel_send_queue(transport)

    def cut(self, reason: str) -> None:
        """Abort the connection now and end its slots with `reason` (once)."""
        if self.cut_reason is None:
            self.cut_reason = reason
            self.stop_watch()
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
