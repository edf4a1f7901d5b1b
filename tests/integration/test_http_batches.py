"""JSON-RPC batches from 2025-03-26 sessions, as a hand-written client sends them (MCP 2025-03-26,
"Sending Messages to the Server": a POST body may be an array of requests and notifications, or of
responses), and the refusal every other sender gets.

The clients here are plain aiohttp requests, since no SDK client batches; the providers are an SDK
server (progress and log notifications) and a scripted board that holds a call until the test answers
it, so cancellation and provider questions are seen on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.integration.test_sse_clients import LegacySse
from tests.integration.test_websocket_clients import connect
from tests.support.servers import demo_server
from tests.support.southbound import Boards, ScriptedBoard

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
BATCHING = "2025-03-26"
BOTH = "application/json, text/event-stream"
ONLY_FROM = "JSON-RPC batches are accepted only from sessions that negotiated protocol version 2025-03-26"
RELATED = "io.github.mcp-gateway/relatedRequest"


def request(request_id: Any, method: str, params: JsonObject | None = None) -> JsonObject:
    body: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def notification(method: str, params: JsonObject | None = None) -> JsonObject:
    body: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    return body


def add(request_id: Any, a: int, b: int) -> JsonObject:
    return request(request_id, "tools/call", {"name": "add", "arguments": {"a": a, "b": b}})


def valve(request_id: Any) -> JsonObject:
    return request(request_id, "tools/call", {"name": "valve", "arguments": {"open": True}})


def initialize(version: str = BATCHING, capabilities: JsonObject | None = None) -> JsonObject:
    return request(
        "init",
        "initialize",
        {"protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": {"name": "raw", "version": "1"}},
    )


async def read_events(response: aiohttp.ClientResponse) -> list[JsonObject]:
    """Every JSON-RPC message of an SSE body, to its end."""
    return [message async for message in events(response)]


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[JsonObject]:
    """The JSON-RPC messages of an SSE body as they arrive; ends with the body."""
    data: list[bytes] = []
    async with asyncio.timeout(10):
        while line := await response.content.readline():
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
            elif not line and data:
                yield orjson.loads(b"\n".join(data))
                data = []


class Session:
    """A session-era client that POSTs what the test gives it, batches included."""

    def __init__(self, http: aiohttp.ClientSession, url: str, accept: str = BOTH) -> None:
        self.http = http
        self.url = url
        self.accept = accept
        self.session_id: str | None = None

    def headers(self) -> dict[str, str]:
        # A 2025-03-26 client sends no MCP-Protocol-Version header: that revision has none.
        headers = {"Accept": self.accept, "Content-Type": "application/json"}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    async def open(self, version: str = BATCHING, capabilities: JsonObject | None = None) -> Session:
        async with self.http.post(
            self.url, data=orjson.dumps(initialize(version, capabilities)), headers=self.headers()
        ) as response:
            assert response.status == 200, await response.text()
            self.session_id = response.headers["Mcp-Session-Id"]
        status, _, _ = await self.post(notification("notifications/initialized"))
        assert status == 202
        return self

    def send(self, body: Any) -> Any:
        """The POST, for a test that reads the answer as it streams (`async with`)."""
        return self.http.post(self.url, data=orjson.dumps(body), headers=self.headers())

    async def post(self, body: Any) -> tuple[int, Any, Any]:
        """(status, headers, the decoded JSON body, the SSE messages, or None for an empty body)."""
        async with self.send(body) as response:
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                return response.status, response.headers, await read_events(response)
            raw = await response.read()
            return response.status, response.headers, (orjson.loads(raw) if raw else None)


async def responses(receive: Callable[[], Awaitable[JsonObject]], count: int) -> list[JsonObject]:
    """The next `count` responses from a stream or socket, skipping notifications on the way."""
    got: list[JsonObject] = []
    while len(got) < count:
        message = await receive()
        if "method" not in message:
            got.append(message)
    return got


def by_id(answers: list[JsonObject]) -> dict[Any, JsonObject]:
    """Responses keyed by id (a batch's answers come in the order they are ready)."""
    responses = [answer for answer in answers if "method" not in answer]
    keyed = {answer["id"]: answer for answer in responses}
    assert len(keyed) == len(responses), answers
    return keyed


@pytest.fixture
async def pump(gateway: GatewayServer, publishers: Publishers) -> str:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    return f"{gateway.url}/pump-1/mcp"


@pytest.fixture
async def board(gateway: GatewayServer) -> AsyncIterator[ScriptedBoard]:
    """A hand-written provider at slot "board": it answers a call only when the test says so."""
    boards = Boards()
    scripted = await boards.connect(gateway.url, "/provider/board")
    await wait_ready_slot(gateway, "board")
    yield scripted
    await boards.aclose()


# -- answers ----------------------------------------------------------------------------------------


async def test_a_batch_of_requests_and_notifications_is_answered_with_one_json_array(
    pump: str, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, pump, accept="application/json").open()
    batch = [
        notification("notifications/roots/list_changed"),
        add(1, 2, 3),
        request("p", "ping"),
        request(3, "tools/list"),
    ]
    status, headers, answers = await client.post(batch)
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert headers["Mcp-Session-Id"] == client.session_id
    assert isinstance(answers, list) and len(answers) == 3  # the notification has no answer
    answered = by_id(answers)
    assert answered[1]["result"]["structuredContent"] == {"result": 5}
    assert answered["p"] == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert "add" in {tool["name"] for tool in answered[3]["result"]["tools"]}


async def test_an_sse_answer_carries_each_response_with_its_notifications_then_ends(
    pump: str, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, pump).open()
    echo = request("e", "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": "t"}})
    status, headers, messages = await client.post([echo, add("a", 1, 1)])
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert [m["params"]["progressToken"] for m in progress] == ["t"]
    assert any(m.get("method") == "notifications/message" for m in messages)
    answered = by_id(messages)
    assert set(answered) == {"e", "a"}
    assert answered["e"]["result"]["structuredContent"] == {"result": "hi"}
    assert answered["a"]["result"]["structuredContent"] == {"result": 2}
    # Each request's notifications come before its own response.
    assert messages.index(progress[0]) < messages.index(answered["e"])


async def test_a_batch_of_only_notifications_or_responses_gets_202_without_a_body(
    pump: str, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, pump).open()
    for batch in (
        [notification("notifications/roots/list_changed"), notification("notifications/progress", {"progress": 1})],
        [
            {"jsonrpc": "2.0", "id": 5, "result": {}},
            {"jsonrpc": "2.0", "id": 6, "error": {"code": -1, "message": "no"}},
        ],
    ):
        status, headers, body = await client.post(batch)
        assert (status, body) == (202, None)
        assert headers["Mcp-Session-Id"] == client.session_id


async def test_a_batch_of_responses_answers_what_the_provider_asked_during_a_batch(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, f"{gateway.url}/board/mcp").open(capabilities={"elicitation": {}})
    # The answer's headers go out once it commits to a stream: when the board asks.
    posting = asyncio.create_task(client.send([valve(7), request(8, "ping")]))
    forwarded = await board.request("tools/call")
    question = {"message": "Open the drain valve?", "requestedSchema": {"type": "object", "properties": {}}}
    await board.send(
        {
            "jsonrpc": "2.0",
            "id": "q-1",
            "method": "elicitation/create",
            "params": {**question, "_meta": {RELATED: forwarded["id"]}},
        }
    )
    async with await posting as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        seen: list[JsonObject] = []
        stream = events(response)
        async for message in stream:
            seen.append(message)
            if message.get("method") == "elicitation/create":
                break
        asked = seen[-1]
        assert asked["params"] == question
        # The answer to the provider's question, in a batch of responses: 202, no body.
        accept = {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {}}}
        status, _, body = await client.post([accept, notification("notifications/roots/list_changed")])
        assert (status, body) == (202, None)
        answer = await board.answer_to("q-1")
        assert answer["result"] == {"action": "accept", "content": {}}
        await board.reply(forwarded, {"content": [{"type": "text", "text": "opened"}]})
        seen += [message async for message in stream]  # to the end of the stream
    answered = by_id([message for message in seen if message.get("method") != "elicitation/create"])
    assert answered[8]["result"] == {}
    assert answered[7]["result"]["content"] == [{"type": "text", "text": "opened"}]


# -- each member as if alone ------------------------------------------------------------------------


async def test_initialize_in_a_batch_is_refused_and_the_rest_is_handled(pump: str, http: aiohttp.ClientSession) -> None:
    client = await Session(http, pump, accept="application/json").open()
    status, _, answers = await client.post([initialize(), add(2, 20, 22)])
    assert status == 200
    answered = by_id(answers)
    assert answered["init"]["error"] == {
        "code": -32600,
        "message": "initialize must not be part of a JSON-RPC batch; send it alone, before anything else",
    }
    assert answered[2]["result"]["structuredContent"] == {"result": 42}


async def test_members_are_checked_as_requests_alone_are(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_pending_per_client": 2})
    boards = Boards()
    board = await boards.connect(server.url, "/provider/board")
    await wait_ready_slot(server, "board")
    try:
        client = await Session(http, f"{server.url}/board/mcp", accept="application/json").open()
        batch = [valve(1), valve(1), valve(2), valve(3), {"jsonrpc": "2.0", "id": 9}, 42]
        answering = asyncio.create_task(client.post(batch))
        calls = [await board.request("tools/call"), await board.request("tools/call")]
        for call in calls:
            await board.reply(call, {"content": [{"type": "text", "text": "done"}]})
        status, _, answers = await answering
        assert status == 200 and len(answers) == 6
        done = [answer for answer in answers if "result" in answer]
        assert sorted(answer["id"] for answer in done) == [1, 2]
        errors = sorted(
            (answer["id"] is None, str(answer["id"]), answer["error"]["message"])
            for answer in answers
            if "error" in answer
        )
        assert errors[0][:2] == (False, "1")
        assert errors[0][2] == "Request id 1 is already in flight on this session; use a new id for each request"
        assert errors[1][:2] == (False, "3")
        assert "(limit 2)" in errors[1][2]  # max_pending_per_client, counted over the batch's own requests
        assert errors[2][:2] == (False, "9")
        assert errors[2][2].startswith("Invalid JSON-RPC: ")
        assert errors[3][:2] == (True, "None")  # 42 has no id to answer with
        assert errors[3][2] == "Invalid JSON-RPC: a JSON-RPC message must be a JSON object"
    finally:
        await boards.aclose()


async def test_rate_limits_count_each_request_of_a_batch(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"rate": {"per_principal": {"rate_per_s": 0.01, "burst": 3}}})
    await publishers.start(server, "pump-1", demo_server("pump"))
    client = await Session(http, f"{server.url}/pump-1/mcp", accept="application/json").open()  # 1 token
    status, _, answers = await client.post(
        [request(1, "ping"), notification("notifications/x"), request(2, "ping"), request(3, "ping")]
    )
    assert status == 200
    answered = by_id(answers)
    assert answered[1]["result"] == {} and answered[2]["result"] == {}
    assert answered[3]["error"]["code"] == -32029
    assert answered[3]["error"]["data"]["retryAfterMs"] > 0


async def test_a_client_that_goes_away_cancels_every_request_of_its_batch_upstream(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, f"{gateway.url}/board/mcp").open()
    posting = asyncio.create_task(client.post([valve(1), valve(2)]))
    calls = {(await board.request("tools/call"))["id"], (await board.request("tools/call"))["id"]}
    posting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await posting
    cancels = [await board.take(lambda m: m.get("method") == "notifications/cancelled", what="a cancel") for _ in calls]
    assert {cancel["params"]["requestId"] for cancel in cancels} == calls


async def test_notifications_cancelled_cancels_one_request_of_a_batch(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    client = await Session(http, f"{gateway.url}/board/mcp", accept="application/json").open()
    posting = asyncio.create_task(client.post([valve("a"), valve("b")]))
    first, second = await board.request("tools/call"), await board.request("tools/call")
    status, _, _ = await client.post(notification("notifications/cancelled", {"requestId": "a"}))
    assert status == 202
    cancel = await board.take(lambda m: m.get("method") == "notifications/cancelled", what="the cancel")
    # Requests are forwarded in batch order, so "a" is the first one the board got.
    assert cancel["params"]["requestId"] == first["id"]
    await board.reply(second, {"content": [{"type": "text", "text": "b done"}]})
    status, _, answers = await posting
    answered = by_id(answers)
    assert answered["a"]["error"] == {"code": -32800, "message": "Request cancelled"}
    assert answered["b"]["result"]["content"] == [{"type": "text", "text": "b done"}]


# -- refusals ---------------------------------------------------------------------------------------


async def test_empty_and_oversized_batches_are_refused_whole(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_batch_messages": 2})
    await publishers.start(server, "pump-1", demo_server("pump"))
    client = await Session(http, f"{server.url}/pump-1/mcp").open()
    status, _, body = await client.post([])
    assert status == 400
    assert body["id"] is None
    assert body["error"] == {"code": -32600, "message": "Invalid JSON-RPC: an empty batch; send at least one message"}
    status, _, body = await client.post([request(1, "ping"), request(2, "ping"), request(3, "ping")])
    assert status == 400
    assert body["error"]["code"] == -32600
    assert body["error"]["message"] == (
        "JSON-RPC batch of 3 messages; the limit is 2 (limits.max_batch_messages): send smaller batches"
    )
    assert body["error"]["data"] == {"reason": "batch_limit", "limit": "max_batch_messages", "value": 2}
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_batch_messages") == 1
    status, _, answers = await client.post([request(1, "ping"), request(2, "ping")])
    assert status == 200 and set(by_id(answers)) == {1, 2}


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
async def test_sessions_of_other_versions_keep_the_refusal(
    pump: str, http: aiohttp.ClientSession, version: str
) -> None:
    client = await Session(http, pump).open(version)
    status, _, body = await client.post([request(1, "ping")])
    assert status == 400
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["message"].startswith(ONLY_FROM)


async def test_a_batch_without_a_session_is_refused(pump: str, http: aiohttp.ClientSession) -> None:
    status, _, body = await Session(http, pump).post([request(1, "ping")])
    assert status == 400 and body["error"]["message"].startswith(ONLY_FROM)
    # The stateless era has no batches either.
    headers = {"Accept": BOTH, "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28"}
    async with http.post(pump, data=orjson.dumps([request(1, "tools/list")]), headers=headers) as response:
        assert response.status == 400
        assert (await response.json())["error"]["message"].startswith(ONLY_FROM)


# -- the other session-era ways in ------------------------------------------------------------------


async def test_legacy_sse_takes_a_batch_from_a_2025_03_26_session_and_answers_on_the_stream(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    for version, takes in ((BATCHING, True), ("2024-11-05", False)):
        client = LegacySse(http, gateway.url, "pump-1")
        await client.open()
        assert await client.post(initialize(version)) == (202, None)
        assert (await client.message())["result"]["protocolVersion"] == version
        status, body = await client.post([notification("notifications/initialized"), add(1, 1, 2), initialize()])
        if takes:
            assert (status, body) == (202, None)
            answered = by_id(await responses(client.message, 2))
            assert answered[1]["result"]["structuredContent"] == {"result": 3}
            assert answered["init"]["error"]["message"].startswith("initialize must not be part of a JSON-RPC batch")
        else:
            assert status == 400 and body["error"]["message"].startswith(ONLY_FROM)
        client.close()


async def test_a_raw_websocket_takes_a_batch_from_a_2025_03_26_session(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    for version, takes in ((BATCHING, True), ("2025-06-18", False)):
        ws, client = await connect(http, gateway, "pump-1")
        opened = await client.call("init", "initialize", initialize(version)["params"])
        assert opened["result"]["protocolVersion"] == version
        await client.send([notification("notifications/initialized"), add(1, 2, 2), request(2, "ping")])
        if takes:
            answered = by_id(await responses(client.receive, 2))
            assert answered[1]["result"]["structuredContent"] == {"result": 4}
            assert answered[2]["result"] == {}
        else:
            refused = await client.receive()
            assert refused["id"] is None and refused["error"]["message"].startswith(ONLY_FROM)
        await ws.close()
    await wait_for(lambda: not gateway.gateway.sessions.sessions, what="the sockets' sessions to end")
