"""The bound on an execution limit's groups through a real gateway: two agents with their own tokens
take turns at a rule with max_keys = 1, each let in once the other's window is empty, never locked out;
a refusal while the other's window still counts carries retryAfterMs, and an idle group is dropped
(docs/governance-limits.md, "Memory bounds")."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_ready_slot

AGENT_A = secrets.token_urlsafe(32)
AGENT_B = secrets.token_urlsafe(32)
WINDOW_MS = 1500
"""Short enough to wait for twice, long enough for a refused call to land inside the other's window."""

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [
        {"principal": "token:agent-a", "role": "operator", "resources": ["/plant/**"]},
        {"principal": "token:agent-b", "role": "operator", "resources": ["/plant/**"]},
    ],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
    "execution_limits": [
        {
            "id": "keys",
            "match": {"provider": "pump-1", "capability": "tool:get_status"},
            "group_by": ["subject"],
            "rate": {"max": 100, "window_ms": WINDOW_MS},
            "max_keys": 1,
        }
    ],
}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
async def pump(gateway_factory: GatewayFactory) -> AsyncIterator[GatewayServer]:
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent-a", "sha256": sha(AGENT_A)}, {"name": "agent-b", "sha256": sha(AGENT_B)}]},
        policy=POLICY,
        providers={"heartbeat_interval_s": 600},
    )
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        yield server
    finally:
        await simulator.stop()


@contextlib.asynccontextmanager
async def client(server: GatewayServer, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}/pump-1/mcp", http_client=transport)) as sdk,
    ):
        yield sdk


async def keys_full(agent: Client) -> tuple[str, int]:
    """The refusal's message and retryAfterMs; the refusal must carry one."""
    with pytest.raises(MCPError) as refused:
        await agent.call_tool("get_status", {})
    error = refused.value.error
    assert error.code == -32029
    assert isinstance(error.data, dict)
    assert (error.data["reason"], error.data["ruleId"]) == ("limit_keys_full", "keys")
    retry_ms = error.data.get("retryAfterMs")
    assert isinstance(retry_ms, int) and 0 < retry_ms <= WINDOW_MS, error.message
    return error.message, retry_ms


def groups(server: GatewayServer) -> int:
    assert server.governor is not None
    (rule,) = server.governor.status()["limits"]["rules"]
    return int(rule["groups"])


async def test_two_agents_take_turns_at_a_rule_of_one_group_and_neither_is_locked_out(pump: GatewayServer) -> None:
    async with client(pump, AGENT_A) as agent_a, client(pump, AGENT_B) as agent_b:
        assert not (await agent_a.call_tool("get_status", {})).is_error
        _, retry_ms = await keys_full(agent_b)
        await asyncio.sleep(retry_ms / 1000)
        assert not (await agent_b.call_tool("get_status", {})).is_error  # agent-a's idle group made room
        message, retry_ms = await keys_full(agent_a)  # agent-b's call is still in its window
        assert "none idle yet" in message and "in flight" not in message
        await asyncio.sleep(retry_ms / 1000)
        assert not (await agent_a.call_tool("get_status", {})).is_error
        await asyncio.sleep(WINDOW_MS / 1000)
        assert groups(pump) == 0  # every window is empty: no group is kept
        assert not (await agent_b.call_tool("get_status", {})).is_error
