"""A refused WebSocket upgrade, as a board written the ordinary way meets it: after the refusal it
sends a close frame on the same connection, which must end the connection, not be read as HTTP."""

from __future__ import annotations

import asyncio
import logging
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
