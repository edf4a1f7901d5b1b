"""Session-era sockets and streams that hold the gateway's memory or its session caps.

A client WebSocket or legacy SSE session whose client does not read is bounded in queued bytes too
(limits.max_outbox_bytes), not in messages alone; a legacy SSE stream that never sends initialize ends
at limits.connections.handshake_timeout_s, as a raw WebSocket does; and the 429 at
max_sessions_per_principal offers waiting only when one of the caller's sessions can idle out.
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from yarl import URL

from gateway.core.jsonrpc import JsonObject
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_metrics import scrape
from tests.integration.test_stream_stalls import big, deaf_connection, only_stream
from tests.integration.test_websocket_client_stall import DeafSocket, big_answers
from tests.integration.test_websocket_clients import INITIALIZE_PARAMS, ws_url
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

OUTBOX_BYTES = 64 * 1024
ANSWER_KB = 16
"""Answers far under the message bound (notification_queue stays at its 256) but over the byte bound
after a few."""
SSE_ACCEPT = {"Accept": "text/event-stream"}


def call(request_id: int, kb: int) -> JsonObject:
    params = {"name": "big", "arguments": {"kb": kb}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_a_websocket_that_stops_reading_is_ended_at_max_outbox_bytes(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # The write bound far away: the byte bound alone has to end the session.
    limits = {"max_outbox_bytes": OUTBOX_BYTES, "stream_write_timeout_s": 60, "sse_keepalive_s": 60}
    server = await gateway_factory(limits=limits)
    calls: list[int] = []
    await publishers.start(server, "pump-1", big_answers(calls))
    client = await DeafSocket.open(server, "pump-1")
    await client.initialize()
    stream = only_stream(server)

    sent = 0
    while server.gateway.sessions.sessions and sent < 400:  # the client never reads from here on
        sent += 1
        assert client.send(call(sent, ANSWER_KB))
        await asyncio.sleep(0.02)
        assert len(stream) < 64, "the outbox held messages past its byte bound"
    assert not server.gateway.sessions.sessions, f"the session outlived {sent} unread calls"
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="websocket") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="max_outbox_bytes") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="notification_queue") == 0
    assert scraped.get("mcpgw_connection_cuts_total", reason="stream_write_timeout") == 0

    messages, closing = await asyncio.wait_for(client.read_to_close(), 20)
    assert closing == (1008, f"Client too slow: more than {OUTBOX_BYTES} bytes waiting (limits.max_outbox_bytes)")
    assert len(messages) < sent
    client.close()


async def test_one_message_over_max_outbox_bytes_goes_out_when_nothing_is_queued(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_outbox_bytes": OUTBOX_BYTES})
    calls: list[int] = []
    await publishers.start(server, "pump-1", big_answers(calls))
    async with http.ws_connect(ws_url(server, "pump-1"), max_msg_size=0) as ws:
        await ws.send_json({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS})
        assert (await ws.receive_json(timeout=5))["id"] == 0
        await ws.send_json(call(1, 4 * OUTBOX_BYTES // 1024))
        answer = await ws.receive_json(timeout=10)
        assert answer["id"] == 1 and "result" in answer, str(answer)[:200]
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_limit_hits_total", limit="max_outbox_bytes") == 0


async def test_a_legacy_sse_stream_that_stops_reading_is_ended_at_max_outbox_bytes(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # What is queued is dropped at the overflow; the stream ends once its stalled write gives up.
    limits = {"max_outbox_bytes": OUTBOX_BYTES, "stream_write_timeout_s": 1, "sse_keepalive_s": 60}
    server = await gateway_factory(limits=limits)
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    host = URL(server.url).raw_authority.encode()
    reader, writer = await deaf_connection(
        server, b"GET /pump-1/sse HTTP/1.1\r\nHost: " + host + b"\r\nAccept: text/event-stream\r\n\r\n"
    )
    await asyncio.wait_for(reader.readuntil(b"event: endpoint"), 5)
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the SSE session")
    stream = only_stream(server)
    put = 0
    # The client reads nothing more; the kernel's buffers take what they take, the outbox no more
    # than its byte bound (a message count would let 256 of these wait).
    while stream.put(big(put, 16 * 1024)):
        put += 1
        assert len(stream) * 16 * 1024 <= OUTBOX_BYTES, f"{len(stream)} messages queued"
        assert put < 2000, "the stream took every message"
        await asyncio.sleep(0.002)
    assert stream.closed and len(stream) == 0
    await wait_for(lambda: not server.gateway.sessions.sessions, what="the session to end")
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="sse") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="max_outbox_bytes") == 1
    writer.close()


async def test_a_legacy_sse_stream_without_initialize_ends_at_the_handshake_timeout(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"connections": {"handshake_timeout_s": 0.5}, "sse_keepalive_s": 0.2})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    async with http.get(f"{server.url}/pump-1/sse", headers=SSE_ACCEPT) as silent:
        assert silent.status == 200
        body = await asyncio.wait_for(silent.content.read(), 5)  # to the end of the stream
    assert body.startswith(b"event: endpoint\n")
    assert body.endswith(
        b": No initialize within 0.5 s (limits.connections.handshake_timeout_s): send initialize first\n\n"
    ), body
    await wait_for(lambda: not server.gateway.sessions.sessions, what="the session to end")
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_connection_cuts_total", reason="handshake_timeout") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="connections.handshake_timeout_s") == 1

    # A stream whose session answered initialize in time stays open past the deadline.
    async with http.get(f"{server.url}/pump-1/sse", headers=SSE_ACCEPT) as kept:
        head = await asyncio.wait_for(kept.content.readuntil(b"\n\n"), 5)
        endpoint = head.split(b"data: ")[1].strip().decode()
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS}
        async with http.post(
            server.url + endpoint, data=orjson.dumps(initialize), headers={"Content-Type": "application/json"}
        ) as posted:
            assert posted.status == 202
        await asyncio.sleep(1.0)
        assert len(server.gateway.sessions.sessions) == 1
        assert not kept.content.at_eof()


async def test_the_session_cap_429_names_open_websockets_instead_of_offering_to_wait(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_sessions_per_principal": 2})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    sockets = [await http.ws_connect(ws_url(server, "pump-1")) for _ in range(2)]
    async with http.post(f"{server.url}/pump-1/mcp", data=orjson.dumps(initialize), headers=headers) as refused:
        assert refused.status == 429
        message = (await refused.json())["error"]["message"]
    assert "2 open WebSocket sessions" in message, message
    assert "close WebSocket connections you no longer use" in message, message
    assert "wait" not in message and "DELETE" not in message, message

    # A session without an open stream can idle out: then waiting is offered.
    await sockets.pop().close()
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the socket's session to end")
    async with http.post(f"{server.url}/pump-1/mcp", data=orjson.dumps(initialize), headers=headers) as opened:
        assert opened.status == 200
    async with http.post(f"{server.url}/pump-1/mcp", data=orjson.dumps(initialize), headers=headers) as refused:
        assert refused.status == 429
        message = (await refused.json())["error"]["message"]
    assert "or wait: one idle for" in message, message
    for ws in sockets:
        await ws.close()
