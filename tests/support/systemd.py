"""Stand-ins for systemd's sockets: a NOTIFY_SOCKET and a journal socket the test binds and reads.

    with NotifySocket() as notify:            # env={"NOTIFY_SOCKET": notify.path}
        message = await notify.until(lambda m: m.get("READY") == "1")

Both are real AF_UNIX datagram sockets in a fresh short directory (a socket path has at most 107 bytes).
"""

from __future__ import annotations

import array
import asyncio
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

Message = dict[str, str]


def parse_notify(data: bytes) -> Message:
    """sd_notify's "KEY=value" lines as a dict."""
    found: Message = {}
    for line in data.decode().splitlines():
        key, _, value = line.partition("=")
        found[key] = value
    return found


def parse_journal(data: bytes) -> dict[str, list[str]]:
    """The journal's native protocol: `NAME=value\\n`, or `NAME\\n` + 64-bit LE length + bytes + `\\n`.
    A field may appear more than once, hence the lists."""
    fields: dict[str, list[str]] = {}
    at = 0
    while at < len(data):
        end = data.index(b"\n", at)
        line = data[at:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            at = end + 1
        else:
            name = line
            (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
            value = data[end + 9 : end + 9 + size]
            assert data[end + 9 + size : end + 10 + size] == b"\n", "a binary-safe field must end with a newline"
            at = end + 10 + size
        fields.setdefault(name.decode(), []).append(value.decode())
    return fields


class DatagramSocket:
    """A bound AF_UNIX datagram socket in its own temporary directory."""

    def __init__(self, name: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mcpgw-"))
        self.path = str(self.directory / name)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(self.path)
        self.socket.setblocking(False)

    def __enter__(self) -> DatagramSocket:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.socket.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def drain(self) -> list[bytes]:
        """Every datagram waiting now, without waiting for more."""
        found = []
        while True:
            try:
                found.append(self.socket.recv(1 << 20))
            except BlockingIOError:
                return found

    async def receive(self, timeout: float = 10.0) -> bytes:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.sock_recv(self.socket, 1 << 20), timeout)

    def receive_with_descriptor(self) -> tuple[bytes, int | None]:
        """One waiting datagram and the descriptor passed with it (SCM_RIGHTS), if any."""
        fds = array.array("i")
        data, ancillary, _, _ = self.socket.recvmsg(1 << 20, socket.CMSG_SPACE(fds.itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        return data, (fds[0] if fds else None)


class NotifySocket(DatagramSocket):
    """What systemd listens on for sd_notify; every message read is kept in `seen`."""

    def __init__(self) -> None:
        super().__init__("notify")
        self.seen: list[Message] = []

    def __enter__(self) -> NotifySocket:
        return self

    async def next(self, timeout: float = 10.0) -> Message:
        message = parse_notify(await self.receive(timeout))
        self.seen.append(message)
        return message

    async def until(self, wanted: Callable[[Message], bool], timeout: float = 20.0, what: str = "") -> Message:
        """The first message from now on for which `wanted` holds (failing, never hanging, after `timeout`)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await self.next(max(left, 0.0))
            except TimeoutError:
                raise AssertionError(f"no {what or 'such'} notification within {timeout}s; seen: {self.seen}") from None
            if wanted(message):
                return message

    def drain_messages(self) -> list[Message]:
        found = [parse_notify(data) for data in self.drain()]
        self.seen += found
        return found


def read_descriptor(fd: int) -> bytes:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
