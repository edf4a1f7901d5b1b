"""A governed call to a remote upstream is recorded `lost` only when the server may have received it: a
POST the server refused (401) or that reached no server (connection refused) is `error`, whatever ends
the link with it; a POST the server read before its connection closed, with no answer, is `lost`
(docs/governance-audit.md, "Sent, no answer: lost"). A minimal aiohttp Streamable HTTP server (session
era, JSON answers) for each of the three, and the SDK's servers for the 2026-07-28 era and legacy SSE.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from mcp import MCPError

from bench.ports import free_port
from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_audit_outcomes import POLICY, caller, ended, tokens
from tests.integration.test_remote_upstreams import SLOT, entry, slot_url, upstream
from tests.support.remote_server import Guard, remote_server
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

TOOLS = [{"name": "open_valve", "inputSchema": {"type": "object", "properties": {"pct": {"type": "integer"}}}}]


class ValveServer:
    """A session-era Streamable HTTP MCP server with one tool. `behaviour` decides what a tools/call's POST
    gets: "answer", "refuse" (HTTP 401), "drop" (read, then the connection closed) or "forget" (HTTP 404 for
    the session, and for every initialize after it: a restarted server that no longer starts sessions)."""

    def __init__(self) -> None:
        self.behaviour = "answer"
        self.calls: list[Any] = []
        """The tools/call params the server read (whatever it then did with them)."""
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return web.Response(status=405)
        if request.method == "DELETE":
            return web.Response(status=200)
        if self.behaviour == "forget":
            return web.Response(status=404, text="session not found")
        message = json.loads(await request.read())
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return web.Response(status=202)
        result: dict[str, Any] = {}
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "valve", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            if self.behaviour == "refuse":
                return web.Response(status=401, text="invalid token")
            self.calls.append(message["params"])
            if self.behaviour == "drop":
                assert request.transport is not None
                request.transport.close()  # the server had it, and went away before answering
                return web.Response(status=500)
            result = {"content": [{"type": "text", "text": "valve opened"}]}
        answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
        return web.json_response(answer, headers={"Mcp-Session-Id": "valve-1"})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=1)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@contextlib.asynccontextmanager
async def valve_server() -> AsyncIterator[ValveServer]:
    server = ValveServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def governed_remote(gateway_factory: GatewayFactory, trail: Path, url: str, **extra: Any) -> GatewayServer:
    gateway = await gateway_factory(
        auth=tokens(),
        policy=POLICY,
        audit={"path": str(trail)},
        upstreams={"remote": [entry(url, **extra)]},
    )
    await wait_ready_slot(gateway, SLOT, timeout=10)
    return gateway


async def failed_call(gateway: GatewayServer, tool: str, arguments: dict[str, Any]) -> MCPError:
    async with caller(slot_url(gateway)) as agent:
        try:
            answer = await agent.call_tool(tool, arguments)
        except MCPError as exc:
            return exc
    raise AssertionError(f"{tool} was answered: {answer}")


async def last_record(trail: Path, count: int) -> dict[str, Any]:
    records = await ended(trail, count)
    return records[-1]


async def test_a_call_the_server_refused_with_401_is_recorded_error(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with valve_server() as valve:
        gateway = await governed_remote(gateway_factory, trail, valve.url, transport="streamable-http")
        valve.behaviour = "refuse"
        refused = await failed_call(gateway, "open_valve", {"pct": 20})
        assert valve.calls == []
        message = refused.error.message
        record = await last_record(trail, 1)
        assert (record["effect"], record["status"], record["error"]) == ("allow", "error", message)
        assert message.startswith(f'Provider "{SLOT}" disconnected: the upstream refused the gateway')
        assert message.endswith("; the server did not take the request"), message


async def test_a_call_to_a_server_gone_is_recorded_error(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    async with valve_server() as valve:
        gateway = await governed_remote(gateway_factory, trail, valve.url, transport="streamable-http")
        async with caller(slot_url(gateway)) as agent:
            assert not (await agent.call_tool("open_valve", {"pct": 10})).is_error
        await valve.stop()  # connection refused from now on
        refused = await failed_call(gateway, "open_valve", {"pct": 40})
    assert len(valve.calls) == 1
    message = refused.error.message
    first, second = await ended(trail, 2)
    assert first["status"] == "ok"
    assert (second["status"], second["error"]) == ("error", message)
    assert "the upstream is unreachable" in message and "did not take the request" in message, message


async def test_a_call_the_server_read_and_dropped_is_recorded_lost(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with valve_server() as valve:
        gateway = await governed_remote(gateway_factory, trail, valve.url, transport="streamable-http")
        valve.behaviour = "drop"
        lost = await failed_call(gateway, "open_valve", {"pct": 30})
        assert [call["arguments"] for call in valve.calls] == [{"pct": 30}]  # what `lost` warns of
        message = lost.error.message
        assert message.startswith(f'Upstream "{SLOT}" ended the answer before it was complete: '), message
        record = await last_record(trail, 1)
        assert (record["effect"], record["status"], record["error"]) == ("allow", "lost", message)
        valve.behaviour = "answer"  # the link carries on
        async with caller(slot_url(gateway)) as agent:
            assert not (await agent.call_tool("open_valve", {"pct": 5})).is_error


async def test_a_call_whose_session_the_server_forgot_is_recorded_error(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with valve_server() as valve:
        gateway = await governed_remote(gateway_factory, trail, valve.url, transport="streamable-http")
        valve.behaviour = "forget"  # the call meets 404, and so does the initialize that would replace the session
        refused = await failed_call(gateway, "open_valve", {"pct": 50})
        assert valve.calls == []
        message = refused.error.message
        record = await last_record(trail, 1)
        assert (record["status"], record["error"]) == ("error", message)
        assert "initializing again after the upstream lost its session failed" in message, message


@pytest.mark.parametrize(
    ("mode", "transport"),
    [
        pytest.param("session", "auto", id="auto-2026"),
        pytest.param("stateless", "streamable-http", id="sessionless-http"),
        pytest.param("sse", "sse", id="legacy-sse"),
    ],
)
async def test_a_call_refused_with_401_is_error_in_every_era(
    gateway_factory: GatewayFactory, tmp_path: Path, mode: str, transport: str
) -> None:
    trail = tmp_path / "audit.db"
    refusing = {"now": False}
    guard = Guard(lambda headers: not refusing["now"])
    async with remote_server(lambda: demo_server(SLOT), mode, guard=guard) as remote:  # type: ignore[arg-type]
        gateway = await governed_remote(gateway_factory, trail, remote.url, transport=transport)
        refusing["now"] = True
        refused = await failed_call(gateway, "add", {"a": 1, "b": 2})
        assert guard.refusals >= 1
        record = await last_record(trail, 1)
        assert (record["status"], record["error"]) == ("error", refused.error.message)
        await wait_for(lambda: upstream(gateway)["state"] == "auth_failed", what="the upstream refusing the gateway")


CLOSING_CHILD = r"""
import json, os, sys, time
for line in sys.stdin:
    message = json.loads(line)
    request_id, method = message.get("id"), message.get("method")
    if request_id is None:
        continue
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {}}
    if method == "initialize":
        version = message["params"]["protocolVersion"]
        info = {"name": "closing", "version": "1"}
        answer["result"] = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        answer["result"] = {"tools": [{"name": "close_stdin", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        answer["result"] = {"content": [{"type": "text", "text": "closing my stdin"}]}
    elif method != "ping":
        answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    if method == "tools/call":
        break
os.close(0)
time.sleep(30)
"""


async def test_a_call_whose_write_to_a_child_fails_is_recorded_error(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    """A stdio child that closed its stdin (its stdout still open): the write of the next call fails."""
    trail = tmp_path / "audit.db"
    child = {"name": SLOT, "command": [sys.executable, "-c", CLOSING_CHILD], "restart_initial_s": 5.0}
    gateway = await gateway_factory(
        auth=tokens(), policy=POLICY, audit={"path": str(trail)}, upstreams={"stdio": [child]}
    )
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with caller(slot_url(gateway)) as agent:
        assert not (await agent.call_tool("close_stdin", {})).is_error
    failed = await failed_call(gateway, "close_stdin", {})
    first, second = await ended(trail, 2)
    assert first["status"] == "ok"
    assert (second["status"], second["error"]) == ("error", failed.error.message)
    assert failed.error.message.startswith(f'Provider "{SLOT}" disconnected'), failed.error.message
