"""Client authentication on every client way in: static tokens, OAuth 2.1 access tokens (JWT against a
JWKS), RFC 9728 metadata, required scopes per slot, sessions bound to their caller, and what must never
happen: a client token reaching a provider, a token in the logs, a rebinding page getting in.

Everything runs on real sockets: the gateway, a real JWKS server for the authorization server, real SDK
clients and providers, and a hand-written board that records every byte the gateway sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.answers import decode_answer
from tests.support.gateway_process import run_cli as run_cli_process
from tests.support.oauth import ISSUER, JwksServer, access_token, ec_key, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server
from tests.support.southbound import Boards

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SCADA = secrets.token_urlsafe(32)  # may call pump-1
OPS = secrets.token_urlsafe(32)  # may call pump-1, pump-2 and read /metrics
REQUIRED = {"pump-1": ["pump-1"], "pump-2": ["pump-2"]}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
SESSION_ERA = "legacy"
STATELESS_ERA = "2026-07-28"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def static_auth(**extra: Any) -> dict[str, Any]:
    return {
        "tokens": [
            {"name": "scada", "scopes": ["pump-1"], "sha256": sha(SCADA)},
            {"name": "ops", "scopes": ["pump-1", "pump-2", "metrics"], "sha256": sha(OPS)},
        ],
        "required_scopes": REQUIRED,
        **extra,
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def authority() -> AsyncIterator[JwksServer]:
    async with jwks_server(jwks(rsa_key(), ec_key())) as server:
        yield server


async def post(
    http: aiohttp.ClientSession, url: str, body: Any = INITIALIZE, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    async with http.post(url, data=orjson.dumps(body), headers={**MCP_HEADERS, **(headers or {})}) as response:
        payload = decode_answer(response.content_type, await response.read())
        return response.status, dict(response.headers), payload


@contextlib.asynccontextmanager
async def sdk_client(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    """The official SDK client; the token travels in a header of the httpx2 client it is given."""
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=bearer(token), timeout=timeout) as transport_http,
        Client(streamable_http_client(url, http_client=transport_http), mode=mode) as client,
    ):
        yield client


async def metric(http: aiohttp.ClientSession, server: GatewayServer, line_start: str, token: str = OPS) -> float:
    """One sample from /metrics, read as a scraper does (with a token granted the `metrics` scope)."""
    async with http.get(f"{server.url}/metrics", headers=bearer(token)) as response:
        assert response.status == 200
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def lan_address() -> str | None:
    """A non-loopback IPv4 address of this machine (e.g. a container's eth0), or None: then the LAN rule
    is tested at the unit level only (tests/unit/test_static_tokens.py)."""
    candidates: list[str] = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent; the kernel picks the outgoing address
        candidates.append(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    for address in candidates:
        if address.startswith("127.") or address == "0.0.0.0":
            continue
        with contextlib.suppress(OSError), socket.socket() as check:
            check.bind((address, 0))  # really ours
            return address
    return None


# -- static tokens -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "challenge"),
    [
        ("/pump-1/mcp", 'Bearer realm="mcp-gateway", scope="pump-1"'),  # the scopes the endpoint needs
        ("/_all/mcp", 'Bearer realm="mcp-gateway", scope="pump-1 pump-2"'),  # and those of the slots it serves
        ("/_broker/mcp", 'Bearer realm="mcp-gateway"'),
    ],
)
async def test_no_token_gets_401_with_www_authenticate(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, path: str, challenge: str
) -> None:
    server = await gateway_factory(auth=static_auth())
    status, headers, body = await post(http, server.url + path)
    assert status == 401
    assert headers["WWW-Authenticate"] == challenge
    assert headers["Content-Type"].startswith("application/json")
    assert body["error"] == "unauthorized"
    assert "Authorization: Bearer <token>" in body["error_description"]
    assert "mcp-gateway token create" in body["error_description"]
    for method in ("GET", "DELETE"):
        async with http.request(method, server.url + path, headers={"Mcp-Session-Id": "x"}) as response:
            assert response.status == 401
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="missing"}') == 3


@pytest.mark.parametrize("slot", ["provider", "providers", "healthz", "metrics"])
async def test_a_slot_named_like_a_gateway_path_still_needs_a_token(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, publishers: Publishers, slot: str
) -> None:
    # The provider upgrades, probes and /metrics answer GET only: a POST to /provider/mcp is slot
    # "provider" on the client routes, and must be authenticated like any other slot.
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, slot, demo_server(slot))
    status, _, body = await post(http, f"{server.url}/{slot}/mcp")
    assert status == 401, body
    status, _, _ = await post(http, f"{server.url}/{slot}/mcp", headers=bearer(OPS))
    assert status == 200
    for path in ("/provider", "/providers", "/healthz", "/metrics"):
        status, _, _ = await post(http, server.url + path)
        assert status == 401, path


async def test_a_wrong_token_gets_401_invalid_token(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    wrong = SCADA[:-1] + ("A" if SCADA[-1] != "A" else "B")
    status, headers, body = await post(http, f"{server.url}/pump-1/mcp", headers=bearer(wrong))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith(
        'Bearer realm="mcp-gateway", error="invalid_token", error_description='
    )
    assert body["error"] == "invalid_token"
    assert wrong not in str(body) and wrong not in str(headers)
    # Only the Authorization header counts: a token in the query string opens nothing.
    status, _, _ = await post(http, f"{server.url}/pump-1/mcp?access_token={SCADA}")
    assert status == 401
    status, _, body = await post(http, f"{server.url}/pump-1/mcp", headers={"Authorization": f"Basic {SCADA}"})
    assert status == 401 and "Only Authorization: Bearer" in body["error_description"]
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="invalid"}') == 1


async def test_a_token_for_slot_a_is_refused_on_slot_b(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    status, _, _ = await post(http, f"{server.url}/pump-1/mcp", headers=bearer(SCADA))
    assert status == 200
    status, headers, body = await post(http, f"{server.url}/pump-2/mcp", headers=bearer(SCADA))
    assert status == 403
    assert headers["WWW-Authenticate"].startswith('Bearer realm="mcp-gateway", error="insufficient_scope"')
    assert 'scope="pump-2"' in headers["WWW-Authenticate"]
    assert body["error"] == "insufficient_scope"
    assert "scada" in body["error_description"] and "pump-2" in body["error_description"]
    status, _, _ = await post(http, f"{server.url}/pump-2/mcp", headers=bearer(OPS))
    assert status == 200
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="insufficient_scope"}') == 1


@pytest.mark.parametrize("mode", [SESSION_ERA, STATELESS_ERA])
async def test_all_never_bypasses_a_slots_scopes(
    gateway_factory: GatewayFactory, publishers: Publishers, mode: str
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("one"), aggregate=True)
    await publishers.start(server, "pump-2", demo_server("two"), aggregate=True)
    await wait_for(lambda: len(server.gateway.aggregate.members()) == 2, what="both pumps in _all")
    async with sdk_client(f"{server.url}/_all/mcp", SCADA, mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"pump-1-add", "pump-1-echo", "pump-1-sleep", "pump-1-fail"}
        allowed = await client.call_tool("pump-1-add", {"a": 1, "b": 1})
        assert allowed.structured_content == {"result": 2}
        with pytest.raises(Exception) as refused:
            await client.call_tool("pump-2-add", {"a": 1, "b": 1})
        with pytest.raises(Exception) as unknown:
            await client.call_tool("pump-9-add", {"a": 1, "b": 1})
        # A slot the caller may not call looks exactly like one that does not exist.
        assert str(refused.value).replace("pump-2", "X") == str(unknown.value).replace("pump-9", "X")
    async with sdk_client(f"{server.url}/_all/mcp", OPS, mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"pump-1-add", "pump-2-add"} <= names


async def test_the_handshake_of_all_names_no_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # Every caller gets the same instructions: naming the members told one without pump-2's scopes that
    # pump-2 exists, which its unknown-tool answer keeps from it.
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("one"), aggregate=True)
    await publishers.start(server, "pump-2", demo_server("two"), aggregate=True)
    await wait_for(lambda: len(server.gateway.aggregate.members()) == 2, what="both pumps in _all")
    status, _, answer = await post(http, f"{server.url}/_all/mcp", headers=bearer(SCADA))
    assert status == 200
    assert "pump-2" not in orjson.dumps(answer).decode()


@pytest.mark.parametrize("mode", [SESSION_ERA, STATELESS_ERA])
async def test_sdk_clients_of_both_eras_call_with_a_static_token(
    gateway_factory: GatewayFactory, publishers: Publishers, mode: str
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("pump"))  # providers need no client token
    async with sdk_client(f"{server.url}/pump-1/mcp", SCADA, mode) as client:
        result = await client.call_tool("add", {"a": 2, "b": 40})
    assert result.structured_content == {"result": 42}


async def test_metrics_need_the_metrics_scope_and_health_checks_need_nothing(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    async with http.get(f"{server.url}/metrics") as response:
        assert response.status == 401
    async with http.get(f"{server.url}/metrics", headers=bearer(SCADA)) as response:
        assert response.status == 403
        assert 'scope="metrics"' in response.headers["WWW-Authenticate"]
    async with http.get(f"{server.url}/metrics", headers=bearer(OPS)) as response:
        assert response.status == 200
        assert "mcpgw_auth_failures_total" in await response.text()
    for path in ("/healthz", "/readyz"):
        async with http.get(server.url + path) as response:
            assert response.status == 200


async def test_static_tokens_over_the_lan_address_work_from_this_machine_and_over_tls(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    address = lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address; tests/unit/test_static_tokens.py covers the rule")
    plain = await gateway_factory(host=address, auth=static_auth())
    assert plain.url.startswith(f"http://{address}:")
    # Called from this machine at the LAN address (the gateway has no loopback listener): the token is
    # accepted, since the peer is the listener's own address. Another machine gets 401 not_tls, which
    # one host cannot show with real sockets (tests/unit/test_static_tokens.py covers that rule).
    status, _, body = await post(http, f"{plain.url}/pump-1/mcp", headers=bearer(OPS))
    assert status == 200, body

    # The same token over TLS from the same address is accepted (certificate from `tls self-signed`).
    code = await run_cli("tls", "self-signed", "--dir", str(tmp_path / "tls"), "--ip", address)
    assert code == 0
    tls = {"cert_file": str(tmp_path / "tls" / "server.pem"), "key_file": str(tmp_path / "tls" / "server-key.pem")}
    secure = await gateway_factory(host=address, auth=static_auth(), tls=tls)
    assert secure.url.startswith("https://")
    trust = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as https:
        status, _, _ = await post(https, f"{secure.url}/pump-1/mcp", headers=bearer(OPS))
        assert status == 200
        status, _, _ = await post(https, f"{secure.url}/pump-1/mcp")
        assert status == 401


async def run_cli(*args: str) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(process.wait(), 30)


async def test_tokens_created_while_the_gateway_runs_work_without_a_restart(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", ["pump-1"])
    server = await gateway_factory(auth={"token_files": [str(path)], "required_scopes": REQUIRED})
    fresh = create_token(path, "hmi", ["pump-1"])

    async def accepted() -> bool:
        status, _, _ = await post(http, f"{server.url}/pump-1/mcp", headers=bearer(fresh))
        return status == 200

    deadline = time.monotonic() + 5
    while not await accepted():
        assert time.monotonic() < deadline, "the new token was not picked up"
        await asyncio.sleep(0.1)


async def test_a_token_revoked_while_the_gateway_runs_is_refused_without_a_reload(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.toml"
    kept = create_token(path, "scada", ["pump-1"])
    revoked = create_token(path, "hmi", ["pump-1"])
    server = await gateway_factory(auth={"token_files": [str(path)], "required_scopes": REQUIRED})
    url = f"{server.url}/pump-1/mcp"
    assert (await post(http, url, headers=bearer(revoked)))[0] == 200
    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0

    deadline = time.monotonic() + 5
    while (await post(http, url, headers=bearer(revoked)))[0] != 401:
        assert time.monotonic() < deadline, "the revoked token was still accepted"
        await asyncio.sleep(0.1)
    assert (await post(http, url, headers=bearer(kept)))[0] == 200


# -- OAuth 2.1 ---------------------------------------------------------------------------------------


def oauth_auth(authority: JwksServer | None = None, **extra: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"issuer": ISSUER}
    if authority is not None:
        settings["jwks_url"] = authority.url
    settings.update(extra)
    return {"oauth": settings, "required_scopes": REQUIRED}


def scraper(server: GatewayServer) -> str:
    """An access token for Prometheus: audience /metrics, scope metrics."""
    return access_token(rsa_key(), f"{server.url}/metrics", subject="prometheus", scope="metrics")


@pytest.mark.parametrize("mode", [SESSION_ERA, STATELESS_ERA])
@pytest.mark.parametrize("key", [rsa_key, ec_key], ids=["RS256", "ES256"])
async def test_sdk_clients_of_both_eras_call_with_a_valid_access_token(
    gateway_factory: GatewayFactory, publishers: Publishers, authority: JwksServer, key: Any, mode: str
) -> None:
    server = await gateway_factory(auth=oauth_auth(authority))
    await publishers.start(server, "pump-1", demo_server("pump"))
    url = f"{server.url}/pump-1/mcp"
    async with sdk_client(url, access_token(key(), url, scope="pump-1"), mode) as client:
        result = await client.call_tool("add", {"a": 1, "b": 2})
    assert result.structured_content == {"result": 3}


async def refused_token(
    http: aiohttp.ClientSession, url: str, token: str, status: int = 401
) -> tuple[str, dict[str, Any]]:
    code, headers, body = await post(http, url, headers=bearer(token))
    assert code == status, body
    assert token not in str(body) and token not in str(headers)
    return headers["WWW-Authenticate"], body


async def test_expired_foreign_and_misdirected_tokens_are_refused(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    server = await gateway_factory(auth=oauth_auth(authority))
    pump1, pump2 = f"{server.url}/pump-1/mcp", f"{server.url}/pump-2/mcp"
    metadata = f'resource_metadata="{server.url}/.well-known/oauth-protected-resource/pump-1/mcp"'

    header, body = await refused_token(http, pump1, access_token(rsa_key(), pump1, scope="pump-1", expires_in=-120))
    assert header.startswith('Bearer error="invalid_token", error_description="The access token has expired')
    assert header.endswith(metadata)
    assert body["error"] == "invalid_token"
    # A fresh token refused so means the clocks disagree (a gateway booted without a real-time clock).
    assert "the clocks of the authorization server and this gateway disagree" in body["error_description"]

    _, body = await refused_token(
        http, pump1, access_token(rsa_key(), pump1, scope="pump-1", issuer="https://evil.example")
    )
    assert ISSUER in body["error_description"]

    # A token obtained for pump-1 (and carrying pump-2's scope too) does not open pump-2.
    header, body = await refused_token(http, pump2, access_token(ec_key(), pump1, scope="pump-1 pump-2"))
    assert f"its audience (aud) must be {pump2}" in body["error_description"]
    assert 'resource_metadata="' in header and "/pump-2/mcp" in header

    for reason in ("expired", "wrong_issuer", "wrong_audience"):
        assert await metric(http, server, f'mcpgw_auth_failures_total{{reason="{reason}"}}', scraper(server)) == 1


async def test_a_token_without_the_slots_scope_gets_403_insufficient_scope(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    server = await gateway_factory(auth=oauth_auth(authority))
    url = f"{server.url}/pump-1/mcp"
    header, body = await refused_token(http, url, access_token(rsa_key(), url, scope="pump-2 other"), status=403)
    assert header == (
        'Bearer error="insufficient_scope", error_description="' + body["error_description"] + '", scope="pump-1", '
        f'resource_metadata="{server.url}/.well-known/oauth-protected-resource/pump-1/mcp"'
    )
    assert body["error"] == "insufficient_scope"
    status, _, _ = await post(http, url, headers=bearer(access_token(rsa_key(), url, scope="pump-1")))
    assert status == 200


async def test_an_unknown_key_id_fetches_the_keys_again_but_not_on_every_request(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(auth=oauth_auth(authority))
        await wait_for(lambda: authority.fetches == 1, what="the first JWKS fetch")
        url = f"{server.url}/pump-1/mcp"
        # The authorization server rotates in a new key and signs with it.
        authority.document = jwks(rsa_key(), ec_key())
        status, _, _ = await post(http, url, headers=bearer(access_token(ec_key(), url, scope="pump-1")))
        assert status == 200
        assert authority.fetches == 2
        assert not authority.seen_authorization  # the gateway sends no credential to the authorization server
        # Made-up key ids: refused, and they cannot make the gateway hammer the authorization server.
        for index in range(5):
            made_up = access_token(ec_key(), url, scope="pump-1", kid=f"made-up-{index}")
            _, body = await refused_token(http, url, made_up)
            assert "key the authorization server does not publish" in body["error_description"]
        assert authority.fetches == 2
        assert await metric(http, server, 'mcpgw_jwks_fetches_total{outcome="ok"}', scraper(server)) == 2


async def test_the_keys_are_refreshed_every_jwks_refresh_s_without_a_restart(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        # The periodic refresh alone: an unknown key id may trigger one early refetch per hour, and the
        # test spends it first, so only the jwks_refresh_s timer can bring the rotated keys in.
        server = await gateway_factory(auth=oauth_auth(authority, jwks_refresh_s=0.2, jwks_refetch_min_s=3600))
        url = f"{server.url}/pump-1/mcp"
        await refused_token(http, url, access_token(ec_key(), url, scope="pump-1", kid="spends-the-refetch"))
        assert (await post(http, url, headers=bearer(access_token(rsa_key(), url, scope="pump-1"))))[0] == 200

        # The authorization server rotates: the EC key in, the RSA key out.
        authority.document = jwks(ec_key())
        fetched = authority.fetches
        await wait_for(lambda: authority.fetches >= fetched + 2, what="two periodic JWKS fetches")  # one after the swap
        status, _, _ = await post(http, url, headers=bearer(access_token(ec_key(), url, scope="pump-1")))
        assert status == 200
        _, body = await refused_token(http, url, access_token(rsa_key(), url, scope="pump-1"))
        assert "key the authorization server does not publish" in body["error_description"]


async def test_keys_from_a_file(gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(orjson.dumps(jwks(ec_key())))
    server = await gateway_factory(auth=oauth_auth(jwks_file=str(path)))
    url = f"{server.url}/pump-1/mcp"
    status, _, _ = await post(http, url, headers=bearer(access_token(ec_key(), url, scope="pump-1")))
    assert status == 200
    await refused_token(http, url, access_token(rsa_key(), url, scope="pump-1"))


async def test_without_keys_the_gateway_refuses_with_503_not_401(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    authority.status = 500
    server = await gateway_factory(auth=oauth_auth(authority))
    url = f"{server.url}/pump-1/mcp"
    status, headers, body = await post(http, url, headers=bearer(access_token(rsa_key(), url, scope="pump-1")))
    assert status == 503
    assert headers["Retry-After"] == "5"
    assert body["error"] == "temporarily_unavailable"


@contextlib.asynccontextmanager
async def piecewise_jwks_server(body: bytes, pieces: int, pause_s: float = 0.2) -> AsyncIterator[str]:
    """A JWKS endpoint that sends `body` in `pieces` writes with a pause between them; yields its URL."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        size = -(-len(body) // pieces)
        for start in range(0, len(body), size):
            await response.write(body[start : start + size])
            await asyncio.sleep(pause_s)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/jwks", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/jwks"
    finally:
        await runner.cleanup()


async def test_a_jwks_that_arrives_in_pieces_is_read_to_its_end(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    async with piecewise_jwks_server(orjson.dumps(jwks(rsa_key(), ec_key())), pieces=2) as jwks_url:
        server = await gateway_factory(
            auth={"oauth": {"issuer": ISSUER, "jwks_url": jwks_url}, "required_scopes": REQUIRED}
        )
        url = f"{server.url}/pump-1/mcp"
        status, _, body = await post(http, url, headers=bearer(access_token(ec_key(), url, scope="pump-1")))
        assert status == 200, body


async def test_a_jwks_over_one_mib_is_refused_however_it_arrives(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy.oauth")
    # A usable key set, padded past the cap: refused for its size, not parsed.
    document = {**jwks(rsa_key()), "padding": "x" * 1_100_000}
    async with piecewise_jwks_server(orjson.dumps(document), pieces=4, pause_s=0.05) as jwks_url:
        server = await gateway_factory(
            auth={"oauth": {"issuer": ISSUER, "jwks_url": jwks_url}, "required_scopes": REQUIRED}
        )
        url = f"{server.url}/pump-1/mcp"
        status, _, body = await post(http, url, headers=bearer(access_token(rsa_key(), url, scope="pump-1")))
        assert status == 503, body
    refusals = [record.getMessage() for record in caplog.records if "cannot load" in record.getMessage()]
    assert refusals and all(message.endswith("larger than 1048576 bytes") for message in refusals), refusals


async def test_an_empty_jwks_withdraws_every_key(gateway_factory: GatewayFactory, http: aiohttp.ClientSession) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await gateway_factory(auth=oauth_auth(authority, jwks_refresh_s=0.2))
        url = f"{server.url}/pump-1/mcp"
        assert (await post(http, url, headers=bearer(access_token(rsa_key(), url, scope="pump-1"))))[0] == 200

        # The authorization server withdraws its last key: the next refresh leaves the gateway none.
        authority.document = {"keys": []}
        fetched = authority.fetches
        await wait_for(lambda: authority.fetches >= fetched + 2, what="two periodic JWKS fetches")
        _, body = await refused_token(http, url, access_token(rsa_key(), url, scope="pump-1"))
        assert "key the authorization server does not publish" in body["error_description"]


async def test_protected_resource_metadata_per_endpoint(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, authority: JwksServer
) -> None:
    server = await gateway_factory(
        auth=oauth_auth(authority, authorization_servers=["https://auth.plant.test"])
        | {"required_scopes": {"pump-1": ["pump-1"], "_broker": ["admin"]}}
    )
    status, headers, _ = await post(http, f"{server.url}/pump%201/mcp")
    assert status == 401
    metadata_url = headers["WWW-Authenticate"].removeprefix('Bearer resource_metadata="').removesuffix('"')
    assert metadata_url == f"{server.url}/.well-known/oauth-protected-resource/pump%201/mcp"
    status, headers, _ = await post(http, f"{server.url}/_broker/mcp")
    assert (status, headers["WWW-Authenticate"]) == (
        401,
        f'Bearer scope="admin", resource_metadata="{server.url}/.well-known/oauth-protected-resource/_broker/mcp"',
    )
    cases = {
        metadata_url: (f"{server.url}/pump%201/mcp", None, 'mcp-gateway slot "pump 1"'),
        f"{server.url}/.well-known/oauth-protected-resource/pump-1/mcp": (
            f"{server.url}/pump-1/mcp",
            ["pump-1"],
            'mcp-gateway slot "pump-1"',
        ),
        f"{server.url}/.well-known/oauth-protected-resource/_all/mcp": (
            f"{server.url}/_all/mcp",
            ["pump-1"],  # the scopes of the slots it serves (tests/integration/test_oauth_discovery.py)
            "mcp-gateway: every slot in the aggregate (_all)",
        ),
        f"{server.url}/.well-known/oauth-protected-resource/pump-1/sse": (
            f"{server.url}/pump-1/sse",
            ["pump-1"],
            'mcp-gateway slot "pump-1"',
        ),
        f"{server.url}/.well-known/oauth-protected-resource/_broker/mcp": (
            f"{server.url}/_broker/mcp",
            ["admin"],
            "mcp-gateway: the gateway itself (_broker)",
        ),
    }
    for url, (resource, scopes, name) in cases.items():
        async with http.get(url) as response:  # no token needed: clients read it to find the server
            assert response.status == 200
            assert await response.json() == {
                "resource": resource,
                "authorization_servers": ["https://auth.plant.test"],
                # Absent, not [], when the endpoint needs no scope: a client asks for what is listed.
                **({"scopes_supported": scopes} if scopes is not None else {}),
                "bearer_methods_supported": ["header"],
                "resource_name": name,
            }
    async with http.get(f"{server.url}/.well-known/oauth-protected-resource/_bad/mcp") as response:
        assert response.status == 404
    async with http.get(f"{server.url}/.well-known/oauth-protected-resource/pump-1/messages") as response:
        assert response.status == 404


# -- sessions belong to their caller -----------------------------------------------------------------


async def test_a_session_belongs_to_the_caller_that_opened_it(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(auth=static_auth())
    url = f"{server.url}/pump-1/mcp"
    status, headers, _ = await post(http, url, headers=bearer(SCADA))
    assert status == 200
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"]}
    forbidden = {
        "error": "forbidden",
        "error_description": "This session belongs to another caller. Open a session of your own.",
    }
    status, _, body = await post(http, url, TOOLS_LIST, {**bearer(OPS), **session})
    assert (status, body) == (403, forbidden)
    for method in ("GET", "DELETE"):
        async with http.request(method, url, headers={**MCP_HEADERS, **bearer(OPS), **session}) as response:
            assert response.status == 403
            assert await response.json() == forbidden
    # The owner's session is untouched by all that: its request reaches the (empty) slot.
    status, _, body = await post(http, url, TOOLS_LIST, {**bearer(SCADA), **session})
    assert status == 200
    assert body["error"]["message"].startswith('Provider "pump-1" not connected: ')
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="session_owner"}') == 3


# -- what must never happen --------------------------------------------------------------------------


async def test_no_client_token_ever_reaches_a_provider(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    server = await gateway_factory(auth=static_auth(oauth={"issuer": ISSUER, "jwks_file": str(keys)}))
    boards = Boards()
    try:
        board = await boards.connect(server.url, "/provider/pump-1")
        await wait_for(
            lambda: (
                server.gateway.registry.slots.get("pump-1") is not None
                and server.gateway.registry.slots["pump-1"].live is not None
                and server.gateway.registry.slots["pump-1"].live.ready
            ),
            what="the board to be ready",
        )

        async def answer_calls() -> None:
            while True:
                request = await board.request("tools/call", timeout=30)
                await board.reply(request, {"content": [{"type": "text", "text": "ok"}], "isError": False})

        answering = asyncio.create_task(answer_calls())
        url = f"{server.url}/pump-1/mcp"
        jwt_token = access_token(rsa_key(), url, scope="pump-1")
        try:
            for token, mode in ((SCADA, SESSION_ERA), (jwt_token, STATELESS_ERA), (OPS, STATELESS_ERA)):
                async with sdk_client(url, token, mode) as client:
                    result = await client.call_tool("valve", {"open": True})
                    assert not result.is_error
                    await client.list_tools()
        finally:
            answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answering
        received = "\n".join(board.texts)
        assert received.count('"tools/call"') == 3  # the calls did reach the board
        for secret in (SCADA, OPS, jwt_token, *jwt_token.split(".")):
            assert secret not in received
        assert "bearer" not in received.lower()
        assert "authorization" not in received.lower()
    finally:
        await boards.aclose()


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({"Host": "evil.example", "Origin": "http://evil.example"}, "origin_not_allowed"),
        ({"Host": "evil.example"}, "host_not_allowed"),
        ({"Host": "evil.example:3000", "Origin": "http://evil.example:3000"}, "origin_not_allowed"),
    ],
)
async def test_dns_rebinding_is_refused_even_with_a_valid_token(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, headers: dict[str, str], error: str
) -> None:
    """The conformance suite's scenario: a page whose name resolves to 127.0.0.1 calls a loopback gateway."""
    server = await gateway_factory(auth=static_auth())
    status, response_headers, body = await post(http, f"{server.url}/pump-1/mcp", headers={**bearer(OPS), **headers})
    assert status == 403
    assert response_headers["Content-Type"].startswith("application/json")
    assert body["error"] == error
    assert "Mcp-Session-Id" not in response_headers
    assert server.gateway.sessions.sessions == {}


async def test_the_broker_shows_the_auth_posture_and_no_secret(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    server = await gateway_factory(auth=static_auth(oauth={"issuer": ISSUER, "jwks_file": str(keys)}))
    texts: list[str] = []
    async with sdk_client(f"{server.url}/_broker/mcp", OPS, SESSION_ERA) as client:
        info = (await client.call_tool("broker_info", {})).structured_content
        assert info is not None
        auth = info["security"]["auth"]
        assert {name: auth[name] for name in ("static_tokens", "oauth", "hmac_keys")} == {
            "static_tokens": 2,
            "oauth": ISSUER,
            "hmac_keys": 0,
        }
        assert auth["oauth_keys"]["source"] == f"file {keys}" and auth["oauth_keys"]["keys"] == 1, auth
        assert info["security"]["authentication"] == "static_tokens+oauth"
        texts.append(orjson.dumps(info).decode())
        for tool in ("providers_list", "broker_diagnose"):
            texts.append(orjson.dumps((await client.call_tool(tool, {})).structured_content).decode())
        for topic in ("index", "connect-client", "host-config", "deploy", "troubleshooting"):
            page = await client.call_tool("broker_guide", {"topic": topic})
            texts.append(page.content[0].text)  # type: ignore[union-attr]
    connect = texts[-4]
    assert "Authorization: Bearer <token>" in connect
    assert "mcp-gateway token create" in connect
    assert ISSUER in connect
    everything = "\n".join(texts)
    for secret in (SCADA, OPS, sha(SCADA), sha(OPS)):
        assert secret not in everything


async def test_secrets_are_never_logged(tmp_path: Path, authority: JwksServer) -> None:
    """The gateway as a process at debug level with JSON logs; good and bad credentials of every kind."""
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    config = tmp_path / "gateway.toml"
    config.write_text(
        "port = 0\n"
        '[logging]\nlevel = "debug"\nformat = "json"\n'
        "[auth]\n"
        f'tokens = [{{ name = "ops", scopes = ["pump-1", "metrics"], sha256 = "{sha(OPS)}" }},\n'
        '          { name = "env", scopes = ["pump-1"], env = "GATEWAY_TEST_TOKEN" }]\n'
        '[auth.required_scopes]\n"pump-1" = ["pump-1"]\n'
        f'[auth.oauth]\nissuer = "{ISSUER}"\njwks_file = "{keys}"\n'
    )
    env_token = secrets.token_urlsafe(32)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MCP_GATEWAY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**environment, "GATEWAY_TEST_TOKEN": env_token},
    )
    assert process.stderr is not None and process.stdout is not None
    lines: list[bytes] = []
    url = ""
    try:
        while not url:
            line = await asyncio.wait_for(process.stderr.readline(), 20)
            assert line, b"".join(lines).decode()
            lines.append(line)
            message = orjson.loads(line).get("msg", "")
            if " listening on " in message:
                url = message.rsplit(" ", 1)[1]
        reader = asyncio.create_task(read_all(process.stderr, lines))
        endpoint = f"{url}/pump-1/mcp"
        good_jwt = access_token(rsa_key(), endpoint, scope="pump-1")
        bad_jwts = [
            access_token(rsa_key(), endpoint, scope="pump-1", expires_in=-300),
            access_token(rsa_key(), f"{url}/pump-2/mcp", scope="pump-1"),
            access_token(rsa_key(), endpoint, scope="nothing"),
            access_token(ec_key(), endpoint, scope="pump-1"),  # unknown key
            good_jwt[:-4] + "AAAA",  # bad signature
        ]
        wrong = secrets.token_urlsafe(32)
        async with aiohttp.ClientSession() as http:
            for token in (OPS, env_token, good_jwt, wrong, *bad_jwts):
                status, headers, _ = await post(http, endpoint, headers=bearer(token))
                assert status in (200, 401, 403)
                if status == 200:
                    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"]}
                    await post(http, endpoint, TOOLS_LIST, {**bearer(token), **session})
                    await post(http, endpoint, TOOLS_LIST, {**bearer(wrong), **session})
            await post(http, endpoint, headers={"Authorization": f"Bearer {wrong} extra"})
            async with http.get(f"{url}/metrics", headers=bearer(OPS)) as response:
                assert response.status == 200
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        stdout = await asyncio.wait_for(process.stdout.read(), 20)
        await asyncio.wait_for(process.wait(), 20)
    await reader
    log = (b"".join(lines) + stdout).decode()
    assert '"level":"debug"' in log  # debug logging was on
    assert "client authentication refused" in log  # and refusals were logged
    for secret in (
        OPS,
        env_token,
        wrong,
        sha(OPS),
        good_jwt,
        *good_jwt.split("."),
        *(t.split(".")[2] for t in bad_jwts),
    ):
        assert secret not in log


async def read_all(stream: asyncio.StreamReader, into: list[bytes]) -> None:
    while line := await stream.readline():
        into.append(line)


async def test_the_technician_commands_send_a_token_from_a_file_or_the_environment(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path
) -> None:
    server = await gateway_factory(auth=static_auth())
    await publishers.start(server, "pump-1", demo_server("pump"))
    code, _, err = await run_cli_process("slots", "--url", server.url)
    assert code == 1
    assert "HTTP 401 unauthorized: This endpoint needs authentication" in err
    token_file = tmp_path / "token"
    token_file.write_text(SCADA + "\n")
    code, out, err = await run_cli_process(
        "call", "pump-1", "add", "a=1", "b=2", "--url", server.url, "--token-file", str(token_file)
    )
    assert (code, orjson.loads(out)) == (0, {"result": 3}), err
    code, out, err = await run_cli_process("slots", "--url", server.url, env={"MCP_GATEWAY_TOKEN": OPS})
    assert code == 0, err
    assert out.splitlines()[1].split()[:2] == ["pump-1", "ready"]
    code, _, err = await run_cli_process("call", "pump-2", "add", "--url", server.url, env={"MCP_GATEWAY_TOKEN": SCADA})
    assert code == 1
    assert "HTTP 403 insufficient_scope" in err
    assert SCADA not in err
