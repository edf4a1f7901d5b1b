"""A tool group that a reload removes, seen by SDK clients holding a session on it, in both eras."""

from __future__ import annotations

import aiohttp
import mcp_types as types
import pytest
from mcp import Client, MCPError

from tests.integration.test_groups import INITIALIZE, MCP_HEADERS
from tests.integration.test_reload import Reloadable, pumps, reloadable, rewrite

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
