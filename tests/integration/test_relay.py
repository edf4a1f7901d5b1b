"""Requests from providers to clients across the gateway, and resource subscriptions shared by clients.

A real SDK provider (tests/support/asking_server.py) asks its client for input mid-call: elicitation,
sampling, roots. Session-era clients get the request on the stream of the call that caused it and
answer it; stateless-era clients get an `input_required` result and retry with `inputResponses`.
Real SDK clients with real callbacks, and raw HTTP / WebSocket clients where the bytes matter.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import AsyncIterator
from typing import Any
from unittest.mock import ANY

import aiohttp
import mcp_types as types
import orjson
import pytest
from mcp import Client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.sse import sse_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.asking_server import asking_server
from tests.support.southbound import Boards, Message, ScriptedBoard

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
SLOT = "asker"
STATELESS = "2026-07-28"
EVERY_CAPABILITY: JsonObject = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}
GATEWAY_KEYS = "io.github.mcp-gateway/"
SESSION_ERA = {"era": "session"}


def url_of(server: GatewayServer, slot: str = SLOT) -> str:
    return f"{server.url}/{slot}/mcp"


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


class Answers:
    """One client's side of the relay: what its callbacks were asked, and the answers they give."""

    def __init__(self, name: str = "Ada", colour: str = "teal") -> None:
        self.name = name
        self.colour = colour
        self.asked: list[str] = []
        self.metas: list[Any] = []
        self.release: asyncio.Event | None = None
        """When set, every callback waits for it before answering."""

    async def _hold(self, method: str, meta: Any) -> None:
        self.asked.append(method)
        self.metas.append(meta)
        if self.release is not None:
            await self.release.wait()

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await self._hold("elicitation/create", params.meta)
        key = "colour" if "colour" in params.message else "name"
        return types.ElicitResult(action="accept", content={key: self.colour if key == "colour" else self.name})

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        await self._hold("sampling/createMessage", params.meta)
        reply = types.TextContent(type="text", text=f"{self.name} says hi")
        return types.CreateMessageResult(role="assistant", content=reply, model="test-model", stop_reason="endTurn")

    async def roots(self, context: Any) -> types.ListRootsResult:
        await self._hold("roots/list", None)
        return types.ListRootsResult.model_validate({"roots": [{"uri": "file:///plant/recipes", "name": "recipes"}]})

    def client(self, server: Any, mode: str = "legacy") -> Client:
        return Client(
            server,
            mode=mode,
            elicitation_callback=self.elicit,
            sampling_callback=self.sample,
            list_roots_callback=self.roots,
        )


@pytest.fixture
def outcomes() -> list[str]:
    return []


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    """These tests are about session-era providers: every provider here is spoken to in that era (the
    asking server's tools ask mid-call the session era's way; tests/integration/test_provider_eras.py
    has providers of 2026-07-28)."""
    return await gateway_factory(providers=SESSION_ERA)


@pytest.fixture
async def asker(gateway: GatewayServer, publishers: Publishers, outcomes: list[str]) -> GatewayServer:
    await publishers.start(gateway, SLOT, asking_server(outcomes=outcomes))
    return gateway


# -- both eras through SDK clients ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", STATELESS])
async def test_a_capable_client_answers_what_its_provider_asks(asker: GatewayServer, mode: str) -> None:
    answers = Answers()
    async with answers.client(url_of(asker), mode) as client:
        assert text(await client.call_tool("ask_name", {})) == "Hello, Ada!"
        assert text(await client.call_tool("summarize", {"text": "pressure?"})) == "model said: Ada says hi"
        assert text(await client.call_tool("count_roots", {})) == "roots: file:///plant/recipes"
        assert text(await client.call_tool("two_questions", {})) == "Ada likes teal"
        everything = text(await client.call_tool("everything", {}))
        prompt = await client.get_prompt("greeting", {})
    assert everything == "name=Hello, Ada! | model=model said: Ada says hi | roots=roots: file:///plant/recipes"
    message = prompt.messages[0].content
    assert isinstance(message, types.TextContent) and message.text == "Greet Hello, Ada!"
    assert answers.asked[:5] == [
        "elicitation/create",
        "sampling/createMessage",
        "roots/list",
        "elicitation/create",
        "elicitation/create",
    ]
    assert sorted(answers.asked[5:8]) == ["elicitation/create", "roots/list", "sampling/createMessage"]
    # The gateway's own routing keys (relatedRequest, inputKey) never reach the client.
    assert not [key for meta in answers.metas for key in (meta or {}) if key.startswith(GATEWAY_KEYS)]


@pytest.mark.parametrize("mode", ["legacy", STATELESS])
async def test_a_client_without_the_capability_is_never_asked(
    asker: GatewayServer, mode: str, outcomes: list[str]
) -> None:
    refused_text = "refused -32600: Elicitation not supported: the client did not declare the elicitation capability"
    async with Client(url_of(asker), mode=mode) as client:
        if mode == "legacy":
            # Session era: the provider gets what an SDK client without the capability answers, at
            # once, and its tool reports it: the client saw no request at all.
            assert text(await client.call_tool("ask_name", {})) == refused_text
        else:
            # 2026-07-28: the call itself is refused as a 2026-07-28 server refuses it, -32021 naming
            # the capability; the provider's question gets the same refusal and its call is cancelled.
            with pytest.raises(MCPError) as refused:
                await client.call_tool("ask_name", {})
            assert refused.value.error.code == -32021
            assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}, "traceId": ANY}
    await wait_for(lambda: bool(outcomes), what="the provider's question to end")
    assert outcomes == [f"ask_name: {refused_text}"]


async def test_an_elicitation_goes_only_to_the_client_that_caused_it(asker: GatewayServer) -> None:
    alice, bob = Answers("Alice"), Answers("Bob")
    async with alice.client(url_of(asker)) as first, bob.client(url_of(asker)) as second:
        assert text(await first.call_tool("ask_name", {})) == "Hello, Alice!"
        assert (alice.asked, bob.asked) == (["elicitation/create"], [])
        # Both at once on the same slot: each question reaches its own caller, never the other.
        both = await asyncio.gather(first.call_tool("ask_name", {}), second.call_tool("ask_name", {}))
    assert [text(result) for result in both] == ["Hello, Alice!", "Hello, Bob!"]
    assert (len(alice.asked), len(bob.asked)) == (2, 1)


async def test_the_legacy_sse_way_in_relays_to_its_client(asker: GatewayServer) -> None:
    answers = Answers("Sid")
    async with answers.client(sse_client(f"{asker.url}/{SLOT}/sse")) as client:
        assert text(await client.call_tool("ask_name", {})) == "Hello, Sid!"
        assert text(await client.call_tool("count_roots", {})) == "roots: file:///plant/recipes"
    assert answers.asked == ["elicitation/create", "roots/list"]


async def test_a_raw_websocket_client_gets_the_request_under_a_gateway_id_and_answers_it(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with http.ws_connect(asker.url.replace("http://", "ws://") + f"/{SLOT}") as ws:

        async def receive() -> JsonObject:
            message = await ws.receive(timeout=5)
            decoded: JsonObject = orjson.loads(message.data)
            return decoded

        init = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "w"}}
        await ws.send_str(orjson.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init}).decode())
        assert "result" in await receive()
        await ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        call = {"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}}
        await ws.send_str(orjson.dumps(call).decode())
        request = await receive()
        while "id" not in request:  # notifications may come first
            request = await receive()
        assert request["method"] == "elicitation/create"
        assert isinstance(request["id"], int)
        assert request["params"]["message"] == "What is your name?"
        assert GATEWAY_KEYS not in orjson.dumps(request).decode()
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Wes"}}}
        await ws.send_str(orjson.dumps(answer).decode())
        reply = await receive()
        while reply.get("id") != "c":
            reply = await receive()
    assert reply["result"]["structuredContent"] == {"result": "Hello, Wes!"}


# -- session era: raw HTTP ------------------------------------------------------------------------


async def open_session(http: aiohttp.ClientSession, url: str, capabilities: JsonObject) -> dict[str, str]:
    """Initialize a session-era session; the headers every later request carries."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    params = {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "raw"}}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        assert response.status == 200
        headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, data=orjson.dumps(initialized), headers=headers) as response:
        assert response.status == 202
    return headers


async def next_event(response: aiohttp.ClientResponse) -> JsonObject:
    """The next JSON-RPC message on an SSE response."""
    async with asyncio.timeout(5):
        data = b""
        while True:
            line = await response.content.readline()
            assert line, "the stream ended"
            if line.startswith(b"data:"):
                data += line[5:].strip()
            elif line.strip() == b"" and data:
                decoded: JsonObject = orjson.loads(data)
                return decoded


class CompletingBoard(ScriptedBoard):
    """A scripted board that declares completions, so a stateless completion/complete is relayed to it."""

    @staticmethod
    def _initialize_result(request: Message) -> Message:
        result = ScriptedBoard._initialize_result(request)
        return {**result, "capabilities": {**result["capabilities"], "completions": {}}}


@pytest.fixture
async def board(gateway: GatewayServer) -> AsyncIterator[ScriptedBoard]:
    """A hand-written provider at slot "board": the test reads and writes its frames."""
    boards = Boards()
    scripted = await boards.connect(gateway.url, "/provider/board", CompletingBoard)
    await wait_ready_slot(gateway, "board")
    yield scripted
    await boards.aclose()


ELICIT = {"message": "Open the drain valve?", "requestedSchema": {"type": "object", "properties": {}}}


async def test_a_session_client_that_disconnects_leaves_the_provider_an_error(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    url = url_of(gateway, "board")
    headers = await open_session(http, url, {"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    # The answer's headers go out once the exchange commits to JSON or SSE: after the board asks.
    posting = asyncio.create_task(http.post(url, data=orjson.dumps(call), headers=headers))
    forwarded = await board.request("tools/call")
    # The board names the call its question belongs to (the gateway id it got).
    meta = {"io.github.mcp-gateway/relatedRequest": forwarded["id"]}
    await board.send(
        {"jsonrpc": "2.0", "id": "q-1", "method": "elicitation/create", "params": {**ELICIT, "_meta": meta}}
    )
    response = await posting
    assert response.headers["Content-Type"].startswith("text/event-stream")  # forced: a request is coming
    request = await next_event(response)
    assert request == {"jsonrpc": "2.0", "id": request["id"], "method": "elicitation/create", "params": ELICIT}
    assert isinstance(request["id"], int)  # minted by the gateway, not the board's "q-1"
    response.close()  # the client goes away without answering
    answer = await board.answer_to("q-1")
    assert answer["error"] == {"code": -32000, "message": "client disconnected", "data": {"reason": "client_gone"}}
    cancel = await board.take(lambda m: m.get("method") == "notifications/cancelled", what="the call's cancel")
    assert cancel["params"]["requestId"] == forwarded["id"]
    # A late answer for the same id finds nobody waiting: acknowledged and dropped.
    late = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {}}}
    async with http.post(url, data=orjson.dumps(late), headers=headers) as posted:
        assert posted.status == 202
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_relay_requests_total", method="elicitation/create", outcome="client_gone") == 1
    assert metrics.get("mcpgw_relay_in_flight") == 0


async def test_a_provider_that_gives_up_its_question_withdraws_it_from_the_client(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    url = url_of(gateway, "board")
    headers = await open_session(http, url, {"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    posting = asyncio.create_task(http.post(url, data=orjson.dumps(call), headers=headers))
    forwarded = await board.request("tools/call")
    # No tag: the only client request pending is the one it belongs to.
    await board.send({"jsonrpc": "2.0", "id": 77, "method": "elicitation/create", "params": ELICIT})
    async with await posting as response:
        request = await next_event(response)
        await board.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}})
        withdrawn = await next_event(response)
        assert withdrawn == {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request["id"], "reason": "no longer needed"},
        }
        await board.reply(forwarded, {"content": [{"type": "text", "text": "closed"}]})
        final = await next_event(response)
    assert final["result"]["content"][0]["text"] == "closed"
    assert not [message for _, message in board.received if message.get("id") == 77]  # withdrawn: no answer


async def test_a_request_that_cannot_carry_one_gets_method_not_found(
    gateway: GatewayServer, board: ScriptedBoard, http: aiohttp.ClientSession
) -> None:
    url = url_of(gateway, "board")
    headers = await open_session(http, url, {"elicitation": {}, "roots": {}})
    # A session-era POST that accepts only JSON: its answer can carry no request.
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    json_only = {**headers, "Accept": "application/json"}
    posting = asyncio.create_task(http.post(url, data=orjson.dumps(call), headers=json_only))
    forwarded = await board.request("tools/call")
    await board.send({"jsonrpc": "2.0", "id": "e", "method": "elicitation/create", "params": ELICIT})
    answer = await board.answer_to("e")
    assert answer["error"]["code"] == -32601
    assert answer["error"]["data"] == {"reason": "no_channel"}
    assert "does not accept text/event-stream" in answer["error"]["message"]
    await board.reply(forwarded, {"content": []})
    async with await posting as response:
        assert response.headers["Content-Type"].startswith("application/json")
    # A stateless-era request other than tools/call, prompts/get, resources/read cannot ask.
    completing = asyncio.create_task(
        stateless(http, url, "completion/complete", {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {}})
    )
    forwarded = await board.request("completion/complete")
    await board.send({"jsonrpc": "2.0", "id": "s", "method": "roots/list"})
    answer = await board.answer_to("s")
    assert answer["error"]["message"].endswith(
        "a stateless-era completion/complete cannot ask for input (only tools/call, prompts/get, resources/read)"
    )
    await board.reply(forwarded, {"completion": {"values": []}})
    _, completed = await completing
    assert completed["result"]["completion"] == {"values": []}


async def test_a_provider_request_nobody_caused_is_refused_at_once(board: ScriptedBoard) -> None:
    await board.send({"jsonrpc": "2.0", "id": "r", "method": "roots/list"})
    answer = await board.answer_to("r")
    assert answer["error"]["code"] == -32601
    assert answer["error"]["message"] == (
        "Method not found: the gateway did not relay roots/list to a client: "
        "no client request is pending on this provider"
    )
    assert answer["error"]["data"] == {"reason": "unattributed"}


async def test_a_clients_error_answer_reaches_the_provider(asker: GatewayServer, http: aiohttp.ClientSession) -> None:
    url = url_of(asker)
    headers = await open_session(http, url, {"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}}
    async with http.post(url, data=orjson.dumps(call), headers=headers) as response:
        request = await next_event(response)
        error = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "user is away"}}
        async with http.post(url, data=orjson.dumps(error), headers=headers) as posted:
            assert posted.status == 202
        final = await next_event(response)
    assert final["id"] == 8
    assert final["result"]["structuredContent"] == {"result": "refused -1: user is away"}


async def test_relayed_requests_are_bounded_per_client(gateway_factory: GatewayFactory, publishers: Publishers) -> None:
    server = await gateway_factory(providers=SESSION_ERA, limits={"max_relayed_requests_per_client": 1})
    await publishers.start(server, SLOT, asking_server())
    answers = Answers()
    answers.release = asyncio.Event()
    registry = server.gateway.metrics.registry

    def refused_for_the_limit() -> float:
        methods = ("elicitation/create", "sampling/createMessage", "roots/list")
        labels = [{"method": method, "outcome": "relay_limit"} for method in methods]
        return sum(registry.get_sample_value("mcpgw_relay_requests_total", label) or 0.0 for label in labels)

    async with answers.client(url_of(server)) as client:
        call = asyncio.create_task(client.call_tool("everything", {}))
        await wait_for(lambda: refused_for_the_limit() == 2, what="two requests refused for the bound")
        answers.release.set()
        result = text(await call)
    assert len(answers.asked) == 1  # one question reached the client, the bound refused the other two
    assert result.count("refused -32000: Too many requests waiting on this client (limit 1") == 2


# -- stateless era: the input_required translation, on the wire -----------------------------------


async def stateless(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: JsonObject,
    capabilities: JsonObject | None = None,
) -> tuple[int, JsonObject]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": EVERY_CAPABILITY if capabilities is None else capabilities,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": STATELESS,
        "Mcp-Method": method,
        "Mcp-Name": params.get("name", ""),
    }
    async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
        assert response.headers["Content-Type"].startswith("application/json")  # never a request on the stream
        decoded: JsonObject = orjson.loads(await response.read())
        return response.status, decoded


def accept(**content: Any) -> JsonObject:
    return {"action": "accept", "content": content}


async def test_a_stateless_call_answers_input_required_and_the_retry_completes_it(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = url_of(asker)
    status, first = await stateless(http, url, "tools/call", {"name": "ask_name", "arguments": {}})
    assert status == 200
    result = first["result"]
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == ["elicitation-1"]
    request = result["inputRequests"]["elicitation-1"]
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "What is your name?"
    assert request["params"]["requestedSchema"]["required"] == ["name"]
    assert GATEWAY_KEYS not in orjson.dumps(request).decode()
    state = result["requestState"]
    assert isinstance(state, str)
    retry = {"name": "ask_name", "arguments": {}, "inputResponses": {"elicitation-1": accept(name="Eve")}}
    status, done = await stateless(http, url, "tools/call", {**retry, "requestState": state})
    assert (status, done["result"]["resultType"]) == (200, "complete")
    assert done["result"]["structuredContent"] == {"result": "Hello, Eve!"}
    # The state is spent: the call it continued has finished.
    status, again = await stateless(http, url, "tools/call", {**retry, "requestState": state})
    assert (status, again["error"]["code"]) == (400, -32602)
    assert again["error"]["message"].startswith("requestState has expired")


async def test_several_questions_asked_at_once_come_in_one_round(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = url_of(asker)
    _, first = await stateless(http, url, "tools/call", {"name": "everything", "arguments": {}})
    requests = first["result"]["inputRequests"]
    assert {key: request["method"] for key, request in requests.items()} == {
        "elicitation-1": "elicitation/create",
        "sampling-1": "sampling/createMessage",
        "roots-1": "roots/list",
    }
    responses = {
        "elicitation-1": accept(name="Eve"),
        "sampling-1": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"},
        "roots-1": {"roots": [{"uri": "file:///a"}]},
    }
    params = {"name": "everything", "arguments": {}, "inputResponses": responses}
    _, done = await stateless(http, url, "tools/call", {**params, "requestState": first["result"]["requestState"]})
    assert done["result"]["structuredContent"] == {
        "result": "name=Hello, Eve! | model=model said: hi | roots=roots: file:///a"
    }


async def test_request_state_is_checked_and_missing_answers_are_asked_again(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = url_of(asker)
    call = {"name": "two_questions", "arguments": {}}
    _, first = await stateless(http, url, "tools/call", call)
    state = first["result"]["requestState"]
    # Altered: refused, and the call it belongs to is not disturbed.
    name = {"inputResponses": {"elicitation-1": accept(name="Eve")}}
    status, tampered = await stateless(http, url, "tools/call", {**call, **name, "requestState": state + "x"})
    assert (status, tampered["error"]["code"]) == (400, -32602)
    assert "integrity" in tampered["error"]["message"]
    # No answer to the question asked (and an unknown key, ignored): it is asked again.
    unrelated = {"inputResponses": {"surprise": accept(name="Zed")}, "requestState": state}
    _, asked_again = await stateless(http, url, "tools/call", {**call, **unrelated})
    assert list(asked_again["result"]["inputRequests"]) == ["elicitation-1"]
    state = asked_again["result"]["requestState"]
    assert state != first["result"]["requestState"]
    # A state is bound to its request: another tool cannot use it.
    other = {"name": "ask_name", "arguments": {}, **name, "requestState": state}
    status, mismatch = await stateless(http, url, "tools/call", other)
    assert (status, mismatch["error"]["code"]) == (400, -32602)
    assert "another request" in mismatch["error"]["message"]
    # Round two: the provider asks its second question in the same call.
    _, second = await stateless(http, url, "tools/call", {**call, **name, "requestState": state})
    assert list(second["result"]["inputRequests"]) == ["elicitation-2"]
    colour = {"inputResponses": {"elicitation-2": accept(colour="red")}}
    _, done = await stateless(
        http, url, "tools/call", {**call, **colour, "requestState": second["result"]["requestState"]}
    )
    assert done["result"]["structuredContent"] == {"result": "Eve likes red"}


async def test_malformed_input_responses_are_refused(asker: GatewayServer, http: aiohttp.ClientSession) -> None:
    url = url_of(asker)
    for responses in (None, {"elicitation-1": 12345}):
        call = {"name": "ask_name", "arguments": {}, "inputResponses": responses}
        status, answer = await stateless(http, url, "tools/call", call)
        assert (status, answer["error"]["code"]) == (400, -32602)
        assert "inputResponses" in answer["error"]["message"]


async def test_a_stateless_caller_is_asked_only_what_it_declared(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = url_of(asker)
    call = {"name": "summarize", "arguments": {"text": "pressure?"}}
    _, first = await stateless(http, url, "tools/call", call, capabilities={"sampling": {}})
    assert list(first["result"]["inputRequests"]) == ["sampling-1"]
    answer = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
    retry = {**call, "inputResponses": {"sampling-1": answer}, "requestState": first["result"]["requestState"]}
    _, done = await stateless(http, url, "tools/call", retry, capabilities={"sampling": {}})
    assert done["result"]["structuredContent"]["result"] == "model said: hi"
    # A tool that also asks what the caller cannot answer: the call is refused with -32021 (HTTP 400),
    # as a 2026-07-28 server refuses a request that needs a capability its caller did not declare.
    status, refused = await stateless(
        http, url, "tools/call", {"name": "everything", "arguments": {}}, capabilities={"sampling": {}}
    )
    assert (status, refused["error"]["code"]) == (400, -32021)
    assert refused["error"]["data"]["requiredCapabilities"] in ({"elicitation": {}}, {"roots": {}})


async def test_a_held_call_ends_at_its_deadline(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(providers={**SESSION_ERA, "request_timeout_ms": 300})
    outcomes: list[str] = []
    await publishers.start(server, SLOT, asking_server(outcomes=outcomes))
    _, first = await stateless(http, url_of(server), "tools/call", {"name": "ask_name", "arguments": {}})
    assert first["result"]["resultType"] == "input_required"
    assert (await scrape(http, server)).get("mcpgw_input_required_held") == 1
    # Nobody retries: at the deadline the provider's question is answered with an error, and the
    # held call is dropped.
    await wait_for(lambda: len(outcomes) == 1, what="the provider's question to end")
    assert outcomes[0].startswith("ask_name: refused -32000: the request it belongs to passed the gateway deadline")
    await wait_for(lambda: not server.gateway.input_required.calls, what="the held call to be dropped")
    retry = {"name": "ask_name", "arguments": {}, "inputResponses": {"elicitation-1": accept(name="Eve")}}
    retry["requestState"] = first["result"]["requestState"]
    status, late = await stateless(http, url_of(server), "tools/call", retry)
    assert (status, late["error"]["code"]) == (400, -32602)
    assert (await scrape(http, server)).get("mcpgw_input_required_held") == 0


async def test_held_calls_are_bounded(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(providers=SESSION_ERA, limits={"max_input_required_states": 1})
    await publishers.start(server, SLOT, asking_server())
    _, first = await stateless(http, url_of(server), "tools/call", {"name": "ask_name", "arguments": {}})
    assert first["result"]["resultType"] == "input_required"
    _, second = await stateless(http, url_of(server), "tools/call", {"name": "ask_name", "arguments": {}})
    assert second["error"]["code"] == -32000
    assert second["error"]["message"].startswith("Too many calls are waiting for client input (limit 1")
    assert second["error"]["data"]["reason"] == "input_required_limit"
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_input_required_states") == 1
    # The held one is unharmed.
    retry = {"name": "ask_name", "arguments": {}, "inputResponses": {"elicitation-1": accept(name="Eve")}}
    _, done = await stateless(
        http, url_of(server), "tools/call", {**retry, "requestState": first["result"]["requestState"]}
    )
    assert done["result"]["structuredContent"] == {"result": "Hello, Eve!"}


# -- stateless era: a call whose answer nobody takes ----------------------------------------------

SHORT_DEADLINE_MS = 50


class LostTasks:
    """What asyncio reports through the loop's exception handler (`Task exception was never retrieved`
    when a task that ended with an exception is collected unread), while the `with` block runs."""

    def __init__(self) -> None:
        self.reports: list[str] = []

    def __enter__(self) -> LostTasks:
        self.loop = asyncio.get_running_loop()
        self.previous = self.loop.get_exception_handler()
        self.loop.set_exception_handler(lambda _, context: self.reports.append(f"{context.get('message')}: {context}"))
        return self

    def __exit__(self, *_: object) -> None:
        gc.collect()  # a task's exception is reported when the task is collected
        self.loop.set_exception_handler(self.previous)


def raw_stateless_call(port: int, number: int) -> bytes:
    """A stateless-era tools/call of the board's valve by a caller that declared elicitation, as raw HTTP."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    params = {"name": "valve", "arguments": {}, "_meta": meta}
    body = orjson.dumps({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
    head = (
        f"POST /board/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {STATELESS}\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: valve\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def test_a_stateless_caller_hanging_up_at_the_call_deadline_leaves_no_lost_task_error(
    gateway_factory: GatewayFactory,
) -> None:
    """The provider's deadline and the caller's hang-up reach a busy gateway in the same turn of its
    event loop: the call ends with the deadline error while the caller's request is being cancelled,
    so nobody takes that error. It must not end up as asyncio's `Task exception was never retrieved`."""
    server = await gateway_factory(providers={**SESSION_ERA, "request_timeout_ms": SHORT_DEADLINE_MS})
    boards = Boards()
    board = await boards.connect(server.url, "/provider/board")
    await wait_ready_slot(server, "board")
    port = int(server.url.rsplit(":", 1)[1])
    loop = asyncio.get_running_loop()
    try:
        with LostTasks() as lost:
            for number in range(60):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw_stateless_call(port, number))
                await board.request("tools/call")  # never answered: the gateway armed its deadline before this
                due = loop.time() + SHORT_DEADLINE_MS / 1000
                hung_up = loop.create_future()

                def busy_then_hang_up(writer: asyncio.StreamWriter = writer, hung_up: Any = hung_up) -> None:
                    # The gateway is busy from just before its deadline to just after it (a loaded
                    # gateway is), and the client hangs up meanwhile: both are handled in one turn.
                    time.sleep(0.02)
                    writer.transport.abort()
                    hung_up.set_result(None)

                loop.call_at(due - 0.015, busy_then_hang_up)
                await hung_up
            await asyncio.sleep(0.05)
        assert lost.reports == []
        # The gateway is still well: a caller that waits gets the deadline error.
        async with aiohttp.ClientSession() as http:
            waiting = asyncio.create_task(
                stateless(http, url_of(server, "board"), "tools/call", {"name": "valve", "arguments": {}})
            )
            await board.request("tools/call")
            status, answer = await waiting
        assert answer["error"]["data"]["reason"] == "deadline", (status, answer)
    finally:
        await boards.aclose()


async def test_a_held_call_whose_provider_never_answers_leaves_no_lost_task_error(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    """The caller got input_required and never retried: the call's deadline error has no reader."""
    server = await gateway_factory(providers={**SESSION_ERA, "request_timeout_ms": 300})
    boards = Boards()
    board = await boards.connect(server.url, "/provider/board")
    await wait_ready_slot(server, "board")
    try:
        with LostTasks() as lost:
            posting = asyncio.create_task(
                stateless(http, url_of(server, "board"), "tools/call", {"name": "valve", "arguments": {}})
            )
            forwarded = await board.request("tools/call")
            meta = {"io.github.mcp-gateway/relatedRequest": forwarded["id"]}
            await board.send(
                {"jsonrpc": "2.0", "id": "q-1", "method": "elicitation/create", "params": {**ELICIT, "_meta": meta}}
            )
            _, first = await posting
            assert first["result"]["resultType"] == "input_required"
            await wait_for(lambda: not server.gateway.input_required.calls, what="the held call to be dropped")
        assert lost.reports == []
    finally:
        await boards.aclose()


# -- a stdio upstream: requests it cannot tag -----------------------------------------------------


async def test_a_stdio_upstreams_requests_go_to_the_only_call_pending(gateway_factory: GatewayFactory) -> None:
    upstream = {"name": "asker-stdio", "command": [sys.executable, "-m", "tests.support.asking_server"]}
    server = await gateway_factory(providers=SESSION_ERA, upstreams={"stdio": [upstream]})
    await wait_ready_slot(server, "asker-stdio", timeout=20)
    alice, bob = Answers("Alice"), Answers("Bob")
    async with (
        alice.client(url_of(server, "asker-stdio")) as first,
        bob.client(url_of(server, "asker-stdio")) as second,
    ):
        assert text(await first.call_tool("ask_name", {})) == "Hello, Alice!"
        assert text(await second.call_tool("count_roots", {})) == "roots: file:///plant/recipes"
        # Two calls waiting at once: an untagged request could be either's, so it is refused.
        alice.release = asyncio.Event()
        held = asyncio.create_task(first.call_tool("ask_name", {}))
        await wait_for(lambda: len(alice.asked) == 2, what="Alice's second question")
        refused = text(await second.call_tool("ask_name", {}))
        alice.release.set()
        assert text(await held) == "Hello, Alice!"
    assert refused.startswith("refused -32601: Method not found: the gateway did not relay elicitation/create")
    assert "2 client requests are pending" in refused
    assert bob.asked == ["roots/list"]


# -- resource subscriptions shared by clients -----------------------------------------------------

TANK = "plant://tank-1"


def watched_server(log: list[str]) -> MCPServer:
    """A provider with one subscribable resource; `log` records what the gateway asked of it."""
    server = MCPServer("tank")

    @server.resource(TANK)
    def tank() -> str:
        return "level 42"

    @server.tool()
    async def fill(ctx: Context) -> str:
        """Change the tank and say so."""
        await ctx.session.send_resource_updated(TANK)
        return "filled"

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        log.append(f"subscribe {params.uri}")
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        log.append(f"unsubscribe {params.uri}")
        return types.EmptyResult()

    low = server._lowlevel_server
    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    return server


def updates_into(seen: list[str]) -> MessageHandlerFnT:
    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.append(str(message.params.uri))

    return on_message


async def test_a_subscription_shared_by_two_clients_survives_a_provider_reconnect(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    log: list[str] = []
    publisher = await publishers.start(gateway, "tank", watched_server(log))
    url = url_of(gateway, "tank")
    seen_a: list[str] = []
    seen_b: list[str] = []
    async with Client(url, mode="legacy", message_handler=updates_into(seen_a)) as a:
        async with Client(url, mode="legacy", message_handler=updates_into(seen_b)) as b:
            await a.subscribe_resource(TANK)
            await b.subscribe_resource(TANK)
            assert log == [f"subscribe {TANK}"]  # one upstream subscription for both
            await a.call_tool("fill", {})
            await wait_for(lambda: seen_a == [TANK] and seen_b == [TANK], what="the update at both clients")
            # The provider's link drops and it comes back: the gateway subscribes it again.
            connects = gateway.gateway.registry.slots["tank"].connects
            await publisher.drop()
            await wait_for(lambda: gateway.gateway.registry.slots["tank"].connects == connects + 1, what="reconnect")
            await wait_ready_slot(gateway, "tank")
            await wait_for(lambda: log == [f"subscribe {TANK}"] * 2, what="the replayed subscription")
            await b.call_tool("fill", {})
            await wait_for(lambda: seen_a == [TANK] * 2 and seen_b == [TANK] * 2, what="the update after reconnect")
            await a.unsubscribe_resource(TANK)
            assert log == [f"subscribe {TANK}"] * 2  # b still listens
        # b's session ended: the last subscriber left, one upstream unsubscribe.
        await wait_for(lambda: log[-1] == f"unsubscribe {TANK}", what="the upstream unsubscribe")
    assert log == [f"subscribe {TANK}", f"subscribe {TANK}", f"unsubscribe {TANK}"]
