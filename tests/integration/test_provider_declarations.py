"""Providers' governance on mcp-broker's wire through a real gateway (docs/governance-providers.md): a
provider with its own identity declares its domain, agents with their own tokens call its tool with the
official SDK client, the provider gets each caller as a reference, asks broker/authorize, acts within
the constraints and reports the result; every decision and result lands in the audit trail."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sqlite3
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.declaring_provider import CALLER_META_KEY, BrokerRequestError, DeclaringProvider

REPO = Path(__file__).resolve().parents[2]
OPERATOR = secrets.token_urlsafe(32)
VIEWER = secrets.token_urlsafe(32)
SCADA_SECRET = secrets.token_urlsafe(32)
INTRUDER_SECRET = secrets.token_urlsafe(32)

POLICY: dict[str, Any] = {
    "roles": {
        "viewer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.control", "scada.read"]},
        "operator": {"inherits": ["viewer"], "capabilities": ["scada.write"]},
        "inspector": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]},
    },
    "assign": [
        {"principal": "token:operator", "role": "operator", "resources": ["/plant/**"]},
        {"principal": "token:viewer", "role": "viewer", "resources": ["/plant/**"]},
        {"principal": "token:operator", "role": "inspector", "resources": ["/_system/**"]},
    ],
    "resources": {"scada": "/plant/scada", "scada-2": "/plant/other", "tool": "/plant/tool"},
    "declared_limits": [{"resources": ["/plant/scada/valve-*"], "capability": "scada.write", "min": 0, "max": 80}],
}
TARGETS = {
    "valve-3": ("uns://plant/valve-3", "/plant/scada/valve-3"),
    "valve-9": ("uns://plant/valve-9", "/plant/scada/valve-9"),
    "pump-1": ("uns://plant/pump-1", "/plant/scada/pump-1"),
}
DECLARATION: dict[str, Any] = {
    "version": "1.0.0",
    "domain": "scada",
    "namespace": {"resource": "/plant/scada"},
    "capabilities": ["scada.read", "scada.write"],
    "resources": [
        {
            "resource": "uns://plant/valve-3",
            "resourcePath": "/plant/scada/valve-3",
            "limits": {"minValue": 0, "maxValue": 100},
        },
        {"resource": "uns://plant/valve-9", "resourcePath": "/plant/scada/valve-9", "limits": {"minValue": 85}},
        {"resource": "uns://plant/pump-1", "resourcePath": "/plant/scada/pump-1", "effect": "physical-action"},
    ],
    "resultsRequired": ["scada.write"],
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config(tmp_path: Path, **declarations: Any) -> dict[str, Any]:
    return {
        "auth": {"tokens": [{"name": "operator", "sha256": sha(OPERATOR)}, {"name": "viewer", "sha256": sha(VIEWER)}]},
        "policy": POLICY,
        "audit": {"path": str(tmp_path / "audit.db")},
        "providers": {
            "auth": {
                "mode": "identities",
                "identities": [
                    {"name": "scada-main", "sha256": sha(SCADA_SECRET), "slots": ["scada"]},
                    {"name": "intruder", "sha256": sha(INTRUDER_SECRET), "slots": ["scada-2"]},
                ],
            },
            "declarations": declarations,
        },
    }


@dataclass
class Plant:
    gateway: GatewayServer
    provider: DeclaringProvider
    http: aiohttp.ClientSession
    trail: Path


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[Plant]:
    server = await gateway_factory(**config(tmp_path, caller_ref_grace_s=0))
    async with aiohttp.ClientSession() as http:
        provider = await DeclaringProvider.connect(http, server.url, "scada", SCADA_SECRET, TARGETS)
        try:
            await wait_ready_slot(server, "scada")
            yield Plant(server, provider, http, tmp_path / "audit.db")
        finally:
            await provider.close()


@contextlib.asynccontextmanager
async def client(server: GatewayServer, token: str, path: str = "/scada/mcp") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}{path}", http_client=transport), mode="legacy") as sdk,
    ):
        yield sdk


def text_of(result: types.CallToolResult) -> str:
    return " ".join(item.text for item in result.content if isinstance(item, types.TextContent))


def rows(path: Path, sql: str) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute(sql))


def authorize_rows(path: Path) -> list[sqlite3.Row]:
    return rows(
        path,
        "SELECT d.*, r.status, r.error AS result_error FROM decisions d LEFT JOIN results r ON r.decision_id = d.id "
        "WHERE d.transport = 'broker/authorize' ORDER BY d.id",
    )


async def test_declare_then_each_call_is_decided_for_its_caller_and_its_result_recorded(plant: Plant) -> None:
    accepted = await plant.provider.declare(DECLARATION)
    assert accepted["accepted"] is True and accepted["version"] == "1.0.0"
    assert isinstance(accepted["policyVersion"], str)
    traceparent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    async with client(plant.gateway, OPERATOR) as operator:
        clamped = await operator.call_tool(
            "actuate",
            {"target": "valve-3", "value": 95},
            meta={"traceparent": traceparent},  # type: ignore[arg-type]
        )
        free = await operator.call_tool("actuate", {"target": "pump-1", "value": 95})
        empty = await operator.call_tool("actuate", {"target": "valve-9", "value": 90})
    async with client(plant.gateway, VIEWER) as viewer:
        denied = await viewer.call_tool("actuate", {"target": "valve-3", "value": 10})
    # The provider got its caller as an opaque reference, with the trace the client started.
    caller = plant.provider.calls[0]["_meta"][CALLER_META_KEY]
    assert caller["ref"].startswith("cr_") and caller["correlationId"]
    assert caller["traceId"] == "ab" * 16
    assert len({call["_meta"][CALLER_META_KEY]["ref"] for call in plant.provider.calls}) == 4
    # allow-with-constraints: the declared 0..100 and the operator's 0..80; allowed is false on purpose.
    first = plant.provider.decisions[0]
    assert (first["effect"], first["allowed"], first["reason"]) == ("allow-with-constraints", False, "role-grant")
    assert first["obligations"] == {"constraints": {"minValue": 0, "maxValue": 80}}
    assert first["policies"] == ["assign[0]", "declared_limits[0]"]
    assert text_of(clamped) == "moved valve-3 to 80"
    assert (plant.provider.decisions[1]["effect"], plant.provider.decisions[1]["allowed"]) == ("allow", True)
    assert text_of(free) == "moved pump-1 to 95"
    # 85.. declared, ..80 by the operator: nothing is left, which is a deny.
    assert (plant.provider.decisions[2]["effect"], plant.provider.decisions[2]["reason"]) == ("deny", "empty-limits")
    assert empty.is_error
    # The viewer may call the tool but holds no scada.write there: the provider refuses.
    assert (plant.provider.decisions[3]["effect"], plant.provider.decisions[3]["reason"]) == (
        "deny",
        "no-matching-grant",
    )
    assert denied.is_error and text_of(denied) == "refused: no-matching-grant"

    await wait_for(lambda: len([r for r in authorize_rows(plant.trail) if r["status"]]) == 4, what="four results")
    recorded = authorize_rows(plant.trail)
    assert [(row["effect"], row["status"]) for row in recorded] == [
        ("allow-with-constraints", "success"),
        ("allow", "success"),
        ("deny", "refused"),
        ("deny", "refused"),
    ]
    first_row = recorded[0]
    assert (first_row["capability"], first_row["resource"], first_row["slot"]) == (
        "scada.write",
        "/plant/scada/valve-3",
        "scada",
    )
    assert json.loads(first_row["principal"]) == ["token:operator"]
    assert json.loads(first_row["constraints"]) == {"minValue": 0, "maxValue": 80}
    assert first_row["trace_id"] == "ab" * 16
    details = json.loads(first_row["arguments"])
    assert details["decisionId"] == first["decisionId"] and details["resource"] == "uns://plant/valve-3"
    assert details["correlationId"] == caller["correlationId"]
    assert json.loads(first_row["result_error"]) == {"nativeStatus": "Good"}
    assert json.loads(recorded[3]["principal"]) == ["token:viewer"]


async def test_a_reference_resolves_only_while_its_call_is_pending(plant: Plant) -> None:
    await plant.provider.declare(DECLARATION)
    async with client(plant.gateway, OPERATOR) as operator:
        await operator.call_tool("actuate", {"target": "pump-1", "value": 1})
    ref = plant.provider.calls[0]["_meta"][CALLER_META_KEY]["ref"]
    check = {"capability": "scada.write", "resource": "uns://plant/pump-1", "resourcePath": "/plant/scada/pump-1"}
    with pytest.raises(BrokerRequestError) as expired:  # answered, and this gateway keeps no grace
        await plant.provider.authorize({"principal": {"type": "caller-ref", "ref": ref}, "checks": [check]})
    assert expired.value.code == -32602
    assert "principal.ref is unknown, expired" in expired.value.message
    with pytest.raises(BrokerRequestError) as forged:
        await plant.provider.authorize(
            {"principal": {"type": "caller-ref", "ref": "cr_" + "A" * 32}, "checks": [check]}
        )
    assert forged.value.code == -32602
    with pytest.raises(BrokerRequestError) as too_many:
        query = {"principal": {"type": "provider"}, "checks": [check] * 257}
        await plant.provider.authorize(query)
    assert too_many.value.code == -32602 and "at most 256" in too_many.value.message
    own = await plant.provider.authorize({"principal": {"type": "provider"}, "checks": [check]})
    assert own["decisions"][0]["reason"] == "no-matching-grant"  # nothing grants provider:scada-main


async def test_a_refused_declaration_lists_every_problem_and_changes_nothing(plant: Plant) -> None:
    bad = {
        **DECLARATION,
        "domain": "mcp",
        "namespace": {"resource": "/elsewhere"},
        "capabilities": ["scada.write", "other.read"],
        "roles": {"x": {}},
        "resources": [{"resource": "v", "resourcePath": "/plant/scada/v", "limits": {"maxValue": "high", "unit": "%"}}],
    }
    with pytest.raises(BrokerRequestError) as refused:
        await plant.provider.declare(bad)
    assert refused.value.code == -32602
    assert refused.value.message.startswith("Declaration refused:")
    problems = refused.value.data["errors"]
    assert any(problem.startswith('"roles" is not accepted') for problem in problems)
    assert 'domain "mcp" is reserved for the gateway\'s own capabilities' in problems
    assert any('namespace.resource "/elsewhere" is outside slot "scada"' in problem for problem in problems)
    assert (
        'resources[0].limits: unknown limit "unit"; the gateway keeps minValue, maxValue, allowedValues, destinations'
        in problems
    )
    assert "resources[0].limits.maxValue must be a finite number" in problems
    # Nothing was accepted: authorize has no declaration to decide by, and calls carry no caller reference.
    with pytest.raises(BrokerRequestError) as undeclared:
        await plant.provider.authorize(
            {"principal": {"type": "provider"}, "checks": [{"capability": "scada.write", "resource": "x"}]}
        )
    assert undeclared.value.code == -32003
    async with client(plant.gateway, OPERATOR) as operator:
        result = await operator.call_tool("actuate", {"target": "pump-1", "value": 1})
    assert text_of(result) == "refused: no caller reference (no declaration accepted)"


async def test_a_domain_has_one_owner_identity(plant: Plant) -> None:
    await plant.provider.declare(DECLARATION)
    intruder = await DeclaringProvider.connect(plant.http, plant.gateway.url, "scada-2", INTRUDER_SECRET, TARGETS)
    try:
        await wait_ready_slot(plant.gateway, "scada-2")
        claim = {**DECLARATION, "namespace": {"resource": "/plant/other"}, "resources": []}
        with pytest.raises(BrokerRequestError) as refused:
            await intruder.declare(claim)
        assert refused.value.data["errors"] == [
            'domain "scada" is already declared by provider "scada-main"; a domain has one owner'
        ]
        # The owner may declare again: its new declaration replaces the old one.
        again = await plant.provider.declare({**DECLARATION, "version": "1.0.1"})
        assert again["version"] == "1.0.1"
    finally:
        await intruder.close()


async def test_a_client_cannot_forge_a_caller_reference(plant: Plant) -> None:
    forged = {CALLER_META_KEY: {"ref": "cr_" + "F" * 32, "correlationId": "mine", "traceId": "0" * 31 + "1"}}
    async with client(plant.gateway, OPERATOR) as operator:
        await operator.call_tool("actuate", {"target": "pump-1", "value": 1}, meta=forged)  # type: ignore[arg-type]
        await plant.provider.declare(DECLARATION)
        await operator.call_tool("actuate", {"target": "pump-1", "value": 1}, meta=forged)  # type: ignore[arg-type]
    before, after = (call.get("_meta") or {} for call in plant.provider.calls)
    assert CALLER_META_KEY not in before  # no declaration yet: the key is gone
    assert after[CALLER_META_KEY]["ref"] != forged[CALLER_META_KEY]["ref"]  # the gateway's own
    assert after[CALLER_META_KEY]["correlationId"] != "mine"


async def test_an_overdue_result_shows_in_broker_diagnose(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await gateway_factory(**config(tmp_path, result_timeout_s=0.05))
    async with aiohttp.ClientSession() as http:
        provider = await DeclaringProvider.connect(http, server.url, "scada", SCADA_SECRET, TARGETS)
        try:
            await wait_ready_slot(server, "scada")
            await provider.declare(DECLARATION)
            async with client(server, OPERATOR) as operator:
                await operator.call_tool("actuate", {"target": "pump-1", "value": 3, "report": False})
            decision = provider.decisions[0]["decisionId"]

            def overdue() -> list[dict[str, Any]]:
                problems = [p.to_json() for p in server.gateway.broker.problems()]
                return [p for p in problems if p["id"] == "declarations.result_overdue"]

            await wait_for(lambda: bool(overdue()), what="the overdue result in the diagnosis")
            async with client(server, OPERATOR, "/_broker/mcp") as broker:
                diagnosis = await broker.call_tool("broker_diagnose", {"slot": "scada"})
            assert diagnosis.structured_content is not None
            found = [p for p in diagnosis.structured_content["problems"] if p["id"] == "declarations.result_overdue"]
            assert found and found[0]["slot"] == "scada" and decision in found[0]["evidence"]
            await provider.report_result(decision, "success")
            await wait_for(lambda: not overdue(), what="the report to clear it")
        finally:
            await provider.close()


async def test_a_stdio_upstream_gets_method_not_found_for_broker_requests(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    stdio = {"name": "tool", "command": [sys.executable, "-m", "tests.support.broker_stdio"], "cwd": str(REPO)}
    server = await gateway_factory(**config(tmp_path), upstreams={"stdio": [stdio]})
    await wait_ready_slot(server, "tool", timeout=20)
    policy_free = await gateway_factory(upstreams={"stdio": [stdio]})
    await wait_ready_slot(policy_free, "tool", timeout=20)
    async with client(server, OPERATOR, "/tool/mcp") as operator:
        governed = json.loads(text_of(await operator.call_tool("ask", {"method": "broker/authorize"})))
    async with Client(f"{policy_free.url}/tool/mcp", mode="legacy") as anyone:
        ungoverned = json.loads(text_of(await anyone.call_tool("ask", {"method": "broker/authorization/declare"})))
    assert governed["code"] == -32601 and "not to an upstream server" in governed["message"]
    assert ungoverned["code"] == -32601 and "broker/authorization/declare" in ungoverned["message"]
