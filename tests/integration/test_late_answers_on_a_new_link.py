"""A provider that dials again by itself may carry an answer it owed its previous connection onto the
new one: a client library with a send queue (mcp-broker-provider's MultiplexTransport) flushes it
there. That answer must never end a request of the new link (docs/protocol.md, "Requests and ids").

The provider is a raw WebSocket scripted by the test: its first connection takes a call and drops
without answering; its second takes a new call and then sends the old answer before the new one, as
a flushed send queue does.
"""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import Boards, ScriptedBoard, provider_status

REGISTER = {"provider": "board", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}]}


async def dial(boards: Boards, url: str, path: str) -> ScriptedBoard:
    return await boards.connect(url, path, first_frame=REGISTER if path == "/providers" else None)


@pytest.mark.parametrize("path", ["/provider/board", "/providers"])
async def test_an_answer_owed_to_the_previous_link_never_answers_a_call_on_the_new_one(
    gateway_factory: GatewayFactory, boards: Boards, path: str
) -> None:
    gateway = await gateway_factory()
    url = f"{gateway.url}/board/mcp"
    provider = "board" if path == "/providers" else None
    first = await dial(boards, gateway.url, path)
    await wait_ready_slot(gateway, "board")
    async with Client(url, mode="legacy") as client:
        lost = asyncio.create_task(client.call_tool("valve", {"open": True}))
        owed = await first.request("tools/call")
        await first.close()
        with pytest.raises(MCPError, match="disconnected"):
            await asyncio.wait_for(lost, 5)

        slot = gateway.gateway.registry.slots["board"]
        await wait_for(lambda: slot.live is None, what="the first link to be let go")
        second = await dial(boards, gateway.url, path)
        await wait_ready_slot(gateway, "board")
        call = asyncio.create_task(client.call_tool("valve", {"open": False}))
        asked = await second.request("tools/call")
        assert asked["id"] != owed["id"]
        await second.reply(owed, text("the answer owed to the first link"), provider)
        await second.reply(asked, text("closed"), provider)
        result = await asyncio.wait_for(call, 5)
    assert result.content[0].type == "text"
    assert result.content[0].text == "closed"
    assert (await provider_status(gateway.url, "board"))["counters"]["unmatched_responses"] == 1
