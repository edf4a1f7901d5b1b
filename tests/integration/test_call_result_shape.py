"""A provider's tools/call result whose top-level members have the wrong JSON type is refused with
-32603 naming the provider and the member (docs/protocol.md, "Requests and ids"), instead of reaching
the client, whose SDK would fail on it with a validation error that names no provider.

MCP's CallToolResult: `content` an array of content blocks, `isError` a boolean, `structuredContent`
an object. A scripted WebSocket board answers; a raw WebSocket client calls.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from tests.integration.test_metrics import scrape
from tests.integration.test_nested_json import board_client, board_on
from tests.support.southbound import Boards

BAD_RESULTS: dict[str, tuple[dict[str, Any], str]] = {
    "content string": ({"content": "notalist"}, '"content" is a string, not an array of content blocks'),
    "content null": ({"content": None}, '"content" is null, not an array of content blocks'),
    "content object": ({"content": {"type": "text"}}, '"content" is an object, not an array of content blocks'),
    "block string": ({"content": ["hi"]}, '"content" holds a string, not a content block object'),
    "isError string": ({"content": [], "isError": "yes"}, '"isError" is a string, not a boolean'),
    "structured array": ({"content": [], "structuredContent": [1]}, '"structuredContent" is an array, not an object'),
}


@pytest.mark.parametrize("shape", list(BAD_RESULTS))
async def test_a_call_result_of_the_wrong_shape_is_refused_naming_the_provider(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession, shape: str
) -> None:
    board = await board_on(gateway, boards, "/provider/board")
    ws, client = await board_client(gateway, http)
    result, problem = BAD_RESULTS[shape]
    await client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "valve"}})
    await board.reply(await board.request("tools/call"), result)
    refused = await client.answer(1)
    refused["error"]["data"].pop("traceId", None)
    assert refused["error"] == {
        "code": -32603,
        "message": f'Provider "board" returned a tools/call result the gateway cannot relay: {problem}',
        "data": {"slot": "board", "reason": "malformed_result"},
    }
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_call_errors_total", slot="board", kind="provider") == 1
    await ws.close()


async def test_well_formed_results_pass_untouched(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> None:
    board = await board_on(gateway, boards, "/provider/board")
    ws, client = await board_client(gateway, http)
    results: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "ok"}], "isError": False, "structuredContent": {"a": 1}, "extra": 2},
        {"content": [], "isError": True},
        {"content": [], "structuredContent": None},  # null is as good as absent to an SDK client
        {"task": {"taskId": "t1", "status": "working"}},  # a task's result carries no content
    ]
    for request_id, result in enumerate(results, start=1):
        await client.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "v"}})
        await board.reply(await board.request("tools/call"), result)
        assert (await client.answer(request_id))["result"] == result
    await ws.close()
