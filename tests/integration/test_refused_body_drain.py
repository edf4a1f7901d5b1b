"""A request answered before its body was read (413 for a body over limits.max_body_bytes) is answered
with `Connection: close` and has the rest of its body drained for DRAIN_FACTOR times max_body_bytes
more bytes at most, then its connection closed (docs/security-limits.md): an endless chunked body
costs the gateway a bounded read, not `body_timeout_s` of reading at whatever rate it comes. A body
several times over the bound is drained whole, so a client that sends it all before it reads (as
http.client does) reads its 413 cleanly.

The clients are raw sockets, so the test controls every byte and counts what it got to send."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import orjson
import pytest

from gateway.listener import DRAIN_FACTOR
from tests.conftest import GatewayFactory

MAX_BODY = 65_536
BODY_TIMEOUT_S = 30.0
"""Far longer than the test waits: a connection cut within it is cut by bytes, not by time."""
KERNEL_BUFFERS = 16 * 1024 * 1024
"""What the two sockets' kernel buffers may hold beyond what the gateway read (loopback's tcp_rmem
maximum is 32 MiB, yet a closing gateway leaves about 1 MiB in them; the client's send buffer is set
small); the gateway without a byte bound reads gigabytes in the same time."""
GIVE_UP_BYTES = 512 * 1024 * 1024
CHUNK = b"a" * 65_536


def head(port: int, extra: str = "Transfer-Encoding: chunked\r\n") -> bytes:
    return (
        f"POST /_broker/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{extra}\r\n"
    ).encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def endless_body(port: int) -> tuple[int, bytes, float, bool]:
    """POST a chunked body that never ends until the gateway stops taking it: bytes sent, what the
    gateway answered (read after the send failed or GIVE_UP_BYTES went), seconds, whether the send broke."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65_536)
    sock.settimeout(BODY_TIMEOUT_S)
    sent = 0
    broke = False
    started = time.monotonic()
    frame = chunk(CHUNK)
    try:
        sock.sendall(head(port))
        while sent < GIVE_UP_BYTES:
            sock.sendall(frame)
            sent += len(frame)
    except OSError:
        broke = True
    elapsed = time.monotonic() - started
    answer = b""
    try:
        while data := sock.recv(65_536):
            answer += data
    except OSError:
        pass
    sock.close()
    return sent, answer, elapsed, broke


def modest_body(port: int, size: int) -> bytes:
    """POST a whole chunked body of `size` bytes, then read the answer to the connection's end."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(head(port, "Transfer-Encoding: chunked\r\nConnection: close\r\n"))
        left = size
        while left:
            piece = CHUNK[: min(left, len(CHUNK))]
            sock.sendall(chunk(piece))
            left -= len(piece)
        sock.sendall(b"0\r\n\r\n")
        answer = b""
        while data := sock.recv(65_536):
            answer += data
    return answer


def status_and_error(answer: bytes) -> tuple[int, str]:
    head_part, _, body = answer.partition(b"\r\n\r\n")
    return int(head_part.split()[1]), orjson.loads(body)["error"]


async def test_an_endless_chunked_body_is_drained_by_bytes_not_by_time(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    server = await gateway_factory(
        limits={"max_body_bytes": MAX_BODY, "connections": {"body_timeout_s": BODY_TIMEOUT_S}}
    )
    sent, answer, elapsed, broke = await asyncio.to_thread(endless_body, server.port)
    assert broke, f"the gateway took {sent} bytes after its 413 and still reads"
    assert sent < MAX_BODY * (DRAIN_FACTOR + 1) + KERNEL_BUFFERS, f"{sent} bytes sent before the gateway closed"
    assert elapsed < BODY_TIMEOUT_S / 3, f"closed after {elapsed:.1f} s, by time rather than by bytes"
    if answer:  # usually read; a reset can take it with the connection
        assert status_and_error(answer) == (413, "body_too_large")
    # The gateway serves on.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n".encode())
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200")
    writer.close()
    # The cut is no fault of the gateway's: nothing logged ("Unhandled exception" from aiohttp's drain).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_modest_oversize_body_gets_its_413_read_cleanly(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits={"max_body_bytes": MAX_BODY})
    answer = await asyncio.to_thread(modest_body, server.port, MAX_BODY + MAX_BODY // 2)
    assert status_and_error(answer) == (413, "body_too_large")


def whole_body_then_answer(port: int, size: int) -> bytes:
    """POST a body of `size` bytes with its Content-Length, all of it before reading, as http.client
    does; then read the answer to the connection's end."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(head(port, f"Content-Length: {size}\r\n") + b"a" * size)
        answer = b""
        while data := sock.recv(65_536):
            answer += data
    return answer


async def test_a_body_many_times_over_is_drained_and_its_413_closes_the_connection(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(limits={"max_body_bytes": MAX_BODY})
    answer = await asyncio.to_thread(whole_body_then_answer, server.port, MAX_BODY * (DRAIN_FACTOR // 2))
    assert status_and_error(answer) == (413, "body_too_large")
    assert b"Connection: close" in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")  # nothing more on it
