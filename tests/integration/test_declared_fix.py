"""Declared authorization held tight through a real gateway on loopback, with a real JWKS server, a
declaring provider on its own WebSocket and the official SDK client: an access token whose groups go
past a bound is refused (a [[deny]] naming a group past a cut would not apply), a declaration re-sent
from another slot leaves the first slot with nothing live, and a broker/* request nested deeper than
limits.max_json_depth is answered at once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.support.declaring_provider import BrokerRequestError, DeclaringProvider
from tests.support.oauth import ISSUER, JwksServer, access_token, jwks, jwks_server, rsa_key

SCADA_SECRET = secrets.token_urlsafe(32)
TARGETS = {"valve-3": ("uns://plant/valve-3", "/plant/scada/valve-3")}
POLICY: dict[str, Any] = {
    "roles": {
        "operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.control", "scada.write"]},
    },
    "assign": [{"principal": "group:staff", "role": "operator", "resources": ["/plant/**"]}],
    "deny": [{"principal": "group:contractors", "capabilities": ["scada.write"], "resources": ["/plant/**"]}],
    "resources": {"scada": "/plant/scada", "scadab": "/plant/other"},
}
DECLARATION: dict[str, Any] = {
    "version": "1",
    "domain": "scada",
    "namespace": {"resource": "/plant/scada"},
    "capabilities": ["scada.write"],
    "resources": [
        {"resource": "uns://plant/valve-3", "resourcePath": "/plant/scada/valve-3", "limits": {"maxValue": 100}}
    ],
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
async def authority() -> AsyncIterator[JwksServer]:
    async with jwks_server(jwks(rsa_key())) as server:
        yield server


@pytest.fixture
async def server(gateway_factory: GatewayFactory, authority: JwksServer) -> GatewayServer:
    return await gateway_factory(
        auth={"oauth": {"issuer": ISSUER, "jwks_url": authority.url}},
        policy=POLICY,
        providers={
            "auth": {
                "mode": "identities",
                "identities": [{"name": "scada-main", "sha256": sha(SCADA_SECRET), "slots": ["scada", "scadab"]}],
            }
        },
    )


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@contextlib.asynccontextmanager
async def provider(server: GatewayServer, http: aiohttp.ClientSession, slot: str) -> AsyncIterator[DeclaringProvider]:
    connected = await DeclaringProvider.connect(http, server.url, slot, SCADA_SECRET, TARGETS)
    try:
        await wait_ready_slot(server, slot)
        yield connected
    finally:
        await connected.close()


def token(server: GatewayServer, groups: list[str]) -> str:
    return access_token(rsa_key(), f"{server.url}/scada/mcp", subject="alice", groups=groups)


async def actuate(server: GatewayServer, bearer: str) -> types.CallToolResult:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{server.url}/scada/mcp", http_client=transport), mode="legacy") as sdk,
    ):
        return await sdk.call_tool("actuate", {"target": "valve-3", "value": 50})


async def test_a_token_whose_groups_pass_a_bound_is_refused_so_no_deny_is_escaped(
    server: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with provider(server, http, "scada") as scada:
        await scada.declare(DECLARATION)
        # Within the bounds the deny applies, as it must.
        denied = await actuate(server, token(server, ["staff", "contractors"]))
        assert denied.is_error and scada.decisions[-1]["reason"] == "explicit-deny"
        fillers = ["staff"] + [f"g{i}" for i in range(279)] + ["contractors"] + [f"h{i}" for i in range(19)]
        long_dn = ["staff", "ou=contractors," + "x" * 250 + ",dc=plant"]
        for groups, words in [
            (fillers, "The access token's groups claim lists 300 groups; at most 256 are accepted."),
            (long_dn, "The access token's groups claim holds a group name longer than 256 characters."),
        ]:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {
                "Authorization": f"Bearer {token(server, groups)}",
                "Accept": "application/json, text/event-stream",
            }
            async with http.post(f"{server.url}/scada/mcp", json=body, headers=headers) as response:
                assert response.status == 401
                refused = await response.json()
            assert (refused["error"], refused["error_description"]) == ("invalid_token", words)
        assert len(scada.decisions) == 1  # the refused tokens never reached the provider


async def test_a_declaration_sent_from_another_slot_is_live_only_there(
    server: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with provider(server, http, "scada") as first, provider(server, http, "scadab") as second:
        await first.declare(DECLARATION)
        await second.declare({**DECLARATION, "namespace": {"resource": "/plant/other"}, "resources": []})
        check = {"capability": "scada.write", "resource": "r", "resourcePath": "/plant/other/secret-valve"}
        with pytest.raises(BrokerRequestError) as stale:
            await first.authorize({"principal": {"type": "provider"}, "checks": [check]})
        assert stale.value.code == -32003
        answer = await second.authorize({"principal": {"type": "provider"}, "checks": [check]})
        assert answer["decisions"][0]["reason"] == "no-matching-grant"


async def test_a_broker_request_nested_too_deep_is_answered_at_once(
    server: GatewayServer, http: aiohttp.ClientSession
) -> None:
    async with provider(server, http, "scada") as scada:
        await scada.declare(DECLARATION)
        deep: Any = 0
        for _ in range(70):
            deep = {"a": deep}
        check = {"capability": "scada.write", "resource": "r", "resourcePath": "/plant/scada/x", "attributes": deep}
        with pytest.raises(BrokerRequestError) as refused:
            await asyncio.wait_for(scada.authorize({"principal": {"type": "provider"}, "checks": [check]}), 5)
        assert refused.value.code == -32600
        assert "nested more than 64 levels deep" in refused.value.message
        assert refused.value.data == {"limit": "max_json_depth"}
        # The link carries on: the next request is answered as ever.
        flat = {**check, "attributes": {"a": 1}}
        answer = await scada.authorize({"principal": {"type": "provider"}, "checks": [flat]})
        assert answer["decisions"][0]["effect"] == "deny"
