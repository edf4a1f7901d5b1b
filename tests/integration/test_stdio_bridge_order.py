"""The stdio bridge forwards the host's messages in stdin order and keeps what it holds bounded: a
notifications/cancelled written right after its call cancels that call; at EOF the answers still on
their way are waited for (up to --read-timeout) and what is left unanswered is named, with exit
status 1; a host writing faster than the gateway answers is not read ahead of without bound; a silent
gateway costs the messages already waiting one --read-timeout, not one each.

The bridge is the real `mcp-gateway stdio` process, driven by lines on its stdin as a host drives it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from tests.conftest import GatewayFactory, Publishers, wait_ready_slot
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge
from tests.integration.test_stdio_upstreams import upstream
from tests.support.servers import demo_server

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(request_id: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


async def write_all(raw: RawBridge, *messages: dict[str, Any]) -> None:
    """The messages in one write, as a host that sends them back to back."""
    assert raw.process.stdin is not None
    raw.process.stdin.write(b"".join(orjson.dumps(message) + b"\n" for message in messages))
    await raw.process.stdin.drain()


async def initialized(url: str, *extra: str) -> RawBridge:
    raw = await RawBridge.start(url, "pump-1", *extra)
    await raw.send(INITIALIZE)
    assert "result" in await raw.receive()
    await raw.send(INITIALIZED)
    return raw


async def stop(raw: RawBridge) -> None:
    if raw.process.returncode is None:
        raw.process.kill()
        await raw.process.wait()


@pytest.fixture
async def stdio_upstream_gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    """A real gateway whose slot pump-1 is a real stdio upstream (tests/support/stdio_server.py)."""
    server = await gateway_factory(upstreams={"stdio": [upstream(name="pump-1")]})
    await wait_ready_slot(server, "pump-1", timeout=20)
    return server


async def test_a_cancel_written_right_after_its_call_cancels_that_call(stdio_upstream_gateway: GatewayServer) -> None:
    raw = await initialized(stdio_upstream_gateway.url)
    try:
        calls = 10
        # All in one write, as a host that cancels at once (its user pressed stop).
        await write_all(
            raw, *(message for n in range(calls) for message in (call(n, "sleep", {"seconds": 30}), cancel(n)))
        )
        # Each call reached the gateway before its cancel did: every one ends at once as cancelled,
        # none runs its 30 s.
        answers = [await raw.receive() for _ in range(calls)]
        assert sorted(answer["id"] for answer in answers) == list(range(calls))
        assert all(answer["error"]["code"] == -32800 for answer in answers), answers
    finally:
        await stop(raw)


async def test_parallel_calls_all_reach_the_server_before_the_first_answers(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    # Requests do not wait for each other's answers to begin: 20 one-second calls written at once are
    # all at the server before the first of them ends (waiting for each to be taken in took 0.1 s each).
    record = tmp_path / "upstream-stdin.jsonl"
    server = await gateway_factory(upstreams={"stdio": [upstream("--record-stdin", str(record), name="pump-1")]})
    await wait_ready_slot(server, "pump-1", timeout=20)
    raw = await initialized(server.url)
    try:
        calls = 20
        await write_all(raw, *(call(n, "sleep", {"seconds": 1}) for n in range(calls)))
        first = await raw.receive()
        reached = record.read_bytes().count(b'"name":"sleep"')
        assert reached == calls, f"{reached} of {calls} calls at the server when call {first['id']} ended"
        rest = [await raw.receive() for _ in range(calls - 1)]
        assert sorted(answer["id"] for answer in [first, *rest]) == list(range(calls))
    finally:
        await stop(raw)


async def test_a_cancel_follows_its_call_into_the_session_opened_after_a_gateway_restart() -> None:
    # The host's session is gone with the first gateway: each call's first POST gets 404, and the bridge
    # opens a new session and sends it again. Its cancel waits for that resend, not for the 404.
    port = free_port()
    settings = {"port": port, "upstreams": {"stdio": [upstream(name="pump-1")]}}
    first = GatewayServer(GatewayConfig.model_validate(settings))
    await first.start()
    raw: RawBridge | None = None
    second: GatewayServer | None = None
    try:
        await wait_ready_slot(first, "pump-1", timeout=20)
        raw = await RawBridge.start(first.url, "pump-1")
        await raw.send(INITIALIZE)  # no notifications/initialized: no GET stream renews the session first
        assert "result" in await raw.receive()
        await first.stop()
        second = GatewayServer(GatewayConfig.model_validate(settings))
        await second.start()
        await wait_ready_slot(second, "pump-1", timeout=20)
        calls = 3
        await write_all(
            raw, *(message for n in range(calls) for message in (call(n, "sleep", {"seconds": 30}), cancel(n)))
        )
        answers: list[dict[str, Any]] = []
        while len(answers) < calls:  # the new session's notifications may come between them
            message = await raw.receive()
            if "id" in message:
                answers.append(message)
        assert sorted(answer["id"] for answer in answers) == list(range(calls))
        assert all(answer["error"]["code"] == -32800 for answer in answers), answers
    finally:
        if raw is not None:
            await stop(raw)
        for server in (first, second):
            if server is not None:
                await server.stop()


# -- EOF ---------------------------------------------------------------------------------------------


@pytest.fixture
async def keepalive_gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    """A real gateway writing SSE keepalives every 0.2 s, so a long call outlasts a short read timeout."""
    server = await gateway_factory(limits={"sse_keepalive_s": 0.2})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    return server


async def test_at_eof_the_answers_on_their_way_are_waited_for(keepalive_gateway: GatewayServer) -> None:
    raw = await initialized(keepalive_gateway.url, "--read-timeout", "10")
    try:
        await raw.send(call(2, "sleep", {"seconds": 2.5}))
        assert raw.process.stdin is not None
        raw.process.stdin.close()
        answer = await raw.receive()
        assert answer["id"] == 2 and answer["result"]["content"][0]["text"] == "slept 2.5", answer
        assert await asyncio.wait_for(raw.process.wait(), 15) == 0
    finally:
        await stop(raw)


async def test_at_eof_requests_left_unanswered_after_the_read_timeout_are_named(
    keepalive_gateway: GatewayServer,
) -> None:
    raw = await initialized(keepalive_gateway.url, "--read-timeout", "1")
    try:
        await write_all(raw, call("long-1", "sleep", {"seconds": 30}), call("long-2", "sleep", {"seconds": 30}))
        await asyncio.sleep(0.5)  # both calls at the gateway
        started = time.monotonic()
        assert raw.process.stdin is not None
        raw.process.stdin.close()
        assert await asyncio.wait_for(raw.process.wait(), 15) == 1
        assert time.monotonic() - started < 8
        # stdout is still open: each request given up gets its answer, the stdin-closed error (it was sent).
        given_up = [await raw.receive() for _ in range(2)]
        assert sorted(answer["id"] for answer in given_up) == ["long-1", "long-2"]
        assert all(answer["error"]["data"]["reason"] == "stdin_closed" for answer in given_up), given_up
        assert all(answer["error"]["data"]["sent"] is True for answer in given_up), given_up
        stderr = await raw.stderr()
        assert "stdin closed; gave up after 1 s (--read-timeout) on 2 request(s) still without an answer" in stderr
        assert '"long-1"' in stderr and '"long-2"' in stderr
        assert "Traceback" not in stderr
    finally:
        await stop(raw)


# -- a gateway that does not answer ------------------------------------------------------------------


@pytest.fixture
async def black_hole() -> AsyncIterator[str]:
    """A listener that reads every request and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(1 << 20):
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", free_port())
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        for writer in held:
            writer.close()


async def test_stdin_is_not_read_ahead_without_bound_while_the_gateway_is_slow(black_hole: str) -> None:
    raw = await RawBridge.start(black_hole, "pump-1")
    line_bytes = 1 << 20
    lines = 160
    written = 0

    async def host() -> None:
        nonlocal written
        assert raw.process.stdin is not None
        for n in range(lines):
            arguments = {"text": "x" * (line_bytes - 200)}
            request = call(n, "echo", arguments)
            request["params"]["_meta"] = STATELESS_META
            raw.process.stdin.write(orjson.dumps(request) + b"\n")
            await raw.process.stdin.drain()
            written += 1

    writing = asyncio.create_task(host())
    try:
        await asyncio.sleep(6)
        # 32 MiB of lines held, as much again in the pipe reader's buffer, and the pipe itself.
        assert written < 80, f"the bridge took {written} lines of 1 MiB from a host while nothing was answered"
        assert not writing.done()
    finally:
        writing.cancel()
        await stop(raw)


async def test_messages_already_waiting_when_an_open_meets_a_silent_gateway_are_answered_at_once(
    black_hole: str,
) -> None:
    raw = await RawBridge.start(black_hole, "pump-1", "--read-timeout", "1")
    try:
        started = time.monotonic()
        await write_all(raw, INITIALIZE, *(call(n, "add", {"a": 1, "b": n}) for n in range(2, 6)))
        answers = [await raw.receive() for _ in range(5)]
        assert sorted(answer["id"] for answer in answers) == [1, 2, 3, 4, 5]
        assert all(answer["error"]["data"]["reason"] == "gateway_silent" for answer in answers), answers
        # One silence of 1 s for the host's initialize, and one for the first open of a session: the
        # messages waiting behind it are answered with it, not after a silence each.
        assert time.monotonic() - started < 3.5
    finally:
        await stop(raw)


async def test_a_late_cancel_of_a_stateless_request_is_dropped_quietly(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    raw = await RawBridge.start(gateway.url, "pump-1")
    try:
        request = call("s-1", "add", {"a": 1, "b": 2})
        request["params"]["_meta"] = STATELESS_META
        await raw.send(request)
        assert (await raw.receive())["id"] == "s-1"
        await raw.send(cancel("s-1"))
        assert await raw.close() == 0
        stderr = await raw.stderr()
        assert "refused a notifications/cancelled" not in stderr, stderr
        assert "Mcp-Session-Id" not in stderr, stderr
    finally:
        await stop(raw)
