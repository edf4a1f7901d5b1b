"""limits.max_tool_list_bytes_per_slot: the JSON bytes of one provider's tools the gateway keeps. A provider
of large tools (long descriptions, each page just under max_frame_bytes) is cut at the bound as visibly as one
over max_tools_per_slot: in tools/list, provider_status `tools_left_out`, mcpgw_limit_hits_total and one
warning per connection (docs/security-limits.md, "What a provider's tool list can make the gateway hold").

The provider is a hand-written socket on `/providers` holding several slots, the shape of the attack: one
unauthenticated peer whose every slot lists pages of large tools."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.southbound import provider_status

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(60),
]

SETTING = "limits.max_tool_list_bytes_per_slot"


def big_tool(slot: str, index: int, description_bytes: int) -> dict[str, Any]:
    salt = f"{slot}-{index}-"
    return {
        "name": f"t{index}",
        "description": salt + "x" * (description_bytes - len(salt)),
        "inputSchema": {"type": "object"},
    }


def encoded(tool: dict[str, Any]) -> int:
    return len(orjson.dumps(tool))


class PagingPeer:
    """One `/providers` socket: each slot's tools in pages of `page_size`, counting the pages asked for."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, tools: dict[str, list[dict[str, Any]]], page_size: int):
        self.ws = ws
        self.tools = tools
        self.page_size = page_size
        self.pages_asked: Counter[str] = Counter()
        self._reader = asyncio.get_running_loop().create_task(self._serve())

    async def send(self, slot: str, message: dict[str, Any]) -> None:
        await self.ws.send_bytes(orjson.dumps({"provider": slot, "payload": message}))

    async def _serve(self) -> None:
        async for frame in self.ws:
            if frame.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                return
            envelope = orjson.loads(frame.data)
            slot, message = envelope["provider"], envelope["payload"]
            if not isinstance(message, dict) or "id" not in message or "method" not in message:
                continue
            method = message["method"]
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": slot, "version": "1"},
                }
            elif method == "tools/list":
                self.pages_asked[slot] += 1
                start = int((message.get("params") or {}).get("cursor") or 0)
                end = start + self.page_size
                result = {"tools": self.tools[slot][start:end]}
                if end < len(self.tools[slot]):
                    result["nextCursor"] = str(end)
            elif method == "ping":
                result = {}
            else:  # server/discover and anything else: a session-era board
                error = {"code": -32601, "message": f"Method not found: {method}"}
                await self.send(slot, {"jsonrpc": "2.0", "id": message["id"], "error": error})
                continue
            await self.send(slot, {"jsonrpc": "2.0", "id": message["id"], "result": result})


@contextlib.asynccontextmanager
async def peer(
    http: aiohttp.ClientSession, url: str, tools: dict[str, list[dict[str, Any]]], page_size: int
) -> AsyncIterator[PagingPeer]:
    ws = await http.ws_connect(url.replace("http", "ws", 1) + "/providers", max_msg_size=0)
    served = PagingPeer(ws, tools, page_size)
    try:
        for slot in tools:
            await served.send(slot, {"jsonrpc": "2.0", "method": "notifications/register"})
        yield served
    finally:
        await ws.close()
        await served._reader


async def names_at(url: str) -> list[str]:
    async with Client(url, mode="legacy") as client:
        return [listed.name for listed in (await client.list_tools()).tools]


def warnings_of(caplog: pytest.LogCaptureFixture, fault: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == fault]


async def test_tools_past_the_byte_bound_are_left_out_and_a_small_list_is_not(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    big = [big_tool("big", index, 10_000) for index in range(40)]
    sizes = [encoded(tool) for tool in big]
    bound = sum(sizes[:6])  # exactly six tools fit: a tool that fills the bound to the byte is kept
    small = [{"name": f"s{index}", "inputSchema": {"type": "object"}} for index in range(3)]
    server = await gateway_factory(limits={"max_tool_list_bytes_per_slot": bound})
    async with peer(http, server.url, {"big": big, "small": small}, page_size=4) as served:
        await wait_ready_slot(server, "big")
        await wait_ready_slot(server, "small")
        assert await names_at(f"{server.url}/big/mcp") == [f"t{index}" for index in range(6)]
        assert served.pages_asked["big"] == 2  # the tool that did not fit is on page 2; page 3 is never asked for
        status = await provider_status(server.url, "big")
        assert status["tools"] == 6
        assert status["tools_left_out"] == {
            "max_tools": 1024,
            "over_cap": 0,
            "max_tool_list_bytes": bound,
            "tool_list_bytes": bound,
            "over_bytes": 2,  # t6 and t7, the rest of page 2; later pages are unread
            "names_left_out": 0,
            "names_left_out_shown": [],
            "max_tools_pages": 64,
            "pages_cut": False,
        }

        assert await names_at(f"{server.url}/small/mcp") == ["s0", "s1", "s2"]
        small_left_out = (await provider_status(server.url, "small"))["tools_left_out"]
        assert small_left_out["over_bytes"] == 0
        assert small_left_out["tool_list_bytes"] == sum(encoded(tool) for tool in small)

        # The provider lists again: counted again, warned about once per connection.
        await served.send("big", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        await wait_for(lambda: served.pages_asked["big"] == 4, what="the gateway to list the tools again")
        metrics = await scrape(http, server)
        assert metrics.get("mcpgw_limit_hits_total", limit="max_tool_list_bytes_per_slot") == 2
        assert metrics.value("mcpgw_limit", limit="max_tool_list_bytes_per_slot") == bound
        assert warnings_of(caplog, "tools_over_bytes") == [
            f"provider for slot big lists tools whose JSON is over {bound} bytes ({SETTING}); the first 6 tools "
            f"({bound} bytes) are listed and at least 2 more are left out: shorten the tools' descriptions and "
            f"schemas, split them across slots, or raise {SETTING}"
        ]
        assert warnings_of(caplog, "tools_over_cap") == []


async def test_the_default_bound_stops_frame_sized_pages_of_large_tools(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # The reviewer's shape: 16 tools of ~60 KB to a page (under max_frame_bytes), many pages, several slots
    # on one unauthenticated socket. Without the bound each slot held every page (~61 MiB at 64 pages).
    tools = {slot: [big_tool(slot, index, 60_000) for index in range(16 * 4)] for slot in ("a", "b")}
    server = await gateway_factory()
    async with peer(http, server.url, tools, page_size=16) as served:
        for slot, listed in tools.items():
            await wait_ready_slot(server, slot)
            sizes = [encoded(tool) for tool in listed]
            kept = max(count for count in range(len(sizes) + 1) if sum(sizes[:count]) <= 1_048_576)
            assert kept == 17
            status = await provider_status(server.url, slot)
            assert status["tools"] == kept
            left_out = status["tools_left_out"]
            assert left_out["max_tool_list_bytes"] == 1_048_576
            assert left_out["tool_list_bytes"] == sum(sizes[:kept]) <= 1_048_576
            assert left_out["over_bytes"] == 32 - kept  # the rest of page 2
            assert served.pages_asked[slot] == 2
