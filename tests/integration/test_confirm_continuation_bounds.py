"""The bounds of a confirmed call's provider rounds in the 2026-07-28 era (docs/governance.md, "A confirmed
call whose provider asks its own question"): a continuing round is judged against the [[confirm]] rule in
force, never outlives the confirmation's lifetime (the rule's expires_s from the person's yes), continues
at most MAX_ROUNDS rounds, and one caller fills only its share of the remembered states; a round refused
before it is admitted does not use its state up. Through a real gateway, the real stdio provider
tests/support/ordinary_provider.py (`greet` asks the user's name, and again when not answered) and real
2026-07-28 HTTP requests."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from gateway.core.confirmer import MAX_CONTINUED_PER_CALLER, MAX_ROUNDS
from gateway.policy.rules import Policy
from gateway.policy.rules.checking import check_policy
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_governance import OPERATOR, auth, sha
from tests.integration.test_http_stateless_era import META_CAPABILITIES, post, request, routing_headers

SLOT = "ordinary"
AGENT = secrets.token_urlsafe(32)
AGENT_NAME = f"agent-{secrets.token_hex(4)}"
FILLER = secrets.token_urlsafe(32)
FILLER_NAME = f"filler-{secrets.token_hex(4)}"
"""Callers of names of this run's own: continuation states are remembered per process (the test gateways
share them), and FILLER fills its share."""
YES = {"confirm": {"action": "accept", "content": {"approve": True}}}
NAME = {"name": {"action": "accept", "content": {"name": "Ada"}}}


def policy(by: str = "caller", expires_s: int = 60, agent_may_call: bool = True) -> dict[str, Any]:
    assign = [
        {"principal": principal, "role": "operator", "resources": [f"/{SLOT}"]}
        for principal in ("token:operator", f"token:{FILLER_NAME}")
    ]
    if agent_may_call:
        assign.append({"principal": f"token:{AGENT_NAME}", "role": "operator", "resources": [f"/{SLOT}"]})
    return {
        "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
        "assign": assign,
        "confirm": [
            {
                "principal": "*",
                "capabilities": ["tool:greet"],
                "resources": [f"/{SLOT}"],
                "by": by,
                "expires_s": expires_s,
            }
        ],
    }


async def start(gateway_factory: GatewayFactory, tmp_path: Path, **rules: Any) -> GatewayServer:
    command = [sys.executable, "-m", "tests.support.ordinary_provider", "--stdio"]
    tokens = auth()
    tokens["tokens"] += [{"name": AGENT_NAME, "sha256": sha(AGENT)}, {"name": FILLER_NAME, "sha256": sha(FILLER)}]
    gateway = await gateway_factory(
        auth=tokens,
        policy=policy(**rules),
        audit={"path": str(tmp_path / "audit.db")},
        upstreams={"stdio": [{"name": SLOT, "command": command, "startup_timeout_s": 30}]},
    )
    await wait_ready_slot(gateway, SLOT, timeout=30)
    return gateway


def swap(server: GatewayServer, **rules: Any) -> None:
    """A reload of the policy in force (the in-process form of `mcp-gateway policy reload`)."""
    assert server.governor is not None
    server.governor.swap(Policy(check_policy(policy(**rules))))


async def rpc(
    http: aiohttp.ClientSession, server: GatewayServer, params: dict[str, Any], token: str = AGENT
) -> dict[str, Any]:
    """One stateless-era tools/call from a client that declares elicitation; its final answer, sent
    again after retryAfterMs while the gateway's rate limit refuses it (before it is decided)."""
    body = request("tools/call", params, meta={META_CAPABILITIES: {"elicitation": {"form": {}}}})
    headers = {**routing_headers(body), "Authorization": f"Bearer {token}"}
    while True:
        _, _, answer = await post(http, f"{server.url}/{SLOT}/mcp", body, headers)
        final: dict[str, Any] = answer[-1] if isinstance(answer, list) else answer
        data = final.get("error", {}).get("data", {})
        if data.get("reason") != "rate_limited":
            return final
        await asyncio.sleep(data["retryAfterMs"] / 1000)


async def confirmed(
    http: aiohttp.ClientSession, server: GatewayServer, arguments: dict[str, Any], token: str = AGENT
) -> str:
    """Ask, confirm, and get the provider's own input_required round: its continuation state."""
    asked = (await rpc(http, server, {"name": "greet", "arguments": arguments}, token))["result"]
    retry = {"name": "greet", "arguments": arguments, "requestState": asked["requestState"], "inputResponses": YES}
    provider = (await rpc(http, server, retry, token))["result"]
    assert provider["resultType"] == "input_required" and "name" in provider["inputRequests"], provider
    state: str = provider["requestState"]
    return state


def greet(arguments: dict[str, Any], state: str, responses: dict[str, Any]) -> dict[str, Any]:
    return {"name": "greet", "arguments": arguments, "requestState": state, "inputResponses": responses}


def decisions(path: Path) -> list[tuple[str, str | None, str | None]]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT effect, confirmed_by, reason FROM decisions WHERE tool = 'greet' ORDER BY id")
        return [(effect, by, reason) for effect, by, reason in rows]


async def test_a_round_after_a_reload_to_by_another_is_refused(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        swap(server, by="another")
        error = (await rpc(http, server, greet({"n": 1}, state, NAME)))["error"]
        assert error["code"] == -32001, error
        assert error["data"]["reason"] == "confirmation_changed" and error["data"]["by"] == "another", error
        assert error["data"]["rule"] == "confirm[0]", error
        # With no rule covering the call any more, a confirmed call continues.
        swap(server)
        state = await confirmed(http, server, {"n": 2})
        no_rule = policy()
        no_rule["confirm"] = []
        assert server.governor is not None
        server.governor.swap(Policy(check_policy(no_rule)))
        done = await rpc(http, server, greet({"n": 2}, state, NAME))
        assert done["result"]["content"][0]["text"] == "Hello, Ada!", done
    path = tmp_path / "audit.db"
    await wait_for(lambda: any(effect == "refuse-confirmation" for effect, *_ in decisions(path)), what="refusal")
    [(_, by, reason)] = [row for row in decisions(path) if row[0] == "refuse-confirmation"]
    assert by == f"token:{AGENT_NAME} via input_required", by
    assert reason is not None and 'by = "another"' in reason, reason


async def test_a_round_past_the_confirmations_lifetime_is_refused(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await start(gateway_factory, tmp_path, expires_s=2)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        # The provider asks again (no answer): each round's state carries the same deadline.
        again = (await rpc(http, server, greet({"n": 1}, state, {})))["result"]
        assert again["resultType"] == "input_required", again
        await asyncio.sleep(2.2)
        error = (await rpc(http, server, greet({"n": 1}, again["requestState"], NAME)))["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "expired", error
    assert "lifetime passed" in error["message"] and "send the call again" in error["message"], error


async def test_rounds_of_one_confirmation_are_bounded(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        for _ in range(MAX_ROUNDS):  # the provider asks again each time it is not answered
            state = (await rpc(http, server, greet({"n": 1}, state, {})))["result"]["requestState"]
        error = (await rpc(http, server, greet({"n": 1}, state, NAME)))["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "too_many_rounds", error
    assert error["data"]["limit"] == MAX_ROUNDS and f"at most {MAX_ROUNDS} rounds" in error["message"], error
    path = tmp_path / "audit.db"
    await wait_for(lambda: decisions(path)[-1][0] == "refuse-confirmation", what="refusal")


async def test_one_caller_fills_only_its_share(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with aiohttp.ClientSession() as http:
        spent = 0
        state = ""
        for n in range(MAX_CONTINUED_PER_CALLER // MAX_ROUNDS):
            state = await confirmed(http, server, {"n": n}, FILLER)
            for _ in range(MAX_ROUNDS):
                answer = await rpc(http, server, greet({"n": n}, state, {}), FILLER)
                assert "result" in answer, (spent, answer)
                state = answer["result"]["requestState"]
                spent += 1
        assert spent == MAX_CONTINUED_PER_CALLER
        state = await confirmed(http, server, {"n": "last"}, FILLER)
        error = (await rpc(http, server, greet({"n": "last"}, state, NAME), FILLER))["error"]
        assert error["code"] == -32000 and error["data"]["reason"] == "continuations_full", error
        assert error["data"]["limit"] == "max_continued_per_caller", error
        assert 0 < error["data"]["retryAfterMs"] <= 600_000, error
        # Another caller's confirmed call still continues.
        other = await confirmed(http, server, {"n": 1}, OPERATOR)
        done = await rpc(http, server, greet({"n": 1}, other, NAME), OPERATOR)
        assert done["result"]["content"][0]["text"] == "Hello, Ada!", done
    path = tmp_path / "audit.db"
    await wait_for(
        lambda: any(reason and "max_continued_per_caller" in reason for _, _, reason in decisions(path)),
        what="refusal",
    )


async def test_a_round_refused_by_the_policy_keeps_its_state(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        swap(server, agent_may_call=False)
        refused = await rpc(http, server, greet({"n": 1}, state, NAME))
        assert "error" in refused, refused
        swap(server)
        done = await rpc(http, server, greet({"n": 1}, state, NAME))
    assert done["result"]["content"][0]["text"] == "Hello, Ada!", done


pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
