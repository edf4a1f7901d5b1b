"""A raw WebSocket client (GET /<slot> upgrade) that stops reading but keeps sending.

aiohttp's heartbeat pings only a quiet socket, so a client that keeps sending requests and never reads
is bounded by the gateway alone: a frame waits at most limits.stream_write_timeout_s, and a client
limits.notification_queue messages behind loses its session at once (nothing more is started for it)
and gets 1008 once it reads. A credential that fails on such a socket drops what was queued for it.
The clients here are raw sockets with a small receive buffer, as a stalled script or board would be.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from pathlib import Path

import aiohttp
import orjson
import pytest
from mcp.server.mcpserver import MCPServer
from yarl import URL

from gateway.app import GatewayServer
from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue
from gateway.northbound.credential_watch import RECHECK_EVERY_S
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_client_auth import REQUIRED, bearer, run_cli
from tests.integration.test_metrics import scrape
from tests.integration.test_stream_stalls import big, deaf_connection
from tests.integration.test_websocket_clients import INITIALIZE_PARAMS

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ANSWER_KB = 256
"""Each answer is far bigger than the socket buffers a client that does not read leaves free."""


def big_answers(calls: list[int]) -> MCPServer:
    server = MCPServer("pump-1")

    @server.tool()
    def big(kb: int) -> str:
        """`kb` KiB of text; every call is recorded."""
        calls.append(kb)
        return "x" * (kb * 1024)

    return server


def masked_text_frame(message: JsonObject) -> bytes:
    """One client text frame (RFC 6455 §5.3: a client masks what it sends)."""
    data = orjson.dumps(message)
    mask = os.urandom(4)
    size = len(data)
    header = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack(">H", size))
    return header + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(data))


class DeafSocket:
    """A WebSocket client on a raw socket with a 4 KiB receive buffer that reads only when told to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, server: GatewayServer, slot: str, headers: dict[str, str] | None = None) -> DeafSocket:
        url = URL(server.url)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET /{slot} HTTP/1.1",
            f"Host: {url.raw_authority}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in (headers or {}).items()),
        ]
        reader, writer = await deaf_connection(server, ("\r\n".join(lines) + "\r\n\r\n").encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def send(self, message: JsonObject) -> bool:
        """Queue one frame; False once the gateway has cut the connection."""
        if self.writer.is_closing():
            return False
        self.writer.write(masked_text_frame(message))
        return True

    async def initialize(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        opcode, payload = await asyncio.wait_for(self.frame(), 5)
        assert opcode == 1 and orjson.loads(payload)["id"] == 0, payload

    async def frame(self) -> tuple[int, bytes]:
        """The next frame the gateway sent (unmasked, unfragmented: what aiohttp writes)."""
        first, second = await self.reader.readexactly(2)
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack(">H", await self.reader.readexactly(2))
        elif size == 127:
            (size,) = struct.unpack(">Q", await self.reader.readexactly(8))
        return first & 0x0F, await self.reader.readexactly(size)

    async def read_to_close(self) -> tuple[list[JsonObject], tuple[int, str] | None]:
        """Read what the gateway sent, to its close frame: the text messages and (code, reason)."""
        messages: list[JsonObject] = []
        while True:
            try:
                opcode, payload = await self.frame()
            except (asyncio.IncompleteReadError, ConnectionError):
                return messages, None
            if opcode == 1:
                messages.append(orjson.loads(payload))
            elif opcode == 8:
                return messages, (struct.unpack(">H", payload[:2])[0], payload[2:].decode())

    def close(self) -> None:
        self.writer.close()


def call_big(request_id: int) -> JsonObject:
    params = {"name": "big", "arguments": {"kb": ANSWER_KB}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def a_deaf_client(
    gateway_factory: GatewayFactory, publishers: Publishers, limits: JsonObject
) -> tuple[GatewayServer, DeafSocket, list[int]]:
    """A gateway with `limits`, a pump-1 of big answers (each call's number appended to the list) and an
    initialized client socket on it that reads nothing unless told to."""
    server = await gateway_factory(limits=limits)
    calls: list[int] = []
    await publishers.start(server, "pump-1", big_answers(calls))
    client = await DeafSocket.open(server, "pump-1")
    await client.initialize()
    return server, client, calls


def only_stream(server: GatewayServer) -> MessageQueue:
    (session,) = server.gateway.sessions.sessions.values()
    assert session.stream is not None
    return session.stream


async def test_a_client_that_never_reads_but_keeps_calling_loses_its_session_as_it_overflows(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # The write bound far away: the overflow alone has to end the session. Heartbeats far apart too.
    limits = {"notification_queue": 4, "stream_write_timeout_s": 60, "sse_keepalive_s": 60}
    server, client, calls = await a_deaf_client(gateway_factory, publishers, limits)

    sent = 0
    while server.gateway.sessions.sessions and sent < 100:  # the client never reads from here on
        sent += 1
        assert client.send(call_big(sent))
        await asyncio.sleep(0.05)
    assert not server.gateway.sessions.sessions, f"the session outlived {sent} unread calls"
    # Counted as it happened, while the client has still read nothing.
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="websocket") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="notification_queue") == 1
    assert scraped.get("mcpgw_connection_cuts_total", reason="stream_write_timeout") == 0

    # Calls the client goes on sending start nothing upstream.
    await asyncio.sleep(0.3)
    started = len(calls)
    for n in range(5):
        assert client.send(call_big(sent + 1 + n))
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert len(calls) == started

    # When the client reads at last, what was already on its way comes first, then the 1008 close.
    messages, closing = await asyncio.wait_for(client.read_to_close(), 20)
    assert closing is not None and closing[0] == 1008, closing
    assert closing[1] == "Client too slow: more than 4 messages waiting (limits.notification_queue)"
    assert len(messages) < sent
    client.close()
    for _ in range(100):
        if (await scrape(http, server)).get("mcpgw_client_streams", kind="websocket") == 0:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the socket was never let go")


async def test_a_client_that_stops_reading_is_cut_after_the_write_timeout_while_it_keeps_sending(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # A queue that never fills in this test: the write bound alone has to cut the connection.
    limits = {"stream_write_timeout_s": 0.5, "sse_keepalive_s": 60}
    server, client, _ = await a_deaf_client(gateway_factory, publishers, limits)

    sent = 0
    while server.gateway.sessions.sessions and sent < 100 and client.send(call_big(sent + 1)):
        sent += 1
        await asyncio.sleep(0.05)
    assert not server.gateway.sessions.sessions, f"the session outlived {sent} unread calls"
    assert sent < 100
    scraped = await scrape(http, server)
    assert scraped.get("mcpgw_connection_cuts_total", reason="stream_write_timeout") == 1
    assert scraped.get("mcpgw_limit_hits_total", limit="stream_write_timeout_s") == 1
    assert scraped.get("mcpgw_client_stream_overflows_total", kind="websocket") == 0
    assert scraped.get("mcpgw_client_streams", kind="websocket") == 0
    # The connection was aborted, not left to flush: reading finds its end without a close frame.
    _, closing = await asyncio.wait_for(client.read_to_close(), 10)
    assert closing is None
    client.close()


async def tokens(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", ["pump-1"])
    return path, create_token(path, "hmi", ["pump-1"])


async def until_refused(http: aiohttp.ClientSession, server: GatewayServer, token: str) -> None:
    """Post until the gateway refuses the token (it looks at token files once a second)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for _ in range(50):
        async with http.post(f"{server.url}/pump-1/mcp", json=body, headers=bearer(token)) as response:
            if response.status == 401:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("the revoked token was never refused")


def marker(n: int) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"marker {n}"}}


async def test_a_credential_that_fails_on_a_request_drops_what_was_queued_for_the_socket(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path, token = await tokens(tmp_path)
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED},
        limits={"stream_write_timeout_s": 60, "sse_keepalive_s": 60},
    )
    calls: list[int] = []
    await publishers.start(server, "pump-1", big_answers(calls))
    client = await DeafSocket.open(server, "pump-1", bearer(token))
    await client.initialize()
    stream = only_stream(server)
    for n in range(8):  # far more than the socket's buffers hold: the writer waits on the first ones
        assert stream.put(big(n))
    for n in range(3):
        assert stream.put(marker(n))
    await asyncio.sleep(0.5)
    assert len(stream) >= 3, "the writer did not stall behind the big messages"

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0
    await until_refused(http, server, token)
    await asyncio.sleep(RECHECK_EVERY_S + 0.2)  # past the staleness a judgement may have
    assert client.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
    await wait_for(lambda: not server.gateway.sessions.sessions, what="the revoked socket's session to end")

    messages, closing = await asyncio.wait_for(client.read_to_close(), 20)
    assert closing == (1008, "Credential no longer valid (invalid): reconnect with a valid credential")
    logged = [m["params"]["data"][:8] for m in messages if m.get("method") == "notifications/message"]
    assert not [data for data in logged if data.startswith("marker")], logged
    assert messages[-1]["id"] == 7 and messages[-1]["error"]["code"] == -32001, messages[-1]
    client.close()


async def test_a_legacy_sse_session_whose_stream_overflowed_starts_nothing_more(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    """The channel is shared with legacy SSE: there too, requests posted after the stream overflowed
    (while its writer still waits on a client that does not read) are not run."""
    limits = {"notification_queue": 4, "stream_write_timeout_s": 60, "sse_keepalive_s": 60}
    server = await gateway_factory(limits=limits)
    calls: list[int] = []
    await publishers.start(server, "pump-1", big_answers(calls))
    host = URL(server.url).raw_authority.encode()
    reader, writer = await deaf_connection(
        server, b"GET /pump-1/sse HTTP/1.1\r\nHost: " + host + b"\r\nAccept: text/event-stream\r\n\r\n"
    )
    await asyncio.wait_for(reader.readuntil(b"event: endpoint\ndata: "), 5)
    endpoint = (await asyncio.wait_for(reader.readuntil(b"\n"), 5)).decode().strip()

    async def post(message: JsonObject) -> None:
        async with http.post(f"{server.url}{endpoint}", json=message) as response:
            assert response.status == 202, await response.text()

    await post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS})
    await post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    stream = only_stream(server)
    sent = 0
    while not stream.overflowed and sent < 100:  # the client reads nothing more
        sent += 1
        await post(call_big(sent))
        await asyncio.sleep(0.05)
    assert stream.overflowed
    await asyncio.sleep(0.3)
    started = len(calls)
    for n in range(5):
        await post(call_big(sent + 1 + n))
    await asyncio.sleep(0.5)
    assert len(calls) == started
    writer.close()
