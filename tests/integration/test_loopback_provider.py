"""The in-process provider API (gateway.publish.attach_loopback; docs/provider-api.md, "In-process (loopback)"): an SDK
server in the gateway's own event loop, no socket, called by real SDK clients over HTTP in both eras,
on its own slot and through `_all`."""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.core.slots import SlotRefused
from gateway.publish import Publisher, attach_loopback
from tests.conftest import Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server
from tests.support.southbound import provider_status

MODES = ["legacy", "2026-07-28"]


@pytest.mark.parametrize("mode", MODES)
async def test_loopback_server_serves_its_slot_and_all_in_both_eras(gateway: GatewayServer, mode: str) -> None:
    session = await attach_loopback(gateway.gateway, "calc", demo_server("calc"), aggregate=True)
    await session.wait_ready(5.0)

    async with Client(f"{gateway.url}/calc/mcp", mode=mode) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} >= {"add", "echo"}
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.structured_content == {"result": 5}
        failed = await client.call_tool("fail", {"message": "in-process"})
        assert failed.is_error

    async with Client(f"{gateway.url}/_all/mcp", mode=mode) as client:
        assert "calc-add" in {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("calc-add", {"a": 40, "b": 2})
        assert result.structured_content == {"result": 42}

    status = await provider_status(gateway.url, "calc")
    assert status["connected"] is True
    assert status["transport"] == "loopback"
    assert status["remote"] == "in-process"
    assert status["aggregate"] is True


async def test_loopback_server_leaves_its_slot_when_closed(gateway: GatewayServer) -> None:
    session = await attach_loopback(gateway.gateway, "calc", demo_server("calc"))
    await wait_ready_slot(gateway, "calc")
    async with Client(f"{gateway.url}/_all/mcp", mode="legacy") as client:
        # aggregate defaults to False: the slot stays out of _all.
        assert not any(tool.name.startswith("calc-") for tool in (await client.list_tools()).tools)

    await session.close(1000, "done")
    await wait_for(lambda: gateway.gateway.registry.slots["calc"].live is None, what="the slot to be freed")
    async with Client(f"{gateway.url}/calc/mcp", mode="2026-07-28") as client:
        with pytest.raises(MCPError, match='Provider "calc" not connected'):
            await client.call_tool("add", {"a": 1, "b": 1})

    # The slot is free again, for another in-process server.
    await attach_loopback(gateway.gateway, "calc", demo_server("calc-2"))
    await wait_ready_slot(gateway, "calc")
    async with Client(f"{gateway.url}/calc/mcp", mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}


async def test_loopback_attach_to_a_held_slot_is_refused(gateway: GatewayServer, publishers: Publishers) -> None:
    publisher: Publisher = await publishers.start(gateway, "calc", demo_server("over-websocket"))
    serving = running_sdk_sessions()
    with pytest.raises(SlotRefused, match="Slot already held by a live provider"):
        await attach_loopback(gateway.gateway, "calc", demo_server("calc"))
    assert (await provider_status(gateway.url, "calc"))["transport"] == "websocket"
    assert publisher.connections == 1
    assert running_sdk_sessions() == serving  # the refused server does not keep running unseen


def running_sdk_sessions() -> int:
    return sum(1 for task in asyncio.all_tasks() if "SdkSession.run" in repr(task.get_coro()))
