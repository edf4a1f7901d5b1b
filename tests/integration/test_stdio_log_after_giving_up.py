"""Where a session-era stdio child's log lines go while it still runs a call the gateway gave up
(docs/upstreams.md, "Log messages"; docs/protocol-clients.md, "Request-tied notifications").

The child is an ordinary SDK server (this module, run with `python -m`): its tool logs with
`ctx.info(...)`, which names no request, and ignores cancellation, as a tool that shields its work
does. When the caller cancels the call, or the gateway's deadline ends it, the child keeps logging that
caller's lines; they reach no other caller and no listener. The gateway stops holding the call after
the slot's request_timeout_ms, since an SDK server never answers a cancelled request. Real SDK clients
listen.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_stdio_log_routing import START_S, listener

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(90),
]

REPO = Path(__file__).resolve().parents[2]
SLOT = "worker"


def build_child() -> MCPServer:
    server = MCPServer("stdio-shielded-logger")

    @server.tool()
    async def work(tag: str, ctx: Context, lines: int = 10, interval_s: float = 0.2) -> str:
        """Log `lines` lines, one every `interval_s` seconds, finishing even when the call is cancelled."""
        with anyio.CancelScope(shield=True):
            for number in range(lines):
                await ctx.info(f"{tag} line {number}")
                await anyio.sleep(interval_s)
        return f"{tag} done"

    @server.tool()
    async def chatter(tag: str, ctx: Context) -> str:
        """Log two lines at once and answer."""
        await ctx.info(f"{tag} info")
        await ctx.warning(f"{tag} warning")
        return f"chattered {tag}"

    return server


def child() -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.integration.test_stdio_log_after_giving_up"]
    return {"name": SLOT, "command": command, "cwd": str(REPO), "era": "session"}


async def started(gateway_factory: GatewayFactory, **providers: Any) -> GatewayServer:
    server = await gateway_factory(upstreams={"stdio": [child()]}, providers=providers)
    await wait_ready_slot(server, SLOT, START_S)
    return server


def lines_of(tag: str, heard: list[str]) -> list[str]:
    return [line for line in heard if line.startswith(f"{tag} ")]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_cancelled_calls_later_log_lines_reach_no_other_caller(
    gateway_factory: GatewayFactory, mode: str
) -> None:
    server = await started(gateway_factory)
    url = f"{server.url}/{SLOT}/mcp"
    first: list[str] = []
    second: list[str] = []
    onlooker: list[str] = []
    async with (
        listener(url, first, mode) as caller,
        listener(url, second, mode) as other,
        listener(url, onlooker) as idle,
    ):
        await idle.set_logging_level("debug")
        with pytest.raises(MCPError):  # the SDK gives up after 0.7 s and cancels the call
            await caller.call_tool("work", {"tag": "A", "lines": 12, "interval_s": 0.2}, read_timeout_seconds=0.7)
        # The child logs on with nothing else pending: not the server's own, so no GET stream gets it.
        await asyncio.sleep(0.5)
        for turn in range(3):  # other calls while the child still logs A's lines
            await other.call_tool("chatter", {"tag": f"B{turn}"})
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.5)  # the child's last lines of A come in
    assert lines_of("A", first)[:2] == ["A line 0", "A line 1"]  # A's lines while its call ran are A's
    assert [line for line in second if line.startswith("A ")] == []
    assert onlooker == []


async def test_a_call_past_its_deadline_keeps_its_later_log_lines_from_other_callers(
    gateway_factory: GatewayFactory,
) -> None:
    server = await started(gateway_factory, request_timeout_ms=1000)
    url = f"{server.url}/{SLOT}/mcp"
    first: list[str] = []
    second: list[str] = []
    onlooker: list[str] = []
    async with (
        listener(url, first) as caller,
        listener(url, second) as other,
        listener(url, onlooker) as idle,
    ):
        await idle.set_logging_level("debug")
        with pytest.raises(MCPError) as failure:
            await caller.call_tool("work", {"tag": "A", "lines": 8, "interval_s": 0.2})
        assert isinstance(failure.value.error.data, dict) and failure.value.error.data["reason"] == "deadline"
        for turn in range(3):
            await other.call_tool("chatter", {"tag": f"B{turn}"})
            await asyncio.sleep(0.15)
        await asyncio.sleep(1.0)
    assert lines_of("A", first)[:2] == ["A line 0", "A line 1"]
    assert [line for line in second if line.startswith("A ")] == []
    assert onlooker == []


async def test_a_given_up_call_the_child_never_answers_is_held_only_for_the_request_timeout(
    gateway_factory: GatewayFactory,
) -> None:
    hold_s = 1.5
    server = await started(gateway_factory, request_timeout_ms=int(hold_s * 1000))
    url = f"{server.url}/{SLOT}/mcp"
    first: list[str] = []
    second: list[str] = []
    async with listener(url, first) as caller, listener(url, second) as other:
        with pytest.raises(MCPError):  # cancelled after 0.3 s; the child finishes at 0.6 s and never answers
            await caller.call_tool("work", {"tag": "A", "lines": 3, "interval_s": 0.2}, read_timeout_seconds=0.3)
        # Held: the child may still be writing A's lines, so B's call's own lines cannot be told apart.
        await other.call_tool("chatter", {"tag": "B0"})
        await asyncio.sleep(hold_s + 0.5)
        # Past the bound: B's call is again the only one the child can be working on.
        await other.call_tool("chatter", {"tag": "B1"})
        await asyncio.sleep(0.3)
    assert second == ["B1 info", "B1 warning"]
    session = server.gateway.registry.slots[SLOT].live
    assert session is not None and len(session.given_up) == 0


if __name__ == "__main__":
    build_child().run("stdio")
