"""A provider reserves budget only inside its live declaration, through a real gateway: capabilities of
another domain or undeclared ones, undeclared units and paths outside its namespace are refused with
broker/authorize's reason names (docs/governance-limits.md, "Budgets for providers")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_provider_budgets import (
    AGENT_1,
    DECLARATION,
    POLICY,
    SCANNER_SECRET,
    Site,
    client,
    scan,
    sha,
)
from tests.support.declaring_provider import CALLER_META_KEY, BrokerRequestError
from tests.support.metering_provider import CAPABILITY, UNIT, MeteringProvider

NAMESPACE = "/site/network/lan"


@pytest.fixture
async def narrow(gateway_factory: GatewayFactory) -> AsyncIterator[Site]:
    """scanner-1 (slot resource /site/network) declares only the subtree /site/network/lan."""
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent-1", "sha256": sha(AGENT_1)}]},
        policy=POLICY,
        audit={"enabled": False},
        providers={
            "auth": {
                "mode": "identities",
                "identities": [{"name": "scanner-main", "sha256": sha(SCANNER_SECRET), "slots": ["scanner-1"]}],
            },
            "declarations": {"caller_ref_grace_s": 60},
        },
    )
    async with aiohttp.ClientSession() as http:
        scanner = await MeteringProvider.connect_metering(http, server.url, "scanner-1", SCANNER_SECRET, NAMESPACE)
        try:
            await wait_ready_slot(server, "scanner-1")
            declared = {**DECLARATION, "namespace": {"resource": NAMESPACE}}
            assert (await scanner.declare(declared))["accepted"] is True
            yield Site(server, scanner, http)
        finally:
            await scanner.close()


async def test_a_reservation_outside_the_declaration_is_refused(narrow: Site) -> None:
    scanner = narrow.scanner
    async with client(narrow.gateway, AGENT_1, "2026-07-28") as agent:
        assert (await scan(agent, hosts=1, settle=False))["grant"]["quantity"] == 1
    ref = scanner.calls[0]["_meta"][CALLER_META_KEY]["ref"]
    base: dict[str, Any] = {
        "principal": {"type": "caller-ref", "ref": ref},
        "capability": CAPABILITY,
        "resourcePath": f"{NAMESPACE}/vlan-7",
        "unit": UNIT,
        "quantity": 1,
    }
    refusals = {
        "lab.active": {"capability": "lab.active"},  # another provider domain's capability
        "network.passive": {"capability": "network.passive"},  # its own domain, not declared
        "kwh": {"unit": "kwh"},
        "wan": {"resourcePath": "/site/network/wan"},  # in the slot, outside the namespace
    }
    reasons = {}
    for key, change in refusals.items():
        with pytest.raises(BrokerRequestError) as refused:
            await scanner.reserve_budget({**base, **change, "idempotencyKey": key})
        assert refused.value.code == -32029
        reasons[key] = refused.value.data["reason"]
    assert reasons == {
        "lab.active": "undeclared-capability",
        "network.passive": "undeclared-capability",
        "kwh": "undeclared-unit",
        "wan": "undeclared-resource",
    }
    assert scanner.work == [("vlan-7", 1)]  # only the declared work went ahead
    assert narrow.gateway.governor is not None
    limits = narrow.gateway.governor.status()["limits"]
    assert [entry["reason"] for entry in limits["refusals"]["recent"]] == list(reasons.values())
    assert all(entry["subject"] == "token:agent-1" for entry in limits["refusals"]["recent"])
    assert limits["reservations"]["held"] == 1
