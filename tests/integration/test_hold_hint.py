"""A place kept by a cancelled call, through a real gateway and a real stdio SDK server
(docs/governance-limits.md, "Concurrency"): an SDK server never answers a request its client cancelled,
so the call's place under `concurrency = 1` is kept for limits.cancelled_call_hold_s. The next call's
refusal says so and carries retryAfterMs; retrying as told passes. Real SDK clients.

The child is this module, run with `python -m`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_execution_limits import client
from tests.integration.test_stdio_log_routing import START_S

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(90),
]

REPO = Path(__file__).resolve().parents[2]
SLOT = "recorder"
AGENT = "hold-hint-agent-token-0123456789abcdef"
POLICY: dict[str, Any] = {
    "roles": {"caller": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:agent", "role": "caller", "resources": ["/**"]}],
    "execution_limits": [{"id": "one-slow", "match": {"capability": "tool:slow"}, "concurrency": 1}],
}
AUTH = {"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]}
HOLD_S = 1.0


def in_flight(server: GatewayServer) -> int:
    assert server.governor is not None
    (rule,) = server.governor.status()["limits"]["rules"]
    return int(rule["in_flight"])


def build_child() -> MCPServer:
    server = MCPServer("recorder")

    @server.tool()
    async def slow(seconds: float = 1.0) -> str:
        """Wait `seconds`, then answer."""
        await anyio.sleep(seconds)
        return "done"

    return server


async def started(gateway_factory: GatewayFactory, **config: Any) -> GatewayServer:
    command = [sys.executable, "-m", "tests.integration.test_hold_hint"]
    server = await gateway_factory(
        auth=AUTH,
        policy=POLICY,
        upstreams={"stdio": [{"name": SLOT, "command": command, "cwd": str(REPO), "era": "session"}]},
        **config,
    )
    await wait_ready_slot(server, SLOT, START_S)
    return server


async def test_the_call_after_a_cancel_is_told_when_the_kept_place_comes_back(
    gateway_factory: GatewayFactory,
) -> None:
    server = await started(gateway_factory, limits={"cancelled_call_hold_s": HOLD_S})
    async with client(server, SLOT, AGENT, mode="legacy") as agent:
        with pytest.raises(MCPError):  # the SDK client gives up after 0.3 s and cancels the 1 s call
            await agent.call_tool("slow", {"seconds": 1}, read_timeout_seconds=0.3)
        with pytest.raises(MCPError) as refused:
            await agent.call_tool("slow", {"seconds": 0.1})
        error = refused.value.error
        assert error.code == -32029 and isinstance(error.data, dict), error
        assert (error.data["reason"], error.data["kind"]) == ("concurrency_exceeded", "concurrency")
        assert (
            "at most 1 call in flight, and that many are (1 of them kept by a call that was cancelled or passed "
            "its deadline, until its device answers or at most 1 s after it ended (limits.cancelled_call_hold_s))"
        ) in error.message
        retry_ms = error.data["retryAfterMs"]
        assert isinstance(retry_ms, int) and 1 <= retry_ms <= HOLD_S * 1000
        await asyncio.sleep(retry_ms / 1000 + 0.1)  # as told
        result = await agent.call_tool("slow", {"seconds": 0.1})
        assert not result.is_error and result.content[0].text == "done"  # type: ignore[union-attr]


async def test_a_call_cancelled_before_it_was_sent_gives_its_place_back_at_once(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    server = await started(gateway_factory, audit={"path": str(trail)})  # the default hold: 60 s
    async with client(server, SLOT, AGENT, mode="legacy") as agent:
        assert (await agent.call_tool("slow", {"seconds": 0})).content[0].text == "done"  # type: ignore[union-attr]
        other = sqlite3.connect(trail, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the trail's writer waits for this lock with the next decision
        try:
            with pytest.raises(MCPError):  # cancelled while its decision is written: never forwarded
                await agent.call_tool("slow", {"seconds": 1}, read_timeout_seconds=0.3)
            # Its place is back at the cancel, the trail still locked.
            await wait_for(lambda: in_flight(server) == 0, timeout=1.2, what="the place given back at the cancel")
        finally:
            other.execute("ROLLBACK")
            other.close()
        result = await agent.call_tool("slow", {"seconds": 0.1})
        assert not result.is_error and result.content[0].text == "done"  # type: ignore[union-attr]

    def statuses() -> list[tuple[str, str | None]]:
        with contextlib.closing(sqlite3.connect(f"file:{trail}?mode=ro", uri=True)) as db:
            return list(db.execute("SELECT status, error FROM results ORDER BY decision_id"))

    await wait_for(lambda: len(statuses()) == 3, what="the three results in the trail")
    assert statuses()[1] == ("cancelled", "cancelled by the client before it was sent")


if __name__ == "__main__":
    build_child().run("stdio")
