"""Limits through a real gateway (docs/governance-limits.md, docs/governance-arguments.md): a client
cannot get past `concurrency = 1` by cancelling its own calls, since a cancelled or timed-out call keeps
its place until the device's late answer; and a limited argument left out is refused before it reaches
a simulated pump-1, which would otherwise run at its stored setpoint."""

from __future__ import annotations

import asyncio
import hashlib
from functools import partial
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_cancel_crosses_answer import AgentSession, answered_normally, board_in, cancels, final
from tests.integration.test_execution_limits import client
from tests.support.southbound import Boards

AGENT = "limits-fix-agent-token-0123456789abcdef"
ONE_VALVE = {"id": "one-valve", "match": {"capability": "tool:valve"}, "concurrency": 1}
POLICY: dict[str, Any] = {
    "roles": {"caller": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:agent", "role": "caller", "resources": ["/**"]}],
    "execution_limits": [ONE_VALVE],
}
AUTH = {"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]}
DEADLINE_MS = 400


def in_flight(gateway: GatewayServer) -> int:
    assert gateway.governor is not None
    rules = gateway.governor.status()["limits"]["rules"]
    return int(next(rule for rule in rules if rule["id"] == "one-valve")["in_flight"])


async def refused_at_once(client: AgentSession) -> dict[str, Any]:
    """A valve call the gateway answers itself: it must not wait for the board."""
    body = client.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
    status, _, told = await asyncio.wait_for(client.post(body), 5)
    assert status == 200, told
    return final(told)


@pytest.mark.parametrize("ends_by", ["cancel", "deadline"])
async def test_a_cancelled_or_timed_out_call_keeps_its_place_until_the_devices_late_answer(
    gateway_factory: GatewayFactory, boards: Boards, ends_by: str
) -> None:
    gateway = await gateway_factory(
        auth=AUTH,
        policy=POLICY,
        # A cancelled call's answer is heard until its deadline: the default 60 s for the cancel.
        slots={"declared": {"board": {"tool_timeouts_ms": {"valve": DEADLINE_MS}} if ends_by == "deadline" else {}}},
        providers={"heartbeat_interval_s": 600},
    )
    board = await board_in(gateway, boards)
    async with aiohttp.ClientSession() as http:
        first, second = (AgentSession(http, f"{gateway.url}/board/mcp", AGENT) for _ in range(2))
        await first.initialize()
        await second.initialize()
        body = first.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
        call = asyncio.create_task(first.post(body))
        forwarded = await board.request("tools/call")
        if ends_by == "cancel":
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"]}}
            assert (await first.post(cancel))[0] == 202
        await board.take(partial(cancels, forwarded["id"]), what="the gateway's notifications/cancelled")
        _, _, told = await asyncio.wait_for(call, 5)
        error = final(told)["error"]
        assert error["code"] == -32800 if ends_by == "cancel" else error["data"]["reason"] == "deadline", error
        # The board still works on the first call: a second one is refused and never reaches it.
        for _ in range(2):
            answer = await refused_at_once(second)
            assert answer["error"]["code"] == -32029, answer
            assert answer["error"]["data"]["reason"] == "concurrency_exceeded"
            assert "1 of them kept by a call that was cancelled or passed its deadline" in answer["error"]["message"]
            # Only the kept place blocks it: the hold's end (the default 60 s) lets the call pass.
            assert 59_000 <= answer["error"]["data"]["retryAfterMs"] <= 60_000
        assert in_flight(gateway) == 1
        # Its late answer gives the place back, once.
        await board.send({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": []}})
        await wait_for(lambda: in_flight(gateway) == 0, what="the place given back at the late answer")
        await answered_normally(second, board)
        assert in_flight(gateway) == 0


@pytest.fixture
async def pump(gateway_factory: GatewayFactory) -> Any:
    policy = {
        "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
        "assign": [{"principal": "token:agent", "role": "operator", "resources": ["/plant/**"]}],
        "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
        "limits": [
            {"resources": ["/plant/**"], "tool": "set_speed", "argument": "speed_rpm", "min": 300, "max": 2000},
            {
                "resources": ["/plant/**"],
                "tool": "start",
                "argument": "speed_rpm",
                "min": 300,
                "max": 1500,
                "action": "clamp",
            },
        ],
    }
    server = await gateway_factory(auth=AUTH, policy=policy, providers={"heartbeat_interval_s": 600})
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        yield server, simulator
    finally:
        await simulator.stop()


async def test_start_without_speed_rpm_is_refused_where_the_stored_setpoint_is_past_the_limit(
    pump: tuple[GatewayServer, Simulator],
) -> None:
    server, simulator = pump
    async with client(server, "pump-1", AGENT) as agent:
        # The stored setpoint becomes 2000, which set_speed's limit allows and start's does not.
        assert not (await agent.call_tool("start", {"speed_rpm": 1000})).is_error
        assert not (await agent.call_tool("set_speed", {"speed_rpm": 2000})).is_error
        assert not (await agent.call_tool("stop", {})).is_error
        assert simulator.state("pump-1")["status"]["setpoint_rpm"] == 2000
        requests = int(simulator.state("pump-1")["requests"]["requests"])
        result = await agent.call_tool("start", {})
        assert result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith('Not forwarded to pump-1: Argument "speed_rpm" is left out, but the limit set by ')
        assert 'pass "speed_rpm" explicitly' in text
        assert result.meta is not None
        refused = result.meta["io.github.mcp-gateway/refused"]
        assert (refused["reason"], refused["argument"]) == ("argument_required_by_limit", "speed_rpm")
        assert int(simulator.state("pump-1")["requests"]["requests"]) == requests  # never reached the pump
        started = await agent.call_tool("start", {"speed_rpm": 2000})  # clamped to 1500
        assert not started.is_error
        assert simulator.state("pump-1")["status"]["setpoint_rpm"] == 1500
        await agent.call_tool("stop", {})


async def test_a_cancelled_call_gives_its_place_back_after_limits_cancelled_call_hold_s(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    """A provider that never answers a cancelled request (as the MCP SDK's servers do) holds the place only
    limits.cancelled_call_hold_s."""
    gateway = await gateway_factory(
        auth=AUTH, policy=POLICY, limits={"cancelled_call_hold_s": 0.5}, providers={"heartbeat_interval_s": 600}
    )
    assert gateway.governor is not None
    assert gateway.governor.limits.kept_after_cancel_s == 0.5
    board = await board_in(gateway, boards)
    async with aiohttp.ClientSession() as http:
        first, second = (AgentSession(http, f"{gateway.url}/board/mcp", AGENT) for _ in range(2))
        await first.initialize()
        await second.initialize()
        body = first.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
        call = asyncio.create_task(first.post(body))
        forwarded = await board.request("tools/call")
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"]}}
        assert (await first.post(cancel))[0] == 202
        await board.take(partial(cancels, forwarded["id"]), what="the gateway's notifications/cancelled")
        await asyncio.wait_for(call, 5)
        assert in_flight(gateway) == 1
        # No late answer: the place comes back once the hold has passed.
        await wait_for(lambda: in_flight(gateway) == 0, timeout=5, what="the place given back after the hold")
        await answered_normally(second, board)
