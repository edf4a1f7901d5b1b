"""`mcp-gateway run` on uvloop by default, on asyncio's loop when told, and refusing a missing uvloop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import uvloop
from mcp import Client

from tests.support.gateway_process import gateway_process, run_to_exit


async def broker_info(url: str) -> dict[str, Any]:
    async with Client(f"{url}/_broker/mcp", mode="2026-07-28") as client:
        result = await client.call_tool("broker_info", {})
    info: dict[str, Any] | None = result.structured_content
    assert info is not None
    return info


async def test_a_gateway_serves_on_uvloop_by_default() -> None:
    async with gateway_process("--port", "0") as gateway:
        assert (await broker_info(gateway.url))["event_loop"] == f"uvloop {vars(uvloop)['__version__']}"


async def test_event_loop_asyncio_serves_on_the_stock_loop() -> None:
    async with gateway_process("--port", "0", env={"MCP_GATEWAY_EVENT_LOOP": "asyncio"}) as gateway:
        assert (await broker_info(gateway.url))["event_loop"] == "asyncio"


async def test_event_loop_uvloop_without_uvloop_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "uvloop.py").write_text("raise ImportError('hidden by the test')\n")
    code, _, err = await run_to_exit(
        "run", "--port", "0", env={"MCP_GATEWAY_EVENT_LOOP": "uvloop", "PYTHONPATH": str(tmp_path)}
    )
    assert code == 2
    assert 'mcp-gateway: event_loop = "uvloop", but uvloop is not installed' in err
