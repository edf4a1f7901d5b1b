"""What a person's confirmation holds, through a real gateway with a simulated pump and SDK clients
(docs/governance.md, "Confirmation of device writes"): a policy reload while the person reads the
question decides the call again, only `approve: true` is a yes, a `by = "another"` rule never asks the
caller's own client, an approval is used up by the retry matching it whatever happens to that retry,
and a question the client drops is recorded, without a traceback in the log."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import orjson
import pytest
from mcp import MCPError

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_confirmation import POLICY as CONFIRM_POLICY
from tests.integration.test_confirmation import Person, client
from tests.integration.test_governance import AGENT, ERAS, OPERATOR, auth
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal

LIMIT = {"resources": ["/plant/pump-1"], "tool": "start", "argument": "speed_rpm", "min": 300, "max": 2000}
POLICY: dict[str, Any] = {**CONFIRM_POLICY, "limits": [LIMIT]}
REVOKED: dict[str, Any] = {
    **POLICY,
    "assign": [a for a in POLICY["assign"] if a["role"] != "operator" or a["principal"] != "token:agent"],
}
TIGHTER: dict[str, Any] = {**POLICY, "limits": [{**LIMIT, "max": 1400}]}
BY_ANOTHER: dict[str, Any] = {**POLICY, "confirm": [{**POLICY["confirm"][0], "by": "another"}]}


def policy_toml(policy: dict[str, Any]) -> str:
    """Just enough TOML for these policies: [roles.<name>] tables, then arrays of tables."""
    lines: list[str] = []
    for name, role in policy["roles"].items():
        lines.append(f"[roles.{name}]")
        lines.extend(f"{key} = {orjson.dumps(value).decode()}" for key, value in role.items())
    for section, entries in policy.items():
        if section == "roles":
            continue
        for entry in entries:
            lines.append(f"[[{section}]]")
            lines.extend(f"{key} = {orjson.dumps(value).decode()}" for key, value in entry.items())
    return "\n".join(lines) + "\n"


@dataclass
class Plant:
    gateway: GatewayServer
    simulator: Simulator
    policy: Path
    trail: Path

    def use(self, policy: dict[str, Any]) -> None:
        """Write `policy` to the gateway's policy file and reload it, as `mcp-gateway policy reload` does."""
        self.policy.write_text(policy_toml(policy))
        assert self.gateway.reload_policy() is None

    def setpoint(self) -> int:
        return int(self.simulator.state("pump-1")["status"]["setpoint_rpm"])

    def running(self) -> bool:
        return self.simulator.state("pump-1")["status"]["state"] in ("starting", "running")


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[Plant]:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(POLICY))
    trail = tmp_path / "audit.db"
    server = await gateway_factory(auth=auth(), policy={"file": str(policy)}, audit={"path": str(trail)})
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        yield Plant(server, simulator, policy, trail)
    finally:
        await simulator.stop()


def starts(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions WHERE tool = 'start' ORDER BY id"))


Answerable = str | int | float | bool | list[str] | None
"""A value of an elicitation answer's content."""


class Answering(Person):
    """A person who answers with `content`, after `meanwhile` ran (an operator's reload, say)."""

    def __init__(self, content: dict[str, Answerable] | None = None, meanwhile: Any = None) -> None:
        super().__init__(approve=True)
        self.content: dict[str, Answerable] = {"approve": True} if content is None else content
        self.meanwhile = meanwhile

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.meanwhile is not None:
            self.meanwhile()
        return types.ElicitResult(action="accept", content=self.content)


# -- a reload while the person reads the question ------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("change", ["revoked", "tighter"])
async def test_a_reload_while_the_person_reads_decides_the_call_again(plant: Plant, change: str, mode: str) -> None:
    reloaded = REVOKED if change == "revoked" else TIGHTER
    person = Answering(meanwhile=lambda: plant.use(reloaded))
    async with client(plant.gateway, AGENT, mode, person) as agent:
        if change == "revoked":  # the tool is no longer the agent's: answered as a tool it may not see
            with pytest.raises(MCPError) as unknown:
                await agent.call_tool("start", {"speed_rpm": 1500})
            assert unknown.value.error.message.startswith("Unknown tool: start")
        else:  # arguments the tightened limit refuses: a tool error
            text, _ = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
            assert "above the limit 1400" in text
    assert len(person.asked) == 1
    assert not plant.running()
    last = starts(plant.trail)[-1]
    assert last["effect"] == ("deny" if change == "revoked" else "refuse-arguments")
    if mode == "legacy":  # decided again after the person's yes, which is on record with the refusal
        assert last["confirmed_by"] == "token:agent via elicitation"


# -- only approve: true is a yes ---------------------------------------------------------------------


@pytest.mark.parametrize("content", [{"approve": "false"}, {"approve": 0}, {"approve": "no"}, {"approve": None}, {}])
async def test_an_accept_without_approve_true_is_a_no(plant: Plant, content: dict[str, Answerable]) -> None:
    person = Answering(content)
    async with client(plant.gateway, AGENT, "legacy", person) as agent:
        declined = await agent.call_tool("start", {"speed_rpm": 1500})
    text, refused = refusal(declined)
    assert "does not match the question's schema, so it counts as a no" in text
    assert refused == {
        "reason": "declined",
        "slot": "pump-1",
        "setBy": "policy confirm[0]",
        "by": "token:agent via elicitation",
    }
    assert not plant.running()
    question = person.asked[0]
    assert isinstance(question, types.ElicitRequestFormParams)
    assert question.requested_schema["required"] == ["approve"]
    assert starts(plant.trail)[-1]["effect"] == "declined"


# -- by = "another" ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_by_another_never_asks_the_callers_client(plant: Plant, mode: str, tmp_path: Path) -> None:
    plant.use(BY_ANOTHER)
    operator_token = tmp_path / "operator"
    operator_token.write_text(OPERATOR)
    person = Answering()
    async with client(plant.gateway, AGENT, mode, person) as agent:
        # A tool error the agent's model reads: who approves, and to send the call again.
        text, data = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
        assert data["reason"] == "confirmation_required"
        assert "another principal approves it" in text
        code, _, err = await run_cli(
            "approve", data["approval"], "--url", plant.gateway.url, "--token-file", str(operator_token)
        )
        assert (code, err) == (0, "")
        started = await agent.call_tool("start", {"speed_rpm": 1500})
        assert not started.is_error
    assert person.asked == []
    assert plant.running() and plant.setpoint() == 1500
    assert [row["effect"] for row in starts(plant.trail)] == ["wait-confirmation", "allow"]
    assert starts(plant.trail)[-1]["confirmed_by"] == "token:operator"


# -- an approval is used up by the retry matching it ---------------------------------------------------


async def test_a_refused_retry_uses_its_approval_up(plant: Plant, tmp_path: Path) -> None:
    operator_token = tmp_path / "operator"
    operator_token.write_text(OPERATOR)
    async with client(plant.gateway, AGENT, "2026-07-28") as agent:  # cannot be asked: waits for approve
        _, data = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
        approval = data["approval"]
        code, _, err = await run_cli(
            "approve", approval, "--url", plant.gateway.url, "--token-file", str(operator_token)
        )
        assert (code, err) == (0, "")
        plant.use(TIGHTER)
        refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
        plant.use(POLICY)
        _, again_data = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
        assert again_data["reason"] == "confirmation_required"
        assert again_data["approval"] != approval
    assert not plant.running()
    assert [row["effect"] for row in starts(plant.trail)] == [
        "wait-confirmation",
        "refuse-arguments",
        "wait-confirmation",
    ]


# -- a question the client drops ----------------------------------------------------------------------


async def test_a_question_the_client_drops_is_recorded_and_logs_no_traceback(
    plant: Plant, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{plant.gateway.url}/pump-1/mcp"
    headers = {"Authorization": f"Bearer {AGENT}", "Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t"}},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "start", "arguments": {"speed_rpm": 1500}},
    }
    caplog.set_level(logging.ERROR, logger="asyncio")
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(url, json=initialize) as answer:
            session = {"Mcp-Session-Id": answer.headers["Mcp-Session-Id"]}
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        async with http.post(url, json=call, headers=session) as stream:
            async for line in stream.content:
                if b"elicitation/create" in line:
                    break
            stream.close()  # the client goes away instead of answering
    await wait_for(lambda: bool(starts(plant.trail)), what="the dropped question on record")
    [dropped] = starts(plant.trail)
    assert (dropped["effect"], dropped["confirmed_by"]) == ("declined", "nobody")
    assert "nobody answered the question of confirm[0]" in dropped["reason"]
    assert not plant.running()
    await asyncio.sleep(0.2)
    gc.collect()  # an exception nobody retrieved is reported when its task is collected
    await asyncio.sleep(0)
    assert not [record for record in caplog.records if "never retrieved" in record.getMessage()]


# -- bounds on the calls waiting for approval ------------------------------------------------------------

BOTH_BY_ANOTHER: dict[str, Any] = {
    **BY_ANOTHER,
    "confirm": [*BY_ANOTHER["confirm"], {**BY_ANOTHER["confirm"][0], "principal": "token:operator"}],
}


async def test_one_caller_cannot_fill_the_calls_waiting_for_approval(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(BOTH_BY_ANOTHER))
    limits = {"max_pending_approvals": 3, "max_pending_approvals_per_caller": 2}
    server = await gateway_factory(auth=auth(), policy={"file": str(policy)}, limits=limits)
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        async with client(server, AGENT, "2026-07-28") as agent, client(server, OPERATOR, "2026-07-28") as operator:
            for speed in (1000, 1100):
                assert refusal(await agent.call_tool("start", {"speed_rpm": speed}))[1]["reason"] == (
                    "confirmation_required"
                )
            with pytest.raises(MCPError) as mine:
                await agent.call_tool("start", {"speed_rpm": 1200})
            assert mine.value.error.data is not None
            assert mine.value.error.data["reason"] == "approvals_full"
            assert mine.value.error.data["limit"] == "limits.max_pending_approvals_per_caller"
            assert "2 calls of this caller already wait for approval" in mine.value.error.message
            # The agent's flood leaves room for another caller's call to reach a person...
            assert refusal(await operator.call_tool("start", {"speed_rpm": 900}))[1]["reason"] == (
                "confirmation_required"
            )
            # ...up to the gateway-wide bound.
            with pytest.raises(MCPError) as full:
                await operator.call_tool("start", {"speed_rpm": 950})
            assert full.value.error.data is not None
            assert full.value.error.data["limit"] == "limits.max_pending_approvals"
        assert server.governor is not None and len(server.governor.approvals()) == 3
    finally:
        await simulator.stop()
