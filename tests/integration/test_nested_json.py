"""JSON nested deeper than limits.max_json_depth, on every way in, from clients and from providers.

orjson reads JSON nested up to 1024 levels but writes at most 254: a message in between, once taken
in, could never be written out again (a text/plain 500 to an HTTP client, no answer to a WebSocket or
legacy SSE client, a client socket's write loop ended by a provider's notification). Every way in
refuses such a message where it enters, the way it refuses other malformed input and with the
message's id when it has one; a provider's is dropped and its caller answered at once; and whatever
the gateway cannot encode costs that one message, never the stream it is on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.core.sessions import ClientSession
from tests.conftest import GatewayFactory, Publishers, wait_ready_slot
from tests.integration.test_http_session_era import RawSession
from tests.integration.test_http_stateless_era import request, routing_headers, url_of
from tests.integration.test_metrics import scrape
from tests.integration.test_sse_clients import LegacySse
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge
from tests.integration.test_websocket_clients import RawSocket, connect
from tests.support.servers import demo_server
from tests.support.southbound import Boards, ScriptedBoard, provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
BEYOND_ENCODER = 300
"""Past the 254 levels orjson writes (and within the 1024 it reads): what could not be relayed at all."""
OVER_BOUND = 100
"""Past limits.max_json_depth's default of 64, still writable: refused by the bound alone."""
NESTED = "@nested@"
ADD_6_AND_1: JsonObject = {"name": "add", "arguments": {"a": 6, "b": 1}}


def with_nested(message: Any, levels: int) -> bytes:
    """`message` as JSON text with NESTED replaced by `levels` arrays, one inside the other (no
    encoder writes the deeper ones, so the text is spliced)."""
    return orjson.dumps(message).replace(orjson.dumps(NESTED), b"[" * levels + b"]" * levels)


def add_call(request_id: Any, a: Any = 1) -> JsonObject:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": a}},
    }


def assert_refused_for_depth(answer: JsonObject, request_id: Any, limit: int = 64) -> None:
    assert answer["id"] == request_id, answer
    assert answer["error"]["code"] == -32600, answer
    message = answer["error"]["message"]
    assert f"nested more than {limit} levels deep" in message, message
    assert "limits.max_json_depth" in message, message


async def post_raw(
    http: aiohttp.ClientSession, url: str, data: bytes, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    async with http.post(url, data=data, headers=headers) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()


# -- clients -----------------------------------------------------------------------------------------


async def session_refused_a_nested_call(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, levels: int
) -> RawSession:
    """A session-era client of pump-1 (a demo server) posts a call (id 7) nested `levels` deep and gets
    HTTP 400 with the depth error under that id. The session, for what the test does next."""
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    raw = RawSession(http, url_of(gateway, "pump-1"))
    await raw.initialize()
    status, kind, body = await post_raw(http, raw.url, with_nested(add_call(7, NESTED), levels), raw.headers())
    assert (status, kind) == (400, "application/json"), body
    assert_refused_for_depth(orjson.loads(body), 7)
    return raw


@pytest.mark.parametrize("levels", [OVER_BOUND, BEYOND_ENCODER])
async def test_streamable_http_session_era_refuses_nested_json_with_400(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, levels: int
) -> None:
    raw = await session_refused_a_nested_call(gateway, publishers, http, levels)
    # The session goes on.
    assert (await raw.call("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}))["result"][
        "structuredContent"
    ] == {"result": 5}


@pytest.mark.parametrize("slot", ["pump-1", "_all", "_broker"])
async def test_streamable_http_stateless_era_refuses_nested_json_with_400_on_every_route(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession, slot: str
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    body = request("tools/call", {"name": "add", "arguments": {"a": NESTED, "b": 1}}, request_id="deep")
    status, kind, answer = await post_raw(
        http, url_of(gateway, slot), with_nested(body, BEYOND_ENCODER), routing_headers(body)
    )
    assert (status, kind) == (400, "application/json"), answer
    assert_refused_for_depth(orjson.loads(answer), "deep")
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_unparsable_messages_total", side="client") == 1
    assert metrics.value("mcpgw_limit_hits_total", limit="max_json_depth") == 1
    assert metrics.value("mcpgw_limit", limit="max_json_depth") == 64


async def test_the_bound_is_configurable(gateway_factory: GatewayFactory, http: aiohttp.ClientSession) -> None:
    gateway = await gateway_factory(limits={"max_json_depth": 120})
    raw = RawSession(http, url_of(gateway, "_broker"))
    await raw.initialize()
    # The request, its params and its arguments hold the arrays: 3 + 117 levels pass (answered by
    # _broker, which has no such tool), 3 + 118 do not.
    status, _, body = await post_raw(http, raw.url, with_nested(add_call(1, NESTED), 117), raw.headers())
    assert status == 200, body
    status, _, body = await post_raw(http, raw.url, with_nested(add_call(2, NESTED), 118), raw.headers())
    assert status == 400
    assert_refused_for_depth(orjson.loads(body), 2, limit=120)


async def test_legacy_sse_answers_nested_json_on_the_stream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    client = LegacySse(http, gateway.url, "pump-1")
    await client.open()
    await client.initialize()
    # Accepted like any request (the SDK's client stops posting after a refused POST), answered on the stream.
    assert await client.post(with_nested(add_call("deep", NESTED), BEYOND_ENCODER)) == (202, None)
    assert_refused_for_depth(await client.message(), "deep")
    added = await client.call(8, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    assert added["result"]["structuredContent"] == {"result": 3}
    assert (await scrape(http, gateway)).value("mcpgw_limit_hits_total", limit="max_json_depth") == 1
    client.close()


async def test_raw_websocket_answers_nested_json_on_the_socket(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, gateway, "pump-1")
    await client.initialize()
    for request_id, levels in (("beyond", BEYOND_ENCODER), ("over", OVER_BOUND)):
        await client.send(with_nested(add_call(request_id, NESTED), levels))
        assert_refused_for_depth(await client.answer(request_id), request_id)
    added = await client.call(9, "tools/call", {"name": "add", "arguments": {"a": 4, "b": 5}})
    assert added["result"]["structuredContent"] == {"result": 9}
    assert (await scrape(http, gateway)).value("mcpgw_limit_hits_total", limit="max_json_depth") == 2
    await ws.close()


async def test_stdio_bridge_refuses_what_it_cannot_forward_and_relays_the_gateways_refusal(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    raw = await RawBridge.start(gateway.url)
    try:
        await raw.send(INITIALIZE)
        assert "result" in await raw.receive()
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert raw.process.stdin is not None
        # Deeper than any gateway accepts: the bridge answers itself (it could not encode it to forward it).
        raw.process.stdin.write(with_nested(add_call("beyond", NESTED), BEYOND_ENCODER) + b"\n")
        await raw.process.stdin.drain()
        assert_refused_for_depth(await raw.receive(), "beyond", limit=200)
        # Within what the bridge forwards: the gateway's own refusal, under the host's id.
        raw.process.stdin.write(with_nested(add_call("over", NESTED), OVER_BOUND) + b"\n")
        await raw.process.stdin.drain()
        assert_refused_for_depth(await raw.receive(), "over")
        await raw.send({"jsonrpc": "2.0", "id": "flat", "method": "tools/call", "params": ADD_6_AND_1})
        assert (await raw.receive())["result"]["structuredContent"] == {"result": 7}
    finally:
        await raw.close()


# -- providers ---------------------------------------------------------------------------------------


async def board_on(gateway: GatewayServer, boards: Boards, path: str) -> ScriptedBoard:
    register = {"provider": "board", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, path, first_frame=register if path == "/providers" else None)
    await wait_ready_slot(gateway, "board")
    return board


async def board_client(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> tuple[aiohttp.ClientWebSocketResponse, RawSocket]:
    ws, client = await connect(http, gateway, "board")
    await client.initialize()
    return ws, client


VALVE = {"name": "valve"}


async def answer_nested(board: ScriptedBoard, levels: int) -> None:
    """The board answers the next tools/call it gets with a result nested `levels` deep."""
    forwarded = await board.request("tools/call")
    answer = {"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": [], "structuredContent": NESTED}}
    await board.send_raw(with_nested(answer, levels).decode())


async def assert_nested_answer_refused(board: ScriptedBoard, client: RawSocket, levels: int) -> str:
    """A call (id 1) the board answers nested `levels` deep: its caller gets the depth refusal at once,
    not at the deadline (the answer's id could still be read). The error message."""
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": VALVE})
    await answer_nested(board, levels)
    refused = await client.answer(1, timeout=2.0)
    assert refused["error"]["code"] == -32603
    assert 'Provider "board" answered, but the gateway refused the answer' in refused["error"]["message"]
    assert "limits.max_json_depth" in refused["error"]["message"]
    assert refused["error"]["data"] == {"slot": "board", "reason": "answer_refused", "limit": "max_json_depth"}
    return str(refused["error"]["message"])


async def assert_board_still_answers(board: ScriptedBoard, client: RawSocket) -> None:
    """The client's socket and the board's link carry the next call (id 2) and its answer."""
    await client.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": VALVE})
    forwarded = await board.request("tools/call")
    await board.reply(forwarded, {"content": [{"type": "text", "text": "opened"}]})
    assert (await client.answer(2))["result"]["content"][0]["text"] == "opened"


async def test_a_providers_nested_answer_is_an_error_to_its_caller_and_nothing_else_suffers(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> None:
    board = await board_on(gateway, boards, "/provider/board")
    ws, client = await board_client(gateway, http)
    await assert_nested_answer_refused(board, client, BEYOND_ENCODER)
    # The same over Streamable HTTP: an error on HTTP 200, never a 500.
    body = request("tools/call", {**VALVE, "arguments": {}}, request_id="http")
    call = asyncio.create_task(post_raw(http, url_of(gateway, "board"), orjson.dumps(body), routing_headers(body)))
    await answer_nested(board, OVER_BOUND)
    status, kind, raw = await call
    assert (status, kind) == (200, "application/json"), raw
    assert orjson.loads(raw)["error"]["data"]["reason"] == "answer_refused"
    # The client's socket, the board's link and its next answer are unharmed.
    await assert_board_still_answers(board, client)
    status_now = await provider_status(gateway.url, "board")
    assert status_now["connected"] is True and status_now["connects"] == 1
    assert status_now["counters"]["unparsable"] == 2
    await ws.close()


@pytest.mark.parametrize("path", ["/provider/board", "/providers"], ids=["dedicated", "multiplexed"])
async def test_a_providers_nested_notification_is_dropped_and_the_client_socket_goes_on(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession, path: str
) -> None:
    board = await board_on(gateway, boards, path)
    ws, client = await board_client(gateway, http)
    provider = "board" if board.multiplexed else None
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": NESTED}}
    deep = with_nested({"provider": "board", "payload": log} if provider else log, BEYOND_ENCODER)
    await board.send_raw(deep.decode())
    await board.send({**log, "params": {"level": "info", "data": "after"}}, provider)
    # The nested one never reaches the client; the next one does, on a socket that still answers.
    pushed = await client.receive()
    assert pushed["params"]["data"] == "after"
    assert "result" in await client.call("ping", "ping")
    assert client.notifications == []
    await ws.close()


# -- what the gateway cannot encode ------------------------------------------------------------------


def only_session(gateway: GatewayServer, transport: str) -> ClientSession:
    sessions = [s for s in gateway.gateway.sessions.sessions.values() if s.transport == transport]
    assert len(sessions) == 1, sessions
    return sessions[0]


def unencodable_messages(session: ClientSession) -> None:
    """A notification and an answer no JSON encoder writes (the gateway's own fault, if it ever
    happened), then a notification that is fine."""
    stream = session.stream
    assert stream is not None
    deep: Any = "bottom"
    for _ in range(BEYOND_ENCODER):
        deep = [deep]
    stream.put({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": {1, 2}}})
    stream.put({"jsonrpc": "2.0", "id": "unencodable", "result": {"structuredContent": deep}})
    stream.put({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "after"}})


def assert_unencodable_answer(answer: JsonObject) -> None:
    assert answer["id"] == "unencodable"
    assert answer["error"]["code"] == -32603
    assert answer["error"]["message"].startswith("The gateway could not encode this answer as JSON")
    assert answer["error"]["data"] == {"reason": "unencodable"}


async def test_a_websocket_write_loop_survives_what_it_cannot_encode(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    ws, client = await connect(http, gateway, "pump-1")
    await client.initialize()
    unencodable_messages(only_session(gateway, "websocket"))
    assert_unencodable_answer(await client.receive())
    assert (await client.receive())["params"]["data"] == "after"
    assert "result" in await client.call("ping", "ping")
    assert (await scrape(http, gateway)).value("mcpgw_unencodable_messages_total") == 1
    await ws.close()


async def test_a_legacy_sse_stream_survives_what_it_cannot_encode(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    client = LegacySse(http, gateway.url, "pump-1")
    await client.open()
    await client.initialize()
    unencodable_messages(only_session(gateway, "sse"))
    assert_unencodable_answer(await client.message())
    assert (await client.message())["params"]["data"] == "after"
    assert "result" in await client.call("ping", "ping")
    assert (await scrape(http, gateway)).value("mcpgw_unencodable_messages_total") == 1
    client.close()
