"""Approvals nobody can give: on a gateway without [auth] every caller is `anonymous`, and an anonymous
caller never approves an anonymous call (docs/governance.md, "Confirmation of device writes"). So a
[[confirm]] rule covering that caller makes calls wait for nobody: `mcp-gateway config check` warns of
it, `broker_diagnose` names it (governance.approvals_unanswerable), the caller is told that no one can
approve its call here, and `mcp-gateway approve` says why it refuses. With [auth] none of this is said.
A real gateway, a simulated pump, SDK clients and the real command line."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Any

import orjson
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_governance import client, one_pump
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/plant/**", "/_system/**"]}],
    "confirm": [{"principal": "*", "capabilities": ["tool:start"], "resources": ["/plant/**"], "by": "another"}],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}
PROBLEM = "governance.approvals_unanswerable"
AGENT = secrets.token_urlsafe(32)


def auth() -> dict[str, Any]:
    return {"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]}


def toml_value(value: Any) -> str:
    """A TOML inline value (JSON's strings, numbers, lists and booleans are TOML's)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + "}"
    return orjson.dumps(value).decode()


def policy_toml(policy: dict[str, Any], prefix: str = "") -> str:
    lines = [f"[{prefix}roles]"]
    lines += [f"{name} = {toml_value(role)}" for name, role in policy["roles"].items()]
    for key in ("assign", "confirm", "resource_patterns"):
        for entry in policy.get(key, []):
            lines.append(f"[[{prefix}{key}]]")
            lines += [f"{name} = {toml_value(item)}" for name, item in entry.items()]
    return "\n".join(lines) + "\n"


async def config_check(path: Path) -> tuple[int, str, str]:
    return await run_cli("config", "check", "--config", str(path))


async def test_config_check_warns_of_confirmations_nobody_can_approve(tmp_path: Path) -> None:
    audit = f'[audit]\npath = "{tmp_path / "audit.db"}"\n'
    inline = tmp_path / "inline.toml"
    inline.write_text(audit + policy_toml(POLICY, "policy."))
    code, out, err = await config_check(inline)
    assert code == 0 and "configuration OK" in out, err
    assert "warning: [policy]: confirm[0] makes calls of any caller wait for a person" in err, err
    assert "with no [auth] nobody can approve" in err and "Add [auth] with a token for the approver" in err

    # The policy in a file of its own: the same warning, naming the file.
    (tmp_path / "policy.toml").write_text(policy_toml(POLICY))
    in_file = tmp_path / "in_file.toml"
    in_file.write_text(f'{audit}[policy]\nfile = "{tmp_path / "policy.toml"}"\n')
    code, out, err = await config_check(in_file)
    assert code == 0 and f"warning: policy file {tmp_path / 'policy.toml'}: confirm[0] makes" in err, err

    # With [auth], or a rule that covers no anonymous caller, someone can approve: no warning.
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(audit + '[[auth.tokens]]\nname = "agent"\nsha256 = "' + "0" * 64 + '"\n')
    tokens.write_text(tokens.read_text() + policy_toml(POLICY, "policy."))
    named = tmp_path / "named.toml"
    confirm_agent = {**POLICY, "confirm": [{**POLICY["confirm"][0], "principal": "token:agent"}]}
    named.write_text(audit + policy_toml(confirm_agent, "policy."))
    for quiet in (tokens, named):
        code, out, err = await config_check(quiet)
        assert code == 0 and "configuration OK" in out and "nobody can approve" not in err, (quiet, err)


async def diagnosed(server: GatewayServer) -> list[dict[str, Any]]:
    async with Client(f"{server.url}/_broker/mcp", mode="2026-07-28") as broker:
        result = await broker.call_tool("broker_diagnose", {})
    assert not result.is_error and result.structured_content is not None, result
    problems: list[dict[str, Any]] = result.structured_content["problems"]
    return problems


async def test_an_anonymous_call_is_told_nobody_here_can_approve_it(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await gateway_factory(policy=POLICY, audit={"path": str(tmp_path / "audit.db")})
    async with one_pump(server):
        [problem] = [p for p in await diagnosed(server) if p["id"] == PROBLEM]
        assert problem["severity"] == "warning"
        assert "confirm[0]" in problem["evidence"] and "every caller is anonymous" in problem["evidence"]
        assert "Add [auth] with a token for the approver" in problem["fix"]

        async with Client(f"{server.url}/pump-1/mcp", mode="2026-07-28") as agent:
            result = await agent.call_tool("start", {"speed_rpm": 900})
        text, data = refusal(result)
        assert data["reason"] == "confirmation_required"
        assert "No one can approve it on this gateway: without [auth] every caller is anonymous" in text, text
        assert "An operator runs" not in text

        code, out, err = await run_cli("approve", data["approval"], "--url", server.url)
        assert code == 1, (out, err)
        assert f"Approval {data['approval']} is for a call of yours (anonymous: every caller is anonymous" in err, err
        assert "add [auth] with a token for the approver" in err and "your token names" not in err


async def test_with_auth_an_operator_is_named_and_nothing_is_diagnosed(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")})
    async with one_pump(server):
        assert PROBLEM not in {p.id for p in server.gateway.broker.problems()}
        async with client(server, "/pump-1/mcp", AGENT, "2026-07-28") as agent:
            result = await agent.call_tool("start", {"speed_rpm": 900})
        text, data = refusal(result)
        assert f"An operator runs `mcp-gateway approve {data['approval']}`" in text, text
        credential = tmp_path / "credential"
        credential.write_text(AGENT)
        code, out, err = await run_cli(
            "approve", data["approval"], "--url", server.url, "--token-file", str(credential)
        )
        # A static token's caller is named by its identity alone: no token names a client or groups.
        assert code == 1 and f"Approval {data['approval']} is for a call of yours (token:agent):" in err, (out, err)
