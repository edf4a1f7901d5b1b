"""Execution limits through a real gateway: simulated pumps (the board's own firmware modules) and a
provider that holds its `start` call, agents with their own tokens calling them with the official SDK
client; every refusal is -32029, recorded in the audit trail, and never reaches the device
(docs/governance-limits.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.core.errors import RpcError
from gateway.policy.execution.wire import CallerOfRef, reserve_budget, settle_budget
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot

AGENT_1 = secrets.token_urlsafe(32)
AGENT_2 = secrets.token_urlsafe(32)
SPEED_WINDOW_MS = 3000
"""Short enough to wait for in a test, long enough for three calls to fall inside it on a slow host."""
BUDGET_WINDOW_MS = 1500

POLICY: dict[str, Any] = {
    "roles": {
        "operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]},
    },
    "assign": [
        {"principal": "token:agent-1", "role": "operator", "resources": ["/plant/**"]},
        {"principal": "token:agent-2", "role": "operator", "resources": ["/plant/**"]},
    ],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
    "execution_limits": [
        {
            "id": "speed-changes-per-agent",
            "match": {"capability": "tool:set_speed", "resource": "/plant/**"},
            "group_by": ["subject"],
            "calls": {"max": 3, "window_ms": SPEED_WINDOW_MS},
        },
        {"id": "one-start-per-pump", "match": {"capability": "tool:start"}, "group_by": ["provider"], "concurrency": 1},
        {
            "id": "flush-per-agent",
            "match": {"provider": "pump-*", "capability": "pump.flush"},
            "group_by": ["subject"],
            "budget": {"unit": "flush-litre", "max": 10, "window_ms": BUDGET_WINDOW_MS},
        },
    ],
}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def auth() -> dict[str, Any]:
    return {"tokens": [{"name": "agent-1", "sha256": sha(AGENT_1)}, {"name": "agent-2", "sha256": sha(AGENT_2)}]}


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[tuple[GatewayServer, Simulator]]:
    server = await gateway_factory(
        auth=auth(),
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db")},
        providers={"heartbeat_interval_s": 600},  # no ping reaches a board while a test counts its requests
    )
    simulator = Simulator(server.url, SimulatorSettings(pumps=2, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        for slot in ("pump-1", "pump-2"):
            await wait_ready_slot(server, slot)
        yield server, simulator
    finally:
        await simulator.stop()


@contextlib.asynccontextmanager
async def client(server: GatewayServer, slot: str, token: str, mode: str = "2026-07-28") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}/{slot}/mcp", http_client=transport), mode=mode) as sdk,
    ):
        yield sdk


def board_requests(simulator: Simulator, slot: str) -> int:
    return int(simulator.state(slot)["requests"]["requests"])


def refusals_in_trail(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions WHERE effect = 'refuse-limit' ORDER BY id"))


async def test_speed_changes_per_agent_are_refused_past_the_window_and_pass_again_after_it(
    plant: tuple[GatewayServer, Simulator], tmp_path: Path
) -> None:
    server, simulator = plant
    async with client(server, "pump-1", AGENT_1) as agent_1, client(server, "pump-1", AGENT_2) as agent_2:
        assert not (await agent_1.call_tool("start", {"speed_rpm": 1000})).is_error
        for speed in (1100, 1200, 1300):
            assert not (await agent_1.call_tool("set_speed", {"speed_rpm": speed})).is_error
        before = board_requests(simulator, "pump-1")
        with pytest.raises(MCPError) as refused:
            await agent_1.call_tool("set_speed", {"speed_rpm": 1800})
        error = refused.value.error
        assert error.code == -32029
        assert isinstance(error.data, dict)
        retry_ms = error.data.pop("retryAfterMs")
        assert 0 < retry_ms <= SPEED_WINDOW_MS
        assert error.data == {
            "slot": "pump-1",
            "reason": "limit_exceeded",
            "ruleId": "speed-changes-per-agent",
            "kind": "calls",
            "traceId": ANY,  # the request's trace (docs/telemetry.md)
        }
        assert error.message.startswith(
            'Execution limit "speed-changes-per-agent" reached for subject token:agent-1: at most 3 calls per 3 s'
        )
        # The board never saw the refused call.
        assert board_requests(simulator, "pump-1") == before
        assert simulator.state("pump-1")["status"]["setpoint_rpm"] == 1300
        # Another agent has a window of its own.
        assert not (await agent_2.call_tool("set_speed", {"speed_rpm": 1400})).is_error
        await asyncio.sleep(retry_ms / 1000)
        assert not (await agent_1.call_tool("set_speed", {"speed_rpm": 1800})).is_error
        assert simulator.state("pump-1")["status"]["setpoint_rpm"] == 1800
        await agent_1.call_tool("stop", {})

    rows = refusals_in_trail(tmp_path / "audit.db")
    assert [(row["tool"], row["principal"]) for row in rows] == [("set_speed", '["token:agent-1"]')]
    assert "speed-changes-per-agent" in json.loads(rows[0]["rules"])
    assert json.loads(rows[0]["constraints"])["reason"] == "limit_exceeded"
    assert rows[0]["reason"].startswith('Execution limit "speed-changes-per-agent" reached')
    problems = {problem.id: problem for problem in server.gateway.broker.problems()}
    assert "rule speed-changes-per-agent (limit_exceeded) refused token:agent-1" in problems["limits.refused"].evidence


def held_pump(seen: list[str], release: asyncio.Event) -> MCPServer:
    """A pump whose `start` takes until the test releases it: a call in flight for as long as needed."""
    server = MCPServer("held-pump")

    @server.tool()
    async def start(speed_rpm: int) -> str:
        """Start the pump; answers once the test releases it."""
        seen.append(f"start {speed_rpm}")
        await release.wait()
        return "started"

    return server


async def test_a_second_start_while_the_first_is_in_flight_is_refused_and_never_reaches_the_pump(
    plant: tuple[GatewayServer, Simulator], publishers: Publishers, tmp_path: Path
) -> None:
    server, _ = plant
    assert server.governor is not None
    seen: list[str] = []
    release = asyncio.Event()
    await publishers.start(server, "pump-9", held_pump(seen, release))
    async with client(server, "pump-9", AGENT_1, "legacy") as agent_1, client(server, "pump-9", AGENT_2) as agent_2:
        first = asyncio.create_task(agent_1.call_tool("start", {"speed_rpm": 1000}))
        await wait_for(lambda: seen == ["start 1000"], what="the first start at the pump")
        with pytest.raises(MCPError) as refused:
            await agent_2.call_tool("start", {"speed_rpm": 1200})
        assert refused.value.error.code == -32029
        # No retryAfterMs: only the first call ending frees the place, not time.
        assert refused.value.error.data == {
            "slot": "pump-9",
            "reason": "concurrency_exceeded",
            "ruleId": "one-start-per-pump",
            "kind": "concurrency",
            "traceId": ANY,
        }
        # Each pump has its own place: a simulated pump starts meanwhile.
        async with client(server, "pump-1", AGENT_2) as other_pump:
            assert not (await other_pump.call_tool("start", {"speed_rpm": 1000})).is_error
            await other_pump.call_tool("stop", {})
        assert seen == ["start 1000"]
        status = server.governor.status()["limits"]
        start_rule = next(rule for rule in status["rules"] if rule["id"] == "one-start-per-pump")
        assert start_rule["busiest"] == [{"group": {"provider": "pump-9"}, "in_flight": 1}]
        release.set()
        assert not (await first).is_error
        # The first call ended and gave its place back.
        assert not (await agent_2.call_tool("start", {"speed_rpm": 1200})).is_error
        assert seen == ["start 1000", "start 1200"]
    rows = refusals_in_trail(tmp_path / "audit.db")
    assert [(row["slot"], row["tool"], row["principal"]) for row in rows] == [("pump-9", "start", '["token:agent-2"]')]
    assert "one-start-per-pump" in json.loads(rows[0]["rules"])


async def test_a_budget_is_exhausted_kept_across_a_reload_and_refilled(
    plant: tuple[GatewayServer, Simulator],
) -> None:
    server, _ = plant
    assert server.governor is not None
    ledger = server.governor.limits.budget
    callers = {"cr_agent1": CallerOfRef(frozenset({"token:agent-1"}), "pump-1", "/plant/pump-1")}

    def reserve(quantity: int, key: str) -> dict[str, Any]:
        params = {
            "principal": {"type": "caller-ref", "ref": "cr_agent1"},
            "capability": "pump.flush",
            "resource": "pump-1",
            "unit": "flush-litre",
            "quantity": quantity,
            "idempotencyKey": key,
        }
        return reserve_budget(params, "pump-1", callers.get, ledger)

    grants = [reserve(6, "a"), reserve(4, "b")]
    with pytest.raises(RpcError) as exhausted:
        reserve(1, "c")
    assert exhausted.value.code == -32029
    assert exhausted.value.data["reason"] == "limit_exceeded"
    assert exhausted.value.data["ruleId"] == "flush-per-agent"
    assert server.reload_policy() is None  # the rule is unchanged, so its counters are kept
    with pytest.raises(RpcError) as still:
        reserve(1, "c")
    retry_ms = still.value.data["retryAfterMs"]
    await asyncio.sleep(retry_ms / 1000)
    refilled = reserve(1, "c")
    assert refilled["quantity"] == 1 and refilled["replayed"] is False
    for grant in [*grants, refilled]:
        settled = settle_budget(
            {"reservationId": grant["reservationId"], "used": 1, "result": "success"}, "pump-1", ledger
        )
        assert settled["settled"] is True
    assert server.governor.status()["limits"]["reservations"]["unsettled"] == 0
