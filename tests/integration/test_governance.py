"""Governed device tools through a real gateway: simulated pumps (the board's own firmware modules),
agents with their own tokens calling them with the official SDK client in both eras, through the
slot, `_all`, a tool group and a raw WebSocket; every call recorded in the audit trail before it
reaches the pump (docs/governance.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_stdio_bridge import bridge
from tests.support.gateway_process import run_cli
from tests.support.oauth import ISSUER, access_token, jwks, jwks_server, rsa_key
from tests.support.refusals import refusal

AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)
ERAS = ["legacy", "2026-07-28"]

POLICY: dict[str, Any] = {
    "roles": {
        "observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]},
        "operator": {"inherits": ["observer"], "capabilities": ["tool.control"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "observer", "resources": ["/plant/**"]},
        {"principal": "token:operator", "role": "observer", "resources": ["/plant/**"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/plant/pump-1"]},
    ],
    "deny": [{"principal": "token:operator", "capabilities": ["tool:reset_fault"], "resources": ["/plant/**"]}],
    "limits": [
        {
            "resources": ["/plant/pump-1"],
            "tool": "set_speed",
            "argument": "speed_rpm",
            "min": 300,
            "max": 2000,
            "action": "clamp",
        },
        {"resources": ["/plant/pump-1"], "tool": "start", "argument": "speed_rpm", "min": 300, "max": 2000},
    ],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}
GROUPS = {"pumps": {"slots": ["pump-*"], "description": "the pumps"}}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def auth() -> dict[str, Any]:
    return {"tokens": [{"name": "agent", "sha256": sha(AGENT)}, {"name": "operator", "sha256": sha(OPERATOR)}]}


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[GatewayServer]:
    server = await gateway_factory(
        auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, groups=GROUPS
    )
    simulator = Simulator(server.url, SimulatorSettings(pumps=2, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        for slot in ("pump-1", "pump-2"):
            await wait_ready_slot(server, slot)
        yield server
    finally:
        await simulator.stop()


@contextlib.asynccontextmanager
async def one_pump(server: GatewayServer) -> AsyncIterator[None]:
    """A simulated pump-1 attached to `server` and ready for the block, stopped at its end."""
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        yield
    finally:
        await simulator.stop()


@contextlib.asynccontextmanager
async def client(server: GatewayServer, path: str, token: str, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}{path}", http_client=transport), mode=mode) as sdk,
    ):
        yield sdk


def text_of(result: types.CallToolResult) -> str:
    return " ".join(item.text for item in result.content if isinstance(item, types.TextContent))


def trail_rows(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions ORDER BY id"))


@pytest.mark.parametrize("mode", ERAS)
async def test_each_caller_sees_and_calls_only_what_the_policy_gives_it(plant: GatewayServer, mode: str) -> None:
    async with client(plant, "/pump-1/mcp", AGENT, mode) as agent:
        assert [tool.name for tool in (await agent.list_tools()).tools] == ["get_status"]
        status = await agent.call_tool("get_status", {})
        assert not status.is_error
        # A control tool the agent may not call looks exactly like a tool the pump does not have.
        with pytest.raises(MCPError) as forbidden:
            await agent.call_tool("start", {"speed_rpm": 1000})
        with pytest.raises(MCPError) as unknown:
            await agent.call_tool("no_such_tool", {})
        assert forbidden.value.error.code == unknown.value.error.code
        assert forbidden.value.error.message.replace("start", "X") == unknown.value.error.message.replace(
            "no_such_tool", "X"
        )
    async with client(plant, "/pump-1/mcp", OPERATOR, mode) as operator:
        names = {tool.name for tool in (await operator.list_tools()).tools}
        assert names == {"get_status", "start", "set_speed", "stop"}  # reset_fault denied
    async with client(plant, "/pump-2/mcp", OPERATOR, mode) as operator:
        assert [tool.name for tool in (await operator.list_tools()).tools] == ["get_status"]


@pytest.mark.parametrize("mode", ERAS)
async def test_limits_refuse_and_clamp_for_a_board_that_declares_nothing(plant: GatewayServer, mode: str) -> None:
    async with client(plant, "/pump-1/mcp", OPERATOR, mode) as operator:
        # A tool error the agent's model reads (MCP answers input validation so), not a protocol error.
        text, refused = refusal(await operator.call_tool("start", {"speed_rpm": 2500}))
        assert text == (
            'Not forwarded to pump-1: Argument "speed_rpm" = 2500 is above the limit 2000 set by policy limits[1] '
            "for /plant/pump-1; use a value from 300 to 2000"
        )
        assert (refused["reason"], refused["setBy"]) == ("argument_limit", "policy limits[1]")
        started = await operator.call_tool("start", {"speed_rpm": 1000})
        assert not started.is_error
        clamped = await operator.call_tool("set_speed", {"speed_rpm": 2600})
        assert not clamped.is_error
        assert "speed_rpm 2600 -> 2000 (policy limits[0])" in text_of(clamped)
        status = await operator.call_tool("get_status", {})
        assert status.structured_content is not None
        assert status.structured_content["setpoint_rpm"] == 2000
        await operator.call_tool("stop", {})


async def test_all_and_a_group_filter_and_govern_the_same_way(plant: GatewayServer) -> None:
    async with client(plant, "/_all/mcp", AGENT, "legacy") as agent:
        names = {tool.name for tool in (await agent.list_tools()).tools}
        assert names == {"pump-1-get_status", "pump-2-get_status"}
        with pytest.raises(MCPError) as forbidden:
            await agent.call_tool("pump-1-start", {"speed_rpm": 1000})
        assert forbidden.value.error.message.startswith("Unknown tool: pump-1-start")
    async with client(plant, "/mcp/pumps", OPERATOR, "2026-07-28") as operator:
        names = {tool.name for tool in (await operator.list_tools()).tools}
        assert {"pump-1__set_speed", "pump-2__get_status"} <= names
        assert "pump-2__set_speed" not in names and "pump-1__reset_fault" not in names
        text, _ = refusal(await operator.call_tool("pump-1__start", {"speed_rpm": 2500}))
        assert "is above the limit 2000 set by policy limits[1]" in text


async def test_a_raw_websocket_client_is_governed_too(plant: GatewayServer) -> None:
    headers = {"Authorization": f"Bearer {AGENT}"}
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{plant.url}/pump-1", headers=headers) as ws:
        await ws.send_json(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "ws", "version": "1"},
                },
            }
        )
        await ws.receive_json(timeout=10)
        await ws.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await ws.send_json({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed = await ws.receive_json(timeout=10)
        assert [tool["name"] for tool in listed["result"]["tools"]] == ["get_status"]
        await ws.send_json({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "stop"}})
        answer = await ws.receive_json(timeout=10)
        assert answer["error"]["message"].startswith("Unknown tool: stop")


async def test_every_decision_is_in_the_trail_and_each_forwarded_call_has_its_result(
    plant: GatewayServer, tmp_path: Path
) -> None:
    async with client(plant, "/pump-1/mcp", OPERATOR, "legacy") as operator:
        await operator.call_tool("get_status", {})
        with pytest.raises(MCPError):
            await operator.call_tool("reset_fault", {})
        refusal(await operator.call_tool("set_speed", {"speed_rpm": 1000, "password": "hunter2"}))
        await operator.call_tool("set_speed", {"speed_rpm": 2600})
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(trail_rows(path)) >= 4, what="four decisions")
    rows = trail_rows(path)
    assert [(row["tool"], row["effect"]) for row in rows] == [
        ("get_status", "allow"),
        ("reset_fault", "deny"),
        ("set_speed", "refuse-arguments"),
        ("set_speed", "clamp"),
    ]
    assert all(row["principal"] == '["token:operator"]' for row in rows)
    assert rows[0]["resource"] == "/plant/pump-1"
    assert "hunter2" not in rows[2]["arguments"]
    assert "speed_rpm 2600 -> 2000" in rows[3]["constraints"]
    assert rows[3]["rules"] == '["assign[1]","assign[2]","limits[0]"]'  # the limit that clamped is among them

    def results() -> dict[int, str]:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return dict(db.execute("SELECT decision_id, status FROM results"))

    # Results go with the next decision's transaction, or within a second.
    await wait_for(lambda: len(results()) >= 2, what="the results")
    # Forwarded calls, and only they, have a result: the stopped pump refuses set_speed as a tool error.
    assert results() == {rows[0]["id"]: "ok", rows[3]["id"]: "tool-error"}


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_the_caller_may_not_call_is_recorded_the_same_on_every_target(
    plant: GatewayServer, tmp_path: Path, mode: str
) -> None:
    targets = [("/pump-1/mcp", "start"), ("/_all/mcp", "pump-1-start"), ("/mcp", "pump-1__start")]
    targets.append(("/mcp/pumps", "pump-1__start"))
    for path, name in targets:
        async with client(plant, path, AGENT, mode) as agent:
            with pytest.raises(MCPError) as hidden:
                await agent.call_tool(name, {"speed_rpm": 1000})
            assert hidden.value.error.message.startswith(f"Unknown tool: {name} is not offered by")
    await wait_for(lambda: len(trail_rows(tmp_path / "audit.db")) >= 4, what="four decisions")
    rows = trail_rows(tmp_path / "audit.db")
    assert [(row["slot"], row["tool"], row["effect"], row["rules"]) for row in rows] == [
        ("pump-1", "start", "deny", '["default"]')
    ] * 4


async def test_a_call_of_a_tool_no_provider_lists_is_recorded_as_a_deny_naming_it(
    plant: GatewayServer, tmp_path: Path
) -> None:
    async with client(plant, "/pump-1/mcp", OPERATOR, "legacy") as operator:
        for name in ("Set_Speed", "set_speed "):
            with pytest.raises(MCPError) as unknown:
                await operator.call_tool(name, {"speed_rpm": 2500})
            assert unknown.value.error.message == f'Unknown tool: {name} is not offered by "pump-1"; call tools/list'
    await wait_for(lambda: len(trail_rows(tmp_path / "audit.db")) >= 2, what="two decisions")
    rows = trail_rows(tmp_path / "audit.db")
    assert [(row["tool"], row["effect"], row["rules"]) for row in rows] == [
        ("Set_Speed", "deny", "[]"),
        ("set_speed ", "deny", "[]"),
    ]
    assert rows[1]["reason"] == (
        'Unknown tool: "set_speed " is not offered by "pump-1" (its provider lists no tool of that name); '
        "call tools/list"
    )


async def test_calls_through_the_stdio_bridge_are_recorded_as_stdio(plant: GatewayServer, tmp_path: Path) -> None:
    params = bridge(plant.url, env={**os.environ, "MCP_GATEWAY_TOKEN": OPERATOR})
    async with Client(params, mode="legacy") as host:
        assert not (await host.call_tool("get_status", {})).is_error
    async with client(plant, "/pump-1/mcp", OPERATOR, "legacy") as operator:
        await operator.call_tool("get_status", {})
    await wait_for(lambda: len(trail_rows(tmp_path / "audit.db")) >= 2, what="two decisions")
    assert [row["transport"] for row in trail_rows(tmp_path / "audit.db")] == ["stdio", "streamable-http"]


def write_policy(path: Path, agent_role: str) -> None:
    path.write_text(
        "[roles.observer]\n"
        'capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]\n'
        "[roles.operator]\n"
        'inherits = ["observer"]\n'
        'capabilities = ["tool.control"]\n'
        "[[assign]]\n"
        'principal = "token:agent"\n'
        f'role = "{agent_role}"\n'
        'resources = ["/**"]\n'
    )


async def test_a_reload_swaps_the_policy_whole_and_a_bad_file_keeps_the_one_in_force(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    write_policy(policy, "observer")
    server = await gateway_factory(auth=auth(), policy={"file": str(policy)}, audit={"path": str(tmp_path / "a.db")})
    async with one_pump(server), client(server, "/pump-1/mcp", AGENT, "2026-07-28") as agent:
        assert [tool.name for tool in (await agent.list_tools()).tools] == ["get_status"]
        write_policy(policy, "operator")
        assert server.reload_policy() is None
        assert len((await agent.list_tools()).tools) == 5
        policy.write_text('[[assign]]\nprincipal = "token:agent"\nrole = "nobody"\nresources = ["/**"]\n')
        problem = server.reload_policy()
        assert problem is not None and 'unknown role "nobody"' in problem
        assert len((await agent.list_tools()).tools) == 5  # the policy in force stays


async def test_a_trail_that_cannot_be_written_refuses_calls_and_says_so(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    system = {"principal": "token:operator", "role": "operator", "resources": ["/_system/**"]}
    policy = {**POLICY, "assign": [*POLICY["assign"], system]}
    server = await gateway_factory(auth=auth(), policy=policy, audit={"path": str(blocker / "audit.db")})
    async with one_pump(server):
        async with client(server, "/pump-1/mcp", OPERATOR, "legacy") as operator:
            with pytest.raises(MCPError) as refused:
                await operator.call_tool("get_status", {})
            assert "the audit trail cannot record it" in refused.value.error.message
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/readyz") as ready:
            assert ready.status == 503
            assert (await ready.json())["status"] == "audit_unavailable"
        problems = server.gateway.broker.problems()
        assert [problem.id for problem in problems if problem.id.startswith("audit.")] == ["audit.unavailable"]
        # The gateway's own read-only tools still answer, unrecorded: the operator learns why from them.
        async with client(server, "/_broker/mcp", OPERATOR, "legacy") as operator:
            diagnosis = await operator.call_tool("broker_diagnose", {})
            assert "audit.unavailable" in str(diagnosis.structured_content)
            with pytest.raises(MCPError) as refused:
                await operator.call_tool("broker_policy_reload", {})  # an action: recorded, so refused
            assert "the audit trail cannot record it" in refused.value.error.message


async def test_a_damaged_trail_is_named_and_moving_it_aside_mends_it(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    trail.write_bytes(b"not a database, " * 64)
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(trail)})
    async with one_pump(server):
        async with client(server, "/pump-1/mcp", OPERATOR, "legacy") as operator:
            with pytest.raises(MCPError, match="file is not a database"):
                await operator.call_tool("get_status", {})
            [problem] = [p for p in server.gateway.broker.problems() if p.id == "audit.unavailable"]
            assert "file is not a database" in problem.evidence and "move a damaged file" in problem.fix
            trail.rename(tmp_path / "audit.db.damaged")  # what the fix says: a new file is started at the path
            assert (await operator.call_tool("get_status", {})).structured_content is not None
        assert not [p for p in server.gateway.broker.problems() if p.id.startswith("audit.")]


async def test_the_diagnosis_says_whether_tools_are_governed(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    plain = await gateway_factory()
    assert plain.gateway.broker.diagnosis()["governed"] is False
    assert "No [policy]" in plain.gateway.broker.diagnosis()["governance"]
    governed = await gateway_factory(policy=POLICY, audit={"path": str(tmp_path / "a.db")})
    assert governed.gateway.broker.diagnosis()["governed"] is True
    assert not [problem for problem in governed.gateway.broker.problems() if problem.id.startswith("audit.")]


async def test_mcp_gateway_policy_reload_asks_the_running_gateway(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    write_policy(policy, "observer")
    with policy.open("a") as extra:  # the operator may act on the gateway itself: /_system/broker
        extra.write('[[assign]]\nprincipal = "token:operator"\nrole = "operator"\nresources = ["/_system/**"]\n')
    server = await gateway_factory(auth=auth(), policy={"file": str(policy)}, audit={"path": str(tmp_path / "a.db")})
    tokens = {name: tmp_path / name for name in ("agent", "operator")}
    tokens["agent"].write_text(AGENT)
    tokens["operator"].write_text(OPERATOR)
    code, out, err = await run_cli("policy", "reload", "--url", server.url, "--token-file", str(tokens["operator"]))
    assert (code, err) == (0, "")
    assert "The policy is reloaded" in out
    assert server.governor is not None and server.governor.reloads == 1
    # An agent may only observe: the reload tool is an action, and it looks like no tool at all.
    code, out, err = await run_cli("policy", "reload", "--url", server.url, "--token-file", str(tokens["agent"]))
    assert code == 1
    assert "Unknown tool: broker_policy_reload" in err
    policy.write_text('[roles.observer]\ncapabilities = ["mcp.tools.lst"]\n')
    code, out, err = await run_cli("policy", "reload", "--url", server.url, "--token-file", str(tokens["operator"]))
    assert (code, out) == (1, "")
    assert err.startswith("mcp-gateway policy reload: The policy was not reloaded; the one in force stays.")
    assert 'did you mean "mcp.tools.list"' in err
    assert server.governor.reloads == 1


async def test_an_oauth_callers_groups_and_client_come_from_its_access_token(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy = {
        **POLICY,
        "assign": [
            {"principal": "group:operators", "role": "operator", "resources": ["/plant/pump-1"]},
            {"principal": "client:hmi", "role": "observer", "resources": ["/plant/**"]},
        ],
        "deny": [],
    }
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(
            auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url}},
            policy=policy,
            audit={"path": str(tmp_path / "a.db")},
        )
        async with one_pump(server):
            url = f"{server.url}/pump-1/mcp"
            operator = access_token(rsa_key(), url, subject="alice", groups=["operators"])
            hmi = access_token(rsa_key(), url, subject="panel-7", azp="hmi")
            stranger = access_token(rsa_key(), url, subject="bob", groups=["visitors"])
            seen = {}
            for name, token in (("operator", operator), ("hmi", hmi), ("stranger", stranger)):
                async with client(server, "/pump-1/mcp", token, "2026-07-28") as caller:
                    if name == "stranger":
                        with pytest.raises(MCPError) as refused:
                            await caller.list_tools()
                        assert refused.value.error.message.startswith("Forbidden: user:bob may not list tools")
                        continue
                    seen[name] = {tool.name for tool in (await caller.list_tools()).tools}
            assert seen["operator"] == {"get_status", "start", "set_speed", "stop", "reset_fault"}
            assert seen["hmi"] == {"get_status"}


async def test_reloads_during_a_burst_decide_each_call_by_one_whole_policy(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    # Two versions of one policy: the rule that lets the agent observe is assign[0] in one and
    # assign[1] in the other, so each recorded decision says which version decided it.
    versions = []
    for padding in (False, True):
        lead = '[[assign]]\nprincipal = "token:operator"\nrole = "observer"\nresources = ["/x"]\n' if padding else ""
        versions.append(
            '[roles.observer]\ncapabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]\n'
            + lead
            + '[[assign]]\nprincipal = "token:agent"\nrole = "observer"\nresources = ["/**"]\n'
        )
    policy = tmp_path / "policy.toml"
    policy.write_text(versions[0])
    path = tmp_path / "a.db"
    unlimited = {"rate": {"per_principal": {"rate_per_s": 0}, "per_slot": {"rate_per_s": 0}}}
    server = await gateway_factory(
        auth=auth(), policy={"file": str(policy)}, audit={"path": str(path)}, limits=unlimited
    )
    async with one_pump(server):

        async def reloads() -> None:
            for turn in range(30):
                policy.write_text(versions[(turn + 1) % 2])
                assert server.reload_policy() is None
                await asyncio.sleep(0.005)

        async def calls(agent: Client) -> None:
            for _ in range(20):
                assert not (await agent.call_tool("get_status", {})).is_error

        async with client(server, "/pump-1/mcp", AGENT, "2026-07-28") as agent:
            await asyncio.gather(reloads(), *(calls(agent) for _ in range(8)))
        await wait_for(lambda: len(trail_rows(path)) >= 160, what="every decision")
        rules = {row["rules"] for row in trail_rows(path)}
        assert rules <= {'["assign[0]"]', '["assign[1]"]'}, rules
        assert len(trail_rows(path)) == 160
