"""A tool group that a reload turns off (disabled or removed) and then on again, seen by the clients that
stayed connected to it: an SDK client holding a session and a GET stream on /mcp/<group>, and a raw
WebSocket client. They keep their session, are told `notifications/tools/list_changed` when the group
returns, and then list and call its tools; while it is off, `guidance` says so."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import wait_for
from tests.integration.test_groups_reload import GROUPED, UNGROUPED
from tests.integration.test_reload import Reloadable, pumps, reloadable, rewrite
from tests.integration.test_websocket_clients import RawSocket

__all__ = ["reloadable"]  # the fixture, used by name

DISABLED = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\nenabled = false\n[groups.all]\nslots = ["*"]\n'
TOOL = "pump-1__get_status"


async def reload_to(server: GatewayServer, text: str) -> None:
    rewrite(server, text)
    report = await server.reload()
    assert report.outcome == "applied", report.refusals


def overview(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


@pytest.mark.parametrize(
    ("off", "said"),
    [(DISABLED, "which is disabled (enabled = true under [groups.pumps]"), (UNGROUPED, "which was removed")],
    ids=["disabled", "removed"],
)
async def test_a_session_on_a_group_turned_off_and_on_again_hears_it_and_lists_its_tools(
    reloadable: Reloadable, off: str, said: str
) -> None:
    server = await reloadable(GROUPED)
    changes = 0

    async def on_message(message: Any) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    async with pumps(server):
        async with Client(f"{server.url}/mcp/pumps", mode="legacy", message_handler=on_message) as client:
            await wait_for(
                lambda: any(s.stream is not None for s in server.gateway.sessions.sessions.values()),
                what="the GET stream",
            )
            assert TOOL in [tool.name for tool in (await client.list_tools()).tools]
            await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)

            changes = 0
            await reload_to(server, off)
            await wait_for(lambda: changes == 1, what="list_changed when the group goes")
            assert [tool.name for tool in (await client.list_tools()).tools] == ["guidance", "search"]
            text = overview(await client.call_tool("guidance", {}))
            assert f"/mcp/pumps, the tool group `pumps`, {said}" in text, text
            assert "none ready now" not in text and "every enabled tool group" not in text, text

            # The group returns: the same session and GET stream hear it, then list and call its tools.
            changes = 0
            await reload_to(server, GROUPED)
            await wait_for(lambda: changes >= 1, what="list_changed when the group returns")
            assert TOOL in [tool.name for tool in (await client.list_tools()).tools]
            status = await client.call_tool(TOOL, {})
            assert not status.is_error, status
            assert "the tool group `pumps`. It offers" in overview(await client.call_tool("guidance", {}))
        # Closing it (DELETE) ends the session on the gateway too.
        await wait_for(lambda: not server.gateway.sessions.sessions, what="the session ended by its DELETE")


@pytest.mark.parametrize("off", [DISABLED, UNGROUPED], ids=["disabled", "removed"])
async def test_a_raw_websocket_on_a_group_turned_off_and_on_again_hears_it(reloadable: Reloadable, off: str) -> None:
    server = await reloadable(GROUPED)
    url = server.url.replace("http://", "ws://") + "/mcp/pumps"
    async with pumps(server), aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        socket = RawSocket(ws)
        await socket.initialize()

        async def names(request_id: int) -> list[str]:
            answer = await socket.call(request_id, "tools/list")
            return [tool["name"] for tool in answer["result"]["tools"]]

        assert TOOL in await names(1)
        await reload_to(server, off)
        assert await names(2) == ["guidance", "search"]

        socket.notifications.clear()
        await reload_to(server, GROUPED)
        heard = await socket.receive()
        assert heard == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        assert TOOL in await names(3)
