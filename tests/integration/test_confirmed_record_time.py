"""A call held for a person's answer is recorded with the time of its decision, when its record is
written, not the time it arrived (docs/governance-audit.md): the trail's records stay in id and time
order, and `mcp-gateway audit --since/--until` place a held call by its decision. A real gateway,
simulated pumps, SDK clients (the agent's asks its person through elicitation, who takes a while and
meanwhile an operator's call is recorded) and the real `mcp-gateway audit`."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_confirmation import POLICY, Person, client
from tests.integration.test_governance import AGENT, OPERATOR, auth, text_of
from tests.support.gateway_process import run_cli
from tests.support.southbound import simulated_pumps

THINKING_S = 0.3
"""How long the person takes after the operator's call, so the answer comes well after both."""


class SlowPerson(Person):
    """Answers after an operator's call of pump-2 was decided and recorded while the question waited."""

    def __init__(self, server: GatewayServer, approve: bool) -> None:
        super().__init__(approve)
        self.server = server

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        async with client(self.server, OPERATOR, "legacy", path="/pump-2/mcp") as operator:
            assert "speed_rpm" in text_of(await operator.call_tool("get_status", {}))
        await asyncio.sleep(THINKING_S)
        if self.approve:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")


async def trail(path: Path, *args: str) -> list[dict[str, Any]]:
    code, out, err = await run_cli("audit", "--path", str(path), "--format", "jsonl", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("approve", "effect"), [(True, "allow"), (False, "declined")])
async def test_a_held_call_is_recorded_when_it_is_decided(
    gateway_factory: GatewayFactory, tmp_path: Path, approve: bool, effect: str
) -> None:
    audit = tmp_path / "audit.db"
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(audit)})
    async with simulated_pumps(server, pumps=2):
        async with client(server, AGENT, "legacy", SlowPerson(server, approve)) as agent:
            result = await agent.call_tool("start", {"speed_rpm": 900})
        assert result.is_error is not approve, result

    records = [record for record in await trail(audit) if record["transport"] != "confirmation-question"]
    assert [(record["tool"], record["effect"]) for record in records] == [("get_status", "allow"), ("start", effect)]
    during, held = records
    # Written after the operator's call, with a later id: its time is later too, and it is the decision's.
    assert held["id"] > during["id"]
    assert held["time_ms"] >= held["confirmed_ms"] >= during["time_ms"] + THINKING_S * 1000 * 0.9, records
    everything = await trail(audit)
    assert [record["time_ms"] for record in everything] == sorted(record["time_ms"] for record in everything)

    # The time windows place it by its decision: after the operator's call, not before it.
    since = await trail(audit, "--since", iso(during["time_ms"] + 1))
    assert [record["id"] for record in since] == [held["id"]], since
    until = await trail(audit, "--until", iso(during["time_ms"] + 1), "--tool", "start")
    assert until == [], until
