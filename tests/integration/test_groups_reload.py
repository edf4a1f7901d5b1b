"""Tool groups across a reload, seen by SDK clients holding a session on them: a group that a reload
removes, and groups whose list a reload leaves as it was; and GET /mcp-servers and GET /groups counting
what a policy reload lets the caller see."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client, MCPError

from tests.conftest import Publishers, wait_for
from tests.integration.test_policy_reload_list_changed import (
    CONTROL_TOOLS,
    OBSERVER,
    OPERATOR,
    config_text,
    policy_text,
)
from tests.integration.test_reload import AGENT_OLD, Reloadable, pumps, reloadable, rewrite
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server

__all__ = ["reloadable"]  # the fixture, used by name

GROUPED = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n[groups.all]\nslots = ["*"]\n'
UNGROUPED = 'port = 0\n[groups.all]\nslots = ["*"]\n'


async def test_a_session_on_a_removed_group_sees_it_empty_and_new_clients_get_404(reloadable: Reloadable) -> None:
    server = await reloadable(GROUPED)
    async with pumps(server), Client(f"{server.url}/mcp/pumps", mode="legacy") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "pump-1__get_status" in names
        rewrite(server, UNGROUPED)
        report = await server.reload()
        assert report.outcome == "applied", report.refusals

        # The session stays, on a group that now holds no tool: only the built-ins are left.
        assert [tool.name for tool in (await client.list_tools()).tools] == ["guidance", "search"]
        with pytest.raises(MCPError, match="Unknown tool: pump-1__get_status is not offered by /mcp/pumps"):
            await client.call_tool("pump-1__get_status", {})
        guide = await client.call_tool("guidance", {})
        assert isinstance(guide.content[0], types.TextContent)

        # A new session is told the group is gone, with the groups that are left.
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{server.url}/mcp/pumps", json=INITIALIZE, headers=MCP_HEADERS) as response,
        ):
            assert response.status == 404
            refusal = await response.json()
        assert refusal["error"] == "unknown_group"
        assert refusal["enabled_groups"] == ["all"]


async def test_a_reload_tells_only_the_endpoints_whose_list_changed(
    reloadable: Reloadable, publishers: Publishers
) -> None:
    before = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n'
    server = await reloadable(before)
    changes: dict[str, int] = {"/mcp": 0, "/mcp/pumps": 0}

    def counter(path: str) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changes[path] += 1

        return on_message

    async with pumps(server), contextlib.AsyncExitStack() as stack:
        await publishers.start(server, "lab-1", demo_server("lab"))
        clients = {
            path: await stack.enter_async_context(
                Client(f"{server.url}{path}", mode="legacy", message_handler=counter(path))
            )
            for path in changes
        }
        await wait_for(
            lambda: sum(s.stream is not None for s in server.gateway.sessions.sessions.values()) == 2,
            what="both GET streams",
        )
        listed = {path: [tool.name for tool in (await client.list_tools()).tools] for path, client in clients.items()}
        assert "lab-1__add" not in listed["/mcp"]

        # A new group of other slots: /mcp lists lab-1's tools now, /mcp/pumps lists what it listed.
        rewrite(server, before + '[groups.lab]\nslots = ["lab-*"]\n')
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        await wait_for(lambda: changes["/mcp"] == 1, what="list_changed at /mcp")
        assert "lab-1__add" in [tool.name for tool in (await clients["/mcp"].list_tools()).tools]
        assert [tool.name for tool in (await clients["/mcp/pumps"].list_tools()).tools] == listed["/mcp/pumps"]
        await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)
        assert changes == {"/mcp": 1, "/mcp/pumps": 0}

        # A new description changes no list: nobody is told.
        rewrite(server, before + 'description = "Run the pumps"\n[groups.lab]\nslots = ["lab-*"]\n')
        assert (await server.reload()).outcome == "applied"
        await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)
        assert changes == {"/mcp": 1, "/mcp/pumps": 0}


async def test_mcp_servers_counts_only_the_tools_the_policy_lets_the_caller_see(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(OPERATOR)
    server = await reloadable(config_text(policy, tmp_path / "audit.db"))
    headers = {"Authorization": f"Bearer {AGENT_OLD}"}

    async def counts() -> tuple[int, int, list[str]]:
        """pump-1's tools at GET /mcp-servers, the pumps group's at GET /groups, and its members."""
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{server.url}/mcp-servers") as response:
                assert response.status == 200
                servers = {entry["name"]: entry for entry in await response.json()}
            async with http.get(f"{server.url}/groups") as response:
                assert response.status == 200
                groups = {entry["name"]: entry for entry in (await response.json())["groups"]}
        return servers["pump-1"]["tools"], groups["pumps"]["tools"], groups["pumps"]["members"]

    async with pumps(server):
        session = server.gateway.registry.slots["pump-1"].live
        assert session is not None
        every = len(session.tools)
        assert await counts() == (every, every, ["pump-1"])

        # A policy that takes tool.control away: its control tools are counted nowhere.
        policy.write_text(OBSERVER)
        assert (await server.reload()).outcome == "applied"
        assert await counts() == (every - len(CONTROL_TOOLS), every - len(CONTROL_TOOLS), ["pump-1"])

        # No tool at all: the slot is still listed (the caller may call it), with none of its tools counted.
        policy.write_text(policy_text(["mcp.tools.list", "mcp.tools.call"]))
        assert (await server.reload()).outcome == "applied"
        assert await counts() == (0, 0, ["pump-1"])
