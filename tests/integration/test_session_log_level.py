"""A session's logging/setLevel governs the log messages of its own calls, on every way in.

One provider session serves every client of a slot, and a session-era provider logs at the most
verbose level any of them asked for, so the gateway holds each session to its own level: the log
messages a provider sends while serving a call reach that call's client only at or above the level
the client set (docs/protocol-clients.md, "Request-tied notifications"). A real SDK provider logs at
three levels; real SDK clients (Streamable HTTP, legacy SSE) and a raw WebSocket client listen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import mcp_types as types
import orjson
import pytest
from mcp import Client
from mcp.client.session import LoggingFnT
from mcp.client.sse import sse_client
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
SLOT = "chatty"


def chatty_server() -> MCPServer:
    server = MCPServer(SLOT)

    @server.tool()
    async def chatter(tag: str, ctx: Context) -> str:
        """Log at debug, info and warning while serving the call."""
        await ctx.debug(f"{tag} debug")
        await ctx.info(f"{tag} info")
        await ctx.warning(f"{tag} warning")
        return "done"

    return server


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(providers={"era": "session"})
    await publishers.start(server, SLOT, chatty_server())
    return server


def collector(into: list[str]) -> LoggingFnT:
    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        into.append(str(params.data))

    return on_log


WAYS_IN: dict[str, Callable[[GatewayServer], Any]] = {
    "streamable-http": lambda server: f"{server.url}/{SLOT}/mcp",
    "sse": lambda server: sse_client(f"{server.url}/{SLOT}/sse"),
}


@pytest.mark.parametrize("way_in", list(WAYS_IN))
async def test_each_session_hears_its_own_calls_at_its_own_level(gateway: GatewayServer, way_in: str) -> None:
    quiet: list[str] = []
    verbose: list[str] = []
    to = WAYS_IN[way_in]
    async with (
        Client(to(gateway), mode="legacy", logging_callback=collector(quiet)) as warned,
        Client(to(gateway), mode="legacy", logging_callback=collector(verbose)) as debugged,
    ):
        # The provider is asked for debug (the most verbose level asked for) and logs all three.
        await debugged.set_logging_level("debug")
        await warned.set_logging_level("warning")
        await warned.call_tool("chatter", {"tag": "A"})
        await debugged.call_tool("chatter", {"tag": "B"})
        # A level set again applies to the next call.
        await warned.set_logging_level("info")
        await warned.call_tool("chatter", {"tag": "C"})
    assert quiet == ["A warning", "C info", "C warning"]
    assert verbose == ["B debug", "B info", "B warning"]


async def test_a_session_that_set_no_level_hears_every_level(gateway: GatewayServer) -> None:
    heard: list[str] = []
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy", logging_callback=collector(heard)) as client:
        await client.call_tool("chatter", {"tag": "A"})
    assert heard == ["A debug", "A info", "A warning"]


async def test_a_raw_websocket_session_hears_its_calls_at_its_level(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    verbose: list[str] = []
    async with (
        Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy", logging_callback=collector(verbose)) as debugged,
        http.ws_connect(gateway.url.replace("http://", "ws://") + f"/{SLOT}") as ws,
    ):
        await debugged.set_logging_level("debug")

        async def until_answer(request_id: str) -> list[JsonObject]:
            seen: list[JsonObject] = []
            while True:
                message: JsonObject = orjson.loads((await ws.receive(timeout=5)).data)
                if message.get("id") == request_id:
                    assert "result" in message, message
                    return seen
                seen.append(message)

        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "w"}}
        await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init}))
        await until_answer("i")
        await ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        level = {"jsonrpc": "2.0", "id": "l", "method": "logging/setLevel", "params": {"level": "warning"}}
        await ws.send_bytes(orjson.dumps(level))
        await until_answer("l")
        params = {"name": "chatter", "arguments": {"tag": "W"}}
        await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": params}))
        seen = await until_answer("c")
    logs = [message["params"]["data"] for message in seen if message.get("method") == "notifications/message"]
    assert logs == ["W warning"]
