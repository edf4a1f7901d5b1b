"""Confirmation of device writes through a real gateway: a [[confirm]] rule holds an agent's control
calls on simulated pumps until a person says yes, asked through the agent's own client (an SDK client's
elicitation callback, in both eras) or, for a client that cannot be asked, approved by an operator
with `mcp-gateway approve` (docs/governance.md)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for
from tests.integration.test_governance import AGENT, ERAS, OPERATOR, auth, text_of
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal
from tests.support.southbound import simulated_pumps

POLICY: dict[str, Any] = {
    "roles": {
        "observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]},
        "operator": {"inherits": ["observer"], "capabilities": ["tool.control"]},
        "auditor": {"capabilities": ["broker.audit.read"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "observer", "resources": ["/plant/**", "/_system/**"]},
        {"principal": "token:agent", "role": "operator", "resources": ["/plant/pump-1"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/plant/**", "/_system/**"]},
        {"principal": "token:operator", "role": "auditor", "resources": ["/_system/**"]},
    ],
    "confirm": [{"principal": "token:agent", "capabilities": ["tool.control"], "resources": ["/plant/**"]}],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}


class Person:
    """The user behind an SDK client: answers each confirmation as told, and keeps what it was shown."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[types.ElicitRequestParams] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.approve:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[GatewayServer]:
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")})
    async with simulated_pumps(server):
        yield server


@contextlib.asynccontextmanager
async def client(
    server: GatewayServer, token: str, mode: str, person: Person | None = None, path: str = "/pump-1/mcp"
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    callback = person.elicit if person is not None else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as transport,
        Client(
            streamable_http_client(f"{server.url}{path}", http_client=transport),
            mode=mode,
            elicitation_callback=callback,
        ) as sdk,
    ):
        yield sdk


async def running(sdk: Client) -> bool:
    status = await sdk.call_tool("get_status", {})
    assert status.structured_content is not None
    return status.structured_content["state"] in ("starting", "running")


def decisions(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions WHERE tool IN ('start', 'stop') ORDER BY id"))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_person_confirms_through_the_agents_own_client(plant: GatewayServer, mode: str, tmp_path: Path) -> None:
    yes = Person(approve=True)
    async with client(plant, AGENT, mode, yes) as agent:
        started = await agent.call_tool("start", {"speed_rpm": 1200})
        assert not started.is_error, text_of(started)
        assert await running(agent)
        assert len(yes.asked) == 1
        question = yes.asked[0].message
        assert "token:agent asks to call start on pump-1 (/plant/pump-1)" in question
        assert '{"speed_rpm":1200}' in question
        assert "The device reports now:" in question and '"state":"stopped"' in question
        assert "confirm[0]" in question
        await agent.call_tool("stop", {})
    rows = decisions(tmp_path / "audit.db")
    # A 2026-07-28 client is asked by an input_required answer, recorded as the attempt waiting for it.
    asked = ["wait-confirmation"] if mode != "legacy" else []
    assert [(row["tool"], row["effect"]) for row in rows] == [
        *(("start", effect) for effect in [*asked, "allow"]),
        *(("stop", effect) for effect in [*asked, "allow"]),
    ]
    allowed = rows[len(asked)]
    how = "elicitation" if mode == "legacy" else "input_required"
    assert allowed["confirmed_by"] == f"token:agent via {how}"
    assert allowed["confirmed_ms"] is not None
    assert "confirm[0]" in json.loads(allowed["rules"])


@pytest.mark.parametrize("mode", ERAS)
async def test_a_declined_call_is_a_tool_error_the_agent_reads_and_never_reaches_the_pump(
    plant: GatewayServer, mode: str, tmp_path: Path
) -> None:
    no = Person(approve=False)
    async with client(plant, AGENT, mode, no) as agent:
        declined = await agent.call_tool("start", {"speed_rpm": 1200})
        assert declined.is_error
        assert text_of(declined) == (
            "Not done: start on pump-1 was not forwarded to the device; token:agent via "
            f"{'elicitation' if mode == 'legacy' else 'input_required'} declined it "
            "(the operator's policy confirm[0] has a person confirm this call)."
        )
        assert not await running(agent)
        # Observe tools are never held: the rule names control tools only.
        assert len(no.asked) == 1
    rows = decisions(tmp_path / "audit.db")
    asked = [("start", "wait-confirmation")] if mode != "legacy" else []
    assert [(row["tool"], row["effect"]) for row in rows] == [*asked, ("start", "declined")]
    assert rows[-1]["reason"] == text_of(declined)  # the words the agent was given


async def test_a_client_that_cannot_be_asked_waits_for_mcp_gateway_approve(
    plant: GatewayServer, tmp_path: Path
) -> None:
    operator_token = tmp_path / "operator"
    operator_token.write_text(OPERATOR)
    async with client(plant, AGENT, "2026-07-28") as agent:  # no elicitation callback: nothing to ask
        # A tool error, so an agent framework hands the model the text: how to have it approved.
        text, data = refusal(await agent.call_tool("start", {"speed_rpm": 900}))
        assert data["reason"] == "confirmation_required"
        approval = data["approval"]
        assert f"`mcp-gateway approve {approval}`" in text

        code, out, err = await run_cli("approve", "--url", plant.url, "--token-file", str(operator_token))
        assert (code, err) == (0, "")
        assert out.startswith(f"{approval}  pending  token:agent -> start on pump-1 (/plant/pump-1) ")
        assert '{"speed_rpm":900}' in out
        code, out, err = await run_cli("approve", approval, "--url", plant.url, "--token-file", str(operator_token))
        assert (code, err) == (0, "")
        assert out.startswith(f"{approval} approved: start on pump-1 for token:agent")

        # Other arguments are another call: the approval does not cover them.
        assert refusal(await agent.call_tool("start", {"speed_rpm": 901}))[1]["approval"] != approval
        started = await agent.call_tool("start", {"speed_rpm": 900})
        assert not started.is_error
        assert await running(agent)
        await plant_stop(plant)
        # Used once: the same call again waits for a new approval.
        _, second = refusal(await agent.call_tool("start", {"speed_rpm": 900}))
        assert second["approval"] != approval
        code, out, err = await run_cli(
            "approve", second["approval"], "--deny", "--url", plant.url, "--token-file", str(operator_token)
        )
        assert (code, err) == (0, "")
        denied = await agent.call_tool("start", {"speed_rpm": 900})
        assert denied.is_error and "token:operator declined it" in text_of(denied)
    rows = decisions(tmp_path / "audit.db")
    effects = [row["effect"] for row in rows if row["tool"] == "start"]
    assert effects == ["wait-confirmation", "wait-confirmation", "allow", "wait-confirmation", "declined"]
    allowed = next(row for row in rows if row["effect"] == "allow" and row["tool"] == "start")
    assert allowed["confirmed_by"] == "token:operator"


async def plant_stop(server: GatewayServer) -> None:
    """Stop pump-1 as the operator (whose control calls need no confirmation)."""
    async with client(server, OPERATOR, "legacy") as operator:
        stopped = await operator.call_tool("stop", {})
        assert not stopped.is_error


async def test_an_agent_cannot_approve_and_recent_decisions_need_broker_audit_read(
    plant: GatewayServer, tmp_path: Path
) -> None:
    agent_token = tmp_path / "agent"
    agent_token.write_text(AGENT)
    code, _, err = await run_cli("approve", "--url", plant.url, "--token-file", str(agent_token))
    assert code == 0, err  # listing is an observe tool of /_system/broker, which the agent holds
    code, _, err = await run_cli("approve", "0000", "--url", plant.url, "--token-file", str(agent_token))
    assert code == 1 and "Unknown tool: broker_approve" in err
    async with client(plant, AGENT, "legacy", path="/_broker/mcp") as agent:
        names = {tool.name for tool in (await agent.list_tools()).tools}
        assert "broker_approvals" in names
        assert "broker_audit_recent" not in names and "broker_approve" not in names
    async with client(plant, OPERATOR, "2026-07-28") as operator:
        await operator.call_tool("get_status", {})
    async with client(plant, OPERATOR, "2026-07-28", path="/_broker/mcp") as operator:
        await wait_for(lambda: bool(decisions_any(tmp_path / "audit.db")), what="a decision on record")
        recent = await operator.call_tool("broker_audit_recent", {"limit": 5, "slot": "pump-*"})
        assert not recent.is_error
        assert recent.structured_content is not None
        found = recent.structured_content["decisions"]
        assert found and found[-1]["tool"] == "get_status" and found[-1]["principal"] == ["token:operator"]


def decisions_any(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return list(db.execute("SELECT id FROM decisions WHERE slot = 'pump-1'"))


async def test_an_unknown_approval_id_is_a_tool_error_that_says_where_to_look(
    plant: GatewayServer, tmp_path: Path
) -> None:
    async with client(plant, OPERATOR, "legacy", path="/_broker/mcp") as operator:
        text, refused = refusal(await operator.call_tool("broker_approve", {"id": "deadbeef"}))
    assert text.startswith("No call waits for approval 'deadbeef'")
    assert "broker_approvals lists the waiting calls" in text
    assert (refused["reason"], refused["approval"]) == ("unknown_approval", "deadbeef")
    # The command says it on stderr: stdout is for what it lists or decides.
    token = tmp_path / "operator"
    token.write_text(OPERATOR)
    code, out, err = await run_cli("approve", "deadbeef", "--url", plant.url, "--token-file", str(token))
    assert (code, out) == (1, "")
    assert err.startswith("mcp-gateway approve: No call waits for approval 'deadbeef'"), err
