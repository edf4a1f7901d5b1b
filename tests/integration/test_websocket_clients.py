"""Raw WebSocket clients at `ws://HOST:PORT/<slot>`: one JSON-RPC message per text frame.

The v2 SDK ships no WebSocket client transport, so a raw aiohttp WebSocket client speaks the session
era frame by frame, as a browser or a small script would; real SDK servers publish the slots.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_client_auth import REQUIRED, SCADA, bearer, run_cli, static_auth
from tests.integration.test_http_session_era import pump_server
from tests.integration.test_metrics import scrape
from tests.support.oauth import ISSUER, access_token, jwks, jwks_server, rsa_key
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
INITIALIZE_PARAMS: JsonObject = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "raw-ws", "version": "1"},
}


class RawSocket:
    """A session-era client on one WebSocket: frames out, frames in, notifications kept aside."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.notifications: list[JsonObject] = []

    async def send(self, message: Any) -> None:
        if isinstance(message, str | bytes):
            await self.ws.send_str(message if isinstance(message, str) else message.decode())
        else:
            await self.ws.send_str(orjson.dumps(message).decode())

    async def receive(self, timeout: float = 5.0) -> JsonObject:
        msg = await self.ws.receive(timeout=timeout)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        decoded: JsonObject = orjson.loads(msg.data)
        return decoded

    async def answer(self, request_id: Any, timeout: float = 5.0) -> JsonObject:
        """The response to `request_id`; notifications that come first are kept in `notifications`."""
        while True:
            message = await self.receive(timeout)
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            elif message.get("id") == request_id:
                return message

    async def call(self, request_id: Any, method: str, params: JsonObject | None = None) -> JsonObject:
        body: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        await self.send(body)
        return await self.answer(request_id)

    async def initialize(self) -> JsonObject:
        answer = await self.call(0, "initialize", INITIALIZE_PARAMS)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: JsonObject = answer["result"]
        return result


def ws_url(server: GatewayServer, slot: str) -> str:
    return server.url.replace("http://", "ws://") + f"/{slot}"


async def connect(
    http: aiohttp.ClientSession, server: GatewayServer, slot: str, **options: Any
) -> tuple[aiohttp.ClientWebSocketResponse, RawSocket]:
    ws = await http.ws_connect(ws_url(server, slot), **options)
    return ws, RawSocket(ws)


def no_sessions(server: GatewayServer) -> bool:
    return not server.gateway.sessions.sessions


def call_sleep(seconds: float) -> JsonObject:
    return {"name": "sleep", "arguments": {"seconds": seconds}}


# -- a session on a socket -------------------------------------------------------------------------


async def test_initialize_list_call_and_notifications_on_the_socket(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, gateway, "pump-1")
    result = await client.initialize()
    # Answered by the gateway from what pump-1 told it when it connected.
    assert result["protocolVersion"] == "2025-06-18"
    assert result["serverInfo"]["name"] == "pump-1"
    assert result["instructions"] == "Demo server pump-1"
    assert result["capabilities"]["tools"] == {"listChanged": True}
    listed = await client.call("list", "tools/list")
    assert {"add", "echo", "sleep", "fail"} <= {tool["name"] for tool in listed["result"]["tools"]}
    call = {"name": "echo", "arguments": {"text": "over ws"}, "_meta": {"progressToken": 42}}
    answer = await client.call(7, "tools/call", call)
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "content": [{"type": "text", "text": "over ws"}],
            "isError": False,
            "structuredContent": {"result": "over ws"},
        },
    }
    # The request's notifications came first, on the same socket, with the client's token.
    assert [n["method"] for n in client.notifications] == ["notifications/progress", "notifications/message"]
    assert client.notifications[0]["params"]["progressToken"] == 42
    read = await client.call("read", "resources/read", {"uri": "demo://greeting"})
    assert read["result"]["contents"][0]["text"] == "hello"
    failed = await client.call(8, "tools/call", {"name": "fail", "arguments": {}})
    assert failed["result"]["isError"] is True
    sessions = list(gateway.gateway.sessions.sessions.values())
    assert [session.transport for session in sessions] == ["websocket"]
    assert sessions[0].client_info == INITIALIZE_PARAMS["clientInfo"]
    await ws.close()
    await wait_for(lambda: no_sessions(gateway), what="the session to end with its socket")


async def test_all_pushes_list_changed_and_broker_answers_on_sockets(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    await wait_for(lambda: gateway.gateway.aggregate.members() == ["pump-1"], what="pump-1 in _all")
    ws, client = await connect(http, gateway, "_all")
    await client.initialize()
    assert "pump-1-add" in {tool["name"] for tool in (await client.call(1, "tools/list"))["result"]["tools"]}
    await publishers.start(gateway, "pump-2", demo_server("pump-2"), aggregate=True)
    pushed = await client.receive()
    assert pushed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    added = await client.call(2, "tools/call", {"name": "pump-2-add", "arguments": {"a": 2, "b": 2}})
    assert added["result"]["structuredContent"] == {"result": 4}
    await ws.close()
    ws, broker = await connect(http, gateway, "_broker")
    await broker.initialize()
    listed = await broker.call(1, "tools/call", {"name": "providers_list", "arguments": {}})
    assert '"pump-2"' in listed["result"]["content"][0]["text"]
    await ws.close()


async def test_two_sockets_using_the_same_ids_at_once_get_their_own_answers(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    sockets = [await connect(http, gateway, "pump-1") for _ in range(2)]
    for _, client in sockets:
        await client.initialize()
    # Both send ids 1..5 at once, with different arguments; every answer goes to its own socket.
    for n, (_, client) in enumerate(sockets):
        for request_id in range(1, 6):
            await client.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": "add", "arguments": {"a": request_id, "b": 100 * n}},
                }
            )
    for n, (_, client) in enumerate(sockets):
        answers = {}
        for _ in range(5):
            message = await client.receive()
            answers[message["id"]] = message["result"]["structuredContent"]["result"]
        assert answers == {request_id: request_id + 100 * n for request_id in range(1, 6)}
    # One socket may not reuse an id that is still in flight.
    _, first = sockets[0]
    await first.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": call_sleep(0.5)})
    twin = await first.call("slow", "ping")
    assert twin["error"]["code"] == -32600
    assert "already in flight" in twin["error"]["message"]
    assert (await first.answer("slow"))["result"]["structuredContent"] == {"result": "slept 0.5"}
    for ws, _ in sockets:
        await ws.close()


# -- what a client gets wrong ----------------------------------------------------------------------


async def test_bad_json_batches_and_requests_before_initialize_are_answered_not_fatal(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, gateway, "pump-1")
    await client.send("this is not json")
    parse_error = await client.receive()
    assert parse_error["id"] is None and parse_error["error"]["code"] == -32700
    await client.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    batch = await client.receive()
    assert batch["id"] is None and batch["error"]["code"] == -32600
    assert (
        "batches are accepted only from sessions that negotiated protocol version 2025-03-26"
        in (batch["error"]["message"])
    )
    await client.send({"jsonrpc": "2.0", "id": True, "method": "ping"})
    bad_id = await client.receive()
    assert bad_id["id"] is None and bad_id["error"]["code"] == -32600
    await client.send({"id": 9, "method": "ping"})  # no "jsonrpc": "2.0"
    unversioned = await client.receive()
    assert unversioned["id"] == 9  # the id is usable, so the refusal carries it
    assert unversioned["error"]["message"] == 'Invalid JSON-RPC: the "jsonrpc" member must be "2.0"'
    no_params = await client.call(10, "initialize")
    assert no_params["error"]["code"] == -32602
    assert no_params["error"]["message"].startswith("Invalid params: initialize needs params")
    early = await client.call(2, "tools/list")
    assert early["error"]["code"] == -32600 and early["error"]["message"].startswith("Send initialize first")
    assert (await client.call(3, "ping"))["result"] == {}
    discover = await client.call(4, "server/discover")
    assert discover["error"]["code"] == -32601
    await client.initialize()
    again = await client.call(5, "initialize", INITIALIZE_PARAMS)
    assert again["error"]["code"] == -32600
    # After all that the session still works.
    added = await client.call(6, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    assert added["result"]["structuredContent"] == {"result": 2}
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_unparsable_messages_total", side="client") >= 1
    await ws.close()


async def test_a_frame_over_the_limit_closes_the_socket_with_1009(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_frame_bytes": 4096})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, server, "pump-1")
    await client.initialize()

    def padded_ping(request_id: int, size: int) -> str:
        """A ping of exactly `size` bytes (the gateway answers it; no provider frame grows with it)."""
        frame = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping", "params": {"_meta": {}}}).decode()
        pad = "x" * (size - len(frame) - len('"pad":""'))
        return frame.replace('"_meta":{}', f'"_meta":{{"pad":"{pad}"}}')

    # The limit is the largest message accepted.
    at_limit = padded_ping(1, 4096)
    assert len(at_limit.encode()) == 4096
    await client.send(at_limit)
    assert (await client.answer(1))["result"] == {}

    await client.send(padded_ping(2, 4097))
    closing = await ws.receive(timeout=5)
    assert closing.type is aiohttp.WSMsgType.CLOSE
    assert closing.data == 1009
    # A reason of at most 123 bytes that says what to do (docs/protocol.md, "Size").
    assert closing.extra == "Frame over 4096 bytes; raise limits.max_frame_bytes or send smaller messages"
    await wait_for(lambda: no_sessions(server), what="the session to end")
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_frame_bytes") == 1


async def test_closing_the_socket_mid_call_cancels_the_call_upstream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    ws, client = await connect(http, gateway, "pump-1")
    await client.initialize()
    assert (await scrape(http, gateway)).get("mcpgw_client_streams", kind="websocket") == 1
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_sleep(30)})
    slot = gateway.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    await ws.close()
    await wait_for(lambda: cancelled == [30.0], what="the provider to see notifications/cancelled")
    await wait_for(lambda: no_sessions(gateway), what="the session to end")
    await wait_for(lambda: slot.live is not None and not slot.live.in_flight, what="nothing pending on pump-1")
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_client_streams", kind="websocket") == 0
    assert metrics.get("mcpgw_http_requests_total", endpoint="websocket", status="101") == 1


async def test_a_cancelled_notification_answers_the_request_with_request_cancelled(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    cancelled: list[float] = []
    await publishers.start(gateway, "pump-1", pump_server(cancelled))
    ws, client = await connect(http, gateway, "pump-1")
    await client.initialize()
    await client.send({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": call_sleep(20)})
    slot = gateway.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}})
    assert await client.answer("c") == {
        "jsonrpc": "2.0",
        "id": "c",
        "error": {"code": -32800, "message": "Request cancelled"},
    }
    await wait_for(lambda: cancelled == [20.0], what="the provider to see notifications/cancelled")
    await ws.close()


async def test_the_gateway_stopping_answers_pending_calls_then_closes_sockets_with_1001(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory()
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, server, "pump-1")
    await client.initialize()
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_sleep(30)})
    slot = server.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")
    await server.stop()
    answer = await client.receive()
    assert answer["id"] == 1
    assert answer["error"]["message"] == 'Provider "pump-1" disconnected: the gateway is shutting down'
    closing = await ws.receive(timeout=5)
    assert closing.type is aiohttp.WSMsgType.CLOSE
    assert (closing.data, closing.extra) == (1001, "Gateway shutting down")


# -- the entry gate, limits and routing ------------------------------------------------------------


async def test_the_upgrade_passes_the_entry_gate(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(server, "pump-1"))
    assert refused.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(server, "pump-2"), headers=bearer(SCADA))
    assert refused.value.status == 403  # scada may call pump-1 only
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(server, "pump-1"), headers={**bearer(SCADA), "Origin": "http://evil.example"})
    assert refused.value.status == 403
    ws, client = await connect(http, server, "pump-1", headers=bearer(SCADA))
    await client.initialize()
    added = await client.call(1, "tools/call", {"name": "add", "arguments": {"a": 5, "b": 5}})
    assert added["result"]["structuredContent"] == {"result": 10}
    await ws.close()


async def test_rate_limits_answer_on_the_socket_and_session_limits_refuse_the_upgrade(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(
        limits={
            "max_sessions_per_principal": 1,
            "rate": {"per_principal": {"rate_per_s": 0.1, "burst": 2}, "per_slot": {"rate_per_s": 0, "burst": 1}},
        }
    )
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, server, "pump-1")
    await client.initialize()
    assert "result" in await client.call(1, "tools/list")
    limited = await client.call(2, "tools/list")
    assert limited["error"]["code"] == -32029
    assert limited["error"]["data"]["retryAfterMs"] > 0
    assert not ws.closed  # a refusal of one request, not of the socket
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(server, "pump-1"))
    assert refused.value.status == 429
    await ws.close()


async def refused_and_closed(client: RawSocket, request_id: int) -> JsonObject:
    """Send tools/list until the socket's credential is judged gone: its error answer, then the 1008 close."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        answer = await client.call(request_id, "tools/list")
        if "error" in answer:
            break
        assert asyncio.get_running_loop().time() < deadline, "the socket kept its credential"
        request_id += 1
        await asyncio.sleep(0.2)
    closing = await client.ws.receive(timeout=5)
    assert closing.type is aiohttp.WSMsgType.CLOSE
    reason = closing.extra
    assert closing.data == 1008
    assert isinstance(reason, str) and reason.startswith("Credential no longer valid (")
    assert len(reason.encode()) <= 123
    return answer


async def test_a_token_revoked_while_a_socket_is_open_ends_that_socket(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.toml"
    kept = create_token(path, "scada", ["pump-1"])
    revoked = create_token(path, "hmi", ["pump-1"])
    server = await gateway_factory(auth={"token_files": [str(path)], "required_scopes": REQUIRED})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    kept_ws, kept_client = await connect(http, server, "pump-1", headers=bearer(kept))
    revoked_ws, revoked_client = await connect(http, server, "pump-1", headers=bearer(revoked))
    await kept_client.initialize()
    await revoked_client.initialize()
    assert "result" in await revoked_client.call(1, "tools/list")

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0
    answer = await refused_and_closed(revoked_client, 2)
    assert answer["error"]["code"] == -32001
    assert answer["error"]["data"] == {"reason": "credential_invalid", "auth": "invalid", "error": "invalid_token"}
    assert "Open a new connection with a valid credential" in answer["error"]["message"]
    assert revoked not in str(answer)
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the revoked socket's session ends")

    # The token still listed keeps working on its socket, well past a re-check.
    await asyncio.sleep(1.2)
    added = await kept_client.call(9, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert added["result"]["structuredContent"] == {"result": 5}
    await kept_ws.close()
    await revoked_ws.close()


async def test_an_access_token_that_expires_while_a_socket_is_open_ends_that_socket(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(
            auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url, "leeway_s": 0}, "required_scopes": REQUIRED}
        )
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        audience = f"{server.url}/pump-1/mcp"
        short_ws, short_client = await connect(
            http, server, "pump-1", headers=bearer(access_token(rsa_key(), audience, scope="pump-1", expires_in=2))
        )
        long_ws, long_client = await connect(
            http, server, "pump-1", headers=bearer(access_token(rsa_key(), audience, scope="pump-1", expires_in=300))
        )
        await short_client.initialize()
        await long_client.initialize()
        assert "result" in await short_client.call(1, "tools/list")

        await asyncio.sleep(2.5)
        answer = await refused_and_closed(short_client, 2)
        assert answer["error"]["data"]["auth"] == "expired"
        assert "The access token has expired" in answer["error"]["message"]
        assert "result" in await long_client.call(2, "tools/list")
        await short_ws.close()
        await long_ws.close()


async def test_requests_in_flight_are_bounded_per_socket(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_pending_per_client": 1})
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, server, "pump-1")
    await client.initialize()
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_sleep(0.3)})
    crowded = await client.call(2, "tools/list")
    assert crowded["error"]["code"] == -32000
    assert crowded["error"]["message"].startswith("Too many requests in flight for this client session (limit 1)")
    assert (await client.answer(1))["result"]["structuredContent"] == {"result": "slept 0.3"}
    assert "result" in await client.call(3, "tools/list")  # the slot is free again
    await ws.close()


@pytest.mark.parametrize("path", ["healthz", "readyz", "metrics", "providers", "provider", "groups", "mcp-servers"])
async def test_gateway_routes_are_never_taken_for_a_slot(
    gateway: GatewayServer, http: aiohttp.ClientSession, path: str
) -> None:
    # A WebSocket upgrade to one of the gateway's own one-segment paths reaches that route, never a
    # client session of a slot with that name (/providers is the provider way in, and upgrades).
    if path == "providers":
        ws = await http.ws_connect(ws_url(gateway, path))
        await ws.close()
    else:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(ws_url(gateway, path))
        assert refused.value.status != 101
    assert no_sessions(gateway)


async def test_the_tool_group_bridge_and_a_group_over_a_socket(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # /mcp and /mcp/<group> take an upgrade at their own path; /mcp is never a slot's socket.
    groups = {"arith": {"slots": ["lab-*"], "tools": ["add"]}, "talk": {"slots": ["lab-*"], "tools": ["echo"]}}
    server = await gateway_factory(groups=groups)
    await publishers.start(server, "lab-1", demo_server("lab-1"))
    ws, bridge = await connect(http, server, "mcp")
    assert (await bridge.initialize())["serverInfo"]["name"] == "mcp-gateway /mcp"
    names = [tool["name"] for tool in (await bridge.call(1, "tools/list"))["result"]["tools"]]
    assert {"lab-1__add", "lab-1__echo"} <= set(names)
    await ws.close()
    ws, group = await connect(http, server, "mcp/arith")
    await group.initialize()
    names = [tool["name"] for tool in (await group.call(1, "tools/list"))["result"]["tools"]]
    assert "lab-1__add" in names and "lab-1__echo" not in names
    added = await group.call(2, "tools/call", {"name": "lab-1__add", "arguments": {"a": 20, "b": 22}})
    assert added["result"]["structuredContent"] == {"result": 42}
    assert [session.transport for session in server.gateway.sessions.sessions.values()] == ["websocket"]
    await ws.close()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(server, "mcp/nope"))
    assert refused.value.status == 404


async def test_a_plain_get_of_a_slot_path_gets_directions(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{gateway.url}/pump-1") as response:
        assert response.status == 404
        body = await response.json()
    assert body["error"] == "not_found"
    assert "WebSocket upgrade at /<slot>" in body["error_description"]
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(ws_url(gateway, "_nope"))
    assert refused.value.status == 404


async def test_a_socket_asking_for_the_mcp_subprotocol_gets_it(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    ws = await http.ws_connect(ws_url(gateway, "pump-1"), protocols=("mcp",))
    assert ws.protocol == "mcp"
    client = RawSocket(ws)
    await client.initialize()
    await ws.close()
    await asyncio.sleep(0)
