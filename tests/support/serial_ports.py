"""Serial lines for tests, on real pseudo-terminals: ports the gateway opens by path like /dev/ttyUSB0.

PtyPair        one pseudo-terminal: `path` is the port (opened by the gateway or by a board), the test
               holds the other end (`master`). The test also keeps the port side open, so that a port
               closed and reopened by the gateway does not hang the line up; close() is the unplug.
SerialRelay    joins two pairs, one per side (the board opens one port, the gateway the other), and
               passes bytes both ways, board-to-gateway frame by frame so that a test can damage a
               chosen frame (a flipped bit, text or random bytes inside it), write noise between frames,
               or freeze the line (as when a cable is cut, without the port going away).
FramedBoard    a board written by hand on a port's other end, speaking serial frames (docs/protocol-serial-mqtt.md,
               "Frames"), for tests that need a board to misbehave; it answers the gateway's handshake and pings itself.
PtyEnumerator  hot-plug's enumerator interface over PtyPairs: plug() and unplug() report USB devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import termios
import tty
from collections.abc import Callable
from typing import Any

import orjson

from gateway.southbound.serial import framing
from gateway.southbound.serial.hotplug import DiffingEnumerator, UsbPort

Message = dict[str, Any]


def raw_tty(fd: int) -> None:
    """Raw mode with VMIN 0: no echo, no line editing, reads return what has arrived."""
    tty.setraw(fd)
    attrs = termios.tcgetattr(fd)
    attrs[6][termios.VMIN] = 0
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


class PtyPair:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        raw_tty(self.slave)  # before anyone writes: a cooked tty would echo the gateway's frames back
        os.set_blocking(self.master, False)
        self.path = os.ttyname(self.slave)
        self.closed = False

    def close(self) -> None:
        """Unplug: both ends go; whoever has the port open reads an error, and the path disappears."""
        if not self.closed:
            self.closed = True
            for fd in (self.master, self.slave):
                with contextlib.suppress(OSError):
                    os.close(fd)


class _Writer:
    """Non-blocking writes to one master, buffered while the other side does not read."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = bytearray()
        self._watching = False

    def write(self, data: bytes) -> None:
        self.pending += data
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending:
            try:
                written = os.write(self.fd, self.pending)
            except BlockingIOError:
                break
            except OSError:
                self.pending.clear()  # the pair was closed
                break
            del self.pending[:written]
        if self.pending and not self._watching:
            self._watching = True
            loop.add_writer(self.fd, self._writable)
        elif not self.pending and self._watching:
            self._watching = False
            loop.remove_writer(self.fd)

    def _writable(self) -> None:
        self._flush()

    def stop(self) -> None:
        if self._watching:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_writer(self.fd)
            self._watching = False


FrameHook = Callable[[int, bytes], bytes]
"""(index of the board's frame, its bytes without delimiters) -> what to pass on instead."""


class SerialRelay:
    """Board side <-> gateway side; board-to-gateway bytes are passed on one frame at a time."""

    def __init__(self, board: PtyPair, gateway: PtyPair) -> None:
        self.board = board
        self.gateway = gateway
        self.to_gateway = _Writer(gateway.master)
        self.to_board = _Writer(board.master)
        self.frames_from_board = 0
        self.frozen = False
        self.hook: FrameHook | None = None
        self._partial = bytearray()
        loop = asyncio.get_running_loop()
        loop.add_reader(board.master, self._from_board)
        loop.add_reader(gateway.master, self._from_gateway)

    def _read(self, fd: int) -> bytes:
        try:
            return os.read(fd, 65536)
        except (BlockingIOError, OSError):
            return b""

    def _from_board(self) -> None:
        data = self._read(self.board.master)
        if not data:
            self._stop_reading(self.board.master)
            return
        self._partial += data
        while True:
            end = self._partial.find(b"\x00")
            if end < 0:
                return
            chunk = bytes(self._partial[:end])
            del self._partial[: end + 1]
            if chunk:
                index = self.frames_from_board
                self.frames_from_board += 1
                if self.hook is not None:
                    chunk = self.hook(index, chunk)
            if not self.frozen:
                self.to_gateway.write(chunk + b"\x00")

    def _from_gateway(self) -> None:
        data = self._read(self.gateway.master)
        if not data:
            self._stop_reading(self.gateway.master)
            return
        if not self.frozen:
            self.to_board.write(data)

    def _stop_reading(self, fd: int) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(fd)

    def inject_to_gateway(self, data: bytes) -> None:
        """Bytes on the line between two frames, as if the board had printed them."""
        self.to_gateway.write(data)

    def stop(self) -> None:
        for fd in (self.board.master, self.gateway.master):
            self._stop_reading(fd)
        self.to_gateway.stop()
        self.to_board.stop()


class FramedBoard:
    """A hand-written board on `pair.master`: frames in and out, handshake and pings answered."""

    def __init__(self, pair: PtyPair, tools: list[Message] | None = None, *, handshake: bool = True) -> None:
        self.pair = pair
        self.handshake = handshake
        """Answer initialize and tools/list itself; False: hand them to the test (a person typing)."""
        self.tools = tools if tools is not None else [{"name": "echo", "inputSchema": {"type": "object"}}]
        self.decoder = framing.FrameDecoder(1 << 20)
        self.writer = _Writer(pair.master)
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.answer_requests = True
        """Answer tools/call like an echo (the arguments back as text); False: hand them to the test."""
        self.received: list[Message] = []
        self.bytes_read = 0
        """Every byte the gateway put on the line, as the board read it."""
        self.bytes_written = 0
        """Every byte the board put on the line (send and write_raw)."""
        asyncio.get_running_loop().add_reader(pair.master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.pair.master, 65536)
        except (BlockingIOError, OSError):
            return
        self.bytes_read += len(data)
        for payload in self.decoder.feed(data):
            message = orjson.loads(payload)
            self.received.append(message)
            if not self._auto_answer(message):
                self.inbox.put_nowait(message)

    def _auto_answer(self, message: Message) -> bool:
        method = message.get("method")
        request_id = message.get("id")
        provider = None
        if "provider" in message and "payload" in message:  # an envelope: answer inside one
            provider, message = message["provider"], message["payload"]
            method, request_id = message.get("method"), message.get("id")
        result: Any = None
        if method in ("initialize", "tools/list") and not self.handshake:
            return False
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "framed-board", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": self.tools}
        elif method == "ping":
            result = {}
        elif method == "tools/call" and self.answer_requests:
            text = orjson.dumps(message["params"].get("arguments", {})).decode()
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif method == "notifications/initialized":
            return True
        if result is None:
            return False
        answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
        self.send(answer if provider is None else {"provider": provider, "payload": answer})
        return True

    def send(self, message: Message | bytes) -> None:
        data = message if isinstance(message, bytes) else orjson.dumps(message)
        self.write_raw(framing.wire_bytes(data))

    def write_raw(self, data: bytes) -> None:
        self.bytes_written += len(data)
        self.writer.write(data)

    def register(self, slot: str, **params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": "notifications/register", "params": {"slot": slot, **params}})

    async def next_message(self, timeout: float = 5.0) -> Message:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.pair.master)
        self.writer.stop()


class PtyEnumerator(DiffingEnumerator):
    """USB devices plugged in and out by the test, each a PtyPair."""

    name = "test"

    def plug(self, pair: PtyPair, vid_pid: str = "303a:1001", serial_number: str = "TEST-1") -> UsbPort:
        vid, pid = (int(part, 16) for part in vid_pid.split(":"))
        port = UsbPort(pair.path, vid, pid, serial_number, "1-1:1.0", "test board")
        self.update([*self.present.values(), port])
        return port

    def unplug(self, pair: PtyPair) -> None:
        self.update([port for port in self.present.values() if port.device != pair.path])
