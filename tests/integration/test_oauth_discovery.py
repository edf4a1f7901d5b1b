"""OAuth discovery as the MCP SDK's own OAuth client runs it (RFC 9728 metadata, RFC 8707 resources),
against a real gateway, a real authorization server (tests/support/authorization_server.py) and real
providers: the legacy SSE transport as a resource of its own, aggregating endpoints that list the
scopes of the slots they serve, the resource named as the client spelled its URL, and the audience
check that stays strict about everything else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from yarl import URL

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.answers import decode_answer
from tests.support.authorization_server import AuthorizationServer, MemoryStorage, agent_auth, authorization_server
from tests.support.oauth import access_token, rsa_key
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REQUIRED = {"pump-1": ["pump-1"], "pump-2": ["pumps"], "_broker": ["admin"], "_mcp": ["tools"]}
GROUPS = {"pumps": {"slots": ["pump-*"], "description": "the pumps"}}
METADATA = "/.well-known/oauth-protected-resource"


@pytest.fixture
async def authority() -> AsyncIterator[AuthorizationServer]:
    async with authorization_server() as server:
        yield server


async def plant(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    authority: AuthorizationServer,
    slots: tuple[str, ...] = ("pump-1", "pump-2", "open-1"),
    **extra: Any,
) -> GatewayServer:
    """A gateway checking the authorization server's tokens, with demo providers in `slots` (pump-1 needs
    the scope pump-1, pump-2 the scope pumps, open-1 none)."""
    server = await gateway_factory(
        auth={"oauth": authority.oauth_settings, "required_scopes": REQUIRED}, groups=GROUPS, **extra
    )
    for slot in slots:
        await publishers.start(server, slot, demo_server(slot), aggregate=True)
    await wait_for(lambda: len(server.gateway.aggregate.members()) == len(slots), what="every slot in _all")
    return server


def port_of(server: GatewayServer) -> int:
    port = server.gateway.bound_port
    assert port is not None
    return port


async def post(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    # encoded=True: the path goes out as written (yarl would turn %3A into :).
    async with http.post(
        URL(url, encoded=True), data=orjson.dumps(INITIALIZE), headers={**MCP_HEADERS, **(headers or {})}
    ) as response:
        return response.status, dict(response.headers), decode_answer(response.content_type, await response.read())


async def metadata_of(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> Any:
    async with http.get(URL(url, encoded=True), headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def metadata_url(headers: dict[str, str]) -> str:
    challenge = headers["WWW-Authenticate"]
    return challenge.rsplit('resource_metadata="', 1)[1].removesuffix('"')


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def sse_opens(http: aiohttp.ClientSession, url: str, token: str) -> int:
    """The status of GET <slot>/sse with `token`; a stream that opens is read up to its first event."""
    headers = {"Accept": "text/event-stream", **bearer(token)}
    async with http.get(url, headers=headers) as response:
        if response.status == 200:
            first = await asyncio.wait_for(response.content.readline(), 10)
            assert first == b"event: endpoint\n"
        return response.status


# -- the legacy HTTP+SSE transport ---------------------------------------------------------------------


async def test_an_sdk_oauth_agent_logs_in_over_legacy_sse_and_its_token_serves_both_transports(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: AuthorizationServer, http: aiohttp.ClientSession
) -> None:
    server = await plant(gateway_factory, publishers, authority, slots=("pump-1", "pump-2"))
    url = f"{server.url}/pump-1/sse"
    storage = MemoryStorage()
    async with Client(sse_client(url, auth=agent_auth(url, storage)), mode="legacy") as client:
        result = await client.call_tool("add", {"a": 1, "b": 2})  # posted to /pump-1/messages with the token
    assert result.structured_content == {"result": 3}
    assert authority.token_requests == [
        {"resource": url, "scope": "pump-1", "client_id": authority.token_requests[0]["client_id"]}
    ]
    assert storage.tokens is not None
    sse_token = storage.tokens.access_token

    # /<slot>/sse and its message path name the /sse resource; its metadata says so.
    for path in ("/pump-1/sse", "/pump-1/messages?sessionId=x"):
        status, headers, _ = await post(http, server.url + path)
        assert status == 401
        assert metadata_url(headers) == f"{server.url}{METADATA}/pump-1/sse"
    document = await metadata_of(http, f"{server.url}{METADATA}/pump-1/sse")
    assert (document["resource"], document["scopes_supported"]) == (url, ["pump-1"])
    for slot, resource in (("_all", "/_all/sse"), ("_broker", "/_broker/sse")):
        async with http.get(f"{server.url}/{slot}/sse", headers={"Accept": "text/event-stream"}) as response:
            assert response.status == 401
            assert metadata_url(dict(response.headers)) == f"{server.url}{METADATA}{resource}"
        assert (await metadata_of(http, f"{server.url}{METADATA}{resource}"))["resource"] == server.url + resource

    # One token, either transport of the same slot.
    assert (await post(http, f"{server.url}/pump-1/mcp", bearer(sse_token)))[0] == 200
    mcp_token = access_token(rsa_key(), f"{server.url}/pump-1/mcp", scope="pump-1", issuer=authority.url)
    assert await sse_opens(http, url, mcp_token) == 200

    # Not another slot's: its /mcp or /sse resource opens neither transport of pump-1.
    for other in ("/pump-2/sse", "/pump-2/mcp"):
        token = access_token(rsa_key(), server.url + other, scope="pump-1 pumps", issuer=authority.url)
        assert await sse_opens(http, url, token) == 401
        status, _, body = await post(http, f"{server.url}/pump-1/mcp", bearer(token))
        assert (status, body["error"]) == (401, "invalid_token")
        assert f"its audience (aud) must be {server.url}/pump-1/mcp" in body["error_description"]
    # The scopes stay the slot's: an /sse token without them gets 403 on both.
    unscoped = access_token(rsa_key(), url, scope="pumps", issuer=authority.url)
    assert await sse_opens(http, url, unscoped) == 403
    assert (await post(http, f"{server.url}/pump-1/mcp", bearer(unscoped)))[0] == 403


# -- aggregating endpoints list the scopes of what they serve -------------------------------------------


async def test_aggregating_endpoints_list_the_scopes_an_agent_needs_to_see_their_tools(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: AuthorizationServer, http: aiohttp.ClientSession
) -> None:
    server = await plant(gateway_factory, publishers, authority)
    expected = {
        "/_all/mcp": ["pump-1", "pumps"],
        "/mcp": ["pump-1", "pumps", "tools"],
        "/mcp/pumps": ["pump-1", "pumps", "tools"],
        "/_broker/mcp": ["admin"],
        "/pump-1/mcp": ["pump-1"],
    }
    for path, scopes in expected.items():
        assert (await metadata_of(http, f"{server.url}{METADATA}{path}"))["scopes_supported"] == scopes, path
    # A slot that needs no scope lists none, rather than an empty list an SDK would ask for.
    assert "scopes_supported" not in await metadata_of(http, f"{server.url}{METADATA}/open-1/mcp")

    # The SDK asks for what the metadata lists, and its token then sees every slot's tools.
    url = f"{server.url}/_all/mcp"
    async with (
        httpx2.AsyncClient(auth=agent_auth(url), timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert (await client.call_tool("pump-1-add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    assert {"pump-1-add", "pump-2-add", "open-1-add"} <= names
    assert authority.token_requests[-1]["scope"] == "pump-1 pumps"

    url = f"{server.url}/mcp/pumps"
    async with (
        httpx2.AsyncClient(auth=agent_auth(url), timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"pump-1__add", "pump-2__add"} <= names
    assert authority.token_requests[-1] == {
        "resource": f"{server.url}/mcp",
        "scope": "pump-1 pumps tools",
        "client_id": authority.token_requests[-1]["client_id"],
    }


# -- the resource as the client spelled it ----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["localhost", "unencoded colon"])
async def test_an_sdk_oauth_agent_logs_in_at_every_url_the_gateway_serves(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    authority: AuthorizationServer,
    http: aiohttp.ClientSession,
    spelling: str,
) -> None:
    server = await plant(gateway_factory, publishers, authority, slots=("line2:pump-1",))
    port = port_of(server)
    if spelling == "localhost":
        url = f"http://localhost:{port}/line2%3Apump-1/mcp"
    else:
        url = f"http://127.0.0.1:{port}/line2:pump-1/mcp"
    async with (
        httpx2.AsyncClient(auth=agent_auth(url), timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
    assert authority.token_requests[-1]["resource"] == url


async def test_the_metadata_names_the_url_the_client_used_on_a_name_of_this_gateway(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: AuthorizationServer, http: aiohttp.ClientSession
) -> None:
    server = await plant(gateway_factory, publishers, authority, slots=())
    port = port_of(server)
    cases = {
        # Host sent -> the resource's origin
        f"localhost:{port}": f"http://localhost:{port}",
        f"LocalHost:{port}": f"http://localhost:{port}",
        f"[::1]:{port}": f"http://[::1]:{port}",
        f"127.0.0.1:{port}": f"http://127.0.0.1:{port}",
        # A loopback name on another port is not this listener's URL: the canonical one.
        f"localhost:{port + 1}": f"http://127.0.0.1:{port}",
    }
    for host, origin in cases.items():
        status, headers, _ = await post(http, f"{server.url}/line2:pump-1/mcp", {"Host": host})
        assert status == 401
        assert metadata_url(headers) == f"{origin}{METADATA}/line2:pump-1/mcp"
        for path, resource in (
            ("/line2:pump-1/mcp", "/line2:pump-1/mcp"),
            ("/line2%3Apump-1/mcp", "/line2%3Apump-1/mcp"),
            ("/line2%3apump-1/sse", "/line2%3apump-1/sse"),
            ("/pump%201/mcp", "/pump%201/mcp"),
            ("/mcp/pumps", "/mcp"),
            ("/metrics", "/metrics"),
        ):
            document = await metadata_of(http, f"{server.url}{METADATA}{path}", {"Host": host})
            assert document["resource"] == origin + resource, (host, path)


async def test_the_audience_check_accepts_each_spelling_of_the_endpoint_and_nothing_else(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: AuthorizationServer, http: aiohttp.ClientSession
) -> None:
    server = await plant(gateway_factory, publishers, authority, slots=("line2:pump-1",))
    port = port_of(server)
    url = f"http://127.0.0.1:{port}/line2%3Apump-1/mcp"

    async def status_with(audience: str | list[str]) -> int:
        token = access_token(rsa_key(), audience, scope="pump-1 pumps tools admin", issuer=authority.url)
        return (await post(http, url, bearer(token)))[0]

    accepted: list[str | list[str]] = [
        url,
        f"http://127.0.0.1:{port}/line2:pump-1/mcp",
        f"http://localhost:{port}/line2:pump-1/mcp",
        f"http://LOCALHOST:{port}/line2%3apump-1/mcp",
        f"http://[::1]:{port}/line2%3Apump-1/sse",
        ["https://elsewhere.example/x", url],
    ]
    for audience in accepted:
        assert await status_with(audience) == 200, audience
    refused: list[str | list[str]] = [
        f"http://127.0.0.1:{port}/line2:pump-2/mcp",  # another slot
        f"http://127.0.0.1:{port}/_all/mcp",
        f"http://127.0.0.1:{port}/mcp",
        f"http://127.0.0.1:{port + 1}/line2:pump-1/mcp",  # another port
        "http://127.0.0.1/line2:pump-1/mcp",
        f"http://evil.example:{port}/line2:pump-1/mcp",  # another host
        f"http://192.0.2.7:{port}/line2:pump-1/mcp",
        f"http://localhost.evil.example:{port}/line2:pump-1/mcp",
        f"https://127.0.0.1:{port}/line2:pump-1/mcp",  # another scheme
        f"http://user@127.0.0.1:{port}/line2:pump-1/mcp",
        f"{url}?x=1",
        f"http://127.0.0.1:{port}/line2:pump-1",  # not a resource the gateway names
        f"http://127.0.0.1:{port}/line2:pump-1/messages",
        f"http://127.0.0.1:{port}/line2:pump-1/mcp/x",
        "line2:pump-1",
        [],
    ]
    for audience in refused:
        assert await status_with(audience) == 401, audience


async def test_with_public_url_the_resource_and_the_audience_are_the_public_ones(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: AuthorizationServer, http: aiohttp.ClientSession
) -> None:
    public = "https://gw.plant.test:8443"
    server = await plant(gateway_factory, publishers, authority, slots=("pump-1",), public_url=public)
    port = port_of(server)
    status, headers, _ = await post(http, f"http://localhost:{port}/pump-1/mcp")
    assert status == 401
    assert metadata_url(headers) == f"{public}{METADATA}/pump-1/mcp"
    document = await metadata_of(http, f"http://localhost:{port}{METADATA}/pump-1/sse")
    assert document["resource"] == f"{public}/pump-1/sse"

    async def status_with(audience: str) -> int:
        token = access_token(rsa_key(), audience, scope="pump-1", issuer=authority.url)
        return (await post(http, f"{server.url}/pump-1/mcp", bearer(token)))[0]

    for audience in (f"{public}/pump-1/mcp", f"{public}/pump-1/sse", "https://GW.plant.test:8443/pump%2D1/mcp"):
        assert await status_with(audience) == 200, audience
    for audience in (
        f"http://127.0.0.1:{port}/pump-1/mcp",
        f"http://localhost:{port}/pump-1/mcp",
        "http://gw.plant.test:8443/pump-1/mcp",
        "https://gw.plant.test:8444/pump-1/mcp",
        f"{public}/pump-2/mcp",
    ):
        assert await status_with(audience) == 401, audience
