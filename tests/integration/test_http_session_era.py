"""Session-era Streamable HTTP at /<slot>/mcp (2024-11-05 to 2025-11-25), as clients see it.

Real SDK clients in legacy mode drive the ordinary paths; raw aiohttp requests produce what the
SDK never sends (no session id, batches, malformed bodies, a mid-request disconnect).
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
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.servers import demo_server

# The providers log on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

LATEST = "2025-11-25"
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


class RawSession:
    """A session-era client built from plain HTTP requests."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self.next_id = 0

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": LATEST,
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        headers.update(extra)
        return headers

    async def post(self, body: Any, **extra: str) -> tuple[int, dict[str, str], Any]:
        """POST one body; (status, headers, decoded JSON body or the SSE messages, or None)."""
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.http.post(self.url, data=data, headers=self.headers(**extra)) as response:
            return response.status, dict(response.headers), await decode(response)

    async def initialize(self, version: str = LATEST) -> JsonObject:
        status, headers, body = await self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
            **{"MCP-Protocol-Version": version},
        )
        assert status == 200, body
        self.session_id = headers["Mcp-Session-Id"]
        status, _, _ = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202
        # One SSE event, as the SDK's own server answers (a JSON body for session_answers = "json").
        final = body[-1] if isinstance(body, list) else body
        result: JsonObject = final["result"]
        return result

    def request_body(self, method: str, params: JsonObject | None = None) -> JsonObject:
        self.next_id += 1
        body: JsonObject = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            body["params"] = params
        return body

    async def call(self, method: str, params: JsonObject | None = None) -> JsonObject:
        """One request; the final JSON-RPC response (from a JSON body or the end of an SSE body)."""
        status, _, body = await self.post(self.request_body(method, params))
        assert status == 200, body
        final: JsonObject = body[-1] if isinstance(body, list) else body
        return final

    async def open_stream(self) -> aiohttp.ClientResponse:
        response = await self.http.get(self.url, headers=self.headers(Accept="text/event-stream"))
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return response


async def decode(response: aiohttp.ClientResponse) -> Any:
    content_type = response.headers.get("Content-Type", "")
    if content_type.startswith("text/event-stream"):
        reader = SseReader(response)
        messages = []
        while (message := await reader.next()) is not None:
            messages.append(message)
        return messages
    raw = await response.read()
    return orjson.loads(raw) if raw else None


def url_of(server: GatewayServer, slot: str) -> str:
    return f"{server.url}/{slot}/mcp"


# -- providers ------------------------------------------------------------------------------------


def pump_server(cancelled: list[float]) -> MCPServer:
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
    async def echo(text: str, ctx: Context) -> str:
        """Report progress and log, then echo."""
        await ctx.report_progress(0.5, 1.0, "half way")
        await ctx.info(f"echoing {text}")
        return text

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Send a notification that is not tied to this request (every listener of the slot gets it),
        each era its own way (a gateway speaks 2026-07-28 to this server)."""
        if ctx.protocol_version == "2026-07-28":
            await ctx.notify_resources_changed()
        else:
            await ctx.request_context.session.send_resource_list_changed()
        return "announced"

    @server.resource("pump://state")
    def state() -> str:
        return "running"

    return server


async def broker_pending(server: GatewayServer, slot: str) -> int:
    """Requests in flight towards a slot's provider, as `_broker`'s provider_status reports them."""
    async with Client(url_of(server, "_broker"), mode="legacy") as broker:
        result = await broker.call_tool("provider_status", {"name": slot})
    assert result.structured_content is not None
    pending: int = result.structured_content["pending"]
    return pending


async def wait_pending(server: GatewayServer, slot: str, expected: int) -> None:
    """Wait until the gateway holds `expected` requests towards the slot (read through `_broker`)."""
    for _ in range(200):
        if await broker_pending(server, slot) == expected:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"pending for {slot} never became {expected}")


# -- initialize -----------------------------------------------------------------------------------


async def test_sdk_client_gets_the_providers_identity_from_the_gateway(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    async with Client(url_of(gateway, "pump-1"), mode="legacy") as client:
        assert client.protocol_version == LATEST
        assert client.server_info is not None
        assert client.server_info.name == "pump-firmware"
        assert client.instructions == "Pump 1: stop the pump before opening the drain valve."
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.tools.list_changed is True  # the gateway announces comings and goings
        assert capabilities.resources is not None
        result = await client.call_tool("sleep", {"seconds": 0})
        assert result.structured_content == {"result": "slept 0.0"}


async def test_initialize_is_answered_even_before_a_provider_connects(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    result = await raw.initialize()
    assert result["serverInfo"]["name"] == "pump-1"
    assert result["capabilities"]["tools"] == {"listChanged": True}
    answer = await raw.call("tools/list")
    assert answer["error"]["code"] == -32000
    assert answer["error"]["message"].startswith('Provider "pump-1" not connected: ')


@pytest.mark.parametrize(
    ("requested", "negotiated"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", LATEST),
    ],
)
async def test_initialize_negotiates_the_version(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, requested: str, negotiated: str
) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    status, headers, body = await raw.post(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {"protocolVersion": requested, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        },
        **{"MCP-Protocol-Version": "2025-03-26"},
    )
    assert status == 200
    (answer,) = body  # one SSE event, as the SDK's own server answers
    assert answer["id"] == "init"
    assert answer["result"]["protocolVersion"] == negotiated
    assert answer["result"]["serverInfo"]["name"] == "pump-firmware"
    assert headers["Mcp-Session-Id"]


async def test_session_ids_are_random_visible_ascii(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    ids = set()
    for _ in range(5):
        raw = RawSession(http, url_of(gateway, "pump-1"))
        await raw.initialize()
        assert raw.session_id is not None
        ids.add(raw.session_id)
    assert len(ids) == 5
    for session_id in ids:
        assert len(session_id) >= 22  # at least 128 random bits in base64
        assert all(0x21 <= ord(ch) <= 0x7E for ch in session_id), session_id


# -- session ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
async def test_missing_session_id_is_400_and_unknown_is_404(
    gateway: GatewayServer, http: aiohttp.ClientSession, method: str
) -> None:
    url = url_of(gateway, "pump-1")
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    # A POSTed request's error echoes its id (JSON-RPC: the id of the request it is about); GET and
    # DELETE carry no JSON-RPC request, so their error's id is null.
    expected_id = 1 if method == "POST" else None
    async with http.request(method, url, data=body, headers=base) as response:
        assert response.status == 400
        answer = await response.json()
        assert answer["id"] == expected_id
        assert answer["error"]["code"] == -32600
        assert "Mcp-Session-Id" in answer["error"]["message"]
    async with http.request(method, url, data=body, headers={**base, "Mcp-Session-Id": "no-such-session"}) as response:
        assert response.status == 404
        answer = await response.json()
        assert answer["id"] == expected_id
        assert "initialize" in answer["error"]["message"]
    if method == "POST":
        # A notification has no id to echo.
        notification = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        async with http.post(url, data=notification, headers={**base, "Mcp-Session-Id": "gone"}) as response:
            assert response.status == 404
            assert (await response.json())["id"] is None


async def test_a_session_belongs_to_its_slot(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    other = RawSession(http, url_of(gateway, "pump-2"))
    other.session_id = raw.session_id
    status, _, _ = await other.post(other.request_body("tools/list"))
    assert status == 404


async def test_delete_ends_the_session_and_its_stream(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    stream = await raw.open_stream()
    async with http.delete(raw.url, headers=raw.headers()) as response:
        assert response.status == 200
    assert await SseReader(stream).next() is None  # the GET stream ends with the session
    stream.close()
    status, _, _ = await raw.post(raw.request_body("tools/list"))
    assert status == 404
    async with http.get(raw.url, headers=raw.headers(Accept="text/event-stream")) as response:
        assert response.status == 404
    async with http.delete(raw.url, headers=raw.headers()) as response:
        assert response.status == 404


async def test_sdk_client_ends_its_session_on_exit(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    async with Client(url_of(gateway, "pump-1"), mode="legacy") as client:
        await client.list_tools()
        assert len(gateway.gateway.sessions.sessions) == 1
    await wait_for(lambda: not gateway.gateway.sessions.sessions, what="the SDK's DELETE to end the session")


# -- idle expiry and the cap -----------------------------------------------------------------------


async def test_idle_sessions_expire_but_not_while_a_stream_is_open(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"session_idle_timeout_s": 0.3})
    idle = RawSession(http, url_of(server, "pump-1"))
    await idle.initialize()
    watching = RawSession(http, url_of(server, "pump-1"))
    await watching.initialize()
    stream = await watching.open_stream()
    sessions = server.gateway.sessions.sessions
    await wait_for(lambda: idle.session_id not in sessions, what="the idle session to expire")
    status, _, body = await idle.post(idle.request_body("tools/list"))
    assert status == 404
    assert "expired" in body["error"]["message"]
    await asyncio.sleep(0.5)  # well past the idle timeout, with the GET stream still open
    status, _, _ = await watching.post(watching.request_body("ping"))
    assert status == 200
    stream.close()
    await wait_for(lambda: watching.session_id not in sessions, what="the session to expire after its stream closed")
    status, _, _ = await watching.post(watching.request_body("ping"))
    assert status == 404


async def test_session_cap_refuses_new_sessions_with_the_limit_named(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_sessions": 2})
    first = RawSession(http, url_of(server, "pump-1"))
    await first.initialize()
    await RawSession(http, url_of(server, "pump-2")).initialize()
    third = RawSession(http, url_of(server, "pump-1"))
    status, headers, body = await third.post(
        {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": LATEST, "capabilities": {}}}
    )
    assert status == 503
    assert "Mcp-Session-Id" not in headers
    assert body["id"] == 9
    assert body["error"]["code"] == -32000
    assert "limits.max_sessions" in body["error"]["message"]
    assert "(limit 2)" in body["error"]["message"]
    async with http.delete(first.url, headers=first.headers()) as response:
        assert response.status == 200
    await third.initialize()  # room again


# -- the GET stream -------------------------------------------------------------------------------


async def test_get_stream_announces_the_provider_connecting_and_coming_back_changed(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(url_of(gateway, "pump-1"), mode="legacy", message_handler=on_message) as client:
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()),
            what="the SDK client's GET stream",
        )
        first = await publishers.start(gateway, "pump-1", demo_server("pump"))
        await wait_for(lambda: len(changes) == 1, what="tools/list_changed on connect")
        assert "add" in {tool.name for tool in (await client.list_tools()).tools}

        await first.stop()
        await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="the provider to leave")
        updated = MCPServer("pump")

        @updated.tool()
        def open_valve(percent: int) -> str:
            return f"valve at {percent}%"

        await publishers.start(gateway, "pump-1", updated)
        await wait_for(lambda: len(changes) == 2, what="tools/list_changed on reconnect with new firmware")
        assert [tool.name for tool in (await client.list_tools()).tools] == ["open_valve"]


async def test_get_stream_announces_a_reboot_with_the_same_tools(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    """A client that asked while the board rebooted got an error; it must learn that the tools are back."""
    first = await publishers.start(gateway, "pump-1", demo_server("pump"))
    await first.stop()
    await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="the provider to leave")
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(url_of(gateway, "pump-1"), mode="legacy", message_handler=on_message) as client:
        with pytest.raises(MCPError, match='Provider "pump-1" not connected'):
            await client.list_tools()
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()),
            what="the SDK client's GET stream",
        )
        await publishers.start(gateway, "pump-1", demo_server("pump"))
        await wait_for(lambda: len(changes) == 1, what="tools/list_changed after the reboot")
        assert "add" in {tool.name for tool in (await client.list_tools()).tools}


async def test_get_stream_on_all_announces_membership_changes(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    raw = RawSession(http, url_of(gateway, "_all"))
    await raw.initialize()
    stream = await raw.open_stream()
    reader = SseReader(stream)
    joined = await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    assert await reader.next() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    await joined.stop()
    assert await reader.next() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    stream.close()


async def test_second_get_stream_on_a_session_is_409(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    stream = await raw.open_stream()
    async with http.get(raw.url, headers=raw.headers(Accept="text/event-stream")) as response:
        assert response.status == 409
        assert (await response.json())["error"] == "stream_open"
    stream.close()
    await wait_for(
        lambda: all(s.stream is None for s in gateway.gateway.sessions.sessions.values()),
        what="the gateway to notice the closed stream",
    )
    again = await raw.open_stream()  # the slot is free once the first stream closed
    again.close()


# -- what a POST may carry ------------------------------------------------------------------------


async def test_notifications_and_responses_get_202_without_body(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": "srv-1", "result": {}},
        {"jsonrpc": "2.0", "id": "srv-2", "error": {"code": -1, "message": "no"}},
    ):
        status, _, body = await raw.post(message)
        assert status == 202
        assert body is None


async def test_batches_and_malformed_bodies_are_400(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    batch = [raw.request_body("ping"), raw.request_body("tools/list")]
    status, _, body = await raw.post(batch)
    assert status == 400
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert (
        "batches are accepted only from sessions that negotiated protocol version 2025-03-26"
        in (body["error"]["message"])
    )
    status, _, body = await raw.post(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert status == 400
    assert body["error"]["code"] == -32700
    status, _, body = await raw.post({"jsonrpc": "2.0", "id": 1})  # neither request nor response
    assert status == 400
    assert body["error"]["code"] == -32600
    # JSON-RPC 2.0's version member is required, as the SDK's servers require it.
    for version in ({}, {"jsonrpc": "1.0"}, {"jsonrpc": 2}):
        for message in ({"id": 1, "method": "ping"}, {"method": "notifications/initialized"}):
            status, _, body = await raw.post({**version, **message})
            assert status == 400, (version, message)
            assert body["error"] == {
                "code": -32600,
                "message": 'Invalid JSON-RPC: the "jsonrpc" member must be "2.0"',
            }
    assert (await raw.call("ping"))["result"] == {}


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        (None, "initialize needs params: protocolVersion, capabilities and clientInfo"),
        (
            {"capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
            "params.protocolVersion must be a string",
        ),
        ({"protocolVersion": 5, "capabilities": {}}, "params.protocolVersion must be a string"),
        ({"protocolVersion": LATEST, "capabilities": []}, "params.capabilities must be an object"),
        ({"protocolVersion": LATEST, "clientInfo": "raw"}, "params.clientInfo must be an object"),
    ],
)
async def test_initialize_without_the_params_mcp_requires_opens_no_session(
    gateway: GatewayServer, http: aiohttp.ClientSession, params: JsonObject | None, problem: str
) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    body: JsonObject = {"jsonrpc": "2.0", "id": 7, "method": "initialize"}
    if params is not None:
        body["params"] = params
    status, headers, answer = await raw.post(body)
    assert status == 400
    assert "Mcp-Session-Id" not in headers
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"].startswith(f"Invalid params: {problem}")
    assert gateway.gateway.sessions.sessions == {}
    # Leaving out capabilities and clientInfo declares none: the session opens.
    status, headers, _ = await raw.post({**body, "params": {"protocolVersion": LATEST}})
    assert status == 200
    assert "Mcp-Session-Id" in headers


async def test_unsupported_protocol_version_header_is_400(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    status, _, body = await raw.post(raw.request_body("ping"), **{"MCP-Protocol-Version": "1.0"})
    assert status == 400
    assert body["error"]["code"] == -32022
    assert LATEST in body["error"]["data"]["supported"]
    status, _, _ = await raw.post(raw.request_body("ping"), **{"MCP-Protocol-Version": "2024-11-05"})
    assert status == 200


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_over_the_limit_is_413_with_json(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, chunked: bool
) -> None:
    server = await gateway_factory(limits={"max_body_bytes": 2048})
    raw = RawSession(http, url_of(server, "pump-1"))
    await raw.initialize()
    body = orjson.dumps(raw.request_body("tools/call", {"name": "echo", "arguments": {"text": "x" * 4096}}))

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1024):
            yield body[start : start + 1024]

    data: Any = chunks() if chunked else body
    async with http.post(raw.url, data=data, headers=raw.headers()) as response:
        assert response.status == 413
        answer = await response.json()
    assert answer["error"] == "body_too_large"
    assert "limits.max_body_bytes" in answer["error_description"]


# -- answers: SSE or JSON -------------------------------------------------------------------------

BOTH = "application/json, text/event-stream"


async def raw_answer(http: aiohttp.ClientSession, url: str, body: JsonObject, **headers: str) -> RawAnswer:
    sent = {"Content-Type": "application/json", "MCP-Protocol-Version": LATEST, **headers}
    async with http.post(url, data=orjson.dumps(body), headers=sent) as response:
        return RawAnswer(response.status, response.headers.copy(), await response.read())


class RawAnswer:
    """One HTTP answer as it came: status, headers and the bytes of the body."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


@pytest.mark.parametrize(
    ("accept", "session_answers", "expected"),
    [
        (BOTH, "sse", "text/event-stream"),
        ("text/event-stream, application/json", "sse", "text/event-stream"),
        ("application/json", "sse", "application/json"),  # a client that cannot read SSE
        ("*/*", "sse", "application/json"),  # curl: SSE only for clients that name it
        (BOTH, "json", "application/json"),  # the operator's cheaper choice
    ],
)
async def test_session_era_answers_are_one_sse_event_like_the_sdk_server(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    accept: str,
    session_answers: str,
    expected: str,
) -> None:
    server = await gateway_factory(session_answers=session_answers)
    await publishers.start(server, "pump-1", pump_server([]))
    url = url_of(server, "pump-1")
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    opened = await raw_answer(http, url, initialize, Accept=accept)
    session = {"Mcp-Session-Id": opened.headers["Mcp-Session-Id"], "Accept": accept}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sleep", "arguments": {"seconds": 0}}}
    called = await raw_answer(http, url, call, **session)
    answers = []
    for answer in (opened, called):
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith(expected)
        # A whole body (no chunks to wait for), and the connection stays open for the next request.
        assert answer.headers["Content-Length"] == str(len(answer.body))
        assert answer.headers.get("Connection", "keep-alive").lower() == "keep-alive"
        if expected == "text/event-stream":
            event, data, end = answer.body.split(b"\n", 2)
            assert (event, end) == (b"event: message", b"\n")
            answers.append(orjson.loads(data.removeprefix(b"data: ")))
        else:
            answers.append(orjson.loads(answer.body))
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"]["serverInfo"]["name"] == "pump-firmware"
    assert answers[1]["result"]["structuredContent"] == {"result": "slept 0.0"}


async def test_a_session_era_answer_that_runs_long_streams_keepalives(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # JSON answers (the operator's choice), so only the keepalive interval can make this one a stream.
    server = await gateway_factory(session_answers="json", limits={"sse_keepalive_s": 0.1})
    await publishers.start(server, "pump-1", pump_server([]))
    raw = RawSession(http, url_of(server, "pump-1"))
    await raw.initialize()
    quick = raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
    assert (await raw_answer(http, raw.url, quick, **raw.headers())).headers["Content-Type"] == "application/json"
    slow = raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 0.5}})
    streamed = await raw_answer(http, raw.url, slow, **raw.headers())
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    assert streamed.body.startswith(b": keepalive\n\n")
    (answer,) = [orjson.loads(line[6:]) for line in streamed.body.splitlines() if line.startswith(b"data: ")]
    assert answer["id"] == slow["id"] and answer["result"]["structuredContent"] == {"result": "slept 0.5"}


# -- request-tied notifications -------------------------------------------------------------------


async def test_progress_and_logs_reach_the_caller_only(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    bystander = RawSession(http, url_of(gateway, "pump-1"))
    await bystander.initialize()
    stream = await bystander.open_stream()
    reports: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with Client(url_of(gateway, "pump-1"), mode="legacy", logging_callback=on_log) as client:
        result = await client.call_tool("echo", {"text": "hi"}, progress_callback=on_progress)
        assert result.structured_content == {"result": "hi"}
        assert reports == [(0.5, 1.0, "half way")]
        assert logs == ["echoing hi"]
        # A notification for every listener, sent after the call: the bystander's first event must be it.
        await client.call_tool("announce", {})
    first = await SseReader(stream).next()
    assert first == {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
    stream.close()


async def test_raw_caller_sees_progress_then_log_then_result_on_one_sse_response(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", pump_server([]))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    body = raw.request_body(
        "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": "p7"}}
    )
    status, headers, messages = await raw.post(body)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["Mcp-Session-Id"] == raw.session_id
    assert [m.get("method") for m in messages] == ["notifications/progress", "notifications/message", None]
    assert messages[0]["params"] == {"progressToken": "p7", "progress": 0.5, "total": 1.0, "message": "half way"}
    assert messages[1]["params"]["data"] == "echoing hi"
    assert "_meta" not in messages[1]["params"]  # the gateway's own routing key never leaks
    assert messages[2]["id"] == body["id"]
    assert messages[2]["result"]["structuredContent"] == {"result": "hi"}


# -- cancellation and the pending bound -------------------------------------------------------------


async def test_client_disconnect_cancels_the_call_upstream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    call = asyncio.create_task(
        raw.post(raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 30}}))
    )
    await wait_pending(gateway, "pump-1", 1)
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    await wait_for(lambda: cancelled == [30.0], what="the provider to see notifications/cancelled")
    await wait_pending(gateway, "pump-1", 0)
    # The session survives its client's abandoned request.
    answer = await raw.call("tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
    assert answer["result"]["structuredContent"] == {"result": "slept 0.0"}


async def test_cancelled_notification_from_the_client_cancels_its_request(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    body = raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 20}})
    call = asyncio.create_task(raw.post(body))
    await wait_pending(gateway, "pump-1", 1)
    status, _, _ = await raw.post(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"], "reason": "user"}}
    )
    assert status == 202
    await wait_for(lambda: cancelled == [20.0], what="the provider to see notifications/cancelled")
    await wait_pending(gateway, "pump-1", 0)
    # The session era ends a request's stream only with a response: "Request cancelled", as SDK servers say.
    status, _, answer = await asyncio.wait_for(call, 5)
    assert status == 200
    assert answer == [
        {
            "jsonrpc": "2.0",
            "id": body["id"],
            "error": {"code": -32800, "message": "Request cancelled"},
        }
    ]


async def test_a_request_reusing_an_id_in_flight_is_refused_and_the_cancel_reaches_the_first(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    first = {
        "jsonrpc": "2.0",
        "id": "X",
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"seconds": 20}},
    }
    call = asyncio.create_task(raw.post(first))
    await wait_pending(gateway, "pump-1", 1)
    twin = {**first, "params": {"name": "sleep", "arguments": {"seconds": 1}}}
    status, _, (refused,) = await raw.post(twin)
    assert status == 200
    assert refused["id"] == "X"
    assert refused["error"] == {
        "code": -32600,
        "message": "Request id 'X' is already in flight on this session; use a new id for each request",
    }
    assert await broker_pending(gateway, "pump-1") == 1  # the twin never reached the provider
    # The id names one request only, so the cancel reaches the one running.
    await raw.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "X"}})
    await wait_for(lambda: cancelled == [20.0], what="the provider to see notifications/cancelled")
    status, _, (answer,) = await asyncio.wait_for(call, 5)
    assert answer["error"]["code"] == -32800
    # Once answered, the id may be used again.
    again = await raw.post({**twin, "params": {"name": "sleep", "arguments": {"seconds": 0}}})
    assert again[2][0]["result"]["structuredContent"] == {"result": "slept 0.0"}


async def test_ending_a_session_cancels_its_requests(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    body = raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 15}})
    call = asyncio.create_task(raw.post(body))
    await wait_pending(gateway, "pump-1", 1)
    async with http.delete(raw.url, headers=raw.headers()) as response:
        assert response.status == 200
    status, _, (answer,) = await asyncio.wait_for(call, 5)
    assert (status, answer["id"], answer["error"]["code"]) == (200, body["id"], -32800)
    await wait_for(lambda: cancelled == [15.0], what="the provider to see notifications/cancelled")
    await wait_pending(gateway, "pump-1", 0)


async def test_sdk_client_cancelling_a_call_cancels_it_upstream(gateway: GatewayServer, publishers: Publishers) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    async with Client(url_of(gateway, "pump-1"), mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("sleep", {"seconds": 25}))
        await wait_pending(gateway, "pump-1", 1)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        await wait_for(lambda: cancelled == [25.0], what="the provider to see notifications/cancelled")
        await wait_pending(gateway, "pump-1", 0)
        result = await client.call_tool("sleep", {"seconds": 0})
        assert result.structured_content == {"result": "slept 0.0"}


async def test_pending_requests_are_bounded_per_client_session(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_pending_per_client": 2})
    cancelled: list[float] = []
    await publishers.start(server, "pump-1", pump_server(cancelled))
    raw = RawSession(http, url_of(server, "pump-1"))
    await raw.initialize()
    calls = [
        asyncio.create_task(raw.post(raw.request_body("tools/call", {"name": "sleep", "arguments": {"seconds": 20}})))
        for _ in range(2)
    ]
    await wait_pending(server, "pump-1", 2)
    refused = await raw.call("tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
    assert refused["id"] == raw.next_id
    assert refused["error"]["code"] == -32000
    assert "(limit 2)" in refused["error"]["message"]
    assert refused["error"]["data"]["reason"] == "pending_limit"
    # Another client session is not held back by this one.
    other = RawSession(http, url_of(server, "pump-1"))
    await other.initialize()
    answer = await other.call("tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
    assert answer["result"]["structuredContent"] == {"result": "slept 0.0"}
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    await wait_pending(server, "pump-1", 0)
    answer = await raw.call("tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
    assert "result" in answer
