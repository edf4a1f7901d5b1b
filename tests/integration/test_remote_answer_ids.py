"""Remote upstreams: what a server sends on a request's stream is that request's (docs/upstreams.md,
Remote upstreams).

One hand-written aiohttp server plays a misbehaving remote MCP server, in the session era or the
2026-07-28 era: its `mixup` tool answers under the id of another caller's pending call (as a buggy
cache or proxy would), and its `ask` tool sends a 2026-07-28 call's stream a request to the client,
which that era does not carry. Clients are SDK clients; the gateway is the real one on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from aiohttp import web
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_remote_upstreams import SLOT, entry, pending, slot_url, start_gateway, text

DEADLINE_MS = 8000
"""The slot's request_timeout_ms: the calls below must end long before it."""
PROMPTLY_S = 4.0

TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object", "properties": {}}}
    for name in ("hold", "mixup", "ask", "forget", "add")
]


class MixingServer:
    """A remote MCP server on 127.0.0.1 (`stateless`: the 2026-07-28 era, else the session era).

    hold: answers "hold done" once `released` is set (at most 10 s). mixup: answers at once under the id of
    the pending `hold` call, text "A's private answer", as JSON or as an event stream (`events`). ask: sends
    elicitation/create on the call's event stream, then keeps the stream open until the client closes it
    (`ask_closed` is set then). forget: the first time, the server forgets its session (HTTP 404), and the
    event stream answering the gateway's next initialize first carries an answer under the pending `hold`
    call's id. add (and forget again): answers "added"."""

    def __init__(self, stateless: bool, events: bool = False) -> None:
        self.stateless = stateless
        self.events = events
        self.holds: list[Any] = []
        self.released = asyncio.Event()
        self.ask_closed = asyncio.Event()
        self.answers_posted: list[Any] = []
        self.session = "s1"
        self.stray_on_initialize = False
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.mcp)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/mcp"

    async def stop(self) -> None:
        self.released.set()
        if self.runner is not None:
            await self.runner.cleanup()

    def complete(self, result: dict[str, Any]) -> dict[str, Any]:
        return {**result, "resultType": "complete"} if self.stateless else result

    async def reply(self, request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
        headers = {} if self.stateless else {"Mcp-Session-Id": self.session}
        if not self.events:
            return web.json_response(answer, headers=headers)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        await response.write(f"event: message\ndata: {json.dumps(answer)}\n\n".encode())
        await response.write_eof()
        return response

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        message = json.loads(await request.read())
        method, request_id = message.get("method"), message.get("id")
        if not self.stateless and method != "initialize" and request.headers.get("Mcp-Session-Id") != self.session:
            return web.Response(status=404)
        if method is None:
            self.answers_posted.append(message)
            return web.Response(status=202)
        if request_id is None:
            return web.Response(status=202)

        def result(value: dict[str, Any], answer_id: Any = request_id) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": answer_id, "result": value}

        if method == "server/discover":
            if not self.stateless:
                return web.json_response(
                    {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}}
                )
            info = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
            return web.json_response(result(self.complete({**info, "serverInfo": {"name": "mix", "version": "1"}})))
        if method == "initialize":
            info = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}}}
            answer = result({**info, "serverInfo": {"name": "mix", "version": "1"}})
            if self.stray_on_initialize and self.holds:
                self.stray_on_initialize = False
                return await self.initialize_with_stray(request, answer)
            return web.json_response(answer, headers={"Mcp-Session-Id": self.session})
        if method == "tools/list":
            return web.json_response(result(self.complete({"tools": TOOLS})))
        if method != "tools/call":
            return web.json_response(result(self.complete({})))
        name = message["params"]["name"]
        if name == "hold":
            self.holds.append(request_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), 10)
            self.holds.remove(request_id)
            return await self.reply(request, result(self.complete(content("hold done"))))
        if name == "mixup":
            target = self.holds[-1] if self.holds else request_id
            return await self.reply(request, result(self.complete(content("A's private answer")), target))
        if name == "ask":
            return await self.ask(request)
        if name == "forget" and self.session == "s1":
            self.session, self.stray_on_initialize = "s2", True
            return web.Response(status=404)
        return await self.reply(request, result(self.complete(content("added"))))

    async def initialize_with_stray(self, request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Mcp-Session-Id": self.session})
        await response.prepare(request)
        stray = {"jsonrpc": "2.0", "id": self.holds[-1], "result": content("a stray answer")}
        for message in (stray, answer):
            await response.write(f"event: message\ndata: {json.dumps(message)}\n\n".encode())
        await response.write_eof()
        return response

    async def ask(self, request: web.Request) -> web.StreamResponse:
        headers = {} if self.stateless else {"Mcp-Session-Id": self.session}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        params = {"message": "ok?", "requestedSchema": {"type": "object", "properties": {}}}
        question = {"jsonrpc": "2.0", "id": 77, "method": "elicitation/create", "params": params}
        await response.write(f"event: message\ndata: {json.dumps(question)}\n\n".encode())
        try:
            # Until the client closes the stream (the 2026-07-28 era's cancellation), at most 20 s.
            for _ in range(200):
                await asyncio.sleep(0.1)
                await response.write(b": waiting\n\n")
        except (ConnectionError, RuntimeError):
            self.ask_closed.set()
        return response


def content(words: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": words}]}


@contextlib.asynccontextmanager
async def mixing_server(stateless: bool, events: bool = False) -> AsyncIterator[MixingServer]:
    server = MixingServer(stateless, events)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def counters(server: GatewayServer) -> dict[str, Any]:
    session = server.gateway.registry.slots[SLOT].live
    assert session is not None
    return vars(session.counters)


async def gateway_for(factory: GatewayFactory, remote: MixingServer) -> GatewayServer:
    transport = "auto" if remote.stateless else "streamable-http"
    server = await start_gateway(factory, entry(remote.url, transport=transport, request_timeout_ms=DEADLINE_MS))
    await wait_ready_slot(server, SLOT)
    return server


# -- an answer under another caller's id --------------------------------------------------------


@pytest.mark.parametrize("events", [False, True], ids=["json", "event-stream"])
@pytest.mark.parametrize("stateless", [False, True], ids=["session-era", "2026-07-28"])
async def test_an_answer_under_another_callers_id_reaches_nobody_and_ends_its_own_call(
    gateway_factory: GatewayFactory, stateless: bool, events: bool
) -> None:
    # B's call is pending at the server; the server answers A's call under B's id. B must not get A's
    # answer, and A must hear at once that its answer was refused, not wait out its deadline.
    async with mixing_server(stateless, events) as remote:
        server = await gateway_for(gateway_factory, remote)
        async with Client(slot_url(server), mode="legacy") as one, Client(slot_url(server), mode="legacy") as other:
            held = asyncio.create_task(other.call_tool("hold", {}))
            await wait_for(lambda: len(remote.holds) == 1 and pending(server) == 1, what="B's call held at the remote")
            held_id = remote.holds[0]
            started = time.monotonic()
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(one.call_tool("mixup", {}), PROMPTLY_S)
            assert time.monotonic() - started < PROMPTLY_S
            assert not held.done()  # B still waits for its own answer
            remote.released.set()
            assert text(await asyncio.wait_for(held, 10)) == "hold done"
            assert text(await one.call_tool("add", {})) == "added"  # the slot goes on
        error = failure.value.error
        assert error.code == -32603
        assert error.message.startswith(f'Provider "{SLOT}" answered, but the gateway refused the answer: ')
        assert f"under id {json.dumps(held_id)}" in error.message
        assert "the upstream must answer each request under its own id" in error.message
        assert "private" not in error.message
        assert error.data == {"slot": SLOT, "reason": "answer_refused", "answered_id": json.dumps(held_id)}
        assert counters(server)["unmatched_responses"] == 1


async def test_an_answer_under_another_id_on_the_gateways_own_initialize_reaches_nobody(
    gateway_factory: GatewayFactory,
) -> None:
    # The server forgot its session; the stream answering the gateway's new initialize also carries an
    # answer under B's id. B must get its own answer, and the call that met the 404 goes on.
    async with mixing_server(stateless=False) as remote:
        server = await gateway_for(gateway_factory, remote)
        async with Client(slot_url(server), mode="legacy") as one, Client(slot_url(server), mode="legacy") as other:
            held = asyncio.create_task(other.call_tool("hold", {}))
            await wait_for(lambda: len(remote.holds) == 1 and pending(server) == 1, what="B's call held at the remote")
            assert text(await asyncio.wait_for(one.call_tool("add", {}), PROMPTLY_S)) == "added"
            # Retried once on the new session, the call is answered; the stray answer was not B's to get.
            assert text(await asyncio.wait_for(one.call_tool("forget", {}), PROMPTLY_S)) == "added"
            assert not held.done()
            remote.released.set()
            assert text(await asyncio.wait_for(held, 10)) == "hold done"
        assert remote.session == "s2"
        assert counters(server)["unmatched_responses"] == 1


# -- a request on a 2026-07-28 call's stream ----------------------------------------------------


@pytest.mark.parametrize("client_era", ["legacy", "2026-07-28"])
async def test_a_request_on_a_2026_call_stream_ends_the_call_at_once(
    gateway_factory: GatewayFactory, client_era: str, caplog: pytest.LogCaptureFixture
) -> None:
    # 2026-07-28 has no way to answer a server's request (its servers ask through input_required
    # results): the call ends at once with the reason, its stream closes (which cancels it at the server),
    # and the slot logs it once however often it happens.
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={})

    caplog.set_level(logging.WARNING)
    async with mixing_server(stateless=True) as remote:
        server = await gateway_for(gateway_factory, remote)
        async with Client(slot_url(server), mode=client_era, elicitation_callback=elicit) as client:
            for _ in range(2):
                remote.ask_closed.clear()
                started = time.monotonic()
                with pytest.raises(MCPError) as failure:
                    await asyncio.wait_for(client.call_tool("ask", {}), PROMPTLY_S)
                assert time.monotonic() - started < PROMPTLY_S
                await asyncio.wait_for(remote.ask_closed.wait(), 5)
            assert text(await client.call_tool("add", {})) == "added"
        error = failure.value.error
        assert error.code == -32603
        assert error.message.startswith(
            f'Upstream "{SLOT}" sent its client a request (elicitation/create) on the stream of this call, '
            "which the 2026-07-28 era does not carry"
        )
        assert "input_required" in error.message
        assert error.data == {"slot": SLOT, "reason": "upstream_protocol", "method": "elicitation/create"}
        assert counters(server)["protocol_violations"] == 2
        assert remote.answers_posted == []  # nothing was POSTed as an answer: the era has no session for it
        warned = [record for record in caplog.records if "which the 2026-07-28 era does not carry" in record.message]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING


async def test_a_session_era_request_on_a_call_stream_still_reaches_its_client(gateway_factory: GatewayFactory) -> None:
    # The session era carries such requests: the client is asked, and its answer is POSTed to the server.
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with mixing_server(stateless=False) as remote:
        server = await gateway_for(gateway_factory, remote)
        async with Client(slot_url(server), mode="legacy", elicitation_callback=elicit) as client:
            call = asyncio.create_task(client.call_tool("ask", {}))
            await wait_for(lambda: len(remote.answers_posted) == 1, 10, "the client's answer at the server")
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, MCPError):
                await call
        assert asked == ["ok?"]
        assert remote.answers_posted[0]["id"] == 77
        assert remote.answers_posted[0]["result"]["action"] == "accept"
        assert counters(server)["protocol_violations"] == 0
