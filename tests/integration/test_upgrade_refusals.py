"""A refused WebSocket upgrade, as a board written the ordinary way meets it: after the refusal it
sends a close frame on the same connection, which must end the connection, not be read as HTTP."""

from __future__ import annotations

import asyncio
import logging
import socket
from urllib.parse import urlsplit

import pytest

from gateway.app import GatewayServer

UPGRADE = (
    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
)
CLOSE_FRAME = b"\x88\x82abcd" + bytes(b ^ k for b, k in zip(b"\x03\xe8", b"ab", strict=True))


@pytest.mark.parametrize(
    ("path", "extra", "status"),
    [
        ("/provider/", "", 400),  # a provider path without a slot
        ("/provider/pump-1", "Origin: http://evil.example\r\n", 403),  # a browser origin
        ("/pump-1", "Origin: http://evil.example\r\n", 403),  # a raw WebSocket client
    ],
)
async def test_a_refused_upgrade_ends_the_connection_and_what_follows_is_not_read_as_http(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture, path: str, extra: str, status: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    address = urlsplit(gateway.url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    try:
        writer.write(UPGRADE.format(path=path, host=address.netloc, extra=extra).encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.split(b" ", 2)[1] == str(status).encode(), head
        assert b"connection: close" in head.lower()
        writer.write(CLOSE_FRAME)  # what a board sends as it gives up on the link
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)  # the gateway ends the connection
        assert b"HTTP/1.1" not in rest  # no second answer, to bytes that were never a request
    finally:
        writer.close()
    await asyncio.sleep(0.1)
    errors = [r for r in caplog.records if r.name.startswith("aiohttp") and r.levelno >= logging.ERROR]
    assert errors == []


@pytest.mark.parametrize("path", ["/provider/pump-1", "/providers", "/pump-1"])
async def test_an_upgrade_whose_peer_left_before_the_answer_is_dropped_quietly(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """A board that gave up waiting on a busy gateway ("no upgrade answer in time") has closed its
    connection by the time its upgrade is read: request and close arrive together."""
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    address = urlsplit(gateway.url)
    assert address.hostname is not None and address.port is not None
    # A blocking socket, so that the gateway (on this loop) reads the request and the close in one go.
    with socket.create_connection((address.hostname, address.port)) as board:
        board.sendall(UPGRADE.format(path=path, host=address.netloc, extra="").encode())
    await asyncio.sleep(0.5)
    errors = [r.getMessage() for r in caplog.records if r.name.startswith("aiohttp") and r.levelno >= logging.ERROR]
    assert errors == []
