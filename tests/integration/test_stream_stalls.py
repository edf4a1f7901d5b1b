"""Client streams whose reader stops or falls behind (limits.stream_write_timeout_s, notification_queue):
a stalled write ends the stream, an overflow drops what is queued at once and ends the stream next."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import WSMsgType
from yarl import URL

from gateway.app import GatewayServer
from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_http_session_era import RawSession, SseReader, url_of
from tests.integration.test_metrics import scrape
from tests.integration.test_websocket_clients import connect
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

QUEUE = 4


def big(n: int, size: int = 1 << 20) -> JsonObject:
    params = {"level": "info", "data": f"{n}:" + "x" * size}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def only_stream(server: GatewayServer) -> MessageQueue:
    (session,) = server.gateway.sessions.sessions.values()
    assert session.stream is not None
    return session.stream


async def deaf_connection(server: GatewayServer, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a small receive buffer, for a client that stops reading."""
    url = URL(server.url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (url.host, url.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    writer.write(request)
    return reader, writer


async def test_a_legacy_sse_client_that_stops_reading_is_cut_after_the_write_timeout(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"stream_write_timeout_s": 0.5})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    host = URL(server.url).raw_authority.encode()
    reader, writer = await deaf_connection(
        server, b"GET /pump-1/sse HTTP/1.1\r\nHost: " + host + b"\r\nAccept: text/event-stream\r\n\r\n"
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200"), head
    await asyncio.wait_for(reader.readuntil(b"event: endpoint"), 5)
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the SSE session")
    stream = only_stream(server)
    for n in range(8):  # far more than the socket's buffers hold, far fewer than notification_queue
        assert stream.put(big(n))
    # The client never reads again: the write that waits ends the stream, its session and its memory.
    await wait_for(lambda: not server.gateway.sessions.sessions, timeout=20, what="the stalled stream to end")
    assert len(stream) == 0
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_connection_cuts_total", reason="stream_write_timeout") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="stream_write_timeout_s") == 1
    assert scraped.get("mcpgw_client_streams", kind="sse") == 0
    writer.close()


async def test_a_get_stream_that_overflows_drops_its_queue_and_ends_next(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"notification_queue": QUEUE})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    raw = RawSession(http, url_of(server, "pump-1"))
    await raw.initialize()
    response = await raw.open_stream()
    stream = only_stream(server)
    for n in range(QUEUE + 1):  # at once: the writer has taken none of them when the bound is passed
        stream.put(big(n, 1000))
    assert stream.overflowed
    assert len(stream) == 0  # freed at once, not after the writer got through them
    # The client reads on: the stream ends without the messages that were queued.
    assert await SseReader(response).next() is None
    response.close()
    await wait_for(lambda: only_stream_gone(server), what="the GET stream to end")
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="get") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="notification_queue") == 1


def only_stream_gone(server: GatewayServer) -> bool:
    return all(s.stream is None for s in server.gateway.sessions.sessions.values())


async def test_a_websocket_client_that_falls_behind_gets_1008_next_and_is_counted(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"notification_queue": QUEUE})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, server, "pump-1")
    await client.initialize()
    stream = only_stream(server)
    for n in range(QUEUE + 1):
        stream.put(big(n, 1000))
    assert len(stream) == 0
    # The close comes before anything that was still queued.
    msg = await asyncio.wait_for(ws.receive(), 5)
    assert msg.type is WSMsgType.CLOSE, msg
    assert msg.data == 1008
    assert str(msg.extra).startswith("Client too slow")
    await ws.close()
    await wait_for(lambda: not server.gateway.sessions.sessions, what="the socket's session to end")
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="websocket") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="notification_queue") == 1
