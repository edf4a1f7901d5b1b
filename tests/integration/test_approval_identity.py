"""Approvals go by the caller's stable identity, as sessions do (docs/governance.md, "Confirmation of
device writes"): with `by = "another"`, an OAuth user never approves their own call through a token
issued to another client or naming other groups, and limits.max_pending_approvals_per_caller counts one
user's calls together whatever client or groups their tokens name. The retry an approval answers is still
the same call of the same subjects. A real gateway with OAuth access tokens checked against a real JWKS
server, a simulated pump, SDK clients and `mcp-gateway approve`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.support.gateway_process import run_cli
from tests.support.oauth import ISSUER, access_token, jwks, jwks_server, rsa_key
from tests.support.refusals import refusal
from tests.support.southbound import simulated_pumps

POLICY: dict[str, Any] = {
    "roles": {
        "operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]},
    },
    # Everyone may approve (broker_approve is a control tool on /_system/broker): what stops alice is
    # only that the call is her own.
    "assign": [{"principal": "*", "role": "operator", "resources": ["/plant/**", "/_system/**"]}],
    "confirm": [{"principal": "*", "capabilities": ["tool:start"], "resources": ["/plant/**"], "by": "another"}],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}


@contextlib.asynccontextmanager
async def plant(gateway_factory: GatewayFactory, **limits: int) -> AsyncIterator[GatewayServer]:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(
            auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url}}, policy=POLICY, limits=limits
        )
        async with simulated_pumps(server):
            yield server


def token(server: GatewayServer, subject: str, **claims: Any) -> str:
    """An access token for pump-1 and the gateway's own tools (where `mcp-gateway approve` goes)."""
    audience = [f"{server.url}/pump-1/mcp", f"{server.url}/_broker/mcp"]
    return access_token(rsa_key(), audience, subject=subject, **claims)


@contextlib.asynccontextmanager
async def caller(server: GatewayServer, bearer: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}/pump-1/mcp", http_client=transport), mode="2026-07-28") as sdk,
    ):
        yield sdk


async def start(server: GatewayServer, bearer: str, speed: int) -> tuple[str, dict[str, Any]] | None:
    """Start pump-1 as `bearer`: None when forwarded, else the refusal's (text, data)."""
    async with caller(server, bearer) as sdk:
        result = await sdk.call_tool("start", {"speed_rpm": speed})
    return None if not result.is_error else refusal(result)


async def approve(server: GatewayServer, bearer: str, approval: str, tmp_path: Path) -> tuple[int, str]:
    credential = tmp_path / "credential"
    credential.write_text(bearer)
    code, out, err = await run_cli("approve", approval, "--url", server.url, "--token-file", str(credential))
    return code, out + err


async def test_a_user_never_approves_their_own_call_through_another_client_or_other_groups(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    async with plant(gateway_factory) as server:
        agent = token(server, "alice", azp="agent-app")
        waiting = await start(server, agent, 900)
        assert waiting is not None and waiting[1]["reason"] == "confirmation_required"
        approval = waiting[1]["approval"]
        for own in (
            token(server, "alice", azp="desk"),
            token(server, "alice"),
            token(server, "alice", azp="agent-app", groups=["approvers"]),
            token(server, "alice", azp="agent-app"),
        ):
            code, text = await approve(server, own, approval, tmp_path)
            assert code != 0 and f"Approval {approval} is for a call of yours" in text, text
            assert "(user:alice, whichever client or groups your token names)" in text
        # A script reads the refusal's data on stdout; the words go to stderr, named by the command.
        credential = tmp_path / "credential"
        credential.write_text(token(server, "alice"))
        code, out, err = await run_cli(
            "approve", "--json", approval, "--url", server.url, "--token-file", str(credential)
        )
        assert code == 1
        assert json.loads(out)["error"]["data"]["reason"] == "own_call", out
        assert err.startswith(f"mcp-gateway approve: Approval {approval} is for a call of yours"), err
        # Nothing was approved: the agent's retry still waits, for the same approval.
        again = await start(server, agent, 900)
        assert again is not None and again[1]["approval"] == approval
        code, text = await approve(server, token(server, "bob", azp="desk"), approval, tmp_path)
        assert code == 0 and f"{approval} approved: start on pump-1 for client:agent-app, user:alice" in text, text
        assert await start(server, agent, 900) is None


async def test_an_approval_answers_the_retry_of_the_same_subjects_only(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    async with plant(gateway_factory) as server:
        agent = token(server, "alice", azp="agent-app")
        waiting = await start(server, agent, 900)
        assert waiting is not None
        approval = waiting[1]["approval"]
        assert (await approve(server, token(server, "bob"), approval, tmp_path))[0] == 0
        # The approver approved the call of client:agent-app, user:alice: the same user through another
        # client is another attempt, which waits for its own approval and leaves this one in place.
        other = await start(server, token(server, "alice", azp="desk"), 900)
        assert other is not None and other[1]["reason"] == "confirmation_required"
        assert other[1]["approval"] != approval
        assert await start(server, agent, 900) is None


async def test_one_user_has_one_quota_of_calls_waiting_for_approval(gateway_factory: GatewayFactory) -> None:
    async with plant(gateway_factory, max_pending_approvals=10, max_pending_approvals_per_caller=2) as server:
        for speed, claims in ((900, {}), (901, {"azp": "agent-app"})):
            parked = await start(server, token(server, "erin", **claims), speed)
            assert parked is not None and parked[1]["reason"] == "confirmation_required"
        more: list[tuple[int, dict[str, Any]]] = [(902, {"azp": "c1"}), (903, {"groups": ["g1"]}), (904, {})]
        for speed, claims in more:
            async with caller(server, token(server, "erin", **claims)) as sdk:
                with pytest.raises(MCPError) as refused:
                    await sdk.call_tool("start", {"speed_rpm": speed})
            data = refused.value.error.data
            assert data is not None and data["limit"] == "limits.max_pending_approvals_per_caller", claims
        # Another user has a quota of their own.
        parked = await start(server, token(server, "frank", azp="c1"), 905)
        assert parked is not None and parked[1]["reason"] == "confirmation_required"
        assert server.governor is not None and len(server.governor.approvals()) == 3
