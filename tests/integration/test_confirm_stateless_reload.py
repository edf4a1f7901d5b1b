"""Confirmations answered in the 2026-07-28 era across a policy reload and at a full share of answered
confirmations, through a real gateway, a real SDK provider and a raw stateless-era HTTP client answering
the input_required rounds by hand (docs/governance.md, "Confirmation of device writes"): a caller's own
yes to a question asked under `by = "caller"` does not count once the reloaded policy has another
principal approve the call, as in the session era; and a refused answer whose question expires before
room frees is told to ask again, never to send the same retry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayServer
from gateway.policy.confirmation import FULL_RETRY_MARGIN_MS
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_confirm_state_share import ACCEPT, DECLINE, Valves, caller, decisions, valve
from tests.integration.test_confirmation_holds import policy_toml
from tests.integration.test_governance import AGENT, auth
from tests.support.refusals import refusal_of

EXPIRES_S = 3
"""The rule's lifetime of a question: short, so the test of a share full sees states expire."""
LIMIT = {"resources": ["/plant/**"], "tool": "set_position", "argument": "percent", "min": 0, "max": 100}
CONFIRM = {"principal": "token:agent", "capabilities": ["tool.control"], "resources": ["/plant/**"]}
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:agent", "role": "operator", "resources": ["/plant/**"]}],
    "confirm": [CONFIRM],
    "limits": [LIMIT],
    "resource_patterns": [{"slots": "valve-*", "path": "/plant/{slot}"}],
}
BY_ANOTHER: dict[str, Any] = {**POLICY, "confirm": [{**CONFIRM, "by": "another"}]}
TIGHTER: dict[str, Any] = {**POLICY, "limits": [{**LIMIT, "max": 50}]}


@dataclass
class Plant:
    valves: Valves
    policy: Path

    def use(self, policy: dict[str, Any]) -> None:
        """Write `policy` to the gateway's policy file and reload it, as `mcp-gateway policy reload` does."""
        self.policy.write_text(policy_toml(policy))
        assert self.valves.gateway.reload_policy() is None


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path) -> AsyncIterator[Plant]:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(POLICY))
    server: GatewayServer = await gateway_factory(
        auth=auth(), policy={"file": str(policy)}, audit={"path": str(tmp_path / "audit.db")}
    )
    valves = Valves(server, tmp_path / "audit.db", {}, {})
    await publishers.start(server, "valve-1", valve("valve-1", valves))
    yield Plant(valves, policy)


def effects(plant: Plant) -> list[tuple[str, str | None]]:
    return [(row["effect"], row["confirmed_by"]) for row in decisions(plant.valves.trail, "set_position")]


# -- a reload to by = "another" while the question is open -------------------------------------------------


async def test_a_callers_yes_does_not_count_once_the_reloaded_policy_has_another_approve(plant: Plant) -> None:
    async with caller(plant.valves, AGENT, "valve-1") as agent:
        asked = await agent.ask(40)
        plant.use(BY_ANOTHER)  # the operator reloads while the question is open
        refused = await agent.answer(40, asked["requestState"], ACCEPT)
        error = refused["error"]
        assert error["code"] == -32001, refused
        data = dict(error["data"])
        data.pop("traceId", None)
        assert data == {"reason": "confirmation_changed", "by": "another", "rule": "confirm[0]", "slot": "valve-1"}
        assert 'it now requires approval by another principal (confirm[0], by = "another")' in error["message"]
        assert "the answer came from the caller (token:agent via input_required)" in error["message"]
        # Sent again, the call waits for another principal; the caller is not asked again.
        text, waiting = refusal_of((await agent.send({"name": "set_position", "arguments": {"percent": 40}}))["result"])
        assert waiting["reason"] == "confirmation_required"
        assert "another principal approves it" in text
    assert plant.valves.moves == {"valve-1": []}
    assert [effect for effect, _ in effects(plant)] == ["wait-confirmation", "refuse-confirmation", "wait-confirmation"]
    assert "requires approval by another principal" in decisions(plant.valves.trail, "set_position")[1]["reason"]


async def test_a_callers_no_stays_a_no_after_a_reload_to_by_another(plant: Plant) -> None:
    async with caller(plant.valves, AGENT, "valve-1") as agent:
        asked = await agent.ask(40)
        plant.use(BY_ANOTHER)
        text, declined = refusal_of((await agent.answer(40, asked["requestState"], DECLINE))["result"])
        assert declined["reason"] == "declined", text
    assert plant.valves.moves == {"valve-1": []}
    assert effects(plant) == [("wait-confirmation", None), ("declined", "token:agent via input_required")]


async def test_the_refusal_of_an_answered_call_records_the_callers_answer(plant: Plant) -> None:
    """As in the session era: a refusal after the caller answered has its answer in confirmed_by."""
    async with caller(plant.valves, AGENT, "valve-1") as agent:
        asked = await agent.ask(40)
        plant.use(BY_ANOTHER)
        assert (await agent.answer(40, asked["requestState"], ACCEPT))["error"]["code"] == -32001
        plant.use(POLICY)
        asked = await agent.ask(80)
        plant.use(TIGHTER)  # the limit tightens while the question is open
        text, _ = refusal_of((await agent.answer(80, asked["requestState"], ACCEPT))["result"])
        assert "above the limit 50" in text
    assert plant.valves.moves == {"valve-1": []}
    assert effects(plant)[1] == ("refuse-confirmation", "token:agent via input_required")
    assert effects(plant)[-1] == ("refuse-arguments", "token:agent via input_required")


# -- the per-caller share of answered confirmations is full -------------------------------------------------


async def test_a_refused_answer_whose_question_expires_first_is_told_to_ask_again(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path
) -> None:
    policy = {**POLICY, "confirm": [{**CONFIRM, "expires_s": EXPIRES_S}]}
    server = await gateway_factory(
        auth=auth(),
        policy=policy,
        audit={"path": str(tmp_path / "audit.db")},
        limits={"max_used_confirmations_per_caller": 1},
    )
    valves = Valves(server, tmp_path / "audit.db", {}, {})
    await publishers.start(server, "valve-1", valve("valve-1", valves))
    async with caller(valves, AGENT, "valve-1") as agent:
        first = await agent.ask(1)
        await asyncio.sleep(0.5)
        # The second question's answer fills the agent's share until it expires, after the first question.
        done = await agent.round(2, ACCEPT)
        assert done["result"]["content"][0]["text"] == "moved to 2", done
        full = (await agent.answer(1, first["requestState"], ACCEPT))["error"]
        assert full["code"] == -32000, full
        data = full["data"]
        assert data["reason"] == "confirmations_full"
        assert data["limit"] == "limits.max_used_confirmations_per_caller"
        assert data["retry"] == "ask_again"  # the same retry cannot count: its state expires first
        assert 0 < data["retryAfterMs"] <= EXPIRES_S * 1000
        assert "send the same retry" not in full["message"]
        assert "this question expires in " in full["message"]
        assert "s) or less than 1 s after, so its retry cannot count" in full["message"]
        assert "so its retry cannot count: send the call again without requestState in " in full["message"]

        # A question whose state outlives the wait by more than the margin is told to send the same retry,
        # which then counts.
        await asyncio.sleep(FULL_RETRY_MARGIN_MS / 1000 + 0.5)
        third = await agent.ask(3)
        full = (await agent.answer(3, third["requestState"], ACCEPT))["error"]
        assert full["code"] == -32000, full
        wait_ms = full["data"]["retryAfterMs"]
        assert full["data"]["retry"] == "same"
        assert 0 < wait_ms <= EXPIRES_S * 1000 - FULL_RETRY_MARGIN_MS
        assert "send the same retry again in" in full["message"]
        await asyncio.sleep(wait_ms / 1000 + 0.05)
        done = await agent.answer(3, third["requestState"], ACCEPT)
        assert done["result"]["content"][0]["text"] == "moved to 3", done
    assert valves.moves == {"valve-1": [2, 3]}
