"""A remote upstream whose answers arrive in pieces (gateway/http_body.py).

One small aiohttp server plays the remote MCP server (JSON answers, no sessions), its protected-resource
metadata, the authorization server's metadata and the token endpoint; every JSON body it sends is
written in two pieces with a pause between them, as a slow link or a proxy delivers it. The gateway
discovers the token endpoint, gets a token, probes `server/discover`, initializes and relays a call:
each body is read to its end. A token answer over the size cap is refused as too large, even when
each piece is under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from mcp import Client

from gateway.southbound.remote.auth import MAX_METADATA_BYTES
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_remote_upstreams import SLOT, entry, oauth_entry, slot_url, start_gateway, text, upstream

CLIENT_SECRET = secrets.token_urlsafe(24)
PAUSE_S = 0.2


async def in_two_pieces(
    request: web.Request, body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.StreamResponse:
    data = orjson.dumps(body)
    response = web.StreamResponse(status=status, headers={"Content-Type": "application/json", **(headers or {})})
    response.content_length = len(data)
    await response.prepare(request)
    half = len(data) // 2
    await response.write(data[:half])
    await asyncio.sleep(PAUSE_S)
    await response.write(data[half:])
    await response.write_eof()
    return response


class SplitRemote:
    """Remote MCP server, resource metadata, authorization server metadata and token endpoint in one."""

    def __init__(self, token_padding: int = 0, open_to_all: bool = False) -> None:
        self.token_padding = token_padding
        self.open_to_all = open_to_all
        self.tokens: set[str] = set()
        self.calls = 0
        self.port = 0
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if not self.open_to_all and (scheme.lower() != "bearer" or token not in self.tokens):
            challenge = f'Bearer resource_metadata="{self.url}/.well-known/oauth-protected-resource/mcp"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        if request.method != "POST":
            return web.Response(status=405)
        message = orjson.loads(await request.read())
        if "id" not in message:
            return web.Response(status=202)
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        method = message.get("method")
        if method == "initialize":
            answer["result"] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "split", "version": "1"},
            }
        elif method == "tools/list":
            answer["result"] = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            self.calls += 1
            answer["result"] = {"content": [{"type": "text", "text": "arrived in two pieces " + "x" * 3000}]}
        elif method == "ping":
            answer["result"] = {}
        else:
            answer["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        return await in_two_pieces(request, answer)

    async def resource_metadata(self, request: web.Request) -> web.StreamResponse:
        return await in_two_pieces(request, {"resource": f"{self.url}/mcp", "authorization_servers": [self.url]})

    async def server_metadata(self, request: web.Request) -> web.StreamResponse:
        return await in_two_pieces(request, {"issuer": self.url, "token_endpoint": f"{self.url}/token"})

    async def token(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if form.get("client_secret") != CLIENT_SECRET and "Authorization" not in request.headers:
            return web.json_response({"error": "invalid_client"}, status=401)
        issued = secrets.token_urlsafe(24)
        self.tokens.add(issued)
        answer = {
            "access_token": issued,
            "token_type": "Bearer",
            "expires_in": 300,
            "padding": "p" * self.token_padding,
        }
        return await in_two_pieces(request, answer)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.mcp)
        app.router.add_get("/.well-known/oauth-protected-resource/mcp", self.resource_metadata)
        app.router.add_get("/.well-known/oauth-authorization-server", self.server_metadata)
        app.router.add_post("/token", self.token)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def split_remote(token_padding: int = 0, open_to_all: bool = False) -> AsyncIterator[SplitRemote]:
    remote = SplitRemote(token_padding, open_to_all)
    await remote.start()
    try:
        yield remote
    finally:
        assert remote.runner is not None
        await remote.runner.cleanup()


@pytest.mark.timeout(60)
async def test_bodies_in_two_pieces_are_read_whole(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FILES_CLIENT_SECRET", CLIENT_SECRET)
    async with split_remote() as remote:
        server = await start_gateway(gateway_factory, oauth_entry(f"{remote.url}/mcp", None))
        await wait_ready_slot(server, SLOT)
        credential = upstream(server)["credential"]
        assert credential["token_url_discovered"] is True and credential["token"] == "held"
        async with Client(slot_url(server), mode="legacy") as client:
            assert text(await client.call_tool("echo", {})).startswith("arrived in two pieces ")
        assert remote.calls == 1


@pytest.mark.timeout(60)
async def test_json_answers_in_two_pieces_are_read_whole(gateway_factory: GatewayFactory) -> None:
    """No credential: only the MCP answers (server/discover, initialize, tools/list, tools/call) are split."""
    async with split_remote(open_to_all=True) as remote:
        server = await start_gateway(gateway_factory, entry(f"{remote.url}/mcp"))
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="2026-07-28") as client:
            assert text(await client.call_tool("echo", {})).startswith("arrived in two pieces ")
        assert remote.calls == 1


@pytest.mark.timeout(60)
async def test_a_token_answer_over_the_cap_is_refused_as_too_large(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FILES_CLIENT_SECRET", CLIENT_SECRET)
    # Each piece is under the cap; the whole answer is over it.
    async with split_remote(token_padding=MAX_METADATA_BYTES) as remote:
        server = await start_gateway(gateway_factory, oauth_entry(f"{remote.url}/mcp", f"{remote.url}/token"))
        await wait_for(lambda: upstream(server)["state"] == "auth_failed", what="auth_failed")
        assert f"larger than {MAX_METADATA_BYTES} bytes" in upstream(server)["last_error"]
        assert remote.calls == 0
