"""Confirmations answered in the 2026-07-28 era, through a real gateway and raw stateless-era HTTP
clients (docs/governance.md, "Confirmation of device writes"): one caller answering its own questions in
a loop fills only its share of the answered requestStates (limits.max_used_confirmations_per_caller), and
every other caller's answers still count; and the device read that quotes the device's state in a
question is the caller's governed call, recorded in the audit trail and held to its execution limits."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_governance import AGENT, OPERATOR, auth
from tests.integration.test_http_stateless_era import META_CAPABILITIES, post, request
from tests.integration.test_metrics import Scrape

JsonObject = dict[str, Any]
PER_CALLER = 3
ALL_CALLERS = 5
READS_PER_WINDOW = 2
READ_WINDOW_MS = 600_000
"""Longer than any test: the reads the limit allows are not given back while a test runs."""

POLICY: dict[str, Any] = {
    "roles": {
        "operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "operator", "resources": ["/plant/valve-1"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/plant/**"]},
    ],
    "confirm": [{"principal": "*", "capabilities": ["tool.control"], "resources": ["/plant/**"]}],
    "resource_patterns": [{"slots": "valve-*", "path": "/plant/{slot}"}],
    "execution_limits": [
        {
            "id": "position-reads",
            "match": {"subject": "token:agent", "capability": "tool:get_position"},
            "group_by": ["subject"],
            "calls": {"max": READS_PER_WINDOW, "window_ms": READ_WINDOW_MS},
        }
    ],
}
LIMITS = {"max_used_confirmations": ALL_CALLERS, "max_used_confirmations_per_caller": PER_CALLER}
ACCEPT = {"confirm": {"action": "accept", "content": {"approve": True}}}
DECLINE = {"confirm": {"action": "decline"}}


@dataclass
class Valves:
    gateway: GatewayServer
    trail: Path
    moves: dict[str, list[int]]
    reads: dict[str, int]
    """get_position calls that reached each valve."""


def valve(name: str, valves: Valves) -> MCPServer:
    server = MCPServer(name)
    position = {"percent": 0}
    valves.moves[name] = []
    valves.reads[name] = 0

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def get_position() -> dict[str, int]:
        """Where the valve stands."""
        valves.reads[name] += 1
        return dict(position)

    @server.tool()
    def set_position(percent: int) -> str:
        """Move the valve."""
        valves.moves[name].append(percent)
        position["percent"] = percent
        return f"moved to {percent}"

    return server


@pytest.fixture
async def valves(gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path) -> AsyncIterator[Valves]:
    server = await gateway_factory(
        auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, limits=LIMITS
    )
    plant = Valves(server, tmp_path / "audit.db", {}, {})
    for name in ("valve-1", "valve-2"):
        await publishers.start(server, name, valve(name, plant))
    yield plant


class Caller:
    """A raw 2026-07-28 client that answers the gateway's input_required rounds by hand."""

    def __init__(self, http: aiohttp.ClientSession, valves: Valves, slot: str) -> None:
        self.http = http
        self.url = f"{valves.gateway.url}/{slot}/mcp"
        self.next_id = 0

    async def send(self, params: JsonObject) -> JsonObject:
        self.next_id += 1
        body = request("tools/call", params, self.next_id, {META_CAPABILITIES: {"elicitation": {}}})
        status, _, answer = await post(self.http, self.url, body)
        assert status == 200, answer
        final: JsonObject = answer[-1] if isinstance(answer, list) else answer
        return final

    async def ask(self, percent: int) -> JsonObject:
        """The input_required round the gateway answers a call with."""
        first = await self.send({"name": "set_position", "arguments": {"percent": percent}})
        result: JsonObject = first["result"]
        assert result["resultType"] == "input_required", first
        return result

    async def answer(self, percent: int, state: str, responses: JsonObject) -> JsonObject:
        params = {
            "name": "set_position",
            "arguments": {"percent": percent},
            "requestState": state,
            "inputResponses": responses,
        }
        return await self.send(params)

    async def round(self, percent: int, responses: JsonObject) -> JsonObject:
        return await self.answer(percent, (await self.ask(percent))["requestState"], responses)


@contextlib.asynccontextmanager
async def caller(valves: Valves, token: str, slot: str) -> AsyncIterator[Caller]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        yield Caller(http, valves, slot)


def decisions(path: Path, tool: str) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions WHERE tool = ? ORDER BY id", (tool,)))


def results(path: Path) -> dict[int, str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT decision_id, status FROM results"))


def limit_hits(valves: Valves, limit: str) -> float:
    return Scrape(valves.gateway.gateway.metrics.render().decode()).get("mcpgw_limit_hits_total", limit=limit)


async def test_one_caller_fills_only_its_share_of_answered_confirmations(valves: Valves) -> None:
    async with caller(valves, AGENT, "valve-1") as agent, caller(valves, OPERATOR, "valve-2") as operator:
        for percent in range(PER_CALLER):  # its share, each answered with a no
            declined = await agent.round(percent, DECLINE)
            assert declined["result"]["isError"] is True, declined

        # Past its share: the agent's own answer waits, named, and its state is not used up.
        asked = await agent.ask(50)
        full = await agent.answer(50, asked["requestState"], DECLINE)
        assert full["error"]["code"] == -32000, full
        data = full["error"]["data"]
        assert data["reason"] == "confirmations_full"
        assert data["limit"] == "limits.max_used_confirmations_per_caller"
        assert 0 < data["retryAfterMs"] <= 300_000
        assert "limits.max_used_confirmations_per_caller" in full["error"]["message"]
        assert limit_hits(valves, "max_used_confirmations_per_caller") == 1

        # Every other caller's confirmation still counts.
        done = await operator.round(20, ACCEPT)
        assert done["result"]["content"][0]["text"] == "moved to 20", done
        assert valves.moves == {"valve-1": [], "valve-2": [20]}
        done = await operator.round(30, ACCEPT)
        assert done["result"]["content"][0]["text"] == "moved to 30", done

        # The gateway-wide bound holds too: 3 of the agent's and 2 of the operator's are remembered.
        refused = await operator.round(40, ACCEPT)
        assert refused["error"]["data"]["reason"] == "confirmations_full", refused
        assert refused["error"]["data"]["limit"] == "limits.max_used_confirmations"
        assert valves.moves == {"valve-1": [], "valve-2": [20, 30]}
        assert limit_hits(valves, "max_used_confirmations") == 1

    # Each refusal is on record, and nothing refused reached a valve.
    rows = decisions(valves.trail, "set_position")
    refusals = [row for row in rows if row["effect"] == "refuse-confirmation"]
    assert [(row["slot"], row["principal"]) for row in refusals] == [
        ("valve-1", '["token:agent"]'),
        ("valve-2", '["token:operator"]'),
    ]
    assert all("limits.max_used_confirmations" in row["reason"] for row in refusals)


async def test_the_state_read_for_a_question_is_the_callers_governed_call(valves: Valves) -> None:
    async with caller(valves, AGENT, "valve-1") as agent:
        first = await agent.ask(10)
        assert 'The device reports now: {"percent":0}' in first["inputRequests"]["confirm"]["params"]["message"]
        await agent.round(11, DECLINE)  # asks again: the second read the agent's limit allows
        # The third question would read past the agent's execution limit: it is asked without the state,
        # and the device is not read.
        third = await agent.ask(12)
        message = third["inputRequests"]["confirm"]["params"]["message"]
        assert "The device reports now" not in message
        assert "token:agent asks to call set_position on valve-1 (/plant/valve-1)" in message
    assert valves.reads["valve-1"] == READS_PER_WINDOW
    assert valves.moves["valve-1"] == []

    # Every read that reached the device is on record before it, as the caller's own call of the read
    # tool, with the trace id of the call whose question it was; the one the limit refused is too.
    await wait_for(lambda: len(results(valves.trail)) == READS_PER_WINDOW, what="the reads' results")
    reads = decisions(valves.trail, "get_position")
    assert [(row["effect"], row["transport"], row["principal"]) for row in reads] == [
        ("allow", "confirmation-question", '["token:agent"]'),
        ("allow", "confirmation-question", '["token:agent"]'),
        ("refuse-limit", "confirmation-question", '["token:agent"]'),
    ]
    assert [results(valves.trail).get(row["id"]) for row in reads] == ["ok", "ok", None]
    questions = [row for row in decisions(valves.trail, "set_position") if row["effect"] == "wait-confirmation"]
    assert [row["trace_id"] for row in questions] == [row["trace_id"] for row in reads]
    assert "position-reads" in reads[2]["rules"]


async def test_a_read_tool_that_needs_confirming_is_not_read_for_a_question(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path
) -> None:
    """Where the policy has every call confirmed, the read tool's too, the gateway's read for the
    question is refused on record and the question goes without the state: nothing waits for approval."""
    policy = {**POLICY, "confirm": [{"principal": "*", "capabilities": ["mcp.tools.call"], "resources": ["/**"]}]}
    server = await gateway_factory(auth=auth(), policy=policy, audit={"path": str(tmp_path / "audit.db")})
    plant = Valves(server, tmp_path / "audit.db", {}, {})
    await publishers.start(server, "valve-1", valve("valve-1", plant))
    async with caller(plant, AGENT, "valve-1") as agent:
        asked = await agent.ask(10)
        assert "The device reports now" not in asked["inputRequests"]["confirm"]["params"]["message"]
        done = await agent.answer(10, asked["requestState"], ACCEPT)
        assert done["result"]["content"][0]["text"] == "moved to 10", done
    assert plant.reads["valve-1"] == 0
    assert server.governor is not None and server.governor.approvals() == []
    reads = decisions(plant.trail, "get_position")
    assert [(row["effect"], row["transport"]) for row in reads] == [("refuse-confirmation", "confirmation-question")]
