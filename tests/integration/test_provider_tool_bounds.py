"""What one provider's tools/list can make the gateway hold and show: limits.max_tools_per_slot, and
the tool names clients are shown (docs/provider-api.md, "Tool names")."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.southbound import Boards, ScriptedBoard, provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}}


class PagedBoard(ScriptedBoard):
    """A board that answers tools/list in pages of `page_size` tools, counting the pages asked for."""

    page_size = 6
    pages_asked = 0

    async def _on_text(self, data: str | bytes) -> None:
        message = orjson.loads(data)
        if isinstance(message, dict) and message.get("method") == "tools/list":
            self.pages_asked += 1
            start = int((message.get("params") or {}).get("cursor") or 0)
            end = start + self.page_size
            result: dict[str, Any] = {"tools": self.tools[start:end]}
            if end < len(self.tools):
                result["nextCursor"] = str(end)
            await self.reply(message, result)
            return
        await super()._on_text(data)


async def names_at(url: str) -> list[str]:
    async with Client(url, mode="legacy") as client:
        return [listed.name for listed in (await client.list_tools()).tools]


async def test_tools_beyond_the_cap_are_left_out_and_their_pages_not_read(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    server = await gateway_factory(limits={"max_tools_per_slot": 10})
    ws = await http.ws_connect(server.url.replace("http", "ws", 1) + "/provider/crowded", autoping=False)
    board = PagedBoard(ws, multiplexed=False, tools=[tool(f"t{index}") for index in range(18)])
    try:
        await wait_ready_slot(server, "crowded")
        assert await names_at(f"{server.url}/crowded/mcp") == [f"t{index}" for index in range(10)]
        assert board.pages_asked == 2  # the third page is never asked for
        status = await provider_status(server.url, "crowded")
        assert status["tools"] == 10
        assert status["tools_left_out"] == {
            "max_tools": 10,
            "over_cap": 2,
            "max_tool_list_bytes": 1_048_576,
            "tool_list_bytes": sum(len(orjson.dumps(tool(f"t{index}"))) for index in range(10)),
            "over_bytes": 0,
            "names_left_out": 0,
            "names_left_out_shown": [],
            "max_tools_pages": 64,
            "pages_cut": False,
        }
        # The provider lists again: counted again, warned about once per connection.
        await board.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        await wait_for(lambda: board.pages_asked == 4, what="the gateway to list the tools again")
        metrics = await scrape(http, server)
        assert metrics.get("mcpgw_limit_hits_total", limit="max_tools_per_slot") == 2
        assert metrics.value("mcpgw_limit", limit="max_tools_per_slot") == 10
        warned = [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == "tools_over_cap"]
        assert warned == [
            "provider for slot crowded lists more than 10 tools (at least 12); the first 10 are listed "
            "(limits.max_tools_per_slot)"
        ]
    finally:
        await board.close()


NAMES = [
    "ok",
    "x" * 129,
    "evil\u202etxt.exe",
    "line\nbreak",
    "zero\u200bwidth",
    "ok",
    "tab\there",
    "y" * 128,
    "naïve",
]


async def test_names_clients_should_not_be_shown_are_left_out_with_one_warning(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    server = await gateway_factory()
    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
    tools = [tool(name) for name in NAMES]
    await boards.connect(server.url, "/provider/odd", tools=tools, first_frame=register)
    await wait_ready_slot(server, "odd")
    assert await names_at(f"{server.url}/odd/mcp") == ["ok", "y" * 128, "naïve"]
    status = await provider_status(server.url, "odd")
    left_out = status["tools_left_out"]
    assert left_out["names_left_out"] == 6
    assert left_out["names_left_out_shown"] == [
        f"{'x' * 40!r}… (129 characters) (it is 129 characters long, over 128)",
        "'evil\\u202etxt.exe' (it holds the bidirectional control U+202E)",
        "'line\\nbreak' (it holds a control character, U+000A)",
        "'zero\\u200bwidth' (it holds a format character, U+200B)",
        "'ok' (an earlier tool has the same name)",
    ]
    warned = [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == "tool_names"]
    assert len(warned) == 1
    assert warned[0].startswith(
        "provider for slot odd lists 6 tool names clients are not shown; those tools are left out "
    )
    assert warned[0].endswith("'ok' (an earlier tool has the same name); and 1 more")
    assert "\u202e" not in warned[0] and "\n" not in warned[0]
