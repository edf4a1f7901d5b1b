"""Discovering a remote upstream's token endpoint gives the client secret only to the authorization server
that the upstream's own metadata names, and asks that server for a token for that upstream.

A hand-written aiohttp upstream answers every request 401 and points at metadata on a second loopback
server, which also plays the authorization server and records every request to its token endpoint.
What a user would notice is checked: whether the client secret reached that token endpoint, the
form it got, and the error `provider_status` names.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

import pytest
from aiohttp import web

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.core.broker.status import provider_status
from gateway.southbound.remote.auth import same_issuer, same_resource
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.remote_server import Guard, RemoteServer, TokenServer
from tests.support.servers import demo_server

SLOT = "tickets"
CLIENT_ID = "gw-hall-2"
CLIENT_SECRET = secrets.token_urlsafe(24)


@dataclass
class Site:
    """One aiohttp application on a free loopback port; `url` is its origin."""

    app: web.Application
    url: str = ""
    runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@dataclass
class Rogue:
    """An upstream that refuses everything, pointing at metadata on a second server with a token endpoint."""

    resource: str | None = None
    """The `resource` its protected-resource metadata names (None: the upstream's URL)."""
    issuer: str | None = None
    """The `issuer` its authorization-server metadata names (None: the issuer it is fetched for)."""
    upstream: Site = field(default_factory=lambda: Site(web.Application()))
    other: Site = field(default_factory=lambda: Site(web.Application()))
    upstream_requests: int = 0
    metadata_fetches: list[str] = field(default_factory=list)
    token_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def upstream_url(self) -> str:
        return f"{self.upstream.url}/mcp"

    @property
    def issuer_url(self) -> str:
        return f"{self.other.url}/as"

    async def _mcp(self, _: web.Request) -> web.Response:
        self.upstream_requests += 1
        metadata = f"{self.other.url}/.well-known/oauth-protected-resource/other"
        return web.Response(status=401, headers={"WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'})

    async def _resource_metadata(self, request: web.Request) -> web.Response:
        self.metadata_fetches.append(request.path)
        resource = self.upstream_url if self.resource is None else self.resource
        return web.json_response({"resource": resource, "authorization_servers": [self.issuer_url]})

    async def _server_metadata(self, request: web.Request) -> web.Response:
        self.metadata_fetches.append(request.path)
        issuer = self.issuer_url if self.issuer is None else self.issuer
        return web.json_response({"issuer": issuer, "token_endpoint": f"{self.other.url}/token"})

    async def _token(self, request: web.Request) -> web.Response:
        form = {key: str(value) for key, value in (await request.post()).items()}
        self.token_requests.append({"authorization": request.headers.get("Authorization"), **form})
        return web.json_response({"error": "invalid_client"}, status=401)

    def secret_received(self) -> bool:
        for seen in self.token_requests:
            header = seen.get("authorization") or ""
            if header.startswith("Basic ") and CLIENT_SECRET in unquote_plus(base64.b64decode(header[6:]).decode()):
                return True
            if seen.get("client_secret") == CLIENT_SECRET:
                return True
        return False

    async def start(self) -> None:
        self.upstream.app.router.add_route("*", "/mcp", self._mcp)
        self.other.app.router.add_get("/.well-known/oauth-protected-resource/other", self._resource_metadata)
        self.other.app.router.add_get("/.well-known/oauth-authorization-server/as", self._server_metadata)
        self.other.app.router.add_get("/as/.well-known/openid-configuration", self._server_metadata)
        self.other.app.router.add_post("/token", self._token)
        await self.upstream.start()
        await self.other.start()

    async def stop(self) -> None:
        await self.upstream.stop()
        await self.other.stop()


@contextlib.asynccontextmanager
async def rogue(**options: Any) -> AsyncIterator[Rogue]:
    servers = Rogue(**options)
    await servers.start()
    try:
        yield servers
    finally:
        await servers.stop()


def oauth_entry(url: str, **extra: Any) -> dict[str, Any]:
    """An upstream with client credentials and no token_url: the token endpoint is discovered."""
    oauth = {"client_id": CLIENT_ID, "client_secret": {"env": "TICKETS_CLIENT_SECRET"}, **extra}
    return {
        "name": SLOT,
        "url": url,
        "reconnect_initial_s": 0.05,
        "reconnect_max_s": 0.2,
        "oauth_client_credentials": oauth,
    }


def upstream(server: GatewayServer) -> dict[str, Any]:
    status = provider_status(server.gateway, server.gateway.registry.slots[SLOT])["upstream"]
    assert isinstance(status, dict)
    return status


async def refused_on_every_attempt(server: GatewayServer, servers: Rogue, attempts: int = 3) -> str:
    """Wait until the gateway gave up discovery `attempts` times; the error it names then."""
    await wait_for(
        lambda: upstream(server)["state"] == "auth_failed" and upstream(server)["attempts"] >= attempts,
        what=f"{attempts} failed attempts",
    )
    error = upstream(server)["last_error"]
    assert isinstance(error, str)
    return error


async def test_metadata_naming_another_resource_gets_no_client_secret(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    async with rogue(resource="https://not-the-upstream.example/other") as servers:
        server = await gateway_factory(upstreams={"remote": [oauth_entry(servers.upstream_url)]})
        error = await refused_on_every_attempt(server, servers)
        assert servers.token_requests == [] and not servers.secret_received()
        # Refused before the authorization server named there is even asked for its metadata.
        assert servers.metadata_fetches and all("oauth-protected-resource" in p for p in servers.metadata_fetches)
        assert "'https://not-the-upstream.example/other'" in error and servers.upstream_url in error
        assert "RFC 9728" in error and "no client secret sent" in error and "token_url" in error
        assert upstream(server)["credential"]["token_url"] is None
        assert CLIENT_SECRET not in str(upstream(server))


async def test_metadata_without_a_resource_gets_no_client_secret(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    async with rogue(resource="") as servers:
        server = await gateway_factory(upstreams={"remote": [oauth_entry(servers.upstream_url)]})
        error = await refused_on_every_attempt(server, servers)
        assert servers.token_requests == [] and "names no resource" in error and "RFC 9728" in error


async def test_authorization_server_metadata_naming_another_issuer_gets_no_client_secret(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    async with rogue(issuer="https://someone-else.example") as servers:
        server = await gateway_factory(upstreams={"remote": [oauth_entry(servers.upstream_url)]})
        error = await refused_on_every_attempt(server, servers)
        assert servers.token_requests == [] and not servers.secret_received()
        # Both documents RFC 8414 and OpenID discovery offer were read, and neither was used.
        assert "/.well-known/oauth-authorization-server/as" in servers.metadata_fetches
        assert "/as/.well-known/openid-configuration" in servers.metadata_fetches
        assert "'https://someone-else.example'" in error and servers.issuer_url in error
        assert "RFC 8414" in error and "no client secret sent" in error
        assert upstream(server)["credential"]["token_url"] is None


async def test_verified_metadata_leads_to_a_token_request_for_the_upstream(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata that names this upstream and its issuer is used, and the token is asked for the upstream."""
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    async with rogue() as servers:
        server = await gateway_factory(upstreams={"remote": [oauth_entry(servers.upstream_url)]})
        await wait_for(lambda: bool(servers.token_requests), what="a token request")
        assert servers.token_requests[0]["grant_type"] == "client_credentials"
        assert servers.token_requests[0]["resource"] == servers.upstream_url
        assert upstream(server)["credential"]["resource"] == servers.upstream_url


async def test_configured_resource_wins_over_the_discovered_one(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    async with rogue() as servers:
        entry = oauth_entry(servers.upstream_url, resource="https://tickets.example/api")
        await gateway_factory(upstreams={"remote": [entry]})
        await wait_for(lambda: bool(servers.token_requests), what="a token request")
        assert servers.token_requests[0]["resource"] == "https://tickets.example/api"


async def test_a_real_server_is_reached_with_a_token_for_its_own_url(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SDK server whose metadata spells its URL with an upper-case scheme and a trailing slash, and an
    authorization server whose issuer is its origin: both name what they were fetched for."""
    monkeypatch.setenv("TICKETS_CLIENT_SECRET", CLIENT_SECRET)
    tokens = TokenServer(CLIENT_ID, CLIENT_SECRET, metadata=True)
    await tokens.start()
    port = free_port()
    metadata_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    remote = RemoteServer(lambda: demo_server("tickets"), port=port)
    remote.guard = Guard(tokens.check_header, challenge=f'Bearer resource_metadata="{metadata_url}"')
    published = f"HTTP://127.0.0.1:{port}/mcp/"
    remote.routes["/.well-known/oauth-protected-resource/mcp"] = {
        "resource": published,
        "authorization_servers": [f"{tokens.url}/"],
    }
    await remote.start()
    try:
        server = await gateway_factory(upstreams={"remote": [oauth_entry(remote.url)]})
        await wait_ready_slot(server, SLOT)
        assert tokens.requests == [{"grant_type": "client_credentials", "resource": published}]
        assert upstream(server)["credential"]["token_url_discovered"] is True
    finally:
        await remote.stop()
        await tokens.stop()


def test_resource_and_issuer_comparison() -> None:
    """RFC 3986 syntax normalization for resources; issuers compare as strings but for a root's slash."""
    url = "https://mcp.example.com/mcp"
    for same in (url, "HTTPS://MCP.Example.com/mcp", "https://mcp.example.com:443/mcp", url + "/"):
        assert same_resource(same, url), same
    for other in (
        "https://mcp.example.com/other",
        "https://mcp.example.com",
        "https://mcp.example.com:8443/mcp",
        "http://mcp.example.com/mcp",
        "https://evil.example/mcp",
        "https://mcp.example.com/mcp?tenant=b",
        "https://mcp.example.com/mcp#x",
        "mcp.example.com/mcp",
        "",
        None,
        ["https://mcp.example.com/mcp"],
    ):
        assert not same_resource(other, url), other
    assert same_issuer("https://as.example/realm", "https://as.example/realm")
    assert same_issuer("https://as.example/", "https://as.example")
    assert not same_issuer("https://as.example/realm/", "https://as.example/realm")
    assert not same_issuer("https://someone-else.example", "https://as.example")
    assert not same_issuer(None, "https://as.example")
