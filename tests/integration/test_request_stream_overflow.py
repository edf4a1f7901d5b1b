"""A request's answer stream always ends with its answer (docs/protocol-clients.md, "Answers: JSON or SSE").

An ordinary SDK server run as a stdio upstream sends a burst of progress notifications for one call,
more than `limits.notification_queue` at once: the stream drops the notifications it cannot hold and
still carries the call's answer, in both eras, to the real SDK client and to raw HTTP. Also here: a
2025-03-26 batch that repeats an id, a 2026-07-28 caller asking a board for a method of a capability
it does not declare, and integers past 64 bits in a request's id and progressToken.

Run as `python -m tests.integration.test_request_stream_overflow` it is that stdio server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_http_stateless_era import SseReader, request, routing_headers
from tests.support.southbound import Boards, ScriptedBoard

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SLOT = "burst"
QUEUE = 32  # limits.notification_queue, small so that a burst passes it many times over
BURST = 1500
JsonObject = dict[str, Any]


def serve() -> None:
    """The stdio server: an SDK server written the ordinary way."""
    server = MCPServer("burst")

    @server.tool()
    async def burst(n: int, ctx: Context, linger: float = 0.0, pad: int = 0) -> str:
        """Send n progress notifications (a message of `pad` bytes each) as fast as the SDK writes them,
        then wait `linger` seconds."""
        for i in range(n):
            await ctx.report_progress(i, n, "x" * pad if pad else None)
        await asyncio.sleep(linger)
        return f"burst {n} done"

    server.run("stdio")


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    command = [sys.executable, "-m", "tests.integration.test_request_stream_overflow"]
    upstream = {"name": SLOT, "command": command, "startup_timeout_s": 30}
    server = await gateway_factory(upstreams={"stdio": [upstream]}, limits={"notification_queue": QUEUE})
    await wait_ready_slot(server, SLOT, timeout=30)
    return server


def url_of(gateway: GatewayServer, slot: str = SLOT) -> str:
    return f"{gateway.url}/{slot}/mcp"


def overflows(gateway: GatewayServer) -> float:
    value = gateway.gateway.metrics.registry.get_sample_value(
        "mcpgw_client_stream_overflows_total", {"kind": "request"}
    )
    return value or 0.0


PAD = 8000
"""Bytes of each notification's message in the raw tests: the burst is more than the socket buffers hold."""


def call_body(request_id: Any, n: int, linger: float = 0.0, pad: int = 0) -> JsonObject:
    arguments = {"n": n, "linger": linger, "pad": pad}
    params = {"name": "burst", "arguments": arguments, "_meta": {"progressToken": "p"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def initialize(http: aiohttp.ClientSession, url: str, version: str) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        assert response.status == 200, await response.text()
        return response.headers["Mcp-Session-Id"]


def session_headers(session_id: str, version: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": version,
    }


async def post_reading_late(
    url: str, body: JsonObject, headers: dict[str, str], until: Callable[[], bool]
) -> list[JsonObject]:
    """POST `body` on a socket with a small receive buffer, read nothing `until` it holds (the client
    fell behind), then read the SSE answer to its end: its messages."""
    host, _, rest = url.removeprefix("http://").partition("/")
    address, _, port = host.rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (address, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**20)
    data = orjson.dumps(body)
    head = [f"POST /{rest} HTTP/1.1", f"Host: {host}", "Connection: close", f"Content-Length: {len(data)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + data)
    await writer.drain()
    await wait_for(until, 30, "the client to fall behind")
    raw = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    status_line, _, rest_of = raw.partition(b"\r\n")
    assert b" 200 " in status_line, raw[:300]
    headers_part, _, chunked = rest_of.partition(b"\r\n\r\n")
    assert b"text/event-stream" in headers_part.lower()
    body_bytes = b""
    while chunked:
        size_line, _, chunked = chunked.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body_bytes += chunked[:size]
        chunked = chunked[size + 2 :]
    events = [line[6:] for line in body_bytes.split(b"\n") if line.startswith(b"data: ")]
    return [orjson.loads(event) for event in events]


async def read_slowly(response: aiohttp.ClientResponse, pause: float) -> list[JsonObject]:
    """Every event of an SSE answer, read only after `pause` seconds (the client fell behind)."""
    assert response.headers["Content-Type"].startswith("text/event-stream")
    await asyncio.sleep(pause)
    reader = SseReader(response)
    messages = []
    while (message := await reader.next(timeout=20)) is not None:
        messages.append(message)
    return messages


def assert_answered(messages: list[JsonObject], request_id: Any) -> None:
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert 0 < len(progress) < BURST  # the burst passed the queue's bound: some were dropped
    assert messages[-1]["id"] == request_id, messages[-1]
    assert messages[-1]["result"]["content"][0]["text"] == f"burst {BURST} done"
    values = [m["params"]["progress"] for m in progress]
    assert values == sorted(values)  # what was kept keeps its order


# -- a burst of notifications on the request's stream ---------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_sdk_client_behind_a_burst_still_gets_its_answer(
    gateway: GatewayServer, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.northbound.http")
    seen: list[float] = []

    async def slow_handler(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        await asyncio.sleep(0.002)

    async with Client(url_of(gateway), mode=mode) as client:
        result = await asyncio.wait_for(client.call_tool("burst", {"n": BURST}, progress_callback=slow_handler), 60)
    assert result.content[0].text == f"burst {BURST} done"  # type: ignore[union-attr]
    assert 0 < len(seen) <= BURST and seen == sorted(seen)
    # Whether this client fell behind depends on how fast its transport reads: when it did, the
    # overflow is counted once and logged once (the raw clients below fall behind for certain).
    dropped = [r.getMessage() for r in caplog.records if "notifications for one request dropped" in r.getMessage()]
    if len(seen) < BURST:
        assert overflows(gateway) == 1
        assert len(dropped) == 1, dropped  # one line for the stream, however many were dropped
        assert "(limits.notification_queue)" in dropped[0]
    else:
        assert overflows(gateway) == 0 and not dropped


async def test_a_raw_session_era_client_behind_a_burst_still_gets_its_answer(gateway: GatewayServer) -> None:
    async with aiohttp.ClientSession() as http:
        url = url_of(gateway)
        session_id = await initialize(http, url, "2025-06-18")
        headers = session_headers(session_id, "2025-06-18")
    messages = await post_reading_late(url, call_body(7, BURST, pad=PAD), headers, lambda: overflows(gateway) > 0)
    assert_answered(messages, 7)
    assert overflows(gateway) == 1


async def test_a_raw_stateless_client_behind_a_burst_still_gets_its_answer(gateway: GatewayServer) -> None:
    arguments = {"n": BURST, "pad": PAD}
    body = request("tools/call", {"name": "burst", "arguments": arguments}, 9, {"progressToken": "p"})
    messages = await post_reading_late(url_of(gateway), body, routing_headers(body), lambda: overflows(gateway) > 0)
    assert_answered(messages, 9)
    assert overflows(gateway) == 1


async def test_an_overflow_is_counted_when_it_happens_not_when_the_answer_goes_out(gateway: GatewayServer) -> None:
    # The client stops reading, then hangs up before the call ends: the overflow is counted anyway.
    arguments = {"n": BURST, "linger": 30, "pad": PAD}
    body = request("tools/call", {"name": "burst", "arguments": arguments}, 3, {"progressToken": "p"})
    url = url_of(gateway)
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=orjson.dumps(body), headers=routing_headers(body)) as got,
    ):
        assert got.headers["Content-Type"].startswith("text/event-stream")
        await wait_for(lambda: overflows(gateway) == 1, 20, "the overflow to be counted")
    assert overflows(gateway) == 1


# -- a 2025-03-26 batch that repeats an id ---------------------------------------------------------


async def test_a_batch_member_repeating_an_earlier_members_id_is_refused(gateway: GatewayServer) -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "id": "a", "method": "tools/list"},
    ]
    async with aiohttp.ClientSession() as http:
        url = url_of(gateway)
        session_id = await initialize(http, url, "2025-03-26")
        headers = {**session_headers(session_id, "2025-03-26"), "Accept": "application/json"}
        for _ in range(5):  # the order tasks run in must not matter
            async with http.post(url, data=orjson.dumps(batch), headers=headers) as response:
                assert response.status == 200
                answers = await response.json()
            assert len(answers) == 4
            by_id: dict[Any, list[JsonObject]] = {1: [], "a": []}
            for answer in answers:
                by_id[answer["id"]].append(answer)
            for request_id, first in ((1, "tools"), ("a", None)):
                results = [a for a in by_id[request_id] if "result" in a]
                refused = [a for a in by_id[request_id] if "error" in a]
                assert len(results) == 1 and len(refused) == 1, by_id[request_id]
                if first is not None:
                    assert first in results[0]["result"]  # the earlier member (tools/list) ran
                assert refused[0]["error"]["code"] == -32600
                assert "already in flight" in refused[0]["error"]["message"]


# -- a 2026-07-28 caller asking a board for a capability it does not declare -----------------------


class DeviceBoard(ScriptedBoard):
    """Answers what it does not serve as a board of the device profile does (mcpdevice's dispatcher)."""

    async def _on_text(self, data: str | bytes) -> None:
        await super()._on_text(data)
        message = self.inbox[-1][1] if self.inbox else None
        if isinstance(message, dict) and message.get("method") == "completion/complete" and "id" in message:
            self.inbox.pop()
            method = message["method"]
            text = f"Method not found: {method}. This device answers initialize, ping, tools/list and tools/call"
            await self.reply_error(message, {"code": -32601, "message": text})


async def test_a_stateless_caller_is_not_told_a_boards_session_era_methods(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory()
    board = await boards.connect(server.url, "/provider/board", kind=DeviceBoard)
    await wait_ready_slot(server, "board")
    params = {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}
    body = request("completion/complete", params, 5)
    url = url_of(server, "board")
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=orjson.dumps(body), headers=routing_headers(body)) as got,
    ):
        status, answer = got.status, await got.json()
    assert status == 404
    assert answer["id"] == 5
    assert answer["error"]["code"] == -32601
    assert answer["error"]["message"] == (
        'Method not found: completion/complete is not served by "board" '
        "(its provider declares no completions capability)"
    )
    methods = [m.get("method") for _, m in board.received if isinstance(m, dict)]
    assert "completion/complete" not in methods
    # A session-era caller still hears the board's own answer: its text describes that session.
    async with aiohttp.ClientSession() as http:
        url = url_of(server, "board")
        session_id = await initialize(http, url, "2025-06-18")
        headers = {**session_headers(session_id, "2025-06-18"), "Accept": "application/json"}
        asked = {"jsonrpc": "2.0", "id": 6, "method": "completion/complete", "params": params}
        async with http.post(url, data=orjson.dumps(asked), headers=headers) as got:
            answer = await got.json()
    assert answer["error"]["code"] == -32601
    assert "This device answers initialize, ping" in answer["error"]["message"]


# -- integers past 64 bits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}', '"id"'),
        (b'{"jsonrpc":"2.0","id":-9223372036854775809,"method":"ping"}', '"id"'),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"burst","arguments":{"n":1},'
            b'"_meta":{"progressToken":18446744073709551616}}}',
            '"params._meta.progressToken"',
        ),
    ],
)
async def test_an_integer_past_64_bits_is_refused_naming_the_bound(
    gateway: GatewayServer, body: bytes, named: str
) -> None:
    async with aiohttp.ClientSession() as http:
        url = url_of(gateway)
        session_id = await initialize(http, url, "2025-06-18")
        headers = {**session_headers(session_id, "2025-06-18"), "Accept": "application/json"}
        async with http.post(url, data=body, headers=headers) as response:
            status, answer = response.status, await response.json()
    assert status == 400
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"] == (
        f"Invalid JSON-RPC: {named} must be a string or an integer, one of integers from -2^63 to 2^64-1 (64 bits)"
    )


async def test_64_bit_integers_come_back_exact(gateway: GatewayServer) -> None:
    token = 2**64 - 1
    body = call_body(2**63 - 1, 3)
    body["params"]["_meta"]["progressToken"] = token
    async with aiohttp.ClientSession() as http:
        url = url_of(gateway)
        session_id = await initialize(http, url, "2025-06-18")
        headers = session_headers(session_id, "2025-06-18")
        async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
            messages = await read_slowly(response, 0)
    assert {m["params"]["progressToken"] for m in messages[:-1]} == {token}
    assert messages[-1]["id"] == 2**63 - 1


if __name__ == "__main__":
    serve()
