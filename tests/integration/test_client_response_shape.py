"""A client's answer to a relayed request must be a JSON-RPC 2.0 response, or it is refused unrelayed.

JSON-RPC 2.0 §5: a response has exactly one of `result` and `error`, and an error has an integer
`code` and a string `message`. A client that answers a provider's elicitation otherwise is refused
with -32600 naming the problem (id null: the id it used is the gateway's own), on every way in that
takes client responses, and the provider never sees it: the client's well-formed answer still
reaches it (docs/protocol-clients.md, "Errors before routing"). A real SDK provider
(tests/support/asking_server.py) asks; raw HTTP, legacy SSE and WebSocket clients answer.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_relay import next_event, open_session
from tests.integration.test_sse_clients import LegacySse
from tests.support.asking_server import asking_server

JsonObject = dict[str, Any]
SLOT = "asker"
ASK = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}}
GOOD = {"action": "accept", "content": {"name": "Ada"}}
BAD_SHAPES: dict[str, tuple[JsonObject, str]] = {
    "both": (
        {"result": GOOD, "error": {"code": -1, "message": "no"}},
        'a response has "result" or "error", not both',
    ),
    "no code": ({"error": {"message": "no"}}, '"error.code" must be an integer'),
    "string code": ({"error": {"code": "-1", "message": "no"}}, '"error.code" must be an integer'),
    "no message": ({"error": {"code": -1}}, '"error.message" must be a string'),
    "not an object": (
        {"error": "no"},
        'the "error" member must be an object with an integer "code" and a string "message"',
    ),
}


def refusal(problem: str) -> JsonObject:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": f"Invalid JSON-RPC: {problem}"}}


def answer(request_id: int, members: JsonObject) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, **members}


@pytest.fixture
async def asker(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(providers={"era": "session"})
    await publishers.start(server, SLOT, asking_server())
    return server


@pytest.mark.parametrize("shape", list(BAD_SHAPES))
async def test_streamable_http_refuses_a_malformed_answer_and_relays_the_good_one(
    asker: GatewayServer, http: aiohttp.ClientSession, shape: str
) -> None:
    url = f"{asker.url}/{SLOT}/mcp"
    headers = await open_session(http, url, {"elicitation": {}})
    members, problem = BAD_SHAPES[shape]
    async with http.post(url, data=orjson.dumps(ASK), headers=headers) as response:
        question = await next_event(response)
        async with http.post(url, data=orjson.dumps(answer(question["id"], members)), headers=headers) as refused:
            assert (refused.status, await refused.json()) == (400, refusal(problem))
        # Never relayed: the provider still waits, and takes the answer that follows.
        good = answer(question["id"], {"result": GOOD})
        async with http.post(url, data=orjson.dumps(good), headers=headers) as accepted:
            assert accepted.status == 202
        final = await next_event(response)
    assert final["result"]["structuredContent"] == {"result": "Hello, Ada!"}


async def test_legacy_sse_refuses_a_malformed_answer_and_relays_the_good_one(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    client = LegacySse(http, asker.url, SLOT)
    await client.open()
    init = {"protocolVersion": "2024-11-05", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "s"}}
    assert await client.post({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": init}) == (202, None)
    assert (await client.message())["id"] == "init"
    assert await client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}) == (202, None)
    assert await client.post(ASK) == (202, None)
    question = await client.message()
    assert question["method"] == "elicitation/create"
    members, problem = BAD_SHAPES["both"]
    assert await client.post(answer(question["id"], members)) == (400, refusal(problem))
    assert await client.post(answer(question["id"], {"result": GOOD})) == (202, None)
    final = await client.message()
    client.close()
    assert final["result"]["structuredContent"] == {"result": "Hello, Ada!"}


async def test_a_raw_websocket_gets_the_refusal_on_the_socket_and_relays_the_good_one(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with http.ws_connect(asker.url.replace("http://", "ws://") + f"/{SLOT}") as ws:

        async def receive() -> JsonObject:
            decoded: JsonObject = orjson.loads((await ws.receive(timeout=5)).data)
            return decoded

        init = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "w"}}
        await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init}))
        assert "result" in await receive()
        await ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        await ws.send_bytes(orjson.dumps(ASK))
        question = await receive()
        assert question["method"] == "elicitation/create"
        members, problem = BAD_SHAPES["no code"]
        await ws.send_bytes(orjson.dumps(answer(question["id"], members)))
        assert await receive() == refusal(problem)  # the socket stays open
        await ws.send_bytes(orjson.dumps(answer(question["id"], {"result": GOOD})))
        final = await receive()
    assert final["id"] == 5 and final["result"]["structuredContent"] == {"result": "Hello, Ada!"}
