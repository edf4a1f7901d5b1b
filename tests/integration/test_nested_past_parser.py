"""JSON nested past the 1024 levels orjson reads at all gets the same refusal as JSON nested past
limits.max_json_depth (docs/protocol.md, "Nesting"; docs/protocol-clients.md): the depth error with
`limits.max_json_depth` named, the client's id kept, and a provider's answer refused at once to its
caller with `data.limit`, never a bare "malformed JSON: depth limit exceeded".
"""

from __future__ import annotations

import aiohttp
import pytest

from gateway.app import GatewayServer
from gateway.core import jsonrpc
from tests.conftest import Publishers
from tests.integration.test_nested_json import (
    NESTED,
    add_call,
    assert_board_still_answers,
    assert_nested_answer_refused,
    assert_refused_for_depth,
    board_client,
    board_on,
    session_refused_a_nested_call,
    with_nested,
)
from tests.integration.test_websocket_clients import connect
from tests.support.southbound import Boards, provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

PAST_PARSER = 2000
"""Past the 1024 levels orjson decodes: the parser itself gives up before the gateway's bound is applied."""


def test_the_parsers_own_depth_error_is_the_bound_with_the_head_kept() -> None:
    request = jsonrpc.parse(with_nested(add_call("deep", NESTED), PAST_PARSER), 64)
    assert (request.kind, request.limit) == (jsonrpc.Kind.INVALID, "max_json_depth")
    assert request.body == {"id": "deep", "method": "tools/call"}
    assert "nested more than 64 levels deep" in request.problem
    answer = {"jsonrpc": "2.0", "id": 9, "result": NESTED}
    assert jsonrpc.parse(with_nested(answer, PAST_PARSER).decode(), 64).body == {"id": 9}
    # An id with neither a method nor an outcome beside it is not taken for anything.
    assert jsonrpc.parse(with_nested({"id": 9, "x": NESTED}, PAST_PARSER), 64).body == {}


async def test_a_client_gets_the_depth_refusal_with_its_id_on_http_and_websocket(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await session_refused_a_nested_call(gateway, publishers, http, PAST_PARSER)
    ws, client = await connect(http, gateway, "pump-1")
    await client.initialize()
    await client.send(with_nested(add_call("deep", NESTED), PAST_PARSER))
    assert_refused_for_depth(await client.answer("deep"), "deep")
    added = await client.call(9, "tools/call", {"name": "add", "arguments": {"a": 4, "b": 5}})
    assert added["result"]["structuredContent"] == {"result": 9}
    await ws.close()


async def test_a_providers_answer_past_the_parser_is_refused_to_its_caller_at_once(
    gateway: GatewayServer, boards: Boards, http: aiohttp.ClientSession
) -> None:
    board = await board_on(gateway, boards, "/provider/board")
    ws, client = await board_client(gateway, http)
    message = await assert_nested_answer_refused(board, client, PAST_PARSER)
    assert message.startswith('Provider "board" answered, but the gateway refused the answer: JSON nested more than 64')
    await assert_board_still_answers(board, client)
    status_now = await provider_status(gateway.url, "board")
    assert status_now["connected"] is True and status_now["counters"]["unparsable"] == 1
    await ws.close()
