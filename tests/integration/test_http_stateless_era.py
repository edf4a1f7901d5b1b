"""Stateless-era Streamable HTTP at /<slot>/mcp (2026-07-28), as clients see it.

Real SDK clients pinned to 2026-07-28 (or probing with mode="auto") drive the ordinary paths; raw
aiohttp requests produce the envelopes and headers the SDK never gets wrong.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.subscriptions import ToolsListChanged
from multidict import CIMultiDict

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server

# The providers log on purpose (logging is deprecated in 2026-07-28, yet still relayed on request).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

VERSION = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
JsonObject = dict[str, Any]


# -- raw HTTP helpers -----------------------------------------------------------------------------


class SseReader:
    """Reads one JSON-RPC message per server-sent event from an open aiohttp response."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, timeout: float = 5.0) -> JsonObject | None:
        """The next event's message; None when the stream ended."""
        data: list[bytes] = []
        async with asyncio.timeout(timeout):
            while True:
                line = await self.response.content.readline()
                if not line:
                    return None
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data:"):
                    data.append(line[5:].removeprefix(b" "))
                elif not line and data:
                    message: JsonObject = orjson.loads(b"\n".join(data))
                    return message


def envelope(**extra: Any) -> JsonObject:
    return {
        META_VERSION: VERSION,
        META_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "raw", "version": "1"},
        **extra,
    }


def request(
    method: str, params: JsonObject | None = None, request_id: Any = 1, meta: JsonObject | None = None
) -> JsonObject:
    """A stateless-era request: the envelope (with `meta` on top) rides in params._meta."""
    params = dict(params or {})
    params["_meta"] = {**envelope(), **(meta or {})}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def routing_headers(body: JsonObject) -> dict[str, str]:
    """The headers a correct client sends with `body`."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": body["method"],
    }
    name_key = NAME_PARAM.get(body["method"])
    if name_key is not None:
        headers["Mcp-Name"] = body["params"][name_key]
    return headers


async def decode(response: aiohttp.ClientResponse) -> Any:
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        reader = SseReader(response)
        messages = []
        while (message := await reader.next()) is not None:
            messages.append(message)
        return messages
    raw = await response.read()
    return orjson.loads(raw) if raw else None


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, headers: Any = None
) -> tuple[int, CIMultiDict[str], Any]:
    """POST `body` with the correct routing headers unless `headers` replaces them."""
    if headers is None:
        headers = routing_headers(body)
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        return response.status, CIMultiDict(response.headers), await decode(response)


async def call(http: aiohttp.ClientSession, url: str, body: JsonObject) -> JsonObject:
    """One request that must succeed; the final response (JSON body or the end of an SSE body)."""
    status, _, answer = await post(http, url, body)
    assert status == 200, answer
    final: JsonObject = answer[-1] if isinstance(answer, list) else answer
    assert "result" in final, final
    return final


def url_of(server: GatewayServer, slot: str) -> str:
    return f"{server.url}/{slot}/mcp"


def pump_server(cancelled: list[float], extra_tool: bool = False) -> MCPServer:
    """A provider whose `sleep` records being cancelled and whose `announce` sends a slot-wide notice."""
    server = MCPServer("pump-firmware", instructions="Pump 1: stop the pump before opening the drain valve.")

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            cancelled.append(seconds)
            raise
        return f"slept {seconds}"

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Send a resources/list_changed that is not tied to this request (each era its own way)."""
        if ctx.protocol_version == VERSION:
            await ctx.notify_resources_changed()
        else:
            await ctx.request_context.session.send_resource_list_changed()
        return "announced"

    if extra_tool:

        @server.tool()
        def drain() -> str:
            """Only in the updated firmware."""
            return "drained"

    @server.resource("pump://state")
    def state() -> str:
        return "running"

    return server


async def wait_pending(server: GatewayServer, slot: str, expected: int) -> None:
    """Wait until `_broker` reports `expected` requests in flight towards the slot."""
    async with Client(url_of(server, "_broker"), mode=VERSION) as broker:
        for _ in range(200):
            result = await broker.call_tool("provider_status", {"name": slot})
            assert result.structured_content is not None
            if result.structured_content["pending"] == expected:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"pending for {slot} never became {expected}")


# -- the SDK's view -------------------------------------------------------------------------------


async def test_sdk_client_pinned_to_2026_calls_through(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    async with Client(url_of(gateway, "pump-1"), mode=VERSION) as client:
        assert client.protocol_version == VERSION
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["add", "echo", "sleep", "fail"]
        result = await client.call_tool("add", {"a": 2, "b": 40})
        assert result.structured_content == {"result": 42}
        failed = await client.call_tool("fail", {"message": "valve stuck"})
        assert failed.is_error
        prompt = await client.get_prompt("ask", {"topic": "pumps"})
        assert "pumps" in str(prompt.messages[0].content)
        resource = await client.read_resource("demo://greeting")
        assert "hello" in str(resource.contents[0])


async def test_sdk_client_in_auto_mode_discovers_the_stateless_era(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    async with Client(url_of(gateway, "pump-1"), mode="auto") as client:
        assert client.protocol_version == VERSION
        assert client.server_info is not None
        assert client.server_info.name == "pump-firmware"
        assert client.instructions == "Pump 1: stop the pump before opening the drain valve."
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        result = await client.call_tool("sleep", {"seconds": 0})
        assert result.structured_content == {"result": "slept 0.0"}


# -- server/discover and result stamping ------------------------------------------------------------


async def test_server_discover(gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    answer = await call(http, url_of(gateway, "pump-1"), request("server/discover", request_id="d1"))
    assert answer["id"] == "d1"
    result = answer["result"]
    assert VERSION in result["supportedVersions"]
    assert result["serverInfo"]["name"] == "pump-firmware"
    assert result["capabilities"]["tools"]["listChanged"] is True
    assert "resources" in result["capabilities"]
    assert result["instructions"] == "Pump 1: stop the pump before opening the drain valve."
    assert result["resultType"] == "complete"
    assert result["_meta"][META_SERVER_INFO]["name"] == "pump-firmware"


@pytest.mark.parametrize(
    ("method", "params", "cacheable"),
    [
        ("tools/list", {}, True),
        ("prompts/list", {}, True),
        ("resources/list", {}, True),
        ("resources/templates/list", {}, True),
        ("resources/read", {"uri": "demo://greeting"}, True),
        ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, False),
        ("prompts/get", {"name": "ask", "arguments": {"topic": "valves"}}, False),
    ],
)
async def test_every_result_is_stamped(
    gateway: GatewayServer,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    method: str,
    params: JsonObject,
    cacheable: bool,
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    result = (await call(http, url_of(gateway, "pump-1"), request(method, params)))["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][META_SERVER_INFO] == {
        "name": "pump",
        "version": result["_meta"][META_SERVER_INFO]["version"],
    }
    if cacheable:
        assert isinstance(result["ttlMs"], int)
        assert result["cacheScope"] in ("private", "public")
    else:
        assert "ttlMs" not in result
        assert "cacheScope" not in result


# -- what the stateless handler refuses -------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_are_405(gateway: GatewayServer, http: aiohttp.ClientSession, method: str) -> None:
    headers = {"MCP-Protocol-Version": VERSION, "Accept": "text/event-stream"}
    async with http.request(method, url_of(gateway, "pump-1"), headers=headers) as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"


async def test_missing_envelope_is_400_invalid_params(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    url = url_of(gateway, "pump-1")
    bare = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    status, _, answer = await post(http, url, bare, routing_headers(bare))
    assert status == 400
    assert answer["id"] == 3
    assert answer["error"]["code"] == -32602
    assert "_meta" in answer["error"]["message"]
    half = request("tools/list")
    del half["params"]["_meta"][META_CAPABILITIES]
    status, _, answer = await post(http, url, half)
    assert status == 400
    assert answer["error"]["code"] == -32602
    assert META_CAPABILITIES in answer["error"]["message"]


def with_header(body: JsonObject, name: str, value: str | None) -> dict[str, str]:
    headers = routing_headers(body)
    if value is None:
        del headers[name]
    else:
        headers[name] = value
    return headers


@pytest.mark.parametrize(
    ("body", "header", "value", "named"),
    [
        (
            request("tools/list", meta={META_VERSION: "2025-11-25"}),
            "MCP-Protocol-Version",
            VERSION,
            "mcp-protocol-version header does not match",
        ),
        (request("tools/list"), "Mcp-Method", "prompts/list", "mcp-method header does not match the body's method"),
        (request("tools/list"), "Mcp-Method", None, "mcp-method header is missing: expected Mcp-Method: tools/list"),
        (request("tools/call", {"name": "add", "arguments": {}}), "Mcp-Name", "sub", "mcp-name header does not match"),
        # Absent, it is named as missing, with the header line to send (not "does not match").
        (
            request("tools/call", {"name": "add", "arguments": {}}),
            "Mcp-Name",
            None,
            "mcp-name header is missing: expected Mcp-Name: add (the body's 'name')",
        ),
        (request("resources/read", {"uri": "demo://greeting"}), "Mcp-Name", "demo://other", "mcp-name"),
    ],
)
async def test_headers_disagreeing_with_the_body_are_400_header_mismatch(
    gateway: GatewayServer, http: aiohttp.ClientSession, body: JsonObject, header: str, value: str | None, named: str
) -> None:
    status, _, answer = await post(http, url_of(gateway, "pump-1"), body, with_header(body, header, value))
    assert status == 400
    assert answer["id"] == body["id"]
    assert answer["error"]["code"] == -32020
    assert named in answer["error"]["message"]


async def test_a_base64_encoded_name_header_matches(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    body = request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    encoded = "=?base64?" + base64.b64encode(b"add").decode() + "?="
    status, _, answer = await post(http, url_of(gateway, "pump-1"), body, with_header(body, "Mcp-Name", encoded))
    assert status == 200
    assert answer["result"]["structuredContent"] == {"result": 2}


@pytest.mark.parametrize("header", ["Mcp-Method", "MCP-Protocol-Version", "Mcp-Name"])
async def test_a_duplicated_routing_header_is_400_header_mismatch(
    gateway: GatewayServer, http: aiohttp.ClientSession, header: str
) -> None:
    body = request("tools/call", {"name": "add", "arguments": {}})
    headers: CIMultiDict[str] = CIMultiDict(routing_headers(body))
    headers.add(header, headers[header])
    status, _, answer = await post(http, url_of(gateway, "pump-1"), body, headers)
    assert status == 400
    assert answer["error"]["code"] == -32020
    assert "more than once" in answer["error"]["message"]


async def test_unknown_version_header_is_400_with_the_supported_list(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    body = request("tools/list", meta={META_VERSION: "2027-01-01"})
    status, _, answer = await post(
        http, url_of(gateway, "pump-1"), body, with_header(body, "MCP-Protocol-Version", "2027-01-01")
    )
    assert status == 400
    assert answer["error"]["code"] == -32022
    assert VERSION in answer["error"]["data"]["supported"]
    assert answer["error"]["data"]["requested"] == "2027-01-01"


async def test_session_era_version_in_a_stateless_body_is_header_mismatch(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # A session-era version in the body of a stateless request: the header routes, the body disagrees.
    body = request("server/discover", meta={META_VERSION: "2025-11-25"})
    status, _, answer = await post(http, url_of(gateway, "pump-1"), body)
    assert status == 400
    assert answer["error"]["code"] == -32020


@pytest.mark.parametrize("method", ["no/such/method", "ping", "logging/setLevel", "resources/subscribe", "initialize"])
async def test_unknown_and_session_era_only_methods_are_404(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, method: str
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    params = {"level": "info"} if method == "logging/setLevel" else {"uri": "demo://greeting"}
    status, _, answer = await post(http, url_of(gateway, "pump-1"), request(method, params, request_id=77))
    assert status == 404
    assert answer["id"] == 77
    assert answer["error"]["code"] == -32601


async def test_a_client_that_takes_only_sse_gets_one_event_and_one_that_takes_neither_406(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    url = url_of(gateway, "pump-1")
    body = request("tools/list", request_id=5)
    headers = {**routing_headers(body), "Accept": "text/event-stream"}
    status, answer_headers, messages = await post(http, url, body, headers)
    assert status == 200
    assert answer_headers["Content-Type"].startswith("text/event-stream")
    (answer,) = messages
    assert answer["id"] == 5 and "add" in {tool["name"] for tool in answer["result"]["tools"]}
    # An error keeps its HTTP status on the event stream too.
    unknown = request("no/such/method", request_id=6)
    status, answer_headers, messages = await post(
        http, url, unknown, {**routing_headers(unknown), "Accept": "text/event-stream"}
    )
    assert status == 404 and answer_headers["Content-Type"].startswith("text/event-stream")
    assert [message["error"]["code"] for message in messages] == [-32601]
    status, _, refused = await post(http, url, body, {**routing_headers(body), "Accept": "text/html"})
    assert status == 406
    assert refused == {
        "error": "not_acceptable",
        "error_description": "Accept application/json or text/event-stream (MCP clients list both); "
        "answers come as one of them",
    }


async def test_notifications_are_202(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": envelope()}}
    status, _, answer = await post(http, url_of(gateway, "pump-1"), body, routing_headers(body))
    assert status == 202
    assert answer is None


# -- request-tied notifications -------------------------------------------------------------------


async def test_log_messages_only_when_the_request_asks_for_a_level(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    url = url_of(gateway, "pump-1")
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 5}}
    quiet = request("tools/call", params)
    quiet["params"]["_meta"]["progressToken"] = 5
    status, _, messages = await post(http, url, quiet)
    assert status == 200
    assert [m.get("method") for m in messages] == ["notifications/progress", None]
    assert messages[0]["params"]["progressToken"] == 5
    assert messages[1]["result"]["resultType"] == "complete"

    chatty = request("tools/call", params, meta={META_LOG_LEVEL: "info"})
    status, _, messages = await post(http, url, chatty)
    assert [m.get("method") for m in messages] == ["notifications/message", None]
    assert messages[0]["params"]["level"] == "info"
    assert messages[0]["params"]["data"] == "echoing hi"

    strict = request("tools/call", params, meta={META_LOG_LEVEL: "error"})
    status, _, answer = await post(http, url, strict)
    assert status == 200
    assert answer["result"]["structuredContent"] == {"result": "hi"}  # plain JSON: nothing to stream


# -- subscriptions/listen -------------------------------------------------------------------------


async def open_listen(
    http: aiohttp.ClientSession, url: str, wanted: JsonObject, request_id: Any
) -> tuple[aiohttp.ClientResponse, SseReader, JsonObject]:
    body = request("subscriptions/listen", {"notifications": wanted}, request_id=request_id)
    response = await http.post(url, data=orjson.dumps(body), headers=routing_headers(body))
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    reader = SseReader(response)
    ack = await reader.next()
    assert ack is not None
    return response, reader, ack


async def test_listen_acknowledges_then_sends_tagged_tool_changes(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    response, reader, ack = await open_listen(http, url_of(gateway, "_all"), {"toolsListChanged": True}, "sub-1")
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"][META_SUBSCRIPTION] == "sub-1"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    event = await reader.next()
    assert event == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {META_SUBSCRIPTION: "sub-1"}},
    }
    response.close()
    await wait_for(lambda: gateway.gateway.open_subscriptions == 0, what="the gateway to drop the closed stream")


async def test_listen_never_sends_a_kind_not_asked_for(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    first = await publishers.start(gateway, "pump-1", pump_server([]))
    wanted = {"resourcesListChanged": True, "toolsListChanged": False}
    response, reader, ack = await open_listen(http, url_of(gateway, "pump-1"), wanted, 42)
    assert ack["params"]["notifications"] == {"resourcesListChanged": True}
    # New firmware with another tool: a tools/list_changed the stream did not ask for.
    await first.stop()
    await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="the provider to leave")
    await publishers.start(gateway, "pump-1", pump_server([], extra_tool=True))
    async with Client(url_of(gateway, "pump-1"), mode=VERSION) as client:
        assert "drain" in {tool.name for tool in (await client.list_tools()).tools}
        await client.call_tool("announce", {})
    event = await reader.next()
    assert event == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/list_changed",
        "params": {"_meta": {META_SUBSCRIPTION: 42}},
    }
    response.close()


async def test_listen_acknowledges_only_the_list_changes_the_endpoint_announces(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # A session-era provider that declares prompts and resources without listChanged: only the tool
    # list, which the gateway itself announces for every slot, is acknowledged.
    server = await gateway_factory(providers={"era": "session"})
    await publishers.start(server, "pump-1", demo_server("pump"))
    every_kind = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
    response, _, ack = await open_listen(http, url_of(server, "pump-1"), every_kind, "slot")
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    response.close()
    # _broker's tools and resources never change (listChanged: false): nothing is acknowledged.
    response, _, ack = await open_listen(http, url_of(server, "_broker"), every_kind, "broker")
    assert ack["params"]["notifications"] == {}
    response.close()


async def test_sdk_listen_on_all_sees_a_provider_join(gateway: GatewayServer, publishers: Publishers) -> None:
    async with Client(url_of(gateway, "_all"), mode=VERSION) as client:
        assert (await client.list_tools()).tools == []
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed is True
            await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
            event = await asyncio.wait_for(anext(subscription), 5)
            assert isinstance(event, ToolsListChanged)
        tools = await client.list_tools()
        assert "pump-1-add" in {tool.name for tool in tools.tools}


# -- cancellation ---------------------------------------------------------------------------------


async def test_dropping_the_response_stream_cancels_upstream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    body = request("tools/call", {"name": "sleep", "arguments": {"seconds": 30}})
    pending = asyncio.create_task(post(http, url_of(gateway, "pump-1"), body))
    await wait_pending(gateway, "pump-1", 1)
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pending
    await wait_for(lambda: cancelled == [30.0], what="the provider to see notifications/cancelled")
    await wait_pending(gateway, "pump-1", 0)


async def test_sdk_client_cancelling_a_call_cancels_upstream(gateway: GatewayServer, publishers: Publishers) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    async with Client(url_of(gateway, "pump-1"), mode=VERSION) as client:
        pending = asyncio.create_task(client.call_tool("sleep", {"seconds": 25}))
        await wait_pending(gateway, "pump-1", 1)
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        await wait_for(lambda: cancelled == [25.0], what="the provider to see notifications/cancelled")
        result = await client.call_tool("sleep", {"seconds": 0})
        assert result.structured_content == {"result": "slept 0.0"}


# -- the pending bound and long answers -------------------------------------------------------------

ALICE = "alice-token-0123456789abcdef0123"
BOB = "bob-token-0123456789abcdef012345"


def pending_towards(server: GatewayServer, slot: str) -> int:
    session = server.gateway.registry.slots[slot].live
    return session.in_flight if session is not None else 0


def sleep_call(seconds: float, request_id: int) -> JsonObject:
    return request("tools/call", {"name": "sleep", "arguments": {"seconds": seconds}}, request_id)


def signed(token: str, body: JsonObject) -> dict[str, str]:
    return {**routing_headers(body), "Authorization": f"Bearer {token}"}


async def test_requests_in_flight_are_bounded_per_caller(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALICE_TOKEN", ALICE)
    monkeypatch.setenv("BOB_TOKEN", BOB)
    tokens = [{"name": "alice", "scopes": ["metrics"], "env": "ALICE_TOKEN"}, {"name": "bob", "env": "BOB_TOKEN"}]
    server = await gateway_factory(auth={"tokens": tokens}, limits={"max_pending_per_client": 2})
    cancelled: list[float] = []
    await publishers.start(server, "pump-1", pump_server(cancelled))
    url = url_of(server, "pump-1")
    held = [
        asyncio.create_task(post(http, url, body, signed(ALICE, body))) for body in map(sleep_call, [20, 20], [1, 2])
    ]
    await wait_for(lambda: pending_towards(server, "pump-1") == 2, what="alice's two calls at the provider")
    # The third is refused as a session's would be: -32000 on HTTP 200, naming the bound.
    third = sleep_call(0, 3)
    status, _, refused = await post(http, url, third, signed(ALICE, third))
    assert (status, refused["id"], refused["error"]["code"]) == (200, 3, -32000)
    assert refused["error"]["message"].startswith('Too many requests in flight for caller "token:alice" (limit 2)')
    assert refused["error"]["data"] == {"reason": "pending_limit", "scope": 'caller "token:alice"', "limit": 2}
    # Another caller is not held back by alice.
    other = sleep_call(0, 4)
    status, _, answer = await post(http, url, other, signed(BOB, other))
    assert (status, answer["result"]["structuredContent"]) == (200, {"result": "slept 0.0"})
    async with http.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {ALICE}"}) as response:
        assert 'mcpgw_limit_hits_total{limit="max_pending_per_client"} 1.0' in await response.text()
    # Closing her streams ends her calls, and alice may call again.
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    await wait_for(lambda: sorted(cancelled) == [20.0, 20.0], what="the provider to see both calls cancelled")
    again = sleep_call(0, 5)
    status, _, answer = await post(http, url, again, signed(ALICE, again))
    assert (status, answer["result"]["structuredContent"]) == (200, {"result": "slept 0.0"})


async def test_anonymous_callers_are_told_apart_by_their_address(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_pending_per_client": 1})
    await publishers.start(server, "pump-1", pump_server([]))
    url = url_of(server, "pump-1")
    held = asyncio.create_task(post(http, url, sleep_call(20, 1)))
    await wait_for(lambda: pending_towards(server, "pump-1") == 1, what="the first call at the provider")
    status, _, refused = await post(http, url, sleep_call(0, 2))
    assert (status, refused["error"]["data"]["reason"]) == (200, "pending_limit")
    assert 'caller "anonymous" at 127.0.0.1 (limit 1)' in refused["error"]["message"]
    # Another program on the same machine, from another loopback address, is served.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as elsewhere:
        status, _, answer = await post(elsewhere, url, sleep_call(0, 3))
    assert (status, answer["result"]["structuredContent"]) == (200, {"result": "slept 0.0"})
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)


async def test_answers_that_run_long_become_streams_with_keepalives(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"sse_keepalive_s": 0.2})
    await publishers.start(server, "pump-1", pump_server([]))
    url = url_of(server, "pump-1")

    async def raw_post(body: JsonObject) -> tuple[str, bytes]:
        async with http.post(url, data=orjson.dumps(body), headers=routing_headers(body)) as response:
            return response.headers["Content-Type"], await response.read()

    # Two long answers that started at different times, and a quick one in between.
    first = asyncio.create_task(raw_post(sleep_call(0.9, 1)))
    await wait_for(lambda: pending_towards(server, "pump-1") == 1, what="the first call at the provider")
    second = asyncio.create_task(raw_post(sleep_call(0.6, 2)))
    quick_type, quick = await raw_post(sleep_call(0, 3))
    assert quick_type == "application/json" and orjson.loads(quick)["id"] == 3
    for task, request_id in ((first, 1), (second, 2)):
        content_type, body = await task
        assert content_type.startswith("text/event-stream")
        assert body.startswith(b": keepalive\n\n")
        (answer,) = [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: ")]
        assert answer["id"] == request_id and "result" in answer


# -- a 2026-era client in front of a 2024-era board -------------------------------------------------


class OldBoard:
    """A provider that only speaks 2024-11-05 over /provider/<slot> (like a libmcpb board).

    It refuses any request before initialize and records every message it receives."""

    def __init__(self) -> None:
        self.received: list[JsonObject] = []
        self.initialized = False
        self.task: asyncio.Task[None] | None = None

    def answer(self, message: JsonObject) -> JsonObject | None:
        method = message.get("method")
        if "id" not in message or method is None:
            if method == "notifications/initialized":
                self.initialized = True
            return None
        reply: JsonObject = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": "2024-11-05",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "old-board", "version": "0.9"},
            }
        elif not self.initialized:
            reply["error"] = {"code": -32600, "message": "not initialized"}
        elif method == "tools/list":
            reply["result"] = {"tools": [{"name": "read_temp", "inputSchema": {"type": "object", "properties": {}}}]}
        elif method == "tools/call":
            reply["result"] = {"content": [{"type": "text", "text": "21.5"}]}
        elif method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": f"no {method}"}
        return reply

    async def run(self, ws_url: str) -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
            async for frame in ws:
                if frame.type is not aiohttp.WSMsgType.TEXT:
                    continue
                message = orjson.loads(frame.data)
                self.received.append(message)
                reply = self.answer(message)
                if reply is not None:
                    await ws.send_str(orjson.dumps(reply).decode())


@pytest.fixture
async def old_board(gateway: GatewayServer) -> AsyncIterator[OldBoard]:
    board = OldBoard()
    board.task = asyncio.create_task(board.run(gateway.url.replace("http", "ws") + "/provider/board-1"))
    await wait_ready_slot(gateway, "board-1")
    yield board
    board.task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await board.task


async def test_stateless_client_calls_a_session_era_board(
    gateway: GatewayServer, old_board: OldBoard, http: aiohttp.ClientSession
) -> None:
    async with Client(url_of(gateway, "board-1"), mode=VERSION) as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["read_temp"]
        result = await client.call_tool("read_temp", {})
        assert result.content[0].model_dump()["text"] == "21.5"
    discover = await call(http, url_of(gateway, "board-1"), request("server/discover"))
    assert discover["result"]["serverInfo"] == {"name": "old-board", "version": "0.9"}
    methods = [m.get("method") for m in old_board.received if "method" in m]
    # The era probe first (the board refuses it: it serves the session era only), then the handshake.
    assert methods[:4] == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert methods.count("initialize") == 1  # the gateway's own handshake, never the client's
    calls = [m for m in old_board.received if m.get("method") == "tools/call"]
    assert len(calls) == 1
    # The stateless envelope describes the client to the gateway; the board never sees it.
    meta = calls[0]["params"].get("_meta", {})
    assert not [key for key in meta if key.startswith("io.modelcontextprotocol/")]


@pytest.mark.parametrize("era", ["session", "auto"])
async def test_stateless_client_calls_an_sdk_provider_in_either_era(
    gateway_factory: GatewayFactory, publishers: Publishers, era: str
) -> None:
    gateway = await gateway_factory(providers={"era": era})
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    async with Client(url_of(gateway, "_broker"), mode=VERSION) as broker:
        status = await broker.call_tool("provider_status", {"name": "pump-1"})
    assert status.structured_content is not None
    assert status.structured_content["protocol_version"] == ("2025-11-25" if era == "session" else VERSION)
    async with Client(url_of(gateway, "pump-1"), mode=VERSION) as client:
        result = await client.call_tool("add", {"a": 20, "b": 1})
        assert result.structured_content == {"result": 21}
