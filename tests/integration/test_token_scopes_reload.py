"""A scope taken from a static token (by a configuration reload, or by an edit of its token file)
holds on the sessions that token opened before: `_all`, /mcp and /mcp/<group> filter by the scopes
the caller holds now, on Streamable HTTP sessions from their next request and on a raw WebSocket
from its next judgement, and every listening session is told `notifications/tools/list_changed`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import wait_for
from tests.integration.test_policy_reload_list_changed import listening
from tests.integration.test_reload import Reloadable, pumps, reloadable, rewrite

__all__ = ["reloadable"]  # the fixture, used by name

AGENT = secrets.token_urlsafe(32)
LISTENING = ("/_all/mcp", "/mcp", "/mcp/pumps")
GROUPS = '[groups.pumps]\nslots = ["pump-*"]\n[auth.required_scopes]\n"pump-*" = ["pumps"]\n'


def token_entry(scopes: list[str]) -> str:
    digest = hashlib.sha256(AGENT.encode()).hexdigest()
    return f'[[auth.tokens]]\nname = "agent"\nsha256 = "{digest}"\nscopes = {json.dumps(scopes)}\n'


class RawSocket:
    """A raw WebSocket client on /mcp/pumps, as a browser page would hold one."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    async def ask(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        while True:
            message: dict[str, Any] = await self.ws.receive_json(timeout=10)
            if message.get("id") == self.next_id:
                return message

    async def pump_tools(self) -> list[str]:
        answer = await self.ask("tools/list")
        return [tool["name"] for tool in answer["result"]["tools"] if tool["name"].startswith("pump-1")]


@contextlib.asynccontextmanager
async def raw_socket(server: GatewayServer) -> AsyncIterator[RawSocket]:
    headers = {"Authorization": f"Bearer {AGENT}"}
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"ws{server.url.removeprefix('http')}/mcp/pumps", headers=headers) as ws,
    ):
        socket = RawSocket(ws)
        await socket.ask(
            "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page"}}
        )
        await ws.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield socket


async def pump_tools(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools if tool.name.startswith("pump-1")]


async def quiet(server: GatewayServer) -> None:
    """What the providers announced while connecting is heard; count from here."""
    await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)


async def test_a_scope_a_reload_takes_away_holds_on_the_sessions_opened_before(reloadable: Reloadable) -> None:
    server = await reloadable("port = 0\n" + GROUPS + token_entry(["pumps"]))
    changes = dict.fromkeys(LISTENING, 0)
    async with pumps(server), listening(server, LISTENING, changes, AGENT) as clients, raw_socket(server) as socket:
        for path in LISTENING:
            assert await pump_tools(clients[path]), path
        assert await socket.pump_tools()
        await quiet(server)
        changes.update(dict.fromkeys(LISTENING, 0))

        rewrite(server, "port = 0\n" + GROUPS + token_entry([]))
        report = await server.reload()
        assert report.changes == ("auth.tokens: changed agent",), report.refusals
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in LISTENING:
            assert await pump_tools(clients[path]) == [], path
        with pytest.raises(MCPError, match="Unknown tool: pump-1__get_status"):
            await clients["/mcp/pumps"].call_tool("pump-1__get_status", {})
        # The socket's credential is judged again at most once a second: from then on, its new scopes.
        for _ in range(50):
            if not await socket.pump_tools():
                break
            await asyncio.sleep(0.1)
        assert await socket.pump_tools() == []
        called = await socket.ask("tools/call", {"name": "pump-1__get_status", "arguments": {}})
        assert "Unknown tool" in called["error"]["message"], called


async def test_an_edited_token_file_tells_the_listening_sessions(reloadable: Reloadable, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    digest = hashlib.sha256(AGENT.encode()).hexdigest()

    def write_tokens(scopes: list[str]) -> None:
        tokens.write_text(f'[[tokens]]\nname = "agent"\nsha256 = "{digest}"\nscopes = {json.dumps(scopes)}\n')
        tokens.chmod(0o600)

    write_tokens(["pumps"])
    server = await reloadable(f"port = 0\n{GROUPS}[auth]\ntoken_files = [{json.dumps(str(tokens))}]\n")
    changes = dict.fromkeys(LISTENING, 0)
    async with pumps(server), listening(server, LISTENING, changes, AGENT) as clients:
        for path in LISTENING:
            assert await pump_tools(clients[path]), path
        await quiet(server)
        changes.update(dict.fromkeys(LISTENING, 0))
        write_tokens([])
        # The file is looked at every second, with no request needed to make it so.
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in LISTENING:
            assert await pump_tools(clients[path]) == [], path
