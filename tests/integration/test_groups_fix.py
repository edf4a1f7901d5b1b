"""Tool groups, `search` and `guidance` through a real gateway and real SDK clients and providers: a long
query or topic answered at once over 400 tools of 1 KB descriptions, `switch_on` found by its name, a group
named like a tool, a reload removing a group an MCP_GROUP_* variable names, and `mcp-gateway stdio
--group` checking the whole name."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import mcp_types as types
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.config import load_config
from gateway.reload import ConfigSource
from tests.conftest import GatewayFactory, Publishers
from tests.support.gateway_process import bridge_exit

CJK_500 = "".join(chr(0x4E00 + i) for i in range(500))
TOOLS = 400


def many_tools_server() -> MCPServer:
    """get_status, set_speed and 400 more tools whose descriptions are 1.1 KB each."""
    server = MCPServer("pump-a")

    @server.tool()
    def get_status() -> str:
        """Read the pump's state."""
        return "stopped"

    @server.tool()
    def set_speed(rpm: int) -> str:
        """Change the speed of a running pump."""
        return f"speed {rpm}"

    def tool(number: int) -> str:
        return f"t{number}"

    for number in range(TOOLS):
        text = f"Does thing number {number} with the pump motor valve sensor " * 20
        server.add_tool(lambda number=number: tool(number), name=f"tool_{number}", description=text)
    return server


def lamp_server() -> MCPServer:
    server = MCPServer("lamp")

    @server.tool()
    def switch_off() -> str:
        """Switch the lamp off."""
        return "off"

    @server.tool()
    def switch_on() -> str:
        """Switch the lamp on."""
        return "on"

    @server.tool()
    def get_state() -> str:
        """Read whether the lamp is on."""
        return "off"

    return server


def text_of(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


@pytest.fixture
async def crowded(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(groups={"pumps": {"slots": ["pump-*"]}})
    await publishers.start(server, "pump-a", many_tools_server())
    return server


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_500_character_query_over_400_tools_is_answered_at_once(crowded: GatewayServer, mode: str) -> None:
    async with Client(f"{crowded.url}/mcp/pumps", mode=mode) as client:
        assert len((await client.list_tools()).tools) == TOOLS + 4
        started = time.monotonic()
        result = await client.call_tool("search", {"query": CJK_500})
        took = time.monotonic() - started
        assert not result.is_error
        assert result.structured_content is not None
        assert len(result.structured_content["words"]) == 32
        # Scanning every description word for every query word took 15 s here.
        assert took < 2, f"search took {took:.1f} s"
        found = await client.call_tool("search", {"query": "thing number 17 speed"})
        assert found.structured_content is not None
        assert found.structured_content["results"][0]["name"] == "pump-a__tool_17"


async def test_a_long_guidance_topic_is_refused_at_once(crowded: GatewayServer) -> None:
    topic = " ".join(f"w{number:05d}" for number in range(300))  # 2 KB
    async with Client(f"{crowded.url}/mcp", mode="legacy") as client:
        started = time.monotonic()
        result = await client.call_tool("guidance", {"topic": topic})
        took = time.monotonic() - started
        assert result.is_error
        assert text_of(result).startswith(f'guidance: "topic" is {len(topic)} characters; use at most 200')
        assert took < 2, f"guidance took {took:.1f} s"


async def test_searching_switch_on_finds_switch_on_first(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(groups={"lights": {"slots": ["*"]}})
    await publishers.start(server, "lamp", lamp_server())
    async with Client(f"{server.url}/mcp/lights", mode="legacy") as client:
        for query in ("switch_on", "switch on", "turn the lamp on"):
            result = await client.call_tool("search", {"query": query})
            assert result.structured_content is not None
            assert result.structured_content["results"][0]["name"] == "lamp__switch_on", query


async def test_a_group_named_like_a_tool_keeps_both_pages_reachable(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(groups={"set_speed": {"slots": ["*"], "tools": ["get_"]}})
    await publishers.start(server, "pump-a", many_tools_server())
    async with Client(f"{server.url}/mcp", mode="legacy") as client:
        group = text_of(await client.call_tool("guidance", {"topic": "set_speed"}))
        assert group.startswith("# Group `set_speed`")
        assert '{"topic": "tool", "tool_name": "set_speed"}' in group
        tool = text_of(await client.call_tool("guidance", {"topic": "tool", "tool_name": "set_speed"}))
        assert "Change the speed of a running pump." in tool
        assert tool.endswith('`set_speed` is also a topic of its own: `guidance` with {"topic": "set_speed"} gives it.')


# -- MCP_GROUP_* and a reload --------------------------------------------------------------------

WITH_MAINT = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n[groups.maint]\nslots = ["pump-*"]\nenabled = false\n'
WITHOUT_MAINT = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n'


@pytest.fixture
async def toggled(tmp_path: Path) -> AsyncIterator[GatewayServer]:
    """A gateway started from a file with [groups.maint] and MCP_GROUP_MAINT=true in its environment."""
    path = tmp_path / "gateway.toml"
    path.write_text(WITH_MAINT)
    environ = {"MCP_GROUP_MAINT": "true"}
    server = GatewayServer(load_config(path, environ=environ), source=ConfigSource(str(path), environ=environ))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_reload_removing_a_toggled_group_warns_and_applies(
    toggled: GatewayServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{toggled.url}/groups") as response:
            before = {group["name"]: group["enabled_by"] for group in (await response.json())["groups"]}
        assert before == {"pumps": "config", "maint": "environment variable MCP_GROUP_MAINT"}

        (tmp_path / "gateway.toml").write_text(WITHOUT_MAINT)
        with caplog.at_level(logging.WARNING):
            report = await toggled.reload()
        assert report.outcome == "applied", report.refusals
        said = "environment variable MCP_GROUP_MAINT: no such group in the configuration loaded now; ignored"
        assert [warning for warning in report.warnings if warning.startswith(said)], report.warnings
        assert [message for message in caplog.messages if message.startswith(f"config: {said}")], caplog.messages

        async with http.get(f"{toggled.url}/groups") as response:
            assert [group["name"] for group in (await response.json())["groups"]] == ["pumps"]

        # Renamed back: the variable names it again and turns it on.
        (tmp_path / "gateway.toml").write_text(WITH_MAINT)
        assert (await toggled.reload()).outcome == "applied"
        async with http.get(f"{toggled.url}/groups") as response:
            states = {group["name"]: group["enabled"] for group in (await response.json())["groups"]}
        assert states == {"pumps": True, "maint": True}


# -- mcp-gateway stdio --group --------------------------------------------------------------------


@pytest.mark.parametrize("group", ["pumps\n", "search", "guidance"])
async def test_stdio_refuses_a_group_name_with_a_newline_or_a_built_in_name(group: str) -> None:
    code, stderr = await bridge_exit("--group", group)
    assert code == 2, stderr
    assert stderr.startswith(f"mcp-gateway stdio: --group {group!r} is not a tool group's name"), stderr
