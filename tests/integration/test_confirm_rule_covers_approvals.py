"""A [[confirm]] rule covering /_system/broker (the documented "every call" form: any caller,
mcp.tools.call on /**) never holds broker_approvals nor broker_approve, which are how a confirmation is
given (docs/governance.md, "Confirmation of device writes"): the operator lists and approves the waiting
call with `mcp-gateway approve`. broker_policy_reload stays subject to the rule as written: `policy
reload` waits for approval, and `mcp-gateway policy check` warns of it. A real gateway, a simulated pump,
SDK clients and the real command line."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_anonymous_approvals import policy_toml
from tests.integration.test_governance import client, one_pump
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal

AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)
EVERY_CALL = {"principal": "*", "capabilities": ["mcp.tools.call"], "resources": ["/**"]}
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [
        {"principal": "token:agent", "role": "operator", "resources": ["/plant/**"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/plant/**", "/_system/**"]},
    ],
    "confirm": [EVERY_CALL],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}
RELOAD_WARNING = (
    'warning: confirm[0]: covers broker_policy_reload on /_system/broker (mcp.tools.call on "/**"): '
    "`mcp-gateway policy reload` then waits for a person's approval"
)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def operator(server: GatewayServer, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` as the operator, against `server`."""
    credential = tmp_path / "operator.token"
    credential.write_text(OPERATOR)
    return await run_cli(*args, "--url", server.url, "--token-file", str(credential))


async def start(server: GatewayServer, speed: int) -> tuple[str, dict[str, Any]] | None:
    """The agent starts pump-1 (a client that declares no elicitation): None when forwarded, else the
    refusal's (text, data)."""
    async with client(server, "/pump-1/mcp", AGENT, "legacy") as agent:
        result = await agent.call_tool("start", {"speed_rpm": speed})
    return None if not result.is_error else refusal(result)


@pytest.mark.timeout(90)
async def test_the_operator_approves_under_a_rule_that_covers_every_call(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(policy_toml(POLICY))
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": digest(AGENT)}, {"name": "operator", "sha256": digest(OPERATOR)}]},
        policy={"file": str(policy_file)},
        audit={"path": str(tmp_path / "audit.db")},
    )
    async with one_pump(server):
        waiting = await start(server, 900)
        assert waiting is not None and waiting[1]["reason"] == "confirmation_required", waiting
        approval = waiting[1]["approval"]

        code, out, err = await operator(server, tmp_path, "approve")
        assert code == 0, (out, err)
        [line] = out.splitlines()
        assert line.startswith(f"{approval}  pending  token:agent -> start on pump-1"), out
        code, out, err = await operator(server, tmp_path, "approve", "--json")
        assert code == 0 and [item["id"] for item in json.loads(out)["approvals"]] == [approval], (out, err)

        code, out, err = await operator(server, tmp_path, "approve", approval)
        assert code == 0 and out.startswith(f"{approval} approved: start on pump-1 for token:agent"), (out, err)
        assert await start(server, 900) is None

        # The rule still holds a policy reload: it waits for a person like any other call it covers.
        code, out, err = await operator(server, tmp_path, "policy", "reload")
        assert code == 1 and "mcp-gateway policy reload: Not forwarded yet" in err, (out, err)
        assert "broker_policy_reload on _broker" in err, err
        assert server.governor is not None and server.governor.reloads == 0
        [held] = [item for item in server.governor.approvals() if item["tool"] == "broker_policy_reload"]
        assert held["principal"] == ["token:operator"]

    code, out, err = await run_cli(
        "audit", "--path", str(tmp_path / "audit.db"), "--slot", "_broker", "--format", "jsonl"
    )
    assert code == 0, err
    decided = [(record["tool"], record["effect"]) for record in map(json.loads, out.splitlines())]
    assert decided == [
        ("broker_approvals", "allow"),
        ("broker_approvals", "allow"),
        ("broker_approve", "allow"),
        ("broker_policy_reload", "wait-confirmation"),
    ], decided


async def test_policy_check_warns_of_a_rule_that_holds_a_policy_reload(tmp_path: Path) -> None:
    covering = tmp_path / "covering.toml"
    covering.write_text(policy_toml(POLICY))
    code, out, err = await run_cli("policy", "check", str(covering))
    assert code == 0 and out.startswith("policy OK"), (out, err)
    assert RELOAD_WARNING in err and "SIGHUP (systemctl reload mcp-gateway) still reloads it" in err, err

    # By the tool's own capability or its class too; a rule that leaves /_system alone is not warned of.
    for capability in ("tool:broker_policy_reload", "tool.control"):
        by_tool = tmp_path / "by_tool.toml"
        rule = {**EVERY_CALL, "capabilities": [capability], "resources": ["/_system/*"]}
        by_tool.write_text(policy_toml({**POLICY, "confirm": [rule]}))
        code, out, err = await run_cli("policy", "check", str(by_tool))
        assert code == 0 and f'covers broker_policy_reload on /_system/broker ({capability} on "/_system/*")' in err
    for rule in ({**EVERY_CALL, "resources": ["/plant/**"]}, {**EVERY_CALL, "capabilities": ["tool.observe"]}):
        quiet = tmp_path / "quiet.toml"
        quiet.write_text(policy_toml({**POLICY, "confirm": [rule]}))
        code, out, err = await run_cli("policy", "check", str(quiet))
        assert code == 0 and "broker_policy_reload" not in err, err


async def test_config_check_warns_of_a_rule_that_holds_a_policy_reload(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(POLICY))
    config = tmp_path / "gateway.toml"
    config.write_text(f'[audit]\npath = "{tmp_path / "audit.db"}"\n[policy]\nfile = "{policy}"\n')
    code, out, err = await run_cli("config", "check", "--config", str(config))
    assert code == 0 and "configuration OK" in out, err
    assert f"mcp-gateway config check: warning: policy file {policy}: confirm[0]: covers broker_policy_reload" in err
