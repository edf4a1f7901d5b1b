"""The shortest end-to-end path: an SDK server published over WebSocket, called by an SDK client."""

from __future__ import annotations

import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import Publishers
from tests.support.servers import demo_server


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_call_through_gateway(gateway: GatewayServer, publishers: Publishers, mode: str) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    async with Client(f"{gateway.url}/pump-1/mcp", mode=mode) as client:
        tools = await client.list_tools()
        assert {tool.name for tool in tools.tools} >= {"add", "echo"}
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.structured_content == {"result": 5}
