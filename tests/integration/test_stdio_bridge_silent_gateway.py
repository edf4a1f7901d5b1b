"""The stdio bridge answers every request of the host's, also when it has no answer of the gateway's to
relay: a gateway that takes the request and then sends nothing (a black-hole listener, a frozen
gateway) is named after --read-timeout, while a long call the real gateway keeps alive with SSE
keepalives runs to its end; a host line that orjson cannot read (a lone UTF-16 surrogate escape, as
Node's JSON.stringify writes for a cut emoji, or bytes that are not UTF-8) is refused under its own id;
a line nested past the bridge's own cap is refused in words that name that cap as the bridge's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bench.ports import free_port
from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge
from tests.support.servers import demo_server

pytestmark = [
    pytest.mark.timeout(60),
    # The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
READ_TIMEOUT_S = 1.0

Silence = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def accept_and_say_nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A black hole: the connection is taken, the request read, and nothing ever written."""
    while await reader.read(65536):
        pass


async def start_an_answer_then_stop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A gateway frozen inside a call: the SSE answer's head and one keepalive, then silence."""
    await reader.readuntil(b"\r\n\r\n")
    keepalive = b": keepalive\n\n"
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Mcp-Session-Id: s1\r\n\r\n" + f"{len(keepalive):x}\r\n".encode() + keepalive + b"\r\n"
    )
    await writer.drain()
    while await reader.read(65536):
        pass


@pytest.fixture
async def silent_gateway(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A listener on loopback that takes connections and behaves as `request.param` says."""
    behaviour: Silence = request.param
    held: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await behaviour(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", free_port())
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"
        for writer in held:
            writer.close()


def assert_silent(answer: dict[str, Any], request_id: Any, url: str) -> None:
    assert answer["id"] == request_id, answer
    error = answer["error"]
    assert error["code"] == -32000, answer
    assert error["data"] == {"reason": "gateway_silent", "url": f"{url}/pump-1/mcp", "readTimeoutS": READ_TIMEOUT_S}
    message = error["message"]
    assert message.startswith(f"No answer from the MCP gateway at {url}/pump-1/mcp: nothing came from it for 1 s")
    assert "(--read-timeout)" in message and "may have reached the gateway" in message
    assert "check its effect" in message


@pytest.mark.parametrize("silent_gateway", [accept_and_say_nothing, start_an_answer_then_stop], indirect=True)
async def test_a_gateway_that_takes_a_request_and_sends_nothing_is_named_after_the_read_timeout(
    silent_gateway: str,
) -> None:
    raw = await RawBridge.start(silent_gateway, "pump-1", "--read-timeout", str(READ_TIMEOUT_S))
    try:
        started = time.monotonic()
        await raw.send(INITIALIZE)
        assert_silent(await raw.receive(), 1, silent_gateway)
        assert READ_TIMEOUT_S <= time.monotonic() - started < 10
        # The next request opens the session the host asked for, on a gateway still silent: named again.
        await raw.send({"jsonrpc": "2.0", "id": "call", "method": "tools/call", "params": {"name": "start"}})
        assert_silent(await raw.receive(), "call", silent_gateway)
        assert await raw.close() == 0
        stderr = await raw.stderr()
        assert f"no answer from the gateway at {silent_gateway}/pump-1/mcp to initialize" in stderr
        assert "Traceback" not in stderr
    finally:
        if raw.process.returncode is None:
            raw.process.kill()
            await raw.process.wait()


@pytest.fixture
async def keepalive_gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    """A real gateway writing SSE keepalives every 0.2 s, with pump-1 (the demo tools) behind it."""
    server = await gateway_factory(limits={"sse_keepalive_s": 0.2})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    return server


async def initialized_bridge(url: str, *extra: str) -> RawBridge:
    raw = await RawBridge.start(url, "pump-1", *extra)
    await raw.send(INITIALIZE)
    assert "result" in await raw.receive()
    await raw.send(INITIALIZED)
    return raw


async def test_a_long_call_the_gateway_keeps_alive_outlasts_the_read_timeout(keepalive_gateway: GatewayServer) -> None:
    raw = await initialized_bridge(keepalive_gateway.url, "--read-timeout", str(READ_TIMEOUT_S))
    try:
        call = {"name": "sleep", "arguments": {"seconds": 3 * READ_TIMEOUT_S}}
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        answer = await raw.receive()
        assert answer["id"] == 2, answer
        assert answer["result"]["content"][0]["text"] == "slept 3.0", answer
    finally:
        await raw.close()


# -- lines the bridge cannot read ---------------------------------------------------------------------

# What Node's JSON.stringify writes for {text: "🌡🌡".slice(0, 3)}: the first emoji whole, then half of
# the second as an escape.
CUT_EMOJI = '"🌡\\ud83c"'


def call_line(request_id: str, text: str) -> bytes:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"echo","arguments":{{"text":{text}}}}}}}\n'
    ).encode()


async def send_line(raw: RawBridge, line: bytes) -> dict[str, Any]:
    assert raw.process.stdin is not None
    raw.process.stdin.write(line)
    await raw.process.stdin.drain()
    return await raw.receive()


async def test_a_line_with_a_lone_surrogate_escape_is_answered_under_its_own_id(
    keepalive_gateway: GatewayServer,
) -> None:
    raw = await initialized_bridge(keepalive_gateway.url)
    try:
        answer = await send_line(raw, call_line("505", CUT_EMOJI))
        assert answer["id"] == 505, answer
        assert answer["error"]["code"] == -32602, answer
        message = answer["error"]["message"]
        assert "the string at params.arguments.text holds a lone UTF-16 surrogate escape (\\ud83c)" in message
        assert answer["error"]["data"] == {
            "reason": "lone_surrogate",
            "path": "params.arguments.text",
            "escape": "\\ud83c",
        }
        # A string id is answered too; an id that is itself half a character cannot be, and gets null.
        assert (await send_line(raw, call_line('"s-1"', '"\\udc00"')))["id"] == "s-1"
        unusable = await send_line(raw, call_line('"\\ud800"', '"x"'))
        assert unusable["id"] is None, unusable
        assert "the string at id holds a lone UTF-16 surrogate escape (\\ud800)" in unusable["error"]["message"]
        # Bytes that are not UTF-8: the id is found as well.
        broken = await send_line(raw, call_line("504", '"\xff"').replace("\xff".encode(), b"\xff"))
        assert broken["id"] == 504 and broken["error"]["code"] == -32700, broken
        assert broken["error"]["data"]["reason"] == "not_utf8"
        assert "byte 0xff at offset" in broken["error"]["message"]
        assert "params.arguments.text" in broken["error"]["message"]
        # Not JSON at all: still -32700 under id null. The bridge serves the next request as before.
        garbage = await send_line(raw, b'{"jsonrpc":"2.0","id":7,\n')
        assert garbage["id"] is None and garbage["error"]["code"] == -32700, garbage
        whole = await send_line(raw, call_line("506", '"🌡"'))
        while "id" not in whole:  # the demo echo logs what it echoes first
            whole = await raw.receive()
        assert whole["id"] == 506 and whole["result"]["content"][0]["text"] == "🌡", whole
    finally:
        await raw.close()


async def test_a_line_past_the_bridges_own_depth_cap_is_refused_as_the_bridges(
    keepalive_gateway: GatewayServer,
) -> None:
    raw = await initialized_bridge(keepalive_gateway.url)
    try:
        deep = b'{"jsonrpc":"2.0","id":78,"method":"ping","params":{"x":' + b"[" * 300 + b"]" * 300 + b"}}\n"
        answer = await send_line(raw, deep)
        assert answer["id"] == 78 and answer["error"]["code"] == -32600, answer
        message = answer["error"]["message"]
        assert "nested more than 200 levels deep" in message
        assert "this bridge's own cap of 200 levels" in message
        assert "over the gateway's limit" not in message
        assert "The gateway applies its limits.max_json_depth" in message
        assert answer["error"]["data"] == {"reason": "too_deep", "maxDepth": 200}
    finally:
        await raw.close()
