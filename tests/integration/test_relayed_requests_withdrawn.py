"""A request the gateway relayed to a client ends with the call it belongs to, and the client is told.

A provider's elicitation (sampling, roots) reaches the client under an id the gateway mints. When the
call it belongs to ends first (its deadline passes, the client cancels it, the provider answers it),
the provider gets -32000 with the reason and the client `notifications/cancelled` for the minted id:
on the call's own stream before the call's answer, on the session's GET stream when the client hung
up on the call's stream (docs/protocol-clients.md, "Session era: on the request's stream").
A real SDK provider (tests/support/asking_server.py) asks; raw HTTP and WebSocket clients read the bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_relay import ELICIT, next_event, open_session
from tests.support.asking_server import asking_server
from tests.support.southbound import Boards, ScriptedBoard

JsonObject = dict[str, Any]
SLOT = "asker"
DEADLINE_MS = 700


def cancelled(request_id: int) -> JsonObject:
    params = {"requestId": request_id, "reason": "no longer needed"}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def call(request_id: Any, tool: str = "ask_name") -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": {}}}


@pytest.fixture
def outcomes() -> list[str]:
    return []


@pytest.fixture
async def asker(gateway_factory: GatewayFactory, publishers: Publishers, outcomes: list[str]) -> GatewayServer:
    """An SDK provider whose ask_name has a short gateway deadline."""
    server = await gateway_factory(
        providers={"era": "session"},
        slots={"declared": {SLOT: {"tool_timeouts_ms": {"ask_name": DEADLINE_MS}}}},
    )
    await publishers.start(server, SLOT, asking_server(outcomes=outcomes))
    return server


def url_of(server: GatewayServer, slot: str = SLOT) -> str:
    return f"{server.url}/{slot}/mcp"


async def test_a_call_past_its_deadline_withdraws_its_question_before_the_answer(
    asker: GatewayServer, http: aiohttp.ClientSession, outcomes: list[str]
) -> None:
    url = url_of(asker)
    headers = await open_session(http, url, {"elicitation": {}})
    async with http.post(url, data=orjson.dumps(call(80)), headers=headers) as response:
        question = await next_event(response)
        assert question["method"] == "elicitation/create"
        # Nobody answers: at the deadline the question is withdrawn first, then the call is answered.
        assert await next_event(response) == cancelled(question["id"])
        final = await next_event(response)
    assert final["id"] == 80 and final["error"]["data"]["reason"] == "deadline", final
    await wait_for(lambda: bool(outcomes), what="the provider's question to end")
    assert outcomes[0].startswith(
        f"ask_name: refused -32000: the request it belongs to passed the gateway deadline of {DEADLINE_MS}ms"
    )


async def test_a_call_the_client_cancels_withdraws_its_question(
    asker: GatewayServer, http: aiohttp.ClientSession, outcomes: list[str]
) -> None:
    url = url_of(asker)
    headers = await open_session(http, url, {"elicitation": {}})
    async with http.post(url, data=orjson.dumps(call(50)), headers=headers) as response:
        question = await next_event(response)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 50}}
        async with http.post(url, data=orjson.dumps(cancel), headers=headers) as posted:
            assert posted.status == 202
        assert await next_event(response) == cancelled(question["id"])
        final = await next_event(response)
    assert final == {"jsonrpc": "2.0", "id": 50, "error": {"code": -32800, "message": "Request cancelled"}}
    await wait_for(lambda: bool(outcomes), what="the provider's question to end")
    assert outcomes[0] == "ask_name: refused -32000: cancelled by the client"


async def test_a_raw_websocket_client_hears_the_withdrawal_before_the_answer(
    asker: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with http.ws_connect(asker.url.replace("http://", "ws://") + f"/{SLOT}") as ws:

        async def receive() -> JsonObject:
            message = await ws.receive(timeout=5)
            decoded: JsonObject = orjson.loads(message.data)
            return decoded

        init = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "w"}}
        await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init}))
        assert "result" in await receive()
        await ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        await ws.send_bytes(orjson.dumps(call("c")))
        question = await receive()
        assert question["method"] == "elicitation/create"
        assert await receive() == cancelled(question["id"])
        final = await receive()
    assert final["id"] == "c" and final["error"]["data"]["reason"] == "deadline", final


async def test_a_client_that_hangs_up_on_the_call_hears_the_withdrawal_on_its_get_stream(
    asker: GatewayServer, http: aiohttp.ClientSession, outcomes: list[str]
) -> None:
    url = url_of(asker)
    headers = await open_session(http, url, {"elicitation": {}})
    async with http.get(url, headers={**headers, "Accept": "text/event-stream"}) as listening:
        assert listening.status == 200
        response = await http.post(url, data=orjson.dumps(call(7)), headers=headers)
        question = await next_event(response)
        response.close()  # the client goes away from the call's stream, not from its session
        assert await next_event(listening) == cancelled(question["id"])
    await wait_for(lambda: bool(outcomes), what="the provider's question to end")
    assert outcomes[0] == "ask_name: refused -32000: client disconnected"


@pytest.fixture
async def board(gateway_factory: GatewayFactory) -> AsyncIterator[tuple[GatewayServer, ScriptedBoard]]:
    """A hand-written provider at slot "board": it answers a call while its question is still out."""
    server = await gateway_factory(providers={"era": "session"})
    boards = Boards()
    scripted = await boards.connect(server.url, "/provider/board")
    await wait_ready_slot(server, "board")
    yield server, scripted
    await boards.aclose()


async def test_a_call_answered_while_its_question_is_out_withdraws_the_question(
    board: tuple[GatewayServer, ScriptedBoard], http: aiohttp.ClientSession
) -> None:
    server, provider = board
    url = url_of(server, "board")
    headers = await open_session(http, url, {"elicitation": {}})
    posting = asyncio.create_task(http.post(url, data=orjson.dumps(call(9, "valve")), headers=headers))
    forwarded = await provider.request("tools/call")
    await provider.send({"jsonrpc": "2.0", "id": "q-1", "method": "elicitation/create", "params": ELICIT})
    async with await posting as response:
        question = await next_event(response)
        await provider.reply(forwarded, {"content": [{"type": "text", "text": "closed"}]})
        assert await next_event(response) == cancelled(question["id"])
        final = await next_event(response)
    assert final["result"]["content"][0]["text"] == "closed"
    answer = await provider.answer_to("q-1")
    assert answer["error"]["message"] == "the request it belongs to was answered"
