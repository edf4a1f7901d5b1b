"""Legacy HTTP+SSE clients (the 2024-11-05 transport) at `GET /<slot>/sse` + `POST /<slot>/messages`.

The SDK's own legacy SSE client (mcp/client/sse.py) drives the ordinary paths; a raw aiohttp client
reads the stream byte by byte where a test must see the wire (the endpoint event, keepalives, the
order of messages) or send what the SDK never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import mcp_types as types
import orjson
import pytest
from aiohttp import web
from mcp import Client, MCPError
from mcp.client.sse import sse_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_client_auth import OPS, SCADA, bearer, static_auth
from tests.integration.test_http_session_era import pump_server
from tests.integration.test_metrics import scrape
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
INITIALIZE: JsonObject = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw-sse", "version": "1"}},
}


class LegacySse:
    """A legacy HTTP+SSE client made of plain aiohttp requests: one stream, POSTs to its endpoint."""

    def __init__(self, http: aiohttp.ClientSession, base: str, slot_path: str, headers: dict[str, str] | None = None):
        self.http = http
        self.base = base
        self.url = f"{base}/{slot_path}/sse"
        self.headers = headers or {}
        self.response: aiohttp.ClientResponse | None = None
        self.endpoint = ""

    async def open(self) -> str:
        """Open the stream; the endpoint the first event names."""
        self.response = await self.http.get(self.url, headers={"Accept": "text/event-stream", **self.headers})
        assert self.response.status == 200, await self.response.text()
        event, data = await self.event()
        assert event == "endpoint"
        self.endpoint = data
        return data

    async def event(self, timeout: float = 5.0) -> tuple[str, str]:
        """The next event as (name, data); ("", "") when the stream ended."""
        assert self.response is not None
        name, data = "message", []
        async with asyncio.timeout(timeout):
            while True:
                line = await self.response.content.readline()
                if not line:
                    return "", ""
                line = line.rstrip(b"\r\n")
                if line.startswith(b":"):
                    continue
                if line.startswith(b"event:"):
                    name = line[6:].strip().decode()
                elif line.startswith(b"data:"):
                    data.append(line[5:].removeprefix(b" ").decode())
                elif not line and data:
                    return name, "\n".join(data)

    async def comment(self, timeout: float = 5.0) -> bytes:
        """The next comment line (a keepalive), skipping anything else."""
        assert self.response is not None
        async with asyncio.timeout(timeout):
            while line := await self.response.content.readline():
                if line.startswith(b":"):
                    return line.rstrip(b"\r\n")
        raise AssertionError("the stream ended without a comment")

    async def message(self, timeout: float = 5.0) -> JsonObject:
        event, data = await self.event(timeout)
        assert event == "message", (event, data)
        decoded: JsonObject = orjson.loads(data)
        return decoded

    async def post(self, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.http.post(
            self.base + self.endpoint,
            data=data,
            headers={"Content-Type": "application/json", **self.headers, **(headers or {})},
        ) as response:
            raw = await response.read()
            return response.status, (orjson.loads(raw) if raw else None)

    async def initialize(self) -> JsonObject:
        assert await self.post(INITIALIZE) == (202, None)
        answer = await self.message()
        assert answer["id"] == "init"
        assert await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}) == (202, None)
        return answer

    async def call(self, request_id: Any, method: str, params: JsonObject | None = None) -> JsonObject:
        """One request; its answer (notifications before it are skipped)."""
        body: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        assert await self.post(body) == (202, None)
        while True:
            message = await self.message()
            if message.get("id") == request_id:
                return message

    def close(self) -> None:
        if self.response is not None:
            self.response.close()


@pytest.fixture
async def pump(gateway: GatewayServer, publishers: Publishers) -> GatewayServer:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    return gateway


def sse_url(server: GatewayServer, slot: str) -> str:
    return f"{server.url}/{slot}/sse"


def no_sessions(server: GatewayServer) -> bool:
    return not server.gateway.sessions.sessions


# -- the SDK's legacy SSE client ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_sse_client_lists_and_calls_with_progress_and_logs(pump: GatewayServer, mode: str) -> None:
    reported: list[tuple[float, str | None]] = []
    logs: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with Client(sse_client(sse_url(pump, "pump-1")), mode=mode, logging_callback=on_log) as client:
        # "auto" probes server/discover first; the -32601 it gets sends it to initialize.
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "pump-1"
        assert client.instructions == "Demo server pump-1"
        assert {"add", "echo", "sleep", "fail"} <= {tool.name for tool in (await client.list_tools()).tools}
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
        echoed = await client.call_tool("echo", {"text": "over sse"}, progress_callback=on_progress)
        assert echoed.structured_content == {"result": "over sse"}
        assert reported == [(0.5, "half way")]
        assert logs == ["echoing over sse"]
        assert (await client.call_tool("fail", {"message": "nope"})).is_error
        prompt = await client.get_prompt("ask", {"topic": "pumps"})
        assert "pumps" in str(prompt.messages[0].content)
        resource = await client.read_resource("demo://greeting")
        assert resource.contents[0].text == "hello"  # type: ignore[union-attr]
        sessions = list(pump.gateway.sessions.sessions.values())
        assert [session.transport for session in sessions] == ["sse"]
    # Closing the stream is the end of the session.
    await wait_for(lambda: no_sessions(pump), what="the session to end with its stream")


async def test_all_and_broker_over_sse_with_list_changed_pushed(gateway: GatewayServer, publishers: Publishers) -> None:
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message.method)

    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    await wait_for(lambda: gateway.gateway.aggregate.members() == ["pump-1"], what="pump-1 in _all")
    async with Client(sse_client(sse_url(gateway, "_all")), mode="legacy", message_handler=on_message) as client:
        assert "pump-1-add" in {tool.name for tool in (await client.list_tools()).tools}
        await publishers.start(gateway, "pump-2", demo_server("pump-2"), aggregate=True)
        await wait_for(lambda: "notifications/tools/list_changed" in changed, what="list_changed on the stream")
        assert (await client.call_tool("pump-2-add", {"a": 1, "b": 1})).structured_content == {"result": 2}
    async with Client(sse_client(sse_url(gateway, "_broker")), mode="legacy") as broker:
        listed = await broker.call_tool("providers_list", {})
        assert not listed.is_error
        assert '"pump-2"' in str(listed.content[0])


# -- the wire --------------------------------------------------------------------------------------


async def test_the_stream_names_its_endpoint_first_then_carries_messages_in_order(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"sse_keepalive_s": 0.05})
    await publishers.start(server, "pump 1", demo_server("pump 1"))
    client = LegacySse(http, server.url, "pump%201")
    endpoint = await client.open()
    assert client.response is not None
    assert client.response.headers["Content-Type"].startswith("text/event-stream")
    assert client.response.headers["Cache-Control"] == "no-cache, no-transform"
    session_id = endpoint.rsplit("=", 1)[1]
    # The slot percent-encoded, the session id as the gateway holds it.
    assert endpoint == f"/pump%201/messages?sessionId={session_id}"
    assert server.gateway.sessions.sessions[session_id].transport == "sse"
    answer = await client.initialize()
    assert answer["result"]["protocolVersion"] == "2024-11-05"
    assert answer["result"]["serverInfo"]["name"] == "pump 1"
    # Request-tied notifications come before their answer, with the client's own id and token.
    call = {
        "jsonrpc": "2.0",
        "id": "call-1",
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": "tok"}},
    }
    assert await client.post(call) == (202, None)
    progress = await client.message()
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "tok"
    log = await client.message()
    assert log["method"] == "notifications/message"
    final = await client.message()
    assert final["id"] == "call-1"
    assert final["result"]["structuredContent"] == {"result": "hi"}
    # A quiet stream carries keepalive comments.
    assert await client.comment() == b": keepalive"
    client.close()


@pytest.mark.parametrize("through_proxy", [True, False])
async def test_with_a_public_url_path_the_sdk_posts_where_it_reached_the_stream(
    gateway_factory: GatewayFactory, publishers: Publishers, through_proxy: bool
) -> None:
    # A reverse proxy serves the gateway under /gw, while clients on the appliance reach it directly:
    # the endpoint is relative to the stream's URL, so both post where they came in.
    server = await gateway_factory(public_url="https://plant.lan/gw/")
    await publishers.start(server, "pump-1", demo_server("pump"))
    async with contextlib.AsyncExitStack() as stack:
        base = server.url
        if through_proxy:
            base = await stack.enter_async_context(prefix_proxy(server.url, "/gw"))
        client = await stack.enter_async_context(Client(sse_client(f"{base}/pump-1/sse"), mode="legacy"))
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}


@contextlib.asynccontextmanager
async def prefix_proxy(target: str, prefix: str) -> AsyncIterator[str]:
    """A reverse proxy serving `target` under `prefix`, streaming answers (as nginx does with buffering off)."""

    async def relay(request: web.Request) -> web.StreamResponse:
        path = request.path_qs[len(prefix) :]
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                request.method,
                target + path,
                data=await request.read(),
                headers={
                    key: value
                    for key, value in request.headers.items()
                    if key.lower() not in ("host", "content-length")
                },
            ) as upstream,
        ):
            response = web.StreamResponse(status=upstream.status)
            for key in ("Content-Type", "Mcp-Session-Id"):
                if key in upstream.headers:
                    response.headers[key] = upstream.headers[key]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            return response

    app = web.Application()
    app.router.add_route("*", prefix + "/{tail:.*}", relay)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, shutdown_timeout=0.1)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}{prefix}"
    finally:
        await runner.cleanup()


async def test_requests_before_initialize_and_messages_that_are_not_requests(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_body_bytes": 2048})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    client = LegacySse(http, server.url, "pump-1")
    await client.open()
    early = await client.call(1, "tools/list")
    assert early["error"]["code"] == -32600
    assert early["error"]["message"].startswith("Send initialize first")
    assert (await client.call(2, "ping"))["result"] == {}  # ping is allowed at any time
    discover = await client.call(3, "server/discover")
    assert discover["error"]["code"] == -32601
    await client.initialize()
    again = await client.call(4, "initialize", INITIALIZE["params"])
    assert again["error"]["code"] == -32600
    # The POST itself is refused when its body is not one JSON-RPC message, or too large.
    status, body = await client.post(b"{not json")
    assert status == 400 and body["error"]["code"] == -32700
    status, body = await client.post([{"jsonrpc": "2.0", "id": 5, "method": "ping"}])
    assert status == 400 and body["error"]["code"] == -32600
    status, body = await client.post({"jsonrpc": "2.0", "id": 6, "method": "ping", "params": {"pad": "x" * 4096}})
    assert status == 413 and body["error"] == "body_too_large"
    # The stream is still the session's, and still answers.
    assert (await client.call(8, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}))["result"][
        "structuredContent"
    ] == {"result": 3}
    client.close()


async def test_unknown_missing_and_foreign_session_ids(pump: GatewayServer, http: aiohttp.ClientSession) -> None:
    client = LegacySse(http, pump.url, "pump-1")
    endpoint = await client.open()
    session_id = endpoint.rsplit("=", 1)[1]

    async def post(path: str) -> tuple[int, Any]:
        async with http.post(pump.url + path, data=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})) as r:
            return r.status, await r.json()

    status, body = await post("/pump-1/messages?sessionId=no-such-session")
    assert status == 404
    assert body["error"]["code"] == -32600
    assert body["error"]["message"].startswith("Unknown or expired session")
    status, body = await post("/pump-1/messages")
    assert status == 400 and "sessionId" in body["error"]["message"]
    # A session is reachable only at its own slot, and only through the way in that opened it.
    status, _ = await post(f"/_all/messages?sessionId={session_id}")
    assert status == 404
    async with http.post(
        f"{pump.url}/pump-1/mcp",
        data=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        headers={
            "Mcp-Session-Id": session_id,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        },
    ) as response:
        assert response.status == 404
    async with http.get(f"{pump.url}/pump-1/messages?sessionId={session_id}") as response:
        assert response.status == 405 and response.headers["Allow"] == "POST"
    async with http.post(f"{pump.url}/pump-1/sse") as response:
        assert response.status == 405 and response.headers["Allow"] == "GET"
    async with http.get(f"{pump.url}/_nope/sse") as response:
        assert response.status == 404 and (await response.json())["error"] == "unknown_slot"
    client.close()


async def test_closing_the_stream_ends_the_session_and_cancels_its_calls_upstream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    client = LegacySse(http, gateway.url, "pump-1")
    endpoint = await client.open()
    await client.initialize()
    assert (await scrape(http, gateway)).get("mcpgw_client_streams", kind="sse") == 1
    call = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"seconds": 30}},
    }
    assert await client.post(call) == (202, None)
    slot = gateway.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    client.close()
    await wait_for(lambda: cancelled == [30.0], what="the provider to see notifications/cancelled")
    await wait_for(lambda: no_sessions(gateway), what="the session to end")
    async with http.post(gateway.url + endpoint, data=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})) as r:
        assert r.status == 404
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_client_streams", kind="sse") == 0
    assert metrics.get("mcpgw_http_requests_total", endpoint="sse", status="202") == 3


async def test_a_cancelled_notification_cancels_the_request_and_answers_it(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    client = LegacySse(http, gateway.url, "pump-1")
    await client.open()
    await client.initialize()
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"seconds": 20}},
    }
    assert await client.post(call) == (202, None)
    slot = gateway.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "reason": "user"}}
    assert await client.post(cancel) == (202, None)
    assert await client.message() == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32800, "message": "Request cancelled"},
    }
    await wait_for(lambda: cancelled == [20.0], what="the provider to see notifications/cancelled")
    client.close()


async def test_the_gateway_stopping_answers_pending_calls_then_ends_the_stream(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory()
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    client = LegacySse(http, server.url, "pump-1")
    await client.open()
    await client.initialize()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"seconds": 30}},
    }
    assert await client.post(call) == (202, None)
    slot = server.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    await server.stop()
    answer = await client.message()
    assert answer["id"] == 1
    assert answer["error"]["message"] == 'Provider "pump-1" disconnected: the gateway is shutting down'
    with contextlib.suppress(aiohttp.ClientPayloadError):
        assert await client.event() == ("", "")


# -- the entry gate and the limits -----------------------------------------------------------------


async def test_a_browser_origin_not_allowed_is_refused_on_both_endpoints(
    pump: GatewayServer, http: aiohttp.ClientSession
) -> None:
    evil = {"Origin": "http://evil.example"}
    async with http.get(sse_url(pump, "pump-1"), headers=evil) as response:
        assert response.status == 403
        assert (await response.json())["error"] == "origin_not_allowed"
    client = LegacySse(http, pump.url, "pump-1")
    await client.open()
    status, body = await client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=evil)
    assert status == 403 and body["error"] == "origin_not_allowed"
    client.close()


async def test_with_client_auth_the_stream_and_its_posts_need_the_callers_token(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    async with http.get(sse_url(server, "pump-1")) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer ")
    async with http.get(sse_url(server, "pump-2"), headers=bearer(SCADA)) as response:
        assert response.status == 403  # scada may call pump-1 only
        assert (await response.json())["error"] == "insufficient_scope"
    async with Client(sse_client(sse_url(server, "pump-1"), headers=bearer(SCADA)), mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 4, "b": 4})).structured_content == {"result": 8}
    # The session belongs to the caller that opened the stream: another token cannot post to it.
    owner = LegacySse(http, server.url, "pump-1", headers=bearer(SCADA))
    await owner.open()
    status, body = await owner.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=bearer(OPS))
    assert (status, body["error"]) == (403, "forbidden")
    status, _ = await owner.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Authorization": ""})
    assert status == 401
    assert (await owner.call(2, "ping"))["result"] == {}
    owner.close()


async def test_a_rate_limited_request_is_answered_on_the_stream(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    limits = {"rate": {"per_principal": {"rate_per_s": 0.1, "burst": 2}, "per_slot": {"rate_per_s": 0, "burst": 1}}}
    server = await gateway_factory(limits=limits)
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    async with Client(sse_client(sse_url(server, "pump-1")), mode="legacy") as sdk:
        await sdk.list_tools()  # initialize and this one are the burst
        with pytest.raises(MCPError) as caught:
            await sdk.list_tools()
        assert caught.value.error.code == -32029
    server = await gateway_factory(limits=limits)
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    client = LegacySse(http, server.url, "pump-1")
    await client.open()
    await client.initialize()  # the first request of the burst
    assert "result" in await client.call(1, "tools/list")
    refused = await client.call(2, "tools/list")  # the POST was accepted; its answer is the refusal
    assert refused["error"]["code"] == -32029
    assert refused["error"]["data"]["retryAfterMs"] > 0
    assert refused["error"]["data"]["scope"] == "principal"
    client.close()


async def test_session_limits_refuse_the_stream_before_it_opens(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_sessions_per_principal": 1})
    first = LegacySse(http, server.url, "pump-1")
    await first.open()
    async with http.get(sse_url(server, "pump-1")) as response:
        assert response.status == 429
        error = (await response.json())["error"]
        assert error["data"] == {"reason": "session_limit", "limit": "max_sessions_per_principal", "value": 1}
        assert "close SSE streams you no longer use" in error["message"]
    first.close()
    await wait_for(lambda: no_sessions(server), what="the first session to end")
    second = LegacySse(http, server.url, "pump-1")
    await second.open()
    second.close()
