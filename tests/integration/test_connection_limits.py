"""[limits.connections] on the real listener: idle, dripping and stalled connections are cut within their
timeouts, connections over a cap are refused with a named 503 (or closed when too many are refused at
once), descriptor exhaustion is refused cleanly, and long-lived streams and boards are never idle.

The slow clients are raw asyncio sockets, so the test controls every byte and when it is sent."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from mcp import Client

from gateway.app import GatewayServer
from gateway.policy.hmac_signing import HEADER_KEY_ID
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_metrics import Scrape
from tests.integration.test_sse_clients import LegacySse
from tests.integration.test_tls import self_signed, tls_section
from tests.support.gateway_process import REPO, GatewayProcess, clean_environment
from tests.support.servers import demo_server

SLACK_S = 1.0
"""How much later than its timeout a cut may come on a loaded machine."""

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def limits(**connections: Any) -> dict[str, Any]:
    return {"connections": connections}


def metrics(server: GatewayServer) -> Scrape:
    return Scrape(server.gateway.metrics.render().decode())


async def connect(port: int, source: str = "127.0.0.1") -> Connection:
    """A raw TCP connection to the gateway on 127.0.0.1 from `source` (each loopback address is a peer)."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


def get(port: int, path: str = "/healthz") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


async def answer(reader: asyncio.StreamReader, timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
    """One HTTP answer: status, headers (lower-case names) and its body decoded from JSON."""
    async with asyncio.timeout(timeout):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, orjson.loads(body) if body else None


async def request(connection: Connection, data: bytes) -> tuple[int, dict[str, str], Any]:
    reader, writer = connection
    writer.write(data)
    await writer.drain()
    return await answer(reader)


async def until_closed(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """Everything the gateway sends until it closes the connection; fails if it is still open at `timeout`."""
    received = b""
    async with asyncio.timeout(timeout):
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                received += chunk
    return received


async def drip(writer: asyncio.StreamWriter, interval_s: float, data: bytes = b"x") -> None:
    """Send `data` a byte at a time, one every `interval_s`, until the connection breaks."""
    with contextlib.suppress(ConnectionError):
        for byte in data * 1000:
            await asyncio.sleep(interval_s)
            writer.write(bytes([byte]))
            await writer.drain()


@contextlib.asynccontextmanager
async def dripping(writer: asyncio.StreamWriter, interval_s: float, data: bytes = b"x") -> AsyncIterator[None]:
    task = asyncio.create_task(drip(writer, interval_s, data))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        writer.close()


def parse_answer(raw: bytes) -> tuple[int, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body)


# -- timeouts -------------------------------------------------------------------------------------


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(limits=limits(idle_timeout_s=0.3, header_timeout_s=5))
    reader, writer = connection = await connect(server.port)
    status, headers, _ = await request(connection, get(server.port))
    assert status == 200 and headers.get("connection", "keep-alive").lower() != "close"
    started = time.monotonic()
    assert await until_closed(reader, 0.3 + SLACK_S) == b""  # closed without a word: it asked nothing
    assert time.monotonic() - started >= 0.25
    writer.close()
    assert metrics(server).get("mcpgw_connection_cuts_total", reason="idle_timeout") == 1


async def test_headers_dripped_a_byte_at_a_time_are_cut_with_a_408(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(header_timeout_s=0.3, idle_timeout_s=30))
    reader, writer = await connect(server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    started = time.monotonic()
    async with dripping(writer, 0.05):
        received = await until_closed(reader, 0.3 + SLACK_S)
    assert time.monotonic() - started >= 0.25
    status, body = parse_answer(received)
    assert status == 408
    assert body["error"] == "header_timeout"
    assert "within 0.3 s (limits.connections.header_timeout_s)" in body["error_description"]
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_cuts_total", reason="header_timeout") == 1
    assert scrape.get("mcpgw_limit_hits_total", limit="connections.header_timeout_s") == 1


async def test_a_connection_that_never_sends_a_request_is_closed_at_the_header_timeout(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(limits=limits(header_timeout_s=0.3, idle_timeout_s=30))
    reader, writer = await connect(server.port)
    assert await until_closed(reader, 0.3 + SLACK_S) == b""
    writer.close()
    assert metrics(server).get("mcpgw_connection_cuts_total", reason="header_timeout") == 1


async def test_a_later_request_on_a_connection_gets_its_own_header_deadline(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(header_timeout_s=0.4, idle_timeout_s=30))
    reader, writer = connection = await connect(server.port)
    for _ in range(3):  # each request completes in time although together they take longer than 0.4 s
        await asyncio.sleep(0.2)
        assert (await request(connection, get(server.port)))[0] == 200
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # then one whose headers stop half-way
    received = await until_closed(reader, 0.4 + SLACK_S)
    assert parse_answer(received)[0] == 408


def post_head(port: int, length: int) -> bytes:
    return (
        f"POST /_broker/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def test_a_body_dripped_below_the_minimum_rate_is_cut_with_a_408(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(body_timeout_s=0.3, body_min_rate_bytes_per_s=1000))
    reader, writer = await connect(server.port)
    writer.write(post_head(server.port, 2000) + b"{")
    started = time.monotonic()
    async with dripping(writer, 0.02, b" "):  # 50 bytes/s, never a pause as long as body_timeout_s
        received = await until_closed(reader, 0.3 + SLACK_S)
    assert time.monotonic() - started >= 0.25
    status, body = parse_answer(received)
    assert status == 408
    assert body["error"] == "body_too_slow"
    assert (
        "below the minimum of 1000 bytes/s (limits.connections.body_min_rate_bytes_per_s)" in body["error_description"]
    )
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_cuts_total", reason="body_too_slow") == 1
    assert scrape.get("mcpgw_http_requests_total", endpoint="broker", status="408") == 1


async def test_a_stalled_body_is_cut_after_the_body_timeout(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(body_timeout_s=0.3))
    reader, writer = await connect(server.port)
    writer.write(post_head(server.port, 4_000_000) + b'{"jsonrpc": "2.0", ')
    started = time.monotonic()
    received = await until_closed(reader, 0.3 + SLACK_S)
    assert time.monotonic() - started >= 0.25
    writer.close()
    status, body = parse_answer(received)
    assert status == 408
    assert body["error"] == "body_timeout"
    assert (
        "stopped arriving for 0.3 s (limits.connections.body_timeout_s) after 19 of 4000000 bytes"
        in body["error_description"]
    )
    assert metrics(server).get("mcpgw_connection_cuts_total", reason="body_timeout") == 1


async def test_a_body_sent_in_pieces_at_a_working_pace_is_served(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(body_timeout_s=0.3, body_min_rate_bytes_per_s=50))
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})  # 45 bytes in 0.5 s: 90 bytes/s
    reader, writer = await connect(server.port)
    writer.write(post_head(server.port, len(body)))
    for start in range(0, len(body), 10):  # pieces 0.1 s apart: pauses shorter than body_timeout_s
        await asyncio.sleep(0.1)
        writer.write(body[start : start + 10])
    status, _, _ = await answer(reader)
    writer.close()
    assert status != 408
    assert metrics(server).get("mcpgw_connection_cuts_total", reason="body_too_slow") == 0


async def test_a_signed_request_whose_body_stalls_is_cut_before_its_signature_is_checked(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    secret = tmp_path / "desk.key"
    secret.write_text("a-desk-secret-of-enough-length-0123\n")
    server = await gateway_factory(
        auth={"hmac": {"keys": [{"key_id": "desk-1", "file": str(secret)}]}},
        limits=limits(body_timeout_s=0.3),
    )
    reader, writer = await connect(server.port)
    head = post_head(server.port, 100).replace(b"\r\n\r\n", f"\r\n{HEADER_KEY_ID}: desk-1\r\n\r\n".encode())
    writer.write(head + b"{")
    received = await until_closed(reader, 0.3 + SLACK_S)
    writer.close()
    status, body = parse_answer(received)
    assert (status, body["error"]) == (408, "body_timeout")


# -- WebSocket handshakes -------------------------------------------------------------------------


async def test_a_tls_handshake_that_never_finishes_is_cut(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await gateway_factory(
        tls=tls_section(self_signed(tmp_path / "tls")), limits=limits(handshake_timeout_s=0.3, header_timeout_s=30)
    )
    reader, writer = await connect(server.port)
    writer.write(b"\x16\x03\x01")  # the start of a ClientHello, and nothing more
    started = time.monotonic()
    assert await until_closed(reader, 0.3 + SLACK_S) == b""
    assert time.monotonic() - started >= 0.25
    writer.close()


async def test_a_websocket_upgrade_request_that_never_completes_is_cut(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(header_timeout_s=0.3, idle_timeout_s=30))
    reader, writer = await connect(server.port)
    writer.write(
        f"GET /providers HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n".encode()  # and never the blank line
    )
    received = await until_closed(reader, 0.3 + SLACK_S)
    writer.close()
    assert parse_answer(received)[0] == 408


async def test_a_providers_socket_that_claims_no_slot_is_closed_with_1008(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits=limits(handshake_timeout_s=0.3))
    async with http.ws_connect(f"{server.url.replace('http', 'ws')}/providers") as ws:
        message = await ws.receive(timeout=0.3 + SLACK_S)
    assert message.type is aiohttp.WSMsgType.CLOSE
    assert (message.data, message.extra) == (
        1008,
        "No slot claimed within 0.3 s (limits.connections.handshake_timeout_s): send an envelope first",
    )
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_cuts_total", reason="handshake_timeout") == 1
    assert scrape.get("mcpgw_limit_hits_total", limit="connections.handshake_timeout_s") == 1


async def test_a_client_websocket_that_never_initializes_is_closed_with_1008(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits=limits(handshake_timeout_s=0.3))
    async with http.ws_connect(f"{server.url.replace('http', 'ws')}/_broker") as ws:
        message = await ws.receive(timeout=0.3 + SLACK_S)
    assert message.type is aiohttp.WSMsgType.CLOSE
    assert (message.data, message.extra) == (
        1008,
        "No initialize within 0.3 s (limits.connections.handshake_timeout_s): send initialize first",
    )
    await wait_for(lambda: not server.gateway.sessions.sessions, what="the socket's session to end")


# -- caps -----------------------------------------------------------------------------------------


async def test_a_peer_over_its_cap_gets_a_503_and_other_peers_are_served(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(max_per_peer=2))
    held = [await connect(server.port, "127.0.0.2") for _ in range(2)]
    for connection in held:
        assert (await request(connection, get(server.port)))[0] == 200
    reader, writer = third = await connect(server.port, "127.0.0.2")
    status, headers, body = await request(third, get(server.port))
    assert (status, headers["connection"].lower()) == (503, "close")
    assert body["error"] == "too_many_connections_from_peer"
    assert body["error_description"].startswith(
        "Address 127.0.0.2 holds 2 connections, the limit per address (limits.connections.max_per_peer)"
    )
    assert await until_closed(reader, SLACK_S) == b""
    writer.close()
    other = await connect(server.port, "127.0.0.3")
    assert (await request(other, get(server.port)))[0] == 200
    # A connection that ends frees its place.
    held[0][1].close()
    await wait_for(lambda: server.gateway.connections.per_peer.get("127.0.0.2") == 1, what="the place to free")
    again = await connect(server.port, "127.0.0.2")
    assert (await request(again, get(server.port)))[0] == 200
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_refusals_total", reason="max_per_peer") == 1
    assert scrape.get("mcpgw_connections_largest_peer") == 2
    for _, connection_writer in [*held, other, again]:
        connection_writer.close()


async def test_the_gateway_host_is_exempt_from_the_per_peer_cap(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(limits=limits(max_per_peer=1))
    local = [await connect(server.port) for _ in range(3)]  # 127.0.0.1: a local proxy, the simulator
    for connection in local:
        assert (await request(connection, get(server.port)))[0] == 200
    for _, writer in local:
        writer.close()


async def test_over_the_total_cap_a_request_gets_a_503_and_beyond_max_refusing_a_connection_is_closed(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(limits=limits(max_connections=2, max_refusing=1))
    held = [await connect(server.port, source) for source in ("127.0.0.2", "127.0.0.3")]
    for connection in held:
        assert (await request(connection, get(server.port)))[0] == 200
    refused = await connect(server.port, "127.0.0.4")  # over the cap: its request will be answered
    await wait_for(lambda: server.gateway.connections.refusing == 1, what="the refusal to be under way")
    closed_reader, closed_writer = await connect(server.port, "127.0.0.5")  # and one more: closed at once
    assert await until_closed(closed_reader, SLACK_S) == b""
    closed_writer.close()
    status, _, body = await request(refused, get(server.port))
    assert status == 503
    assert body == {
        "error": "too_many_connections",
        "error_description": "The gateway holds 2 connections, its limit (limits.connections.max_connections, "
        "2 here); try again shortly, and close connections you no longer use",
    }
    refused[1].close()
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_refusals_total", reason="max_connections") == 1
    assert scrape.get("mcpgw_connection_refusals_total", reason="max_refusing") == 1
    assert scrape.get("mcpgw_connections") == 2
    # The held connections were never disturbed.
    for connection in held:
        assert (await request(connection, get(server.port)))[0] == 200
        connection[1].close()


# -- what is never idle ---------------------------------------------------------------------------


async def test_boards_streams_and_client_sockets_outlive_every_timeout(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(
        limits={
            "sse_keepalive_s": 5,
            "connections": {"idle_timeout_s": 0.2, "header_timeout_s": 0.2, "handshake_timeout_s": 0.2},
        }
    )
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await publishers.start_multiplexed(server, {"pump-2": demo_server("pump-2")})
    stream = LegacySse(http, server.url, "pump-1")
    await stream.open()
    await stream.initialize()
    async with http.ws_connect(f"{server.url.replace('http', 'ws')}/pump-1") as client_socket:
        await client_socket.send_str(
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            '"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}'
        )
        assert orjson.loads(await client_socket.receive_str(timeout=5))["id"] == 1
        await asyncio.sleep(1.0)  # five idle, header and handshake timeouts
        await client_socket.send_str('{"jsonrpc":"2.0","id":2,"method":"ping"}')
        assert orjson.loads(await client_socket.receive_str(timeout=5)) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert (await stream.call(3, "ping"))["result"] == {}
    stream.close()
    for slot in ("pump-1", "pump-2"):
        assert server.gateway.registry.slots[slot].connects == 1, slot
    async with Client(f"{server.url}/pump-2/mcp", mode="2026-07-28") as client:
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    scrape = metrics(server)
    for reason in ("idle_timeout", "header_timeout", "handshake_timeout"):
        assert scrape.get("mcpgw_connection_cuts_total", reason=reason) == 0, reason


# -- the descriptor limit ---------------------------------------------------------------------------


async def gateway_with_fd_limit(soft: int, hard: int, env: dict[str, str]) -> GatewayProcess:
    """`mcp-gateway run` in a process whose RLIMIT_NOFILE is (soft, hard), as a system would set it."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        "--port",
        "0",
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(env),
        preexec_fn=limit,
    )
    gateway = GatewayProcess(process)
    try:
        await gateway.started()
    except BaseException:
        await gateway.stop()
        raise
    return gateway


async def test_descriptor_exhaustion_is_refused_cleanly_and_the_limit_is_raised_at_start() -> None:
    hard = 128
    env = {
        "MCP_GATEWAY_LIMITS__CONNECTIONS__FD_RESERVE": "16",
        "MCP_GATEWAY_LIMITS__CONNECTIONS__MAX_REFUSING": "4",
    }
    gateway = await gateway_with_fd_limit(64, hard, env)
    held: list[Connection] = []
    try:
        async with Client(f"{gateway.url}/_broker/mcp", mode="2026-07-28") as client:
            info = (await client.call_tool("broker_info", {})).structured_content
        assert info is not None
        connections = info["connections"]
        assert connections["fd_limit"]["soft"] == connections["fd_limit"]["hard"] == hard
        assert connections["fd_limit"]["raised_from"] == 64
        assert connections["cap_from"] == "fd_limit"
        cap = connections["cap"]
        assert 0 < cap < hard - 16 - 4
        port = int(gateway.url.rsplit(":", 1)[1])
        # Fill every place the descriptors leave, and one more: the gateway answers instead of failing.
        for _ in range(cap + 1):
            connection = await connect(port)
            held.append(connection)
            status, _, body = await request(connection, get(port))
            if status != 200:
                break
        assert len(held) == cap + 1
        assert status == 503 and body["error"] == "too_many_connections"
        for _, writer in held:
            writer.close()
        held.clear()
        await asyncio.sleep(0.2)
        served = await connect(port)
        assert (await request(served, get(port)))[0] == 200
        served[1].close()
    finally:
        for _, writer in held:
            writer.close()
        await gateway.stop()
    assert "descriptor limit (RLIMIT_NOFILE 128) leaves room for" in gateway.log
    assert "Traceback" not in gateway.log
    assert "Too many open files" not in gateway.log
