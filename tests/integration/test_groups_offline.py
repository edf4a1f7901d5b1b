"""A tool whose device went offline, called by the name a client listed at a tool group endpoint or at
`_all`: the answer is the slot endpoint's "not connected" (which `guidance` tells agents to expect), not
"unknown tool". Real SDK providers that leave, real SDK clients of both eras."""

from __future__ import annotations

import re

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.servers import demo_server

MODES = ["legacy", "2026-07-28"]
GROUPS = {
    "lab": {"slots": ["lab-*"], "tools": ["add", "echo"]},
    "pumps": {"slots": ["pump-*"]},
}


async def refusal(url: str, name: str, mode: str) -> MCPError:
    async with Client(url, mode=mode) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool(name, {"a": 1, "b": 2})
    return refused.value


def timeless(message: str) -> str:
    """The message with the "left 3s ago" figure taken out (two answers may straddle a second)."""
    return re.sub(r"left [\d.]+ ?(?:s|min|h) ago", "left <when> ago", message)


@pytest.fixture
async def offline(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    """lab-1 (in `lab` and `_all`) listed once and gone; lab-2 still connected."""
    server = await gateway_factory(groups=GROUPS)
    lab_1 = await publishers.start(server, "lab-1", demo_server("lab"), aggregate=True)
    await publishers.start(server, "lab-2", demo_server("lab"), aggregate=True)
    async with Client(f"{server.url}/mcp/lab", mode="legacy") as client:
        assert "lab-1__add" in [tool.name for tool in (await client.list_tools()).tools]
    async with Client(f"{server.url}/_all/mcp", mode="legacy") as client:
        assert "lab-1-add" in [tool.name for tool in (await client.list_tools()).tools]
    await lab_1.stop()
    await wait_for(lambda: server.gateway.registry.slots["lab-1"].session is None, what="lab-1 to leave")
    return server


@pytest.mark.parametrize("mode", MODES)
async def test_a_listed_tool_of_an_offline_slot_answers_as_the_slot_endpoint(offline: GatewayServer, mode: str) -> None:
    direct = await refusal(f"{offline.url}/lab-1/mcp", "add", mode)
    assert direct.message.startswith('Provider "lab-1" not connected: its provider left ')
    assert "; connected slots: lab-2" in direct.message
    for url, name in (
        (f"{offline.url}/mcp/lab", "lab-1__add"),
        (f"{offline.url}/mcp", "lab-1__add"),
        (f"{offline.url}/_all/mcp", "lab-1-add"),
    ):
        answer = await refusal(url, name, mode)
        assert (answer.code, timeless(answer.message)) == (direct.code, timeless(direct.message)), url
        assert answer.error.data is not None and direct.error.data is not None
        assert answer.error.data["reason"] == "not_connected"
        assert answer.error.data["connectedSlots"] == direct.error.data["connectedSlots"] == ["lab-2"]


@pytest.mark.parametrize("mode", MODES)
async def test_names_the_endpoint_never_had_stay_unknown_while_the_slot_is_offline(
    offline: GatewayServer, mode: str
) -> None:
    for url, name in (
        (f"{offline.url}/mcp/pumps", "lab-1__add"),  # pumps never had lab-1's tools
        (f"{offline.url}/mcp/lab", "lab-1__sleep"),  # no enabled group has sleep: never named
        (f"{offline.url}/mcp/lab", "lab-1__nothing"),
        (f"{offline.url}/_all/mcp", "lab-1-nothing"),
    ):
        answer = await refusal(url, name, mode)
        assert answer.message.startswith(f"Unknown tool: {name} is not offered by "), (url, answer.message)


async def test_a_slot_back_online_is_called_by_the_same_name(offline: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(offline, "lab-1", demo_server("lab"), aggregate=True)
    async with Client(f"{offline.url}/mcp/lab", mode="legacy") as client:
        assert (await client.call_tool("lab-1__add", {"a": 20, "b": 22})).structured_content == {"result": 42}
