"""A provider's answer the gateway cannot take, when its id can still be read: broken JSON (a lone
surrogate escape, a cut-off text) and an answer inside a batch, which providers may not send. The
caller hears -32603 at once, naming why, instead of waiting out the deadline (docs/protocol.md,
"Nesting" and "Every provider link"); the link and the next answer are unharmed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import wait_ready_slot
from tests.integration.test_websocket_clients import RawSocket, connect
from tests.support.southbound import Boards, ScriptedBoard, provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

AT_ONCE_S = 3.0
"""Far below the default deadline of 60 s: an answer within this came at once."""


async def board_and_client(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> tuple[ScriptedBoard, aiohttp.ClientWebSocketResponse, RawSocket]:
    board = await boards.connect(gateway.url, "/provider/board")
    await wait_ready_slot(gateway, "board")
    ws, client = await connect(http, gateway, "board")
    await client.initialize()
    return board, ws, client


def lone_surrogate(request_id: Any) -> str:
    # Valid JSON grammar (RFC 8259 allows any \uXXXX escape), yet no Unicode string: orjson refuses it.
    head = '{"jsonrpc":"2.0","id":' + orjson.dumps(request_id).decode()
    return head + ',"result":{"content":[{"type":"text","text":"\\ud800"}]}}'


def cut_off(request_id: Any) -> str:
    head = '{"jsonrpc": "2.0", "id": ' + orjson.dumps(request_id).decode()
    return head + ', "result": {"content": [{"type": "text", "te'


async def next_answer_is_relayed(board: ScriptedBoard, client: RawSocket, request_id: int) -> None:
    await client.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "valve"}})
    forwarded = await board.request("tools/call")
    await board.reply(forwarded, {"content": [{"type": "text", "text": "opened"}]})
    assert (await client.answer(request_id))["result"]["content"][0]["text"] == "opened"


@pytest.mark.parametrize(
    ("broken", "named"),
    [(lone_surrogate, "low surrogate"), (cut_off, "")],
    ids=["lone-surrogate", "cut-off"],
)
async def test_a_malformed_answer_whose_id_can_be_read_ends_its_call_at_once(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession, broken: Any, named: str
) -> None:
    board, ws, client = await board_and_client(gateway, boards, http)
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "valve"}})
    forwarded = await board.request("tools/call")
    started = time.monotonic()
    await board.send_raw(broken(forwarded["id"]))
    refused = await client.answer(1, timeout=AT_ONCE_S)
    assert time.monotonic() - started < AT_ONCE_S
    error = refused["error"]
    assert error["code"] == -32603, refused
    assert error["message"].startswith(
        'Provider "board" answered, but the gateway refused the answer: malformed JSON: '
    )
    assert named in error["message"], error
    assert "the provider must send well-formed JSON" in error["message"]
    assert error["data"] == {"slot": "board", "reason": "answer_refused"}
    await next_answer_is_relayed(board, client, 2)
    status = await provider_status(gateway.url, "board")
    assert status["connected"] is True and status["connects"] == 1
    assert status["counters"]["unparsable"] == 1
    assert status["counters"]["deadlines"] == 0
    await ws.close()


async def test_an_sdk_caller_hears_of_a_malformed_answer_at_once(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> None:
    board = await boards.connect(gateway.url, "/provider/board")
    await wait_ready_slot(gateway, "board")
    async with Client(f"{gateway.url}/board/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("valve", {}))
        forwarded = await board.request("tools/call")
        started = time.monotonic()
        await board.send_raw(lone_surrogate(forwarded["id"]))
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, AT_ONCE_S)
        assert time.monotonic() - started < AT_ONCE_S
        assert failure.value.error.code == -32603
        assert "refused the answer: malformed JSON" in failure.value.error.message


async def test_answers_inside_a_batch_end_the_calls_they_name_at_once(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> None:
    board, ws, client = await board_and_client(gateway, boards, http)
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "valve"}})
    first = await board.request("tools/call")
    await client.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "valve"}})
    second = await board.request("tools/call")
    outcome = {"content": [{"type": "text", "text": "opened"}]}
    batch = [
        {"jsonrpc": "2.0", "id": first["id"], "result": outcome},
        {"jsonrpc": "2.0", "id": second["id"], "error": {"code": -1, "message": "no"}},
    ]
    started = time.monotonic()
    await board.send(batch)
    for request_id in (1, 2):
        refused = await client.answer(request_id, timeout=AT_ONCE_S)
        error = refused["error"]
        assert error["code"] == -32603, refused
        assert error["message"].startswith(
            'Provider "board" answered, but the gateway refused the answer: it came inside a JSON-RPC batch'
        ), error
        assert "send each answer as its own message" in error["message"]
        assert error["data"] == {"slot": "board", "reason": "answer_refused"}
    assert time.monotonic() - started < AT_ONCE_S
    # The provider is told too, as for any batch it sends (nothing in it was read).
    told = await board.answer_to(None)
    assert told["error"]["code"] == -32600 and told["error"]["data"] == {"reason": "batch"}
    await next_answer_is_relayed(board, client, 3)
    status = await provider_status(gateway.url, "board")
    assert status["connected"] is True and status["counters"]["protocol_violations"] == 1
    assert status["counters"]["deadlines"] == 0
    await ws.close()
