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
provider that reads slowly but steadily is never cut for it, and its frames wait unwritten while the
connection's buffer is full, so a request given up meanwhile never reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
from collections.abc import Callable

from aiohttp import WSMsgType, web
from aiohttp.base_protocol import BaseProtocol

from gateway.core.link import close_reason
from gateway.core.request_sends import FrameHold, held_frame

WATCH_TICKS = 4
"""Looks per limits.provider_send_timeout_s a link's watch takes at bytes still outstanding: a link
that takes nothing is cut within a quarter of the bound past it, at one `SIOCOUTQ` call per look."""


KERNEL_SEND_BUFFER_BYTES = 64 * 1024
"""The default of limits.provider_send_buffer_bytes: the kernel's send buffer of a provider socket
(SO_SNDBUF; Linux doubles it for its bookkeeping). Left to itself Linux grows it to megabytes
(net.ipv4.tcp_wmem), where a slow reader's requests would wait, already written and out of the gate's
reach, for minutes; 64 KiB still keeps a LAN busy."""

DRAIN_RETRY_S = 0.05
"""How long the gate pauses before it looks again when aiohttp's drain could not be awaited."""


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

    A request frame that would take the connection's buffer to its high-water mark waits, unwritten,
    at a gate (first come, first written) until the buffer drained below the mark and the send before
    it left aiohttp; its caller may stop waiting there (its deadline passed, or it left) and the frame
    is then never written, so requests hold the buffer to about the mark plus one frame, and a provider
    that reads slowly never gets a request whose caller gave up before it was written. Other frames
    (answers, notifications, cancels) follow what the provider sent or asked, so they are few, and are
    written at once, as they always were; a slot's last word before its socket is closed must not
    wait behind requests a dead provider never takes. Past the gate the frame
    is sent by a task of its own, which the caller awaits shielded: every send waiting on a socket
    shares one drain future in aiohttp, so a caller that stops waiting must not cancel it under the
    others; and its frame, already in the buffer, stays under the bound whether anyone waits for it or
    not. The drain the gate waits for is awaited by one task per socket, for the same reason.

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
        kernel_send_buffer_bytes: int = KERNEL_SEND_BUFFER_BYTES,
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
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and kernel_send_buffer_bytes > 0:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, kernel_send_buffer_bytes)
        self._sending: set[asyncio.Task[None]] = set()
        protocol = transport.get_protocol() if transport is not None else None
        self._protocol = protocol if isinstance(protocol, BaseProtocol) else None
        """aiohttp's side of the connection: it says whether writing is paused and wakes a drain."""
        self._gate = asyncio.Lock()
        """Held by the frame at the head of those waiting for room in the connection's buffer."""
        self._gated = 0
        """Frames at the gate: while any waits, later ones queue behind it (their order is kept)."""
        self._passed: asyncio.Task[None] | None = None
        """The send of the frame that passed the gate last, until aiohttp took it."""
        self._draining: asyncio.Task[None] | None = None
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
        if self._watch is None and transport is not None:
            self._watch = asyncio.get_running_loop().call_later(self.timeout_s / WATCH_TICKS, self._look)
        if (
            not self._gated
            and transport is not None
            and transport.get_write_buffer_size() + len(data) < self._high_water
        ):
            # Below the buffer's high-water mark aiohttp writes the frame and returns without waiting.
            self._written += len(data)
            await self.ws.send_frame(data, WSMsgType.TEXT)
            return
        hold = held_frame.get()
        if hold is None:
            # Not a request (an answer, a notification, a cancel, a slot's last word before a close):
            # written now, as its sender counts on; such frames follow what the provider sent or asked.
            self._written += len(data)
            await asyncio.shield(self._start(data))
        elif (task := await self._through_gate(data, hold)) is not None:
            await asyncio.shield(task)

    def _start(self, data: bytes) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._send_bounded(data))
        self._sending.add(task)
        task.add_done_callback(self._sent)
        return task

    async def _through_gate(self, data: bytes, hold: FrameHold) -> asyncio.Task[None] | None:
        """Wait, unwritten and cancellably, for room in the connection's buffer, then start the request
        frame's send; None when the request was withdrawn meanwhile (never written)."""
        hold.held = True
        self._gated += 1
        try:
            async with self._gate:
                while True:
                    if self.cut_reason is not None:
                        raise ConnectionError(self.cut_reason)
                    if self.ws.closed:
                        raise ConnectionError("WebSocket closed")
                    if hold.withdrawn:
                        return None
                    passed = self._passed
                    if passed is not None and not passed.done():
                        await asyncio.wait({passed})  # never cancels it: the frame is in the buffer
                    elif self._protocol is not None and self._protocol.writing_paused:
                        await asyncio.wait({self._drained()})
                    else:
                        break
                hold.held = False  # written from here on: a cancel must follow it
                self._written += len(data)
                task = self._passed = self._start(data)
                return task
        finally:
            self._gated -= 1

    def _drained(self) -> asyncio.Task[None]:
        """One task per socket awaits aiohttp's drain (resumed below the low-water mark, or the
        connection lost): a waiter that gives up cancels only its own wait, never the shared future."""
        draining = self._draining
        if draining is None or draining.done():
            draining = self._draining = asyncio.get_running_loop().create_task(self._drain())
        return draining

    async def _drain(self) -> None:
        protocol = self._protocol
        if protocol is None:
            return
        try:
            await protocol._drain_helper()
        except (Exception, asyncio.CancelledError):
            # The connection was lost, or the shared future was cancelled under it (a send cut, a ping
            # past its bound) and stays so until the buffer drains: the gate looks again after a pause.
            await asyncio.sleep(DRAIN_RETRY_S)

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
