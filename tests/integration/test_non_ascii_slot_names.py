"""Slots named in Chinese (xiaozhi-style rooms) through real SDK clients: each room's tools get a name of
their own, the same whatever order the rooms joined in, at `_all` and at a group endpoint alike
(docs/protocol-clients.md, "`_all`", "Tool groups")."""

from __future__ import annotations

import hashlib
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.lowlevel import Server

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_aggregate import answer_of

ROOMS = ["小智-客厅", "小智-卧室"]
TOOL = "self.audio_speaker.set_volume"


def room_board(room: str) -> Server[Any]:
    """A speaker whose set_volume answers with the room it is in."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name=TOOL, description="设置音量。Set the volume.", input_schema={"type": "object"})]
        )

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{room}:{params.name}")])

    return Server(room, on_list_tools=list_tools, on_call_tool=call_tool)


def documented_name(room: str, separator: str) -> str:
    """The documented rule: sanitized slot, `_`, 8 hex digits of the SHA-256 of the slot name, then the tool."""
    digest = hashlib.sha256(room.encode()).hexdigest()[:8]
    return f"__-___{digest}{separator}self_audio_speaker_set_volume"


@pytest.mark.parametrize("order", [ROOMS, ROOMS[::-1]], ids=["living-room-first", "bedroom-first"])
async def test_each_chinese_room_has_its_own_stable_name_at_all_and_at_a_group(
    gateway_factory: GatewayFactory, publishers: Publishers, order: list[str]
) -> None:
    server: GatewayServer = await gateway_factory(groups={"home": {"slots": ["*"]}})
    for room in order:
        await publishers.start(server, room, room_board(room), aggregate=True)
    await wait_for(lambda: server.gateway.aggregate.members() == sorted(ROOMS), what="both rooms in _all")
    async with Client(f"{server.url}/_all/mcp", mode="legacy") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert sorted(names) == sorted(documented_name(room, "-") for room in ROOMS)
        for room in ROOMS:
            assert await answer_of(client, documented_name(room, "-")) == f"{room}:{TOOL}"
    async with Client(f"{server.url}/mcp/home", mode="2026-07-28") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert sorted(names[2:]) == sorted(documented_name(room, "__") for room in ROOMS)
        for room in ROOMS:
            assert await answer_of(client, documented_name(room, "__")) == f"{room}:{TOOL}"
