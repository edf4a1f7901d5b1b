"""Gaps in the confirmation of device writes (docs/governance.md, "Confirmation of device writes"): a
refused continuation state is on record, a continued round carries who confirmed the call, a reload that
shortens the rule's expires_s shortens the states already sealed, and only a principal that may make a
waiting call itself decides it. Through a real gateway, the real stdio provider
tests/support/ordinary_provider.py (`greet` asks the user's name), real MCP SDK clients, real 2026-07-28
HTTP requests and the real `mcp-gateway approve`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.policy.rules import Policy
from gateway.policy.rules.checking import check_policy
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_governance import sha
from tests.integration.test_http_stateless_era import META_CAPABILITIES, post, request, routing_headers
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SLOT = "ordinary"
MODERN = "2026-07-28"
AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)
WATCHER = secrets.token_urlsafe(32)
"""May call the _broker tools, not the slot's: it approves none of the slot's calls."""
YES = {"confirm": {"action": "accept", "content": {"approve": True}}}
NAME = {"name": {"action": "accept", "content": {"name": "Ada"}}}
ROLE = {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}


def policy(by: str = "caller", expires_s: int = 60) -> dict[str, Any]:
    return {
        "roles": {"operator": ROLE},
        "assign": [
            {"principal": "token:agent", "role": "operator", "resources": [f"/{SLOT}"]},
            {"principal": "token:operator", "role": "operator", "resources": [f"/{SLOT}", "/_system/**"]},
            {"principal": "token:watcher", "role": "operator", "resources": ["/_system/**"]},
        ],
        "confirm": [
            {
                "principal": "token:agent",
                "capabilities": ["tool:greet"],
                "resources": [f"/{SLOT}"],
                "by": by,
                "expires_s": expires_s,
            }
        ],
    }


async def start(gateway_factory: GatewayFactory, tmp_path: Path, **rules: Any) -> GatewayServer:
    command = [sys.executable, "-m", "tests.support.ordinary_provider", "--stdio"]
    tokens = [{"name": name, "sha256": sha(token)} for name, token in _TOKENS.items()]
    gateway = await gateway_factory(
        auth={"tokens": tokens},
        policy=policy(**rules),
        audit={"path": str(tmp_path / "audit.db")},
        upstreams={"stdio": [{"name": SLOT, "command": command, "startup_timeout_s": 30}]},
    )
    await wait_ready_slot(gateway, SLOT, timeout=30)
    return gateway


_TOKENS = {"agent": AGENT, "operator": OPERATOR, "watcher": WATCHER}


def swap(server: GatewayServer, **rules: Any) -> None:
    """A reload of the policy in force (the in-process form of `mcp-gateway policy reload`)."""
    assert server.governor is not None
    server.governor.swap(Policy(check_policy(policy(**rules))))


async def rpc(http: aiohttp.ClientSession, server: GatewayServer, params: dict[str, Any]) -> dict[str, Any]:
    """One stateless-era tools/call of the agent, from a client that declares elicitation; its final answer."""
    body = request("tools/call", params, meta={META_CAPABILITIES: {"elicitation": {"form": {}}}})
    headers = {**routing_headers(body), "Authorization": f"Bearer {AGENT}"}
    _, _, answer = await post(http, f"{server.url}/{SLOT}/mcp", body, headers)
    final: dict[str, Any] = answer[-1] if isinstance(answer, list) else answer
    return final


def greet(arguments: dict[str, Any], state: str, responses: dict[str, Any]) -> dict[str, Any]:
    return {"name": "greet", "arguments": arguments, "requestState": state, "inputResponses": responses}


async def confirmed(http: aiohttp.ClientSession, server: GatewayServer, arguments: dict[str, Any]) -> str:
    """Ask, confirm, and get the provider's own input_required round: its continuation state."""
    asked = (await rpc(http, server, {"name": "greet", "arguments": arguments}))["result"]
    provider = (await rpc(http, server, greet(arguments, asked["requestState"], YES)))["result"]
    assert provider["resultType"] == "input_required" and "name" in provider["inputRequests"], provider
    assert provider["requestState"].startswith("mcpgwk1."), provider
    state: str = provider["requestState"]
    return state


def decisions(path: Path) -> list[tuple[str, str | None, str | None, str]]:
    """Each decision on greet: its effect, who confirmed it, its reason and its rules."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT effect, confirmed_by, reason, rules FROM decisions WHERE tool = 'greet' ORDER BY id")
        return [(effect, by, reason, rules) for effect, by, reason, rules in rows]


def refused(path: Path) -> list[tuple[str | None, str | None]]:
    return [(by, reason) for effect, by, reason, _ in decisions(path) if effect == "refuse-confirmation"]


# -- 1. a refused continuation state is on record ----------------------------------------------------------


async def test_a_refused_continuation_state_is_recorded(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        tampered = state[:-1] + ("0" if state[-1] != "0" else "1")
        reasons = []
        for params in (greet({"n": 1}, tampered, NAME), greet({"n": 2}, state, NAME)):  # altered, moved
            error = (await rpc(http, server, params))["error"]
            assert error["code"] == -32602 and error["data"]["reason"] == "mismatch", error
            reasons.append(error["message"])
        done = await rpc(http, server, greet({"n": 1}, state, NAME))
        assert done["result"]["content"][0]["text"] == "Hello, Ada!", done
        error = (await rpc(http, server, greet({"n": 1}, state, NAME)))["error"]  # replayed
        assert error["code"] == -32602 and error["data"]["reason"] == "used", error
        reasons.append(error["message"])
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(refused(path)) == 3, what="three refusals on record")
    # Each refusal names why, as the caller was told; no confirmation is claimed for a state that does not hold.
    assert refused(path) == [(None, reason) for reason in reasons]
    assert "does not belong to this call" in reasons[0] and "already used" in reasons[2]


async def test_an_expired_continuation_state_is_recorded(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path, expires_s=1)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        await asyncio.sleep(1.2)
        error = (await rpc(http, server, greet({"n": 1}, state, NAME)))["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "expired", error
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(refused(path)) == 1, what="the refusal on record")
    assert refused(path) == [(None, error["message"])]


# -- 2. a continued round carries who confirmed the call ---------------------------------------------------


class Person:
    """Answers the gateway's confirmation with a yes and the provider's question with a name."""

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        schema = getattr(params, "requested_schema", None)
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if "approve" in properties:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="accept", content={"name": "Bob"})


@contextlib.asynccontextmanager
async def client(server: GatewayServer, person: Person | None) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}, timeout=30) as transport,
        Client(
            streamable_http_client(f"{server.url}/{SLOT}/mcp", http_client=transport),
            mode=MODERN,
            elicitation_callback=person.elicit if person is not None else None,
        ) as sdk,
    ):
        yield sdk


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


def allowed(path: Path) -> list[tuple[str | None, str]]:
    return [(by, rules) for effect, by, _, rules in decisions(path) if effect == "allow"]


def confirmed_ms(path: Path) -> list[int]:
    """When the yes recorded with each allowed greet was given."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT confirmed_ms FROM decisions WHERE tool = 'greet' AND effect = 'allow' ORDER BY id")
        return [ms for (ms,) in rows]


def same_yes(path: Path) -> None:
    """Both rounds record the one yes: its time, within the clocks' millisecond rounding."""
    first, second = confirmed_ms(path)
    assert abs(first - second) <= 5, (first, second)


async def test_a_continued_round_records_who_confirmed(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path)
    async with client(server, Person()) as sdk:
        result = await sdk.call_tool("greet", {})
    assert text(result) == "Hello, Bob!", result
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(allowed(path)) == 2, what="both rounds on record")
    by = "token:agent via input_required"
    assert allowed(path) == [(by, '["assign[0]","confirm[0]"]'), (by, '["assign[0]","confirm[0]"]')]
    same_yes(path)


async def test_a_continued_round_records_the_approver(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path, by="another")
    async with client(server, Person()) as sdk:
        waiting, data = refusal(await sdk.call_tool("greet", {}))
        assert data["reason"] == "confirmation_required", waiting
        token = tmp_path / "operator.token"
        token.write_text(OPERATOR)
        code, _, err = await run_cli("approve", data["approval"], "--url", server.url, "--token-file", str(token))
        assert code == 0, err
        result = await sdk.call_tool("greet", {})
    assert text(result) == "Hello, Bob!", result
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(allowed(path)) == 2, what="both rounds on record")
    assert [by for by, _ in allowed(path)] == ["token:operator", "token:operator"]
    same_yes(path)


# -- 3. a reload that shortens expires_s shortens the sealed states -----------------------------------------


async def test_a_reload_shortening_expires_s_shortens_a_sealed_state(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await start(gateway_factory, tmp_path, expires_s=60)
    async with aiohttp.ClientSession() as http:
        state = await confirmed(http, server, {"n": 1})
        again = (await rpc(http, server, greet({"n": 1}, state, {})))["result"]  # the provider asks again
        assert again["resultType"] == "input_required", again
        swap(server, expires_s=1)
        await asyncio.sleep(1.2)
        error = (await rpc(http, server, greet({"n": 1}, again["requestState"], NAME)))["error"]
        assert error["code"] == -32602 and error["data"]["reason"] == "expired", error
        assert "lifetime passed" in error["message"], error
        # A yes given under the shorter rule holds for that rule's expires_s.
        state = await confirmed(http, server, {"n": 2})
        done = await rpc(http, server, greet({"n": 2}, state, NAME))
        assert done["result"]["content"][0]["text"] == "Hello, Ada!", done
    path = tmp_path / "audit.db"
    await wait_for(lambda: len(refused(path)) == 1, what="the refusal on record")
    assert refused(path) == [(None, error["message"])]


# -- 4. only a principal that may make a call itself decides it ---------------------------------------------


async def approve(server: GatewayServer, tmp_path: Path, token: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / f"{secrets.token_hex(4)}.token"
    path.write_text(token)
    return await run_cli("approve", *args, "--json", "--url", server.url, "--token-file", str(path))


async def test_an_approver_decides_only_calls_it_may_make(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path, by="another")
    async with client(server, None) as sdk:
        waiting, data = refusal(await sdk.call_tool("greet", {}))
        assert data["reason"] == "confirmation_required", waiting
        approval = data["approval"]
        for args in ((approval,), (approval, "--deny")):
            code, out, err = await approve(server, tmp_path, WATCHER, *args)
            assert code == 1, (out, err)
            error = json.loads(out)["error"]
            assert error["code"] == -32001 and error["data"]["reason"] == "approver_not_permitted", error
            assert error["data"]["approval"] == approval and "slot" not in error["data"], error
            # Like the list, the refusal hides what the call is.
            assert "does not let you make" in err and SLOT not in err and "greet" not in err, err
        # The operator, who may call greet on the slot, still approves it.
        code, out, err = await approve(server, tmp_path, OPERATOR, approval)
        assert code == 0 and json.loads(out)["state"] == "approved", (out, err)


def listed(out: str) -> list[str]:
    """The approval ids of `mcp-gateway approve --json`'s list."""
    return [item["id"] for item in json.loads(out)["approvals"]]


async def test_the_list_shows_only_calls_the_approver_may_make(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path, by="another")
    async with client(server, None) as sdk:
        waiting, data = refusal(await sdk.call_tool("greet", {}))
        assert data["reason"] == "confirmation_required", waiting
    # The watcher may list approvals (/_system/**) but may not call greet on the slot: it sees none.
    code, out, err = await approve(server, tmp_path, WATCHER)
    assert code == 0 and listed(out) == [], (out, err)
    code, out, err = await run_cli("approve", "--url", server.url, "--token-file", str(_token(tmp_path, WATCHER)))
    assert (code, out) == (0, "") and "No call waits for an approval you may give." in err, (out, err)
    # The operator, who may call greet on the slot, sees it.
    code, out, err = await approve(server, tmp_path, OPERATOR)
    assert code == 0 and listed(out) == [data["approval"]], (out, err)
    # A reload that takes the slot from the operator takes the call from its list.
    assert server.governor is not None
    rules = policy(by="another")
    rules["assign"][1]["resources"] = ["/_system/**"]
    server.governor.swap(Policy(check_policy(rules)))
    code, out, err = await approve(server, tmp_path, OPERATOR)
    assert code == 0 and listed(out) == [], (out, err)


def _token(tmp_path: Path, token: str) -> Path:
    path = tmp_path / f"{secrets.token_hex(4)}.token"
    path.write_text(token)
    return path
