"""The stdio bridge's stdin, line by line: a pipe or socket read by the event loop, anything else (a
terminal, a regular file, /dev/null) by a daemon thread; a line over MAX_LINE_BYTES comes out as
TOO_LONG, carrying its head so that it is answered under its id."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import os
import stat
import threading
from collections.abc import AsyncIterator
from typing import BinaryIO

from gateway.northbound.bridge_errors import MAX_LINE_BYTES

log = logging.getLogger("gateway.stdio")

TOO_LONG = b"\x00too long"
"""Stands for a stdin line over MAX_LINE_BYTES (no JSON text starts with a NUL byte)."""
LINE_HEAD_BYTES = 4096
"""How much of a stdin line over MAX_LINE_BYTES is kept, to answer it under the id at its head."""


class TooLong(bytes):
    """TOO_LONG (equal to it), carrying the first LINE_HEAD_BYTES of the line it stands for."""

    head: bytes

    @classmethod
    def of(cls, head: bytes) -> TooLong:
        marker = cls(TOO_LONG)
        marker.head = head[:LINE_HEAD_BYTES]
        return marker


async def stdin_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of stdin (without the newline) until EOF; a line over MAX_LINE_BYTES comes out as TOO_LONG.

    A pipe or socket is read by the event loop. Anything else is read in a thread: epoll refuses
    regular files and devices such as /dev/null (EPERM), and the loop's reader would set O_NONBLOCK
    on a terminal, which stdout, stderr and the shell share with stdin."""
    loop = asyncio.get_running_loop()
    if _pipe_or_socket(stream):
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
        except (ValueError, OSError) as exc:
            log.debug("stdin cannot be watched by the event loop (%s): reading it in a thread", exc)
        else:
            async for line in _reader_lines(reader):
                yield line
            return
    async for line in _thread_lines(stream):
        yield line


def _pipe_or_socket(stream: BinaryIO) -> bool:
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _reader_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                yield exc.partial
            return
        except asyncio.LimitOverrunError as exc:
            head = await reader.readexactly(min(exc.consumed, LINE_HEAD_BYTES))  # consumed: about the limit
            await _skip_line(reader)
            yield TooLong.of(head)
            continue
        yield line.rstrip(b"\r\n")


_EOF = b""


async def _thread_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines read by a daemon thread: a read blocked on a terminal must not hold up the exit
    (asyncio's default executor is joined when the loop closes)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)  # a few lines ahead, then the thread waits

    def hand_over(line: bytes) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(lines.put(line), loop).result()
        except (RuntimeError, concurrent.futures.CancelledError):  # the loop is closing
            return False
        return True

    reader = _own_reader(stream)

    def read() -> None:
        try:
            while line := reader.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while (rest := reader.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass  # skip the rest of the long line without holding it
                    line = TooLong.of(line)
                else:
                    line = line.rstrip(b"\r\n")
                    if not line:
                        continue
                if not hand_over(line):
                    return
        except (OSError, ValueError) as exc:
            log.warning("reading stdin failed: %s", exc)
        if reader is not stream:
            reader.close()
        hand_over(_EOF)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while line := await lines.get():
        yield line


def _own_reader(stream: BinaryIO) -> BinaryIO:
    """A buffered reader of the thread's own on `stream`'s file (a duplicate of its descriptor, sharing its
    offset): a read blocked on a terminal when the bridge exits holds its lock, not sys.stdin's, which
    the interpreter takes at shutdown (it would abort: "could not acquire lock ... at interpreter
    shutdown"). A stream with no descriptor is read as it is."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return stream
    return open(os.dup(fd), "rb")


async def _skip_line(reader: asyncio.StreamReader) -> None:
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)
        except asyncio.IncompleteReadError:
            return
