"""Authentication refusals as the client and the operator see them, on a real gateway on loopback with a
real JWKS server: a request on another caller's session is logged like every other refusal (all three
ways it can arrive), an access token whose subject names no one is refused, a scope joined by a tab
grants nothing, and the per-caller refusals name the caller with its kind."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_client_auth import bearer, metric, post, sha
from tests.support.oauth import ISSUER, JwksServer, access_token, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import MCP_HEADERS

ALICE = secrets.token_urlsafe(32)
BOB = secrets.token_urlsafe(32)
OPS = secrets.token_urlsafe(32)
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
OFF = {"rate_per_s": 0, "burst": 1}


@pytest.fixture
async def authority() -> AsyncIterator[JwksServer]:
    async with jwks_server(jwks(rsa_key())) as server:
        yield server


def auth(authority: JwksServer) -> dict[str, Any]:
    """Static tokens alice, bob (no scope) and ops (metrics), and access tokens of the test's authority."""
    return {
        "tokens": [
            {"name": "alice", "scopes": ["pump-1"], "sha256": sha(ALICE)},
            {"name": "bob", "scopes": ["pump-1"], "sha256": sha(BOB)},
            {"name": "ops", "scopes": ["metrics"], "sha256": sha(OPS)},
        ],
        "oauth": {"issuer": ISSUER, "jwks_url": authority.url},
        "required_scopes": {"pump-1": ["pump-1"], "pump-2": ["pump-2"]},
    }


@pytest.fixture
async def server(gateway_factory: GatewayFactory, authority: JwksServer) -> GatewayServer:
    """A gateway with `auth(authority)` and every other setting at its default."""
    return await gateway_factory(auth=auth(authority))


def user_token(server: GatewayServer, subject: str, scope: str = "pump-1", slot: str = "pump-1") -> str:
    return access_token(rsa_key(), f"{server.url}/{slot}/mcp", subject=subject, scope=scope)


async def second_initialize_refused(http: aiohttp.ClientSession, url: str, credential: str) -> Any:
    """Initialize a session at `url` as `credential`, then once more: the second answer's body (status 429)."""
    status, _, _ = await post(http, url, headers=bearer(credential))
    assert status == 200
    status, _, body = await post(http, url, headers=bearer(credential))
    assert status == 429
    return body


# -- a request on another caller's session -----------------------------------------------------------


async def test_a_request_on_another_callers_session_is_logged_like_every_refusal(
    server: GatewayServer, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "gateway.policy.client_auth")
    url = f"{server.url}/_broker/mcp"
    status, headers, _ = await post(http, url, headers=bearer(ALICE))
    assert status == 200
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"]}
    caplog.clear()
    # Streamable HTTP: a POST, the GET stream and the DELETE on alice's session, each by bob.
    status, _, _ = await post(http, url, TOOLS_LIST, {**bearer(BOB), **session})
    assert status == 403
    for method in ("GET", "DELETE"):
        async with http.request(method, url, headers={**MCP_HEADERS, **bearer(BOB), **session}) as response:
            assert response.status == 403
    # Legacy HTTP+SSE: bob posts to the message endpoint of alice's stream.
    sse_headers = {"Accept": "text/event-stream", **bearer(ALICE)}
    async with http.get(f"{server.url}/_broker/sse", headers=sse_headers) as stream:
        assert stream.status == 200
        assert await asyncio.wait_for(stream.content.readline(), 10) == b"event: endpoint\n"
        endpoint = (await asyncio.wait_for(stream.content.readline(), 10)).decode().removeprefix("data: ").strip()
        assert endpoint.startswith("/_broker/messages?sessionId=")
        status, _, body = await post(http, f"{server.url}{endpoint}", TOOLS_LIST, bearer(BOB))
        assert (status, body["error"]) == (403, "forbidden")
    refusals = [record for record in caplog.records if record.getMessage() == "client authentication refused"]
    fields = [(record.levelno, *(getattr(record, name) for name in ("reason", "path", "peer"))) for record in refusals]
    assert fields == [
        (logging.DEBUG, "session_owner", "/_broker/mcp", "127.0.0.1"),
        (logging.DEBUG, "session_owner", "/_broker/mcp", "127.0.0.1"),
        (logging.DEBUG, "session_owner", "/_broker/mcp", "127.0.0.1"),
        (logging.DEBUG, "session_owner", "/_broker/messages", "127.0.0.1"),
    ]
    # The path without its query: neither a credential nor a session id is logged.
    legacy_session = endpoint.rpartition("=")[2]
    for record in refusals:
        logged = str(record.__dict__)
        assert ALICE not in logged and BOB not in logged
        assert session["Mcp-Session-Id"] not in logged and legacy_session not in logged
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="session_owner"}', OPS) == 4


# -- who an access token stands for ------------------------------------------------------------------


async def test_an_access_token_whose_subject_names_no_one_is_refused(
    server: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/pump-1/mcp"
    for subject in ("", " ", "\t", "\u00a0", "ops\ntoken:alice"):
        status, headers, body = await post(http, url, headers=bearer(user_token(server, subject)))
        assert status == 401, (subject, body)
        assert body["error"] == "invalid_token"
        assert body["error_description"] in (
            "The access token's subject (sub) is empty or blank.",
            "The access token's subject (sub) holds a control character, a line break or a bidirectional override.",
        )
        assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="invalid_subject"}', OPS) == 5
    status, _, _ = await post(http, url, headers=bearer(user_token(server, "jörg smith")))
    assert status == 200


async def test_a_scope_joined_by_a_tab_grants_nothing(server: GatewayServer, http: aiohttp.ClientSession) -> None:
    url = f"{server.url}/pump-1/mcp"
    status, _, body = await post(http, url, headers=bearer(user_token(server, "mallory", scope="x\tpump-1")))
    assert status == 403 and body["error"] == "insufficient_scope"
    assert body["error_description"] == (
        "user:mallory may not call this endpoint: it needs the scope(s) pump-1 and was granted none."
    )
    status, _, _ = await post(http, url, headers=bearer(user_token(server, "mallory", scope="x pump-1")))
    assert status == 200


# -- per-caller refusals name the caller with its kind -------------------------------------------------


async def test_a_missing_scope_names_the_caller_with_its_kind(
    server: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/pump-2/mcp"
    status, _, body = await post(http, url, headers=bearer(BOB))
    assert status == 403
    assert body["error_description"].startswith("token:bob may not call this endpoint: it needs the scope(s) pump-2")
    oauth_bob = user_token(server, "bob", scope="pump-1", slot="pump-2")
    status, _, body = await post(http, url, headers=bearer(oauth_bob))
    assert status == 403
    assert body["error_description"].startswith("user:bob may not call this endpoint: it needs the scope(s) pump-2")


async def test_a_session_quota_names_the_caller_with_its_kind(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    server = await gateway_factory(
        auth=auth(authority), limits={"max_sessions_per_principal": 1, "rate": {"per_principal": OFF, "per_slot": OFF}}
    )
    url = f"{server.url}/pump-1/mcp"
    # A static token and an access token of the same name are two callers with a quota each.
    for credential, subject in ((BOB, "token:bob"), (user_token(server, "bob"), "user:bob")):
        body = await second_initialize_refused(http, url, credential)
        assert body["error"]["message"].startswith(f'Too many sessions for caller "{subject}" (limit 1, ')


async def test_a_rate_limit_names_the_caller_with_its_kind(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    limited = {"rate_per_s": 0.01, "burst": 1}
    server = await gateway_factory(auth=auth(authority), limits={"rate": {"per_principal": limited, "per_slot": OFF}})
    url = f"{server.url}/pump-1/mcp"
    for credential, subject in ((BOB, "token:bob"), (user_token(server, "bob"), "user:bob")):
        body = await second_initialize_refused(http, url, credential)
        assert body["error"]["message"].startswith(f'Rate limit exceeded for principal "{subject}" (limits.rate')
        assert body["error"]["data"]["principal"] == subject
