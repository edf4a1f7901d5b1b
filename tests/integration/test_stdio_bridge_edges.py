"""Edges of the stdio bridge: a request gets exactly one answer even when something fails after the
gateway's answer was written out; the TLS probe after a lost answer does not hold up the bridge's other
requests; the session's GET stream is not closed while it idles longer than --read-timeout, and opened
again it asks for what came meanwhile (Last-Event-ID). The 'gateway' is a plain aiohttp server, or a
socket server, in the test, misbehaving as the case needs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from bench.ports import free_port
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_stdio_bridge import INITIALIZE
from tests.integration.test_stdio_bridge_evil_gateway import (
    CALL,
    INITIALIZED,
    PING,
    Bridge,
    Servers,
    initialize_result,
    servers,  # noqa: F401 (the fixture)
)
from tests.support.servers import demo_server

pytestmark = pytest.mark.timeout(60)

TOOLS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
RESOURCES_CHANGED = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
ANSWER = {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "started"}]}}


async def receive_within(bridge: Bridge, wait_s: float) -> dict[str, Any]:
    assert bridge.process.stdout is not None
    line = await asyncio.wait_for(bridge.process.stdout.readline(), wait_s)
    assert line.endswith(b"\n"), f"bridge ended: {line!r}; stderr: {await bridge.stderr()}"
    message: dict[str, Any] = orjson.loads(line)
    return message


async def open_sse(request: web.Request) -> web.StreamResponse:
    answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await answer.prepare(request)
    return answer


def event(message: dict[str, Any] | bytes, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id is not None else b""
    data = message if isinstance(message, bytes) else orjson.dumps(message)
    return head + b"event: message\ndata: " + data + b"\n\n"


def nested(depth: int) -> bytes:
    """JSON nested `depth` arrays deep: orjson reads it, and writes out no more than 254 levels."""
    return b"[" * depth + b'"deep"' + b"]" * depth


async def session_post(request: web.Request, message: dict[str, Any]) -> web.StreamResponse | None:
    """What every case here answers alike: initialize, notifications, ping, DELETE."""
    if request.method == "DELETE":
        return web.Response(status=200)
    if request.method != "POST":
        return None
    if message.get("method") == "initialize":
        return initialize_result(message)
    if "id" not in message:
        return web.Response(status=202)
    if message.get("method") == "ping":
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})
    return None


# -- one answer per request -----------------------------------------------------------------------


async def test_a_fault_after_the_answer_goes_to_stderr_only(servers: Servers) -> None:  # noqa: F811
    """A notification after the answer nested deeper than the bridge can write out: the bridge fails on it
    after the host has the answer, and the host gets no second one (-32603) for the same id."""

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if (answered := await session_post(request, message)) is not None:
            return answered
        answer = await open_sse(request)
        await answer.write(event(ANSWER))
        params = b'{"progressToken": 1, "progress": 1, "message": ' + nested(300) + b"}"
        await answer.write(event(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": ' + params + b"}"))
        await answer.write_eof()
        return answer

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(CALL)
        assert await bridge.receive() == ANSWER
        await bridge.send(PING)
        assert await bridge.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}  # no second answer for 2
    finally:
        await bridge.close()
    stderr = await bridge.stderr()
    assert "failed on a message from the host after relaying its answer" in stderr, stderr
    assert "Recursion limit" in stderr


async def test_an_answer_stream_silent_after_its_answer_gets_no_second_answer(servers: Servers) -> None:  # noqa: F811
    """The stream stays open and silent past --read-timeout after the answer: logged, never a
    gateway_silent error for a request the host already has its answer to."""

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if (answered := await session_post(request, message)) is not None:
            return answered
        answer = await open_sse(request)
        await answer.write(event(ANSWER))
        await asyncio.sleep(30)
        return answer

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url, "--read-timeout", "1", "--log-level", "info")
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(CALL)
        assert await bridge.receive() == ANSWER
        await bridge.nothing_more(2.5)
        await bridge.send(PING)
        assert await bridge.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        await bridge.close()
    assert "the answer stream to id 2 failed after its answer" in await bridge.stderr()


# -- the TLS probe does not stall the bridge ------------------------------------------------------


@pytest.fixture
async def dropping_gateway() -> AsyncIterator[str]:
    """Reads a POST; closes the connection for the request with id "lost" (so the bridge probes for
    TLS), answers any other after 0.3 s. A TLS handshake (the probe) is met with silence."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while first := await reader.read(1):
                if first == b"\x16":  # a TLS ClientHello: hold it unanswered, past the probe's bound
                    await asyncio.sleep(10)
                    return
                head = first + await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                message = orjson.loads(await reader.readexactly(length))
                if message.get("id") == "lost":
                    return
                await asyncio.sleep(0.3)
                body = orjson.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": {}})
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_the_tls_probe_after_a_lost_answer_holds_up_no_other_request(dropping_gateway: str) -> None:
    bridge = await Bridge.start_with(dropping_gateway)
    try:
        await bridge.send({"jsonrpc": "2.0", "id": "lost", "method": "tools/call", "params": {"name": "start"}})
        await bridge.send(PING)
        sent = time.monotonic()
        first = await bridge.receive()
        second = await bridge.receive()
        lost_after = time.monotonic() - sent
    finally:
        await bridge.close()
    # The ping is answered while the probe waits on its silent handshake (up to TLS_PROBE_TIMEOUT_S).
    assert first == {"jsonrpc": "2.0", "id": 3, "result": {}}, (first, second)
    assert second["id"] == "lost" and second["error"]["data"]["reason"] == "gateway_disconnected", second
    assert lost_after < 5, lost_after  # the probe is bounded


# -- the GET stream -------------------------------------------------------------------------------


async def test_an_idle_get_stream_is_held_past_the_read_timeout(servers: Servers) -> None:  # noqa: F811
    """A gateway whose keepalive interval is longer than --read-timeout: the stream stays open, and what
    the gateway sends after the silence reaches the host (a stream opened again would have lost it: the
    gateway replays nothing)."""

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if (answered := await session_post(request, message)) is not None:
            return answered
        assert request.method == "GET"
        answer = await open_sse(request)
        if sum(hit.method == "GET" for hit in servers.hits) == 1:
            await asyncio.sleep(2.5)
            await answer.write(event(TOOLS_CHANGED))
        await asyncio.sleep(30)
        return answer

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url, "--read-timeout", "1")
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(INITIALIZED)
        assert await receive_within(bridge, 8) == TOOLS_CHANGED
    finally:
        await bridge.close()
    assert [hit.method for hit in servers.hits].count("GET") == 1, servers.hits


async def test_a_get_stream_opened_again_asks_for_the_events_after_the_last_one(servers: Servers) -> None:  # noqa: F811
    """The stream ends after event e1; opened again it carries Last-Event-ID: e1, and the server replays
    e2, which came while it was closed."""

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if (answered := await session_post(request, message)) is not None:
            return answered
        assert request.method == "GET"
        answer = await open_sse(request)
        gets = sum(hit.method == "GET" for hit in servers.hits)
        if gets == 1:
            await answer.write(b"id: e0\n\n")  # a priming event: an id, no data
            await answer.write(event(TOOLS_CHANGED, "e1"))
            await answer.write_eof()
            return answer
        if gets == 2 and request.headers.get("Last-Event-ID") == "e1":
            await answer.write(event(RESOURCES_CHANGED, "e2"))
        await asyncio.sleep(30)
        return answer

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(INITIALIZED)
        assert await receive_within(bridge, 8) == TOOLS_CHANGED
        assert await receive_within(bridge, 8) == RESOURCES_CHANGED
    finally:
        await bridge.close()
    gets = [hit for hit in servers.hits if hit.method == "GET"]
    assert "Last-Event-ID" not in gets[0].headers
    assert gets[1].headers.get("Last-Event-ID") == "e1"


async def test_a_real_gateway_with_a_keepalive_longer_than_the_read_timeout_keeps_one_get_stream(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    """The gateway's streams replay nothing, so the bridge must not close an idle one: with
    limits.sse_keepalive_s 5 and --read-timeout 1 it holds the one GET stream, and a device joining
    after the silence is announced to the host."""
    gateway = await gateway_factory(limits={"sse_keepalive_s": 5})
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    await wait_for(lambda: gateway.gateway.aggregate.members() == ["pump-1"], what="pump-1 in _all")
    bridge = await Bridge.start(gateway.url, "_all", "--read-timeout", "1")
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(INITIALIZED)

        def streams() -> list[Any]:
            return [s.stream for s in gateway.gateway.sessions.sessions.values() if s.stream is not None]

        await wait_for(lambda: bool(streams()), what="the bridge's GET stream")
        first = streams()
        await asyncio.sleep(2.5)  # past --read-timeout twice, short of the keepalive
        assert streams() == first, "the bridge opened its GET stream again"
        await publishers.start(gateway, "pump-2", demo_server("pump-2"), aggregate=True)
        assert await receive_within(bridge, 10) == TOOLS_CHANGED
    finally:
        await bridge.close()
