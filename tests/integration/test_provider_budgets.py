"""Execution budgets over the provider wire, through a real gateway: a provider with its own identity
declares its domain, agents call its `scan` tool with the official SDK client, and the provider reserves
units for each caller with `broker/budget/reserve` before its native work and settles them with
`broker/budget/settle` after (docs/governance-limits.md, "Budgets for providers"; the provider is
tests/support/metering_provider.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.declaring_provider import CALLER_META_KEY, BrokerRequestError
from tests.support.metering_provider import CAPABILITY, UNIT, MeteringProvider

AGENT_1 = secrets.token_urlsafe(32)
AGENT_2 = secrets.token_urlsafe(32)
SCANNER_SECRET = secrets.token_urlsafe(32)
LAB_SECRET = secrets.token_urlsafe(32)
BUDGET_MAX = 5
BUDGET_WINDOW_MS = 3000
"""Short enough to wait for its refill, long enough for a few calls to fall inside it on a slow host."""

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.control"]}},
    "assign": [
        {"principal": "token:agent-1", "role": "operator", "resources": ["/site/**"]},
        {"principal": "token:agent-2", "role": "operator", "resources": ["/site/**"]},
    ],
    "resources": {"scanner-1": "/site/network", "scanner-2": "/site/lab"},
    "execution_limits": [
        {
            "id": "lan-operations",
            "match": {"provider": "scanner-*", "capability": CAPABILITY},
            "group_by": ["subject"],
            "budget": {"unit": UNIT, "max": BUDGET_MAX, "window_ms": BUDGET_WINDOW_MS},
        }
    ],
}
DECLARATION: dict[str, Any] = {
    "version": "1.0.0",
    "domain": "network",
    "namespace": {"resource": "/site/network"},
    "capabilities": [CAPABILITY],
    "budgetUnits": [UNIT],
}
LAB_DECLARATION: dict[str, Any] = {
    "version": "1.0.0",
    "domain": "lab",
    "namespace": {"resource": "/site/lab"},
    "capabilities": ["lab.active"],
    "budgetUnits": [UNIT],
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Site:
    gateway: GatewayServer
    scanner: MeteringProvider
    http: aiohttp.ClientSession


@pytest.fixture
async def site(gateway_factory: GatewayFactory) -> AsyncIterator[Site]:
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent-1", "sha256": sha(AGENT_1)}, {"name": "agent-2", "sha256": sha(AGENT_2)}]},
        policy=POLICY,
        audit={"enabled": False},
        providers={
            "auth": {
                "mode": "identities",
                "identities": [
                    {"name": "scanner-main", "sha256": sha(SCANNER_SECRET), "slots": ["scanner-1"]},
                    {"name": "lab-scanner", "sha256": sha(LAB_SECRET), "slots": ["scanner-2"]},
                ],
            },
            # A reference outlives its call long enough for the test to use it again after the answer.
            "declarations": {"caller_ref_grace_s": 60},
        },
    )
    async with aiohttp.ClientSession() as http:
        scanner = await MeteringProvider.connect_metering(
            http, server.url, "scanner-1", SCANNER_SECRET, "/site/network"
        )
        try:
            await wait_ready_slot(server, "scanner-1")
            assert (await scanner.declare(DECLARATION))["accepted"] is True
            yield Site(server, scanner, http)
        finally:
            await scanner.close()


@contextlib.asynccontextmanager
async def client(server: GatewayServer, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}/scanner-1/mcp", http_client=transport), mode=mode) as sdk,
    ):
        yield sdk


def text_of(result: types.CallToolResult) -> str:
    return " ".join(item.text for item in result.content if isinstance(item, types.TextContent))


async def scan(agent: Client, **arguments: Any) -> dict[str, Any]:
    """A scan that must go ahead: what the provider was granted and settled."""
    result = await agent.call_tool("scan", {"segment": "vlan-7", **arguments})
    assert not result.is_error, text_of(result)
    answer: dict[str, Any] = json.loads(text_of(result))
    return answer


async def refused_scan(agent: Client, provider: MeteringProvider, **arguments: Any) -> BrokerRequestError:
    """A scan the gateway's budget refuses: a tool error for the agent; the provider's refusal."""
    before = len(provider.refusals)
    result = await agent.call_tool("scan", {"segment": "vlan-7", **arguments})
    assert result.is_error, text_of(result)
    assert len(provider.refusals) == before + 1
    refusal = provider.refusals[-1]
    assert text_of(result) == f"not scanned: the gateway refused the budget (-32029): {refusal.message}"
    return refusal


def budget_of(server: GatewayServer, subject: str) -> int:
    """The units the lan-operations budget holds for `subject` in its window now (broker_info's view)."""
    assert server.governor is not None
    rules = server.governor.status()["limits"]["rules"]
    rule = next(rule for rule in rules if rule["id"] == "lan-operations")
    held = [group.get("budget", 0) for group in rule["busiest"] if group["group"] == {"subject": subject}]
    return int(held[0]) if held else 0


async def test_reservations_exhaust_a_callers_budget_replay_without_debit_and_refill_after_the_window(
    site: Site,
) -> None:
    scanner = site.scanner
    async with client(site.gateway, AGENT_1, "legacy") as agent_1:
        # The whole budget at once; the reply to the reservation was lost, so the provider sends it again
        # with the same key: the same grant comes back, replayed, and nothing more is debited (a second
        # debit of 5 would not fit in the budget of 5 and be refused).
        swept = await scan(agent_1, hosts=BUDGET_MAX, key="sweep-1", retry_reserve=True)
        grant, replay = swept["grant"], swept["replay"]
        assert grant["quantity"] == BUDGET_MAX and grant["replayed"] is False
        assert grant["expiresAt"] > time.time() * 1000
        assert replay["replayed"] is True
        assert {key: value for key, value in replay.items() if key != "replayed"} == {
            key: value for key, value in grant.items() if key != "replayed"
        }
        assert swept["settlement"] == {"settled": True, "reservationId": grant["reservationId"], "replayed": False}
        assert budget_of(site.gateway, "token:agent-1") == BUDGET_MAX

        # The budget is spent: the provider's next reservation is refused and the agent reads a tool error.
        exhausted = await refused_scan(agent_1, scanner, hosts=1)
        assert exhausted.code == -32029
        retry_ms = exhausted.data.pop("retryAfterMs")
        assert 0 < retry_ms <= BUDGET_WINDOW_MS
        assert exhausted.data == {"reason": "limit_exceeded", "ruleId": "lan-operations", "kind": "budget"}
        assert exhausted.message.startswith('Execution limit "lan-operations" reached for subject token:agent-1')
        # More than the budget can ever hold: refused whatever the time.
        never = await refused_scan(agent_1, scanner, hosts=BUDGET_MAX + 1)
        assert never.code == -32029
        assert never.data == {"reason": "quantity_exceeds_limit", "ruleId": "lan-operations", "kind": "budget"}
        # Only the granted work was done.
        assert scanner.work == [("vlan-7", BUDGET_MAX)]

        # Settled, the key cannot open new work, even for the same caller reference.
        ref = scanner.calls[0]["_meta"][CALLER_META_KEY]["ref"]
        with pytest.raises(BrokerRequestError) as settled_key:
            await scanner.reserve_budget(
                {
                    "principal": {"type": "caller-ref", "ref": ref},
                    "capability": CAPABILITY,
                    "resource": "scanner-1",
                    "resourcePath": "/site/network/vlan-7",
                    "unit": UNIT,
                    "quantity": BUDGET_MAX,
                    "idempotencyKey": "sweep-1",
                }
            )
        assert settled_key.value.code == -32029
        assert settled_key.value.data == {"reason": "reservation_expired_or_settled"}

        # Another agent has a budget of its own.
        async with client(site.gateway, AGENT_2, "2026-07-28") as agent_2:
            assert (await scan(agent_2, hosts=BUDGET_MAX))["grant"]["quantity"] == BUDGET_MAX

        # After the window the whole budget is there again (polled: each refusal says how long to wait).
        deadline = time.monotonic() + 10 * BUDGET_WINDOW_MS / 1000
        while True:
            await asyncio.sleep(retry_ms / 1000)
            result = await agent_1.call_tool("scan", {"segment": "vlan-7", "hosts": BUDGET_MAX})
            if not result.is_error:
                break
            assert time.monotonic() < deadline, "the budget did not come back"
            retry_ms = max(10, scanner.refusals[-1].data.get("retryAfterMs", 10))
        refilled = json.loads(text_of(result))
        assert refilled["grant"]["quantity"] == BUDGET_MAX and refilled["settlement"]["settled"] is True
    assert scanner.work == [("vlan-7", BUDGET_MAX)] * 3  # agent-1, agent-2, agent-1 after the window
    assert site.gateway.governor is not None
    reservations = site.gateway.governor.status()["limits"]["reservations"]
    assert reservations["unsettled"] == 0


async def test_only_the_slot_that_reserved_settles(site: Site) -> None:
    scanner = site.scanner
    lab = await MeteringProvider.connect_metering(site.http, site.gateway.url, "scanner-2", LAB_SECRET, "/site/lab")
    try:
        await wait_ready_slot(site.gateway, "scanner-2")
        assert (await lab.declare(LAB_DECLARATION))["accepted"] is True
        async with client(site.gateway, AGENT_1, "2026-07-28") as agent_1:
            held = (await scan(agent_1, hosts=2, settle=False))["grant"]
            later = (await scan(agent_1, hosts=1, settle=False))["grant"]
        ref = scanner.calls[0]["_meta"][CALLER_META_KEY]["ref"]
        settlement = {"reservationId": held["reservationId"], "used": 2, "result": "success"}

        # Another slot, on its own connection: the reservation is not its own, and it is told exactly what
        # it is told for an id that does not exist.
        with pytest.raises(BrokerRequestError) as foreign:
            await lab.settle_budget(settlement)
        with pytest.raises(BrokerRequestError) as made_up:
            await lab.settle_budget({**settlement, "reservationId": str(uuid.uuid4())})
        assert foreign.value.code == made_up.value.code == -32029
        assert foreign.value.data == made_up.value.data == {"reason": "unknown_reservation"}
        # Nor can it reserve for a caller of another slot's call.
        with pytest.raises(BrokerRequestError) as borrowed:
            await lab.reserve_budget(
                {
                    "principal": {"type": "caller-ref", "ref": ref},
                    "capability": "lab.active",
                    "unit": UNIT,
                    "quantity": 1,
                    "idempotencyKey": "borrowed",
                }
            )
        assert borrowed.value.code == -32602 and borrowed.value.data == {"field": "principal.ref"}

        # The slot that reserved settles, once; the same settlement again is a replay, another one a conflict.
        assert await scanner.settle_budget(settlement) == {
            "settled": True,
            "reservationId": held["reservationId"],
            "replayed": False,
        }
        assert (await scanner.settle_budget(settlement))["replayed"] is True
        with pytest.raises(BrokerRequestError) as conflict:
            await scanner.settle_budget({**settlement, "used": 1})
        assert conflict.value.code == -32029 and conflict.value.data == {"reason": "settlement_conflict"}
        assert site.gateway.governor is not None
        assert site.gateway.governor.status()["limits"]["reservations"]["unsettled"] == 1

        # The slot that reserved may settle after a reconnect too: on a new connection, with no declaration.
        await scanner.close()
        await wait_for(lambda: site.gateway.gateway.registry.slots["scanner-1"].live is None, what="scanner-1 gone")
        again = await MeteringProvider.connect_metering(
            site.http, site.gateway.url, "scanner-1", SCANNER_SECRET, "/site/network"
        )
        try:
            await wait_ready_slot(site.gateway, "scanner-1")
            settled = await again.settle_budget(
                {"reservationId": later["reservationId"], "used": 0, "result": "failure"}
            )
            assert settled == {"settled": True, "reservationId": later["reservationId"], "replayed": False}
        finally:
            await again.close()
        assert site.gateway.governor.status()["limits"]["reservations"]["unsettled"] == 0
    finally:
        await lab.close()
