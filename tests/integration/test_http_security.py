"""Origin and Host checks on every HTTP and WebSocket entry, client side and provider side.

A browser page may reach the gateway only from an allowed origin (DNS-rebinding and cross-site
request defence); native clients and boards send no Origin and pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.integration.test_sse_clients import LegacySse
from tests.support.answers import decode_answer
from tests.support.raw_mcp import MCP_HEADERS
from tests.support.servers import demo_server

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ALLOWED = ["https://console.plant.lan", "http://localhost:*", "https://*.plant.lan"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}},
}
UPGRADE_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


@pytest.fixture
async def guarded(gateway_factory: GatewayFactory) -> GatewayServer:
    return await gateway_factory(allowed_origins=ALLOWED)


async def start_session(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> str:
    async with http.post(url, data=orjson.dumps(INITIALIZE), headers={**MCP_HEADERS, **(headers or {})}) as response:
        assert response.status == 200, await response.text()
        session_id: str = response.headers["Mcp-Session-Id"]
        return session_id


async def refused_json(response: aiohttp.ClientResponse, status: int = 403) -> dict[str, Any]:
    assert response.status == status
    assert response.headers["Content-Type"].startswith("application/json")
    assert "Access-Control-Allow-Origin" not in response.headers
    body: dict[str, Any] = await response.json()
    return body


# -- Origin ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
async def test_foreign_origin_is_refused_on_the_client_endpoint(
    guarded: GatewayServer, http: aiohttp.ClientSession, method: str
) -> None:
    url = f"{guarded.url}/pump-1/mcp"
    session_id = await start_session(http, url)
    headers = {**MCP_HEADERS, "Mcp-Session-Id": session_id, "Origin": "https://evil.example"}
    async with http.request(method, url, data=orjson.dumps(INITIALIZE), headers=headers) as response:
        body = await refused_json(response)
    assert body["error"] == "origin_not_allowed"
    assert "https://evil.example" in body["error_description"]
    assert "allowed_origins" in body["error_description"]
    assert "MCP_GATEWAY_ALLOWED_ORIGINS" in body["error_description"]
    assert guarded.gateway.sessions.get(session_id) is not None  # a refused DELETE ends nothing


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{other}", "http://localhost:{other}", "https://evil.example"])
async def test_default_config_refuses_every_foreign_browser_origin(
    gateway: GatewayServer, http: aiohttp.ClientSession, origin: str
) -> None:
    # A page on another local port (a dev server, a hostile local app) is another origin.
    headers = {**MCP_HEADERS, "Origin": origin.format(other=gateway.port + 1)}
    async with http.post(f"{gateway.url}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response:
        assert (await refused_json(response))["error"] == "origin_not_allowed"
    assert not gateway.gateway.sessions.sessions


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
async def test_the_gateways_own_origin_is_served_without_configuration(
    gateway: GatewayServer, http: aiohttp.ClientSession, name: str
) -> None:
    # The MCP conformance suite's dns-rebinding-protection sends Origin = the URL it talks to; only a
    # page served from this host and port could carry it, and the gateway serves no pages.
    own = f"{name}:{gateway.port}"
    headers = {**MCP_HEADERS, "Host": own, "Origin": f"http://{own}"}
    async with http.post(f"{gateway.url}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Mcp-Session-Id"]


async def test_a_rebinding_page_naming_itself_in_host_and_origin_is_refused(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    # evil.example resolved to 127.0.0.1: Origin and Host agree, but neither names this gateway.
    own = f"evil.example:{gateway.port}"
    headers = {**MCP_HEADERS, "Host": own, "Origin": f"http://{own}"}
    async with http.post(f"{gateway.url}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response:
        assert (await refused_json(response))["error"] == "origin_not_allowed"
    assert not gateway.gateway.sessions.sessions


@pytest.mark.parametrize("path", ["/provider/pump-1", "/providers"])
async def test_foreign_origin_is_refused_on_provider_websockets(
    guarded: GatewayServer, http: aiohttp.ClientSession, path: str
) -> None:
    headers = {**UPGRADE_HEADERS, "Origin": "https://evil.example"}
    async with http.get(guarded.url + path, headers=headers) as response:
        body = await refused_json(response)
    assert body["error"] == "origin_not_allowed"
    assert "allowed_origins" in body["error_description"]
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(guarded.url + path, headers={"Origin": "https://evil.example"})
    assert refused.value.status == 403
    assert "pump-1" not in guarded.gateway.registry.slots


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost.evil.example",
        "http://localhost:80x",
        "https://localhost:8443",  # another scheme
        "http://console.plant.lan",
        "https://plant.lan",  # *. needs a subdomain
        "https://hmi.plant.lan.evil.example",
        "https://console.plant.lan:8443",
        "null",
    ],
)
async def test_near_misses_of_allowed_origins_are_refused(
    guarded: GatewayServer, http: aiohttp.ClientSession, origin: str
) -> None:
    headers = {**MCP_HEADERS, "Origin": origin}
    async with http.post(f"{guarded.url}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response:
        assert (await refused_json(response))["error"] == "origin_not_allowed"


@pytest.mark.parametrize(
    "origin",
    [
        "https://console.plant.lan",
        "http://localhost:5173",
        "http://localhost",  # a page on port 80: browsers leave the default port out
        "https://hmi.plant.lan",
        "https://a.b.plant.lan",
    ],
)
async def test_allowed_origins_pass_with_cors_headers(
    guarded: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, origin: str
) -> None:
    await publishers.start(guarded, "pump-1", demo_server("pump"))
    url = f"{guarded.url}/pump-1/mcp"
    headers = {**MCP_HEADERS, "Origin": origin}
    async with http.post(url, data=orjson.dumps(INITIALIZE), headers=headers) as response:
        assert response.status == 200
        assert response.headers["Access-Control-Allow-Origin"] == origin
        assert "Mcp-Session-Id" in response.headers["Access-Control-Expose-Headers"]
        assert "Origin" in response.headers["Vary"]
        session_id = response.headers["Mcp-Session-Id"]
    headers["Mcp-Session-Id"] = session_id
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    async with http.post(url, data=orjson.dumps(call), headers=headers) as response:
        assert response.status == 200
        assert response.headers["Access-Control-Allow-Origin"] == origin
        answer = decode_answer(response.content_type, await response.read())
        assert answer["result"]["structuredContent"] == {"result": 3}


async def test_streamed_answers_carry_cors_headers_too(
    guarded: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    """A page reads the GET stream and SSE answers with fetch(); without the header the browser hides them."""
    await publishers.start(guarded, "pump-1", demo_server("pump"))
    origin = "http://localhost:5173"
    url = f"{guarded.url}/pump-1/mcp"
    session_id = await start_session(http, url, {"Origin": origin})
    headers = {**MCP_HEADERS, "Origin": origin, "Mcp-Session-Id": session_id}
    async with http.get(url, headers={**headers, "Accept": "text/event-stream"}) as stream:
        assert stream.status == 200
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        assert stream.headers["Access-Control-Allow-Origin"] == origin
        assert "Mcp-Session-Id" in stream.headers["Access-Control-Expose-Headers"]
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 1}},
    }
    async with http.post(url, data=orjson.dumps(call), headers=headers) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")  # progress made it a stream
        assert response.headers["Access-Control-Allow-Origin"] == origin
        await response.read()


async def test_preflight_from_an_allowed_origin_is_204(guarded: GatewayServer, http: aiohttp.ClientSession) -> None:
    headers = {
        "Origin": "https://hmi.plant.lan",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, mcp-session-id, mcp-protocol-version",
    }
    async with http.options(f"{guarded.url}/pump-1/mcp", headers=headers) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "https://hmi.plant.lan"
        assert "POST" in response.headers["Access-Control-Allow-Methods"]
        assert "DELETE" in response.headers["Access-Control-Allow-Methods"]
        assert "mcp-session-id" in response.headers["Access-Control-Allow-Headers"].lower()
    async with http.options(
        f"{guarded.url}/pump-1/mcp", headers={**headers, "Origin": "https://evil.example"}
    ) as response:
        assert (await refused_json(response))["error"] == "origin_not_allowed"


async def test_requests_without_origin_pass_everywhere(
    guarded: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(guarded, "pump-1", demo_server("pump"))  # a provider WebSocket without Origin
    async with Client(f"{guarded.url}/pump-1/mcp", mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
    async with http.get(f"{guarded.url}/healthz") as response:
        assert response.status == 200
        assert "Access-Control-Allow-Origin" not in response.headers


async def test_providers_from_an_allowed_origin_connect(guarded: GatewayServer, http: aiohttp.ClientSession) -> None:
    ws = await http.ws_connect(f"{guarded.url}/provider/pump-1", headers={"Origin": "https://console.plant.lan"})
    try:
        await wait_for(lambda: "pump-1" in guarded.gateway.registry.slots, what="the slot to be claimed")
        frame = await ws.receive_json(timeout=5)
        assert frame["method"] == "server/discover"  # the gateway opened its session with the provider
    finally:
        await ws.close()


# -- Content-Type ---------------------------------------------------------------------------------

STATELESS_LIST = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/list",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
async def test_a_body_not_sent_as_json_is_415_on_every_mcp_endpoint(
    gateway: GatewayServer, http: aiohttp.ClientSession, content_type: str | None
) -> None:
    # text/plain and forms are what a web page may POST to another origin without a CORS preflight.
    legacy = LegacySse(http, gateway.url, "pump-1")
    await legacy.open()
    stateless = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    for url, body, extra in (
        (f"{gateway.url}/pump-1/mcp", INITIALIZE, {}),
        (f"{gateway.url}/pump-1/mcp", STATELESS_LIST, stateless),
        (f"{gateway.url}/mcp", INITIALIZE, {}),
        (gateway.url + legacy.endpoint, INITIALIZE, {}),
    ):
        headers = {"Accept": "application/json, text/event-stream", **extra}
        if content_type is not None:
            headers["Content-Type"] = content_type
        async with http.post(
            url, data=orjson.dumps(body), headers=headers, skip_auto_headers=["Content-Type"]
        ) as response:
            refused = await refused_json(response, 415)
        assert refused["error"] == "unsupported_media_type", url
        assert refused["error_description"].endswith("; POST JSON-RPC with Content-Type: application/json")
        shown = "no Content-Type" if content_type is None else f"Content-Type '{content_type}'"
        assert shown in refused["error_description"]
    assert len(gateway.gateway.sessions.sessions) == 1  # the legacy stream's own; no initialize was taken
    legacy.close()


async def test_json_with_parameters_in_any_case_is_taken(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    headers = {**MCP_HEADERS, "Content-Type": "Application/JSON; charset=UTF-8"}
    await start_session(http, f"{gateway.url}/pump-1/mcp", headers)


# -- Host (DNS rebinding) --------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io:{port}", "192.168.1.20"])
async def test_foreign_host_is_refused_while_bound_to_loopback(
    gateway: GatewayServer, http: aiohttp.ClientSession, host: str
) -> None:
    headers = {**MCP_HEADERS, "Host": host.format(port=gateway.port)}
    async with http.post(f"{gateway.url}/pump-1/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response:
        body = await refused_json(response)
    assert body["error"] == "host_not_allowed"
    assert "allowed_hosts" in body["error_description"]
    async with http.get(f"{gateway.url}/provider/pump-1", headers={**UPGRADE_HEADERS, **headers}) as response:
        assert (await refused_json(response))["error"] == "host_not_allowed"
    assert not gateway.gateway.sessions.sessions


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "localhost", "[::1]:{port}", "LOCALHOST"])
async def test_loopback_hosts_pass(gateway: GatewayServer, http: aiohttp.ClientSession, host: str) -> None:
    headers = {"Host": host.format(port=gateway.port)}
    await start_session(http, f"{gateway.url}/pump-1/mcp", headers)


async def test_allowed_hosts_extend_the_loopback_names(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(allowed_hosts=["pump-gw.plant.lan"])
    url = f"{server.url}/pump-1/mcp"
    await start_session(http, url, {"Host": f"pump-gw.plant.lan:{server.port}"})
    await start_session(http, url, {"Host": f"localhost:{server.port}"})
    async with http.post(
        url, data=orjson.dumps(INITIALIZE), headers={**MCP_HEADERS, "Host": "other.plant.lan"}
    ) as response:
        assert (await refused_json(response))["error"] == "host_not_allowed"
    await publishers.start(server, "pump-1", demo_server("pump"), headers={"Host": "pump-gw.plant.lan"})
    await wait_ready_slot(server, "pump-1")


async def test_host_is_not_checked_on_a_lan_bind(gateway_factory: GatewayFactory, http: aiohttp.ClientSession) -> None:
    server = await gateway_factory(host="0.0.0.0", insecure_lan=True)
    await start_session(http, f"{server.url}/pump-1/mcp", {"Host": "pump-gw.plant.lan"})


# -- requests as a client library would never send them (raw bytes) --------------------------------


async def raw_request(server: GatewayServer, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send `head` (request line and headers, no blank line) and `body` as written; the status, the
    headers (lower-case names) and the body of the answer. Client libraries add a Host and send a path
    where the test needs none, or an absolute-form target."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        await writer.drain()
        header_block = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        status_line, *lines = header_block.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = headers.get("content-length")
        content = await asyncio.wait_for(reader.readexactly(int(length)) if length else reader.read(), 10)
    finally:
        writer.close()
    return int(status_line.split()[1]), headers, content


def post_head(target: str, *header_lines: str, version: str = "HTTP/1.1") -> str:
    lines = [
        f"POST {target} {version}",
        *header_lines,
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(orjson.dumps(INITIALIZE))}",
        "Connection: close",
    ]
    return "\n".join(lines)


def refused_raw(status: int, headers: dict[str, str], body: bytes, expected: int = 403) -> dict[str, Any]:
    assert status == expected, body
    assert headers["content-type"].startswith("application/json")
    refusal: dict[str, Any] = orjson.loads(body)
    assert set(refusal) == {"error", "error_description"}
    return refusal


async def refusals_counted(server: GatewayServer, http: aiohttp.ClientSession, reason: str) -> float:
    return (await scrape(http, server)).get("mcpgw_client_refusals_total", reason=reason)


@pytest.mark.parametrize(
    "target",
    [
        "http://evil.example/pump-1/mcp",
        "http://evil.example:{port}/pump-1/mcp",
        "http://localhost@evil.example/pump-1/mcp",
    ],
)
async def test_an_absolute_form_target_naming_another_host_is_refused_on_loopback(
    gateway: GatewayServer, http: aiohttp.ClientSession, target: str
) -> None:
    # The Host header names the gateway; the target says the request is for evil.example.
    head = post_head(target.format(port=gateway.port), f"Host: 127.0.0.1:{gateway.port}")
    refusal = refused_raw(*await raw_request(gateway, head, orjson.dumps(INITIALIZE)))
    assert refusal["error"] == "host_not_allowed"
    assert refusal["error_description"].startswith("The request target names 'evil.example")
    assert "send the path alone" in refusal["error_description"]
    assert not gateway.gateway.sessions.sessions
    assert await refusals_counted(gateway, http, "host_not_allowed") == 1


async def test_an_absolute_form_upgrade_naming_another_host_claims_no_slot(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    head = "\n".join(
        ["GET http://evil.example/provider/pump-1 HTTP/1.1", f"Host: localhost:{gateway.port}"]
        + [f"{name}: {value}" for name, value in UPGRADE_HEADERS.items()]
    )
    refusal = refused_raw(*await raw_request(gateway, head))
    assert refusal["error"] == "host_not_allowed"
    assert "pump-1" not in gateway.gateway.registry.slots


async def test_an_absolute_form_target_naming_the_gateway_is_served(gateway: GatewayServer) -> None:
    head = post_head(f"http://127.0.0.1:{gateway.port}/pump-1/mcp", f"Host: localhost:{gateway.port}")
    status, headers, _ = await raw_request(gateway, head, orjson.dumps(INITIALIZE))
    assert status == 200
    assert headers["mcp-session-id"]


async def test_http_1_0_without_host_is_refused_on_loopback(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    head = post_head("/pump-1/mcp", version="HTTP/1.0")
    refusal = refused_raw(*await raw_request(gateway, head, orjson.dumps(INITIALIZE)))
    assert refusal["error"] == "host_not_allowed"
    assert refusal["error_description"].startswith("The request has no Host header.")
    assert not gateway.gateway.sessions.sessions
    assert await refusals_counted(gateway, http, "host_not_allowed") == 1
    status, _, _ = await raw_request(gateway, "GET /healthz HTTP/1.0")  # every route: the gate is the same
    assert status == 403


async def test_http_1_0_without_host_passes_on_a_lan_bind(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(host="0.0.0.0", insecure_lan=True)
    head = post_head("/pump-1/mcp", version="HTTP/1.0")
    status, headers, _ = await raw_request(server, head, orjson.dumps(INITIALIZE))
    assert status == 200
    assert headers["mcp-session-id"]


@pytest.mark.parametrize(
    "origins",
    [
        ("https://console.plant.lan", "https://evil.example"),  # every origin is checked, not only the first
        ("https://evil.example", "https://console.plant.lan"),
    ],
)
async def test_two_origin_headers_are_refused_as_malformed(
    guarded: GatewayServer, http: aiohttp.ClientSession, origins: tuple[str, str]
) -> None:
    head = post_head("/pump-1/mcp", f"Host: localhost:{guarded.port}", *(f"Origin: {origin}" for origin in origins))
    status, headers, body = await raw_request(guarded, head, orjson.dumps(INITIALIZE))
    refusal = refused_raw(status, headers, body, 400)
    assert refusal == {
        "error": "duplicate_origin",
        "error_description": (
            "The request carries 2 Origin headers; a browser sends one. Send at most one Origin header."
        ),
    }
    assert "access-control-allow-origin" not in headers
    assert not guarded.gateway.sessions.sessions
    assert await refusals_counted(guarded, http, "duplicate_origin") == 1


async def test_two_host_headers_are_refused(gateway: GatewayServer) -> None:
    # aiohttp's parser refuses a second Host before the gate sees the request (a plain-text 400); the
    # gate would refuse it with duplicate_host (tests/unit/test_origin.py).
    head = post_head("/pump-1/mcp", f"Host: localhost:{gateway.port}", "Host: evil.example")
    status, _, _ = await raw_request(gateway, head, orjson.dumps(INITIALIZE))
    assert status == 400
    assert not gateway.gateway.sessions.sessions
