"""The audit trail's `client_id`: the OAuth client an access token was issued to (`azp`, else `client_id`),
the name of a static token, null for a caller that names no client; read back with `mcp-gateway audit
--format jsonl` from a real gateway's trail, and for decisions a declaring provider asks on a caller's
behalf (docs/governance-audit.md)."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.config.declarations import DeclarationsConfig
from gateway.core.principal import Principal
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.declarations.authority import ProviderAuthority
from gateway.policy.rules import Policy
from gateway.policy.rules.checking import check_policy
from tests.conftest import GatewayFactory, Publishers
from tests.support.gateway_process import run_cli
from tests.support.oauth import ISSUER, access_token, jwks, jwks_server, rsa_key
from tests.support.servers import demo_server
from tests.unit.test_provider_declarations import POLICY as DECLARING_POLICY
from tests.unit.test_provider_declarations import Clock, Source, ask, declared, origin

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SCADA = secrets.token_urlsafe(32)
POLICY: dict[str, Any] = {
    "roles": {"caller": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "caller", "resources": ["/**"]}],
}


@contextlib.asynccontextmanager
async def caller(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        yield client


async def test_each_decision_names_the_client_of_its_credential(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(
            auth={
                "tokens": [{"name": "scada", "sha256": hashlib.sha256(SCADA.encode()).hexdigest()}],
                "oauth": {"issuer": ISSUER, "jwks_url": authority.url},
            },
            policy=POLICY,
            audit={"path": str(trail)},
        )
        await publishers.start(server, "pump-1", demo_server("pump"))
        url = f"{server.url}/pump-1/mcp"
        callers = [
            SCADA,
            access_token(rsa_key(), url, subject="panel-7", azp="hmi", client_id="ignored-when-azp-is-there"),
            access_token(rsa_key(), url, subject="svc-1", client_id="historian"),
            access_token(rsa_key(), url, subject="alice"),
        ]
        for token in callers:
            async with caller(url, token) as client:
                assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
        code, out, err = await run_cli("audit", "--path", str(trail), "--format", "jsonl")
        assert code == 0, err
        records = [orjson.loads(line) for line in out.splitlines()]
    assert [(record["principal"], record["client_id"]) for record in records] == [
        (["token:scada"], "scada"),
        (["client:hmi", "user:panel-7"], "hmi"),
        (["client:historian", "user:svc-1"], "historian"),
        (["user:alice"], None),
    ]


async def test_a_declaring_providers_decision_names_the_client_it_decides_for(tmp_path: Path) -> None:
    trail = AuditTrail(tmp_path / "audit.db")
    await trail.start()
    try:
        gate = ProviderAuthority(Source(Policy(check_policy(DECLARING_POLICY)), trail), DeclarationsConfig(), Clock())
        await declared(gate)
        for principal in (Principal("op", "token"), Principal("op", "oauth", client="scada-hmi")):
            reference = gate.caller_reference(origin(), principal, None)
            assert reference is not None
            await ask(gate, reference.ref, ("scada.read", "uns://v3", "/plant/scada/v3"))
        await ask(gate, None, ("scada.read", "uns://r", "/plant/scada/r"))  # the provider's own work
    finally:
        await trail.close()
    assert [record["client_id"] for record in trail.query()] == ["op", "scada-hmi", None]
