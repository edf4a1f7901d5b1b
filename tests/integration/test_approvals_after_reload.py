"""Approvals and confirmations across a policy reload and between operators, through `mcp-gateway run` as a
real process with a simulated pump, SDK clients and the `mcp-gateway` command (docs/governance.md,
"Confirmation of device writes"): a caller's own yes does not go ahead once the reloaded policy has another
principal approve the call; a second operator deciding a call already decided is told whose decision holds;
the waiting-calls list marks a rule named by its index in a policy a reload has replaced."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.integration.test_confirmation import POLICY as CONFIRM_POLICY
from tests.integration.test_confirmation_holds import policy_toml
from tests.support.gateway_process import GatewayProcess, gateway_process, run_cli
from tests.support.refusals import refusal

TOKENS = {name: secrets.token_urlsafe(32) for name in ("agent", "operator", "operator2")}
POLICY: dict[str, Any] = {
    **CONFIRM_POLICY,
    "assign": [
        *CONFIRM_POLICY["assign"],
        {"principal": "token:operator2", "role": "operator", "resources": ["/plant/**", "/_system/**"]},
    ],
}
BY_ANOTHER: dict[str, Any] = {**POLICY, "confirm": [{**POLICY["confirm"][0], "by": "another"}]}
OPERATOR_RULE = {"principal": "token:operator", "capabilities": ["tool:stop"], "resources": ["/plant/**"]}
TWO_RULES: dict[str, Any] = {**BY_ANOTHER, "confirm": [OPERATOR_RULE, BY_ANOTHER["confirm"][0]]}
"""The agent's calls wait under confirm[1]; without the first rule they wait under confirm[0]."""


@dataclass
class Plant:
    gateway: GatewayProcess
    policy: Path
    trail: Path
    tokens: dict[str, Path]

    async def cli(self, *args: str, token: str = "operator") -> tuple[int, str, str]:
        return await run_cli(*args, "--url", self.gateway.url, "--token-file", str(self.tokens[token]))

    async def use(self, policy: dict[str, Any]) -> None:
        """Write `policy` to the gateway's policy file and have the running gateway reload it."""
        self.policy.write_text(policy_toml(policy))
        code, _, err = await self.cli("policy", "reload")
        assert (code, err) == (0, "")

    def starts(self) -> list[sqlite3.Row]:
        with contextlib.closing(sqlite3.connect(f"file:{self.trail}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            return list(db.execute("SELECT * FROM decisions WHERE tool = 'start' ORDER BY id"))


@contextlib.asynccontextmanager
async def plant_with(tmp_path: Path, policy: dict[str, Any]) -> AsyncIterator[Plant]:
    policy_file, trail = tmp_path / "policy.toml", tmp_path / "audit.db"
    policy_file.write_text(policy_toml(policy))
    tokens = {name: tmp_path / f"{name}.token" for name in TOKENS}
    entries = ""
    for name, token in TOKENS.items():
        tokens[name].write_text(token)
        entries += f'[[auth.tokens]]\nname = "{name}"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"port = 0\n[policy]\nfile = {json.dumps(str(policy_file))}\n[audit]\npath = {json.dumps(str(trail))}\n"
        + entries
    )
    async with gateway_process("--config", str(config), "--sim-pumps", "1", "--sim-control-port", "0") as gateway:
        await gateway.wait_line("provider attached to slot pump-1")
        yield Plant(gateway, policy_file, trail, tokens)


@contextlib.asynccontextmanager
async def agent_client(plant: Plant, mode: str, elicit: Any = None) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['agent']}"}, timeout=30) as transport,
        Client(
            streamable_http_client(f"{plant.gateway.url}/pump-1/mcp", http_client=transport),
            mode=mode,
            elicitation_callback=elicit,
        ) as sdk,
    ):
        yield sdk


# -- the caller's own yes, and a reload to by = "another" while it was asked ----------------------------------


async def test_a_callers_yes_does_not_go_ahead_when_the_reloaded_policy_has_another_approve(tmp_path: Path) -> None:
    async with plant_with(tmp_path, POLICY) as plant:
        asked: list[str] = []

        async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            await plant.use(BY_ANOTHER)  # the operator reloads while the question is open
            return types.ElicitResult(action="accept", content={"approve": True})

        async with agent_client(plant, "legacy", person) as agent:
            with pytest.raises(MCPError) as refused:
                await agent.call_tool("start", {"speed_rpm": 1500})
            error = refused.value.error
            assert error.code == -32001
            data = dict(error.data or {})
            data.pop("traceId", None)
            assert data == {"reason": "confirmation_changed", "by": "another", "rule": "confirm[0]", "slot": "pump-1"}
            assert 'it now requires approval by another principal (confirm[0], by = "another")' in error.message
            assert "Send the call again" in error.message
            assert len(asked) == 1
            # Sent again, it waits for another principal; its own client is not asked again.
            text, data = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
            assert data["reason"] == "confirmation_required"
            assert "another principal approves it" in text
            assert len(asked) == 1
            status = await agent.call_tool("get_status", {})
            assert status.structured_content is not None
            assert status.structured_content["state"] not in ("starting", "running")
    refused_row, waiting_row = plant.starts()
    assert refused_row["effect"] == "refuse-confirmation"
    assert refused_row["confirmed_by"] == "token:agent via elicitation"
    assert "requires approval by another principal" in refused_row["reason"]
    assert waiting_row["effect"] == "wait-confirmation"


# -- two operators deciding one call -------------------------------------------------------------------


async def test_deciding_a_call_already_decided_names_the_decision_that_holds(tmp_path: Path) -> None:
    async with plant_with(tmp_path, BY_ANOTHER) as plant, agent_client(plant, "2026-07-28") as agent:
        _, data = refusal(await agent.call_tool("start", {"speed_rpm": 1200}))
        approval = data["approval"]
        code, out, err = await plant.cli("approve", approval)
        assert (code, err) == (0, "")
        for also in ([], ["--deny"]):  # the slower operator, approving or denying
            code, out, err = await plant.cli("approve", *also, approval, token="operator2")
            assert (code, out) == (1, "")
            assert f"Approval '{approval}' was already approved by token:operator (start on pump-1)" in err
            assert "its caller's next attempt with the same arguments within" in err
            assert "s is forwarded, once. A decision is final: nothing changed" in err
        code, out, err = await plant.cli("approve", "--json", approval, token="operator2")
        assert code == 1 and "was already approved by token:operator" in err
        answer = json.loads(out)  # a script reads the refusal's data from stdout
        assert answer["isError"] is True and '"already_decided"' in out, out
        code, out, _ = await plant.cli("approve", "--json")
        [listed] = json.loads(out)["approvals"]
        assert (listed["state"], listed["decided_by"]) == ("approved", "token:operator")
        # The refusal's data, as a program reads it.
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['operator2']}"}) as transport,
            Client(streamable_http_client(f"{plant.gateway.url}/_broker/mcp", http_client=transport)) as broker,
        ):
            _, again = refusal(await broker.call_tool("broker_approve", {"id": approval, "approve": False}))
        assert again["reason"] == "already_decided"
        assert (again["state"], again["decided_by"], again["approval"]) == ("approved", "token:operator", approval)
        # The approval holds as decided: the retry is forwarded, and then the id is used up.
        assert not (await agent.call_tool("start", {"speed_rpm": 1200})).is_error
        code, _, err = await plant.cli("approve", approval, token="operator2")
        assert code == 1
        assert f"No call waits for approval '{approval}'" in err


# -- the waiting-calls list after a reload renumbers [[confirm]] ----------------------------------------


async def test_the_list_marks_a_rule_named_in_a_policy_since_reloaded(tmp_path: Path) -> None:
    async with plant_with(tmp_path, TWO_RULES) as plant, agent_client(plant, "2026-07-28") as agent:
        _, data = refusal(await agent.call_tool("start", {"speed_rpm": 1200}))
        code, out, _ = await plant.cli("approve")
        assert code == 0 and "[confirm[1], expires in" in out
        await plant.use(BY_ANOTHER)  # confirm[0] removed: the agent's rule is confirm[0] now
        code, out, _ = await plant.cli("approve")
        assert code == 0
        assert f"{data['approval']}  pending" in out
        assert "[confirm[1] of an earlier policy, expires in" in out
        code, out, _ = await plant.cli("approve", "--json")
        [listed] = json.loads(out)["approvals"]
        assert (listed["rule"], listed["rule_reloaded"]) == ("confirm[1]", True)
        # A call that begins waiting after the reload names a rule of the policy in force.
        await agent.call_tool("start", {"speed_rpm": 1300})
        code, out, _ = await plant.cli("approve")
        assert "[confirm[0], expires in" in out.splitlines()[1]
        # A reload that leaves [[confirm]] as it is changes no rule's meaning.
        await plant.use(
            {
                **BY_ANOTHER,
                "limits": [{"resources": ["/plant/**"], "tool": "start", "argument": "speed_rpm", "max": 2000}],
            }
        )
        code, out, _ = await plant.cli("approve")
        assert "[confirm[0], expires in" in out.splitlines()[1]
