"""What the official MCP conformance suite found wrong with the gateway, pinned down one by one.

The suite runs in CI (tests/conformance/run.py); these tests keep each fix without node:
- an unknown MCP-Protocol-Version on a stateless-era request got the session-era error, without the
  request's id and listing versions the stateless era does not serve (server-stateless);
- `Mcp-Param-*` headers were not checked against the tool's `x-mcp-header` arguments, because the
  provider behind the gateway never sees HTTP headers (http-custom-header-server-validation).
(The third, the gateway's own Origin refused by default, is in test_http_security.py.)
"""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import orjson
import pytest
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.answers import decode_answer

VERSION = "2026-07-28"
JsonObject = dict[str, Any]

REGION_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "query": {"type": "string"},
    },
    "required": ["region"],
}


def routed_server() -> MCPServer:
    """A provider with one tool whose `region` and `priority` arguments travel in headers too."""
    server = MCPServer("router")

    @server.tool()
    def route(region: str, priority: int = 0, query: str = "") -> str:
        """Route a query."""
        return f"{region}/{priority}/{query}"

    tool = server._tool_manager.get_tool("route")
    assert tool is not None
    tool.parameters = REGION_SCHEMA
    return server


def stateless_request(method: str, params: JsonObject, request_id: Any = 7, version: str = VERSION) -> JsonObject:
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}


def headers_for(body: JsonObject, version: str = VERSION, **extra: str) -> dict[str, str]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": version,
        "Mcp-Method": body["method"],
    }
    if body["method"] == "tools/call":
        headers["Mcp-Name"] = body["params"]["name"]
    return {**headers, **extra}


async def post(http: aiohttp.ClientSession, url: str, body: JsonObject, headers: Any) -> tuple[int, JsonObject]:
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        answer: JsonObject = decode_answer(response.content_type, await response.read())
        return response.status, answer


@pytest.fixture
async def routed(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory()
    await publishers.start(server, "router", routed_server(), aggregate=True)
    return server


# -- unknown protocol versions ------------------------------------------------------------------


async def test_an_unknown_version_on_a_stateless_request_gets_the_stateless_ladders_answer(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    body = stateless_request("server/discover", {}, request_id=301, version="v999.0.0")
    status, answer = await post(http, f"{gateway.url}/pump-1/mcp", body, headers_for(body, version="v999.0.0"))
    assert status == 400
    assert answer["id"] == 301
    assert answer["error"]["code"] == -32022
    # Only what a stateless client can retry with: the session-era versions need a handshake.
    assert answer["error"]["data"] == {"supported": [VERSION], "requested": "v999.0.0"}


async def test_an_unknown_version_on_a_session_request_keeps_the_request_id(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    body = {"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {"protocolVersion": "2031-01-01"}}
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2031-01-01"}
    status, answer = await post(http, f"{gateway.url}/pump-1/mcp", body, headers)
    assert status == 400
    assert answer["id"] == "init-1"
    assert answer["error"]["code"] == -32022
    assert "2025-11-25" in answer["error"]["data"]["supported"]


# -- Mcp-Param-* headers ------------------------------------------------------------------------


def call_route(arguments: JsonObject, name: str = "route") -> JsonObject:
    return stateless_request("tools/call", {"name": name, "arguments": arguments})


def b64(text: str) -> str:
    return f"=?base64?{base64.b64encode(text.encode()).decode()}?="


@pytest.mark.parametrize(
    ("arguments", "params"),
    [
        ({"region": "eu-west", "query": "x"}, {"Mcp-Param-Region": "eu-west"}),
        ({"region": "Zürich"}, {"Mcp-Param-Region": b64("Zürich")}),  # non-ASCII travels base64-encoded
        ({"region": "=?base64?abc"}, {"Mcp-Param-Region": "=?base64?abc"}),  # no ?= suffix: a literal value
        ({"region": "eu", "priority": 3}, {"Mcp-Param-Region": "eu", "mcp-param-priority": "3.0"}),  # by value
    ],
)
async def test_agreeing_param_headers_are_served(
    routed: GatewayServer, http: aiohttp.ClientSession, arguments: JsonObject, params: dict[str, str]
) -> None:
    body = call_route(arguments)
    status, answer = await post(http, f"{routed.url}/router/mcp", body, headers_for(body, **params))
    assert status == 200, answer
    assert answer["result"]["content"][0]["text"].startswith(arguments["region"])


@pytest.mark.parametrize(
    ("arguments", "params", "problem"),
    [
        ({"region": "eu-west"}, {}, "missing"),
        ({"region": "eu-west"}, {"Mcp-Param-Region": "us-east"}, "does not match"),
        ({"region": "Hello"}, {"Mcp-Param-Region": "=?base64?SGVsbG8?="}, "malformed"),  # bad padding
        ({"region": "Hello"}, {"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="}, "malformed"),  # not base64
        ({"region": "eu", "priority": 3}, {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "3.5"}, "does not match"),
        ({"region": "eu"}, {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "1"}, "present but argument"),
    ],
)
async def test_disagreeing_param_headers_are_400_header_mismatch(
    routed: GatewayServer, http: aiohttp.ClientSession, arguments: JsonObject, params: dict[str, str], problem: str
) -> None:
    body = call_route(arguments)
    status, answer = await post(http, f"{routed.url}/router/mcp", body, headers_for(body, **params))
    assert status == 400
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32020
    assert problem in answer["error"]["message"]
    assert "Mcp-Param-" in answer["error"]["message"]


async def test_a_repeated_param_header_is_400_header_mismatch(
    routed: GatewayServer, http: aiohttp.ClientSession
) -> None:
    body = call_route({"region": "eu"})
    headers = [*headers_for(body).items(), ("Mcp-Param-Region", "eu"), ("Mcp-Param-Region", "eu")]
    status, answer = await post(http, f"{routed.url}/router/mcp", body, headers)
    assert status == 400
    assert answer["error"]["code"] == -32020
    assert "more than once" in answer["error"]["message"]


async def test_param_headers_are_checked_on_the_aggregate_too(
    routed: GatewayServer, http: aiohttp.ClientSession
) -> None:
    body = call_route({"region": "eu"}, name="router-route")
    status, answer = await post(http, f"{routed.url}/_all/mcp", body, headers_for(body))
    assert status == 400
    assert answer["error"]["code"] == -32020
    status, answer = await post(http, f"{routed.url}/_all/mcp", body, headers_for(body, **{"Mcp-Param-Region": "eu"}))
    assert status == 200, answer


async def test_param_headers_follow_the_tool_list_the_provider_lists_again(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = routed_server()
    route = server._tool_manager.get_tool("route")
    assert route is not None

    @server.tool()
    async def rename_header(ctx: Context) -> str:
        """The firmware update: `region` travels as Mcp-Param-Area from now on."""
        assert route is not None
        route.parameters = {**REGION_SCHEMA, "properties": {"region": {"type": "string", "x-mcp-header": "Area"}}}
        if ctx.protocol_version == "2026-07-28":  # a gateway speaks 2026-07-28 to an SDK server
            await ctx.notify_tools_changed()
        else:
            await ctx.request_context.session.send_tool_list_changed()
        return "renamed"

    gateway = await gateway_factory()
    await publishers.start(gateway, "router", server)
    url = f"{gateway.url}/router/mcp"
    body = call_route({"region": "eu"})
    assert (await post(http, url, body, headers_for(body, **{"Mcp-Param-Region": "eu"})))[0] == 200
    renamed = stateless_request("tools/call", {"name": "rename_header", "arguments": {}}, request_id=8)
    assert (await post(http, url, renamed, headers_for(renamed)))[0] == 200

    def listed_area() -> bool:
        session = gateway.gateway.registry.slots["router"].live
        tools = {tool["name"]: tool for tool in session.tools} if session is not None else {}
        return "Area" in str(tools.get("route", {}).get("inputSchema"))

    await wait_for(listed_area, what="the gateway to list the renamed header")
    status, answer = await post(http, url, body, headers_for(body, **{"Mcp-Param-Region": "eu"}))
    assert (status, answer["error"]["code"]) == (400, -32020)
    assert "Mcp-Param-Area header is missing" in answer["error"]["message"]
    status, answer = await post(http, url, body, headers_for(body, **{"Mcp-Param-Area": "eu"}))
    assert status == 200, answer


async def test_session_era_calls_need_no_param_headers(routed: GatewayServer, http: aiohttp.ClientSession) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    async with http.post(f"{routed.url}/router/mcp", data=orjson.dumps(init), headers=headers) as response:
        session_id = response.headers["Mcp-Session-Id"]
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "route", "arguments": {"region": "eu"}},
    }
    headers = {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    status, answer = await post(http, f"{routed.url}/router/mcp", body, headers)
    assert status == 200
    assert answer["result"]["content"][0]["text"] == "eu/0/"
