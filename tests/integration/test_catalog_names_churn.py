"""Catalog names and order under churn, through real clients: a provider renaming its tools again and
again never makes `_all` or /mcp give a departed device's name to another device, and each slot lists
its tools in its own provider's order even when another provider lists the same tools in another."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.core.naming import NameBook
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import Boards, ScriptedBoard

REGISTER = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
EVERYTHING = {"all": {"slots": ["*"], "description": "every slot"}}
MAX_SLOTS = 4
"""limits.max_slots: the name books then remember 4 * 4 = 16 departed names."""
CHURN_TOOLS = 20
CHURN_ROUNDS = 3


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"tool {name}", "inputSchema": {"type": "object"}}


async def names_at(url: str) -> list[str]:
    async with Client(url, mode="legacy") as client:
        return [listed.name for listed in (await client.list_tools()).tools]


async def board(boards: Boards, server: GatewayServer, slot: str, tools: list[str]) -> ScriptedBoard:
    joined = await boards.connect(server.url, f"/provider/{slot}", tools=[tool(n) for n in tools], first_frame=REGISTER)
    await wait_ready_slot(server, slot)
    return joined


async def relist(server: GatewayServer, provider: ScriptedBoard, slot: str, tools: list[str]) -> None:
    """The provider lists `tools` from now on and says so; returns once the gateway holds them."""
    provider.tools = [tool(name) for name in tools]
    await provider.send(LIST_CHANGED)

    def held() -> bool:
        session = server.gateway.registry.slots[slot].live
        return session is not None and [listed["name"] for listed in session.tools] == tools

    await wait_for(held, what=f"{slot} to list {tools[:2]}...")


async def test_renaming_provider_never_passes_a_departed_devices_name_to_another(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(limits={"max_slots": MAX_SLOTS}, groups=EVERYTHING)
    all_url, groups_url = f"{server.url}/_all/mcp", f"{server.url}/mcp"
    first = await board(boards, server, "a_b", ["stop"])
    assert await names_at(all_url) == ["a_b-stop"]
    assert await names_at(groups_url) == ["guidance", "search", "a_b__stop"]
    await first.close()
    await wait_for(lambda: server.gateway.registry.slots["a_b"].live is None, what="a_b to leave")

    # One provider renames all its tools, each time past the books' bound of departed names.
    churn = await board(boards, server, "churn", [f"t0_{index}" for index in range(CHURN_TOOLS)])
    for round_number in range(1, CHURN_ROUNDS + 1):
        tools = [f"t{round_number}_{index}" for index in range(CHURN_TOOLS)]
        await relist(server, churn, "churn", tools)
        assert f"churn-{tools[0]}" in await names_at(all_url)
        assert f"churn__{tools[0]}" in await names_at(groups_url)
    await churn.close()

    # Another device whose slot reads alike joins with the same tool: it must not take a_b's name.
    other = await board(boards, server, "a.b", ["stop"])
    assert await names_at(all_url) == ["a_b-stop-2"]
    assert await names_at(groups_url) == ["guidance", "search", "a_b__stop-2"]
    async with Client(all_url, mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("a_b-stop", {})
        assert refused.value.message.startswith('Provider "a_b" not connected')
    async with Client(groups_url, mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("a_b__stop", {})
        assert refused.value.message.startswith('Provider "a_b" not connected')
    assert not [message for _, message in other.received if message.get("method") == "tools/call"]


def test_name_book_forgets_from_the_slot_holding_the_most_departed_names() -> None:
    book = NameBook(max_retired=4)
    book.names_for([("quiet", "stop")])
    for round_number in range(5):
        book.names_for([("churn", f"t{round_number}_{index}") for index in range(3)])
    # 1 + 12 departed names, 4 kept: quiet's one and churn's three most recent.
    assert book.by_name["quiet-stop"] == ("quiet", "stop")
    assert len(book.by_name) == 3 + 4
    assert "churn-t3_0" in book.by_name and "churn-t2_2" not in book.by_name
    assert book.names_for([("quiet2", "x"), ("quiet", "stop")])["quiet-stop"] == ("quiet", "stop")


def test_name_book_forgets_a_slots_last_departed_name_only_past_the_bound_in_slots() -> None:
    book = NameBook(max_retired=3)
    for index in range(4):
        book.names_for([(f"s{index}", "t")])
    book.names_for([])
    # Four slots each hold one departed name, one past the bound: the oldest goes.
    assert "s0-t" not in book.by_name
    assert {"s1-t", "s2-t", "s3-t"} <= set(book.by_name)


async def test_each_slot_lists_tools_in_its_own_providers_order(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(groups=EVERYTHING)
    await board(boards, server, "board-a", ["alpha", "zulu"])
    await board(boards, server, "board-b", ["zulu", "alpha"])
    assert await names_at(f"{server.url}/board-a/mcp") == ["alpha", "zulu"]
    assert await names_at(f"{server.url}/board-b/mcp") == ["zulu", "alpha"]
    assert await names_at(f"{server.url}/_all/mcp") == [
        "board-a-alpha",
        "board-a-zulu",
        "board-b-zulu",
        "board-b-alpha",
    ]
    assert await names_at(f"{server.url}/mcp") == [
        "guidance",
        "search",
        "board-a__alpha",
        "board-a__zulu",
        "board-b__zulu",
        "board-b__alpha",
    ]


async def test_a_provider_listing_its_tools_in_another_order_is_a_change(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(groups=EVERYTHING)
    provider = await board(boards, server, "board-a", ["alpha", "zulu"])
    async with Client(f"{server.url}/_all/mcp", mode="legacy") as watcher:
        assert [listed.name for listed in (await watcher.list_tools()).tools] == ["board-a-alpha", "board-a-zulu"]
        await relist(server, provider, "board-a", ["zulu", "alpha"])
        assert await names_at(f"{server.url}/board-a/mcp") == ["zulu", "alpha"]
        assert [listed.name for listed in (await watcher.list_tools()).tools] == ["board-a-zulu", "board-a-alpha"]
    assert await names_at(f"{server.url}/mcp") == ["guidance", "search", "board-a__zulu", "board-a__alpha"]
