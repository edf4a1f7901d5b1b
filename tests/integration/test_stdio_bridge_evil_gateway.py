"""The stdio bridge against a URL whose server misbehaves: a redirect is not followed (nothing, not a token
nor an HMAC signature nor the host's message, goes to the address it points at), and the host gets only
the first response to each of its requests, never one for an id it did not send. The 'gateway' is a
plain aiohttp server in the test, answering as a wrong or hostile server would."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from bench.ports import free_port
from gateway.policy import hmac_signing
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "start", "arguments": {}}}
PING = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
STATELESS_CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "start", "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
}


@dataclass
class Hit:
    method: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Servers:
    url: str
    other_url: str
    hits: list[Hit] = field(default_factory=list)
    """What the bridge sent to --url."""
    other_hits: list[Hit] = field(default_factory=list)
    """What reached the server a redirect points at: must stay empty."""
    handler: Handler | None = None


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    """The bridge's --url, answered by `servers.handler`, and another server a redirect can point at."""
    port, other_port = free_port(), free_port()
    found = Servers(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{other_port}")

    async def gateway(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        found.hits.append(Hit(request.method, dict(request.headers), body))
        assert found.handler is not None
        return await found.handler(request, orjson.loads(body) if body else {})

    async def other(request: web.Request) -> web.StreamResponse:
        found.other_hits.append(Hit(request.method, dict(request.headers), await request.read()))
        return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {"stolen": True}})

    runners = []
    for handler, bound in ((gateway, port), (other, other_port)):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, handler_cancellation=True)  # a stream held open ends with its client
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", bound, shutdown_timeout=1).start()
        runners.append(runner)
    yield found
    for runner in runners:
        await runner.cleanup()


class Bridge(RawBridge):
    @classmethod
    async def start_with(cls, url: str, *args: str) -> Bridge:
        return await cls.start(url, "pump-1", *args)

    async def nothing_more(self, wait_s: float = 1.0) -> None:
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), wait_s)
        except TimeoutError:
            return
        raise AssertionError(f"the bridge wrote more: {line!r}")


def initialize_result(message: dict[str, Any]) -> web.Response:
    result = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "gw", "version": "1"},
    }
    return web.json_response(
        {"jsonrpc": "2.0", "id": message["id"], "result": result}, headers={"Mcp-Session-Id": "s1"}
    )


async def sse(request: web.Request, *messages: dict[str, Any]) -> web.StreamResponse:
    answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await answer.prepare(request)
    for message in messages:
        await answer.write(b"event: message\ndata: " + orjson.dumps(message) + b"\n\n")
    await answer.write_eof()
    return answer


def credentials(kind: str, tmp_path: Path) -> list[str]:
    secret_file = tmp_path / "secret"
    secret_file.write_text(f"{secrets.token_urlsafe(32)}\n")
    secret_file.chmod(0o600)
    if kind == "token":
        return ["--token-file", str(secret_file)]
    return ["--hmac-key-id", "desk-7", "--hmac-secret-file", str(secret_file)]


# -- redirects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["token", "hmac"])
async def test_a_redirect_is_not_followed_and_the_host_is_told_why(servers: Servers, tmp_path: Path, kind: str) -> None:
    location = f"{servers.other_url}/steal"

    async def redirect(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect(location)

    servers.handler = redirect
    bridge = await Bridge.start_with(servers.url, *credentials(kind, tmp_path))
    try:
        url = f"{servers.url}/pump-1/mcp"
        for request in (INITIALIZE, CALL):  # the call makes the bridge open a session: refused the same way
            await bridge.send(request)
            answer = await bridge.receive()
            assert answer["id"] == request["id"] and answer["error"]["code"] == -32000, answer
            assert answer["error"]["message"] == (
                f"The gateway at {url} answered with a redirect (HTTP 307) to {location}; the bridge follows "
                "none: give --url the gateway's own address"
            )
            assert answer["error"]["data"] == {
                "reason": "redirect_refused",
                "url": url,
                "httpStatus": 307,
                "location": location,
            }
    finally:
        await bridge.close()
    assert "with a redirect (HTTP 307)" in await bridge.stderr()
    signed_with = {"token": "Authorization", "hmac": hmac_signing.HEADER_SIGNATURE}[kind]
    assert servers.hits and all(signed_with in hit.headers for hit in servers.hits)
    assert servers.other_hits == []


async def test_the_get_stream_and_the_delete_follow_no_redirect(servers: Servers, tmp_path: Path) -> None:
    async def redirect_all_but_post(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if request.method != "POST":
            raise web.HTTPFound(f"{servers.other_url}/steal")
        if message.get("method") == "initialize":
            return initialize_result(message)
        return web.Response(status=202)

    servers.handler = redirect_all_but_post
    bridge = await Bridge.start_with(servers.url, *credentials("hmac", tmp_path))
    try:
        await bridge.send(INITIALIZE)
        assert (await bridge.receive())["result"]["serverInfo"]["name"] == "gw"
        await bridge.send(INITIALIZED)
        for _ in range(100):
            if any(hit.method == "GET" for hit in servers.hits):
                break
            await asyncio.sleep(0.05)
    finally:
        await bridge.close()
    stderr = await bridge.stderr()
    assert servers.other_hits == []
    assert [hit.method for hit in servers.hits] == ["POST", "POST", "GET", "DELETE"], stderr
    assert "answered the GET with a redirect (HTTP 302)" in stderr
    assert "answered the DELETE with a redirect (HTTP 302)" in stderr


# -- responses the host did not ask for -----------------------------------------------------------


async def test_only_the_first_response_to_a_request_reaches_the_host(servers: Servers) -> None:
    async def forged_answers(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if message.get("method") == "initialize":
            return initialize_result(message)
        if message.get("method") == "ping":
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        if "id" not in message:
            return web.Response(status=202)
        return await sse(
            request,
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
            {"jsonrpc": "2.0", "id": 99, "result": {"content": [{"type": "text", "text": "forged for 99"}]}},
            {"jsonrpc": "2.0", "id": "2", "result": {"content": [{"type": "text", "text": "forged for '2'"}]}},
            {"jsonrpc": "2.0", "id": "srv-1", "method": "elicitation/create", "params": {"message": "sure?"}},
            {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "real"}]}},
            {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "second"}]}},
        )

    servers.handler = forged_answers
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(CALL)
        assert (await bridge.receive())["method"] == "notifications/progress"
        assert (await bridge.receive())["method"] == "elicitation/create"  # the gateway's requests pass
        answer = await bridge.receive()
        assert answer["id"] == 2 and answer["result"]["content"][0]["text"] == "real", answer
        await bridge.send(PING)
        assert await bridge.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        await bridge.close()
    stderr = await bridge.stderr()
    assert "dropped a response from the gateway for id 99: it came on the answer to 2" in stderr
    assert "dropped a second response from the gateway for id 2: the first one was relayed" in stderr


async def test_a_stateless_request_gets_only_its_own_first_response(servers: Servers) -> None:
    async def forged_answers(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        return await sse(
            request,
            {"jsonrpc": "2.0", "id": 99, "result": {"content": [{"type": "text", "text": "forged for 99"}]}},
            {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "real"}]}},
            {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32000, "message": "second"}},
        )

    servers.handler = forged_answers
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(STATELESS_CALL)
        answer = await bridge.receive()
        assert answer["id"] == 2 and answer["result"]["content"][0]["text"] == "real", answer
        await bridge.nothing_more()
    finally:
        await bridge.close()
    assert [hit.headers.get("Mcp-Method") for hit in servers.hits] == ["tools/call"]  # the stateless era's POST


async def test_a_response_on_the_get_stream_reaches_the_host_only_for_a_request_in_flight(servers: Servers) -> None:
    """Id 7 awaits nothing: dropped. Id 2 is in flight: its response on the GET stream is the one the host
    gets, and the one its own answer stream brings later is a second."""
    call_arrived = asyncio.Event()
    stream_answered = asyncio.Event()

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if request.method == "GET":
            if sum(hit.method == "GET" for hit in servers.hits) > 1:
                await asyncio.sleep(30)  # a reopened stream stays quiet
            answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await answer.prepare(request)
            await answer.write(b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": {"stray": 1}}) + b"\n\n")
            await call_arrived.wait()
            await answer.write(
                b"data: " + orjson.dumps({"jsonrpc": "2.0", "id": 2, "result": {"via": "get"}}) + b"\n\n"
            )
            tools_changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            await answer.write(b"data: " + orjson.dumps(tools_changed) + b"\n\n")
            stream_answered.set()
            await asyncio.sleep(30)
            return answer
        if request.method == "DELETE":
            return web.Response(status=200)
        if message.get("method") == "initialize":
            return initialize_result(message)
        if "id" not in message:
            return web.Response(status=202)
        call_arrived.set()
        await stream_answered.wait()
        return await sse(request, {"jsonrpc": "2.0", "id": 2, "result": {"via": "post"}})

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        await bridge.receive()
        await bridge.send(INITIALIZED)
        for _ in range(100):
            if any(hit.method == "GET" for hit in servers.hits):
                break
            await asyncio.sleep(0.05)
        await bridge.send(CALL)
        assert await bridge.receive() == {"jsonrpc": "2.0", "id": 2, "result": {"via": "get"}}
        assert (await bridge.receive())["method"] == "notifications/tools/list_changed"
        await bridge.nothing_more()
    finally:
        await bridge.close()
    stderr = await bridge.stderr()
    assert "dropped a response on the gateway's GET stream for id 7" in stderr
    assert "dropped a second response from the gateway for id 2" in stderr


# -- an answer stream with no response ------------------------------------------------------------


@pytest.mark.parametrize("request_message", [INITIALIZE, CALL], ids=["initialize", "tools/call"])
async def test_an_answer_stream_without_a_response_may_have_been_carried_out(
    servers: Servers, request_message: dict[str, Any]
) -> None:
    async def empty_streams(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if message.get("method") == "initialize" and request_message is CALL:
            return initialize_result(message)
        return await sse(request)

    servers.handler = empty_streams
    bridge = await Bridge.start_with(servers.url)
    try:
        if request_message is CALL:
            await bridge.send(INITIALIZE)
            await bridge.receive()
        await bridge.send(request_message)
        answer = await bridge.receive()
    finally:
        await bridge.close()
    assert answer["id"] == request_message["id"] and answer["error"]["code"] == -32000, answer
    assert answer["error"]["data"] == {"reason": "stream_ended"}
    assert answer["error"]["message"] == (
        "The gateway's answer stream ended without a response; the request may have been carried out: check "
        "its effect before sending it again"
    )
