"""The OAuth resource server's key set at its edges, against a real gateway and a real JWKS endpoint on
loopback: a malformed entry in the set, a reload while the authorization server is unreachable or while
a fetch is under way, and what a failed fetch logs about the key set URL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.app import GatewayServer
from tests.conftest import Publishers, wait_for
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.integration.test_websocket_clients import connect
from tests.support.answers import decode_answer
from tests.support.oauth import ISSUER, JwksServer, access_token, ec_key, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server

__all__ = ["reloadable"]  # the fixture, used by name

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

MALFORMED = {"kty": "EC", "kid": "bad", "crv": ["P-256"], "x": "AA", "y": "AA"}
"""A JWKS entry with an array where a string belongs: skipped, never a 500."""


def settings(jwks_url: str, leeway_s: int = 30, refresh_s: float = 600) -> str:
    return (
        f'port = 0\n[auth.oauth]\nissuer = "{ISSUER}"\njwks_url = "{jwks_url}"\njwks_refresh_s = {refresh_s}\n'
        f'leeway_s = {leeway_s}\n[auth.required_scopes]\n"pump-*" = ["pump-1"]\n'
    )


async def status_of(http: aiohttp.ClientSession, server: GatewayServer, token: str) -> tuple[int, Any]:
    url = f"{server.url}/pump-1/mcp"
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    async with http.post(url, data=orjson.dumps(INITIALIZE), headers=headers) as response:
        return response.status, decode_answer(response.content_type, await response.read())


def token_for(server: GatewayServer, key: Any = None, **claims: Any) -> str:
    return access_token(key or rsa_key(), f"{server.url}/pump-1/mcp", scope="pump-1", **claims)


async def test_a_malformed_entry_is_skipped_and_the_refresh_goes_on(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    async with jwks_server({"keys": [*jwks(rsa_key(), ec_key())["keys"], MALFORMED]}) as authority:
        server = await reloadable(settings(authority.url, refresh_s=0.2))
        status, body = await status_of(http, server, token_for(server))
        assert status == 200, body
        # The authorization server withdraws the RSA key: the schedule (still running) takes it out.
        authority.document = {"keys": [MALFORMED, *jwks(ec_key())["keys"]]}
        fetched = authority.fetches
        await wait_for(lambda: authority.fetches >= fetched + 2, what="two scheduled fetches after the withdrawal")
        status, body = await status_of(http, server, token_for(server))
        assert status == 401, body
        assert (await status_of(http, server, token_for(server, ec_key())))[0] == 200
        # A reload replaces the verifier; closing the old one settles cleanly.
        rewrite(server, settings(authority.url, leeway_s=31, refresh_s=0.2))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert report.changes == ("auth.oauth.leeway_s 30 -> 31",), report.changes


async def test_a_reload_while_the_keys_cannot_be_fetched_keeps_the_keys_held(
    reloadable: Reloadable, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url))
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        long_lived = token_for(server, expires_in=300)
        ws, socket = await connect(http, server, "pump-1", headers={"Authorization": f"Bearer {long_lived}"})
        await socket.initialize()
        assert "result" in await socket.call(1, "tools/list")

        authority.status = 500  # the authorization server cannot serve its keys
        rewrite(server, settings(authority.url, leeway_s=45))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert "auth.oauth.leeway_s 30 -> 45" in report.changes
        status, body = await status_of(http, server, token_for(server))
        assert status == 200, body
        # The open socket is judged again (at most once a second) by the new verifier, and stands.
        await asyncio.sleep(1.2)
        assert "result" in await socket.call(2, "tools/list")
        await ws.close()


async def test_a_socket_outlives_a_judgement_the_gateway_cannot_make(
    reloadable: Reloadable, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    """Keys unavailable (503) is no verdict on the credential: the connection stays open."""
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url))
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        ws, socket = await connect(http, server, "pump-1", headers={"Authorization": f"Bearer {token_for(server)}"})
        await socket.initialize()
        authority.status = 500
        # A new key source: the new verifier holds no keys, and cannot fetch any.
        rewrite(server, settings(authority.url + "?v=2"))
        assert (await server.reload()).outcome == "applied"
        assert (await status_of(http, server, token_for(server)))[0] == 503
        await asyncio.sleep(1.2)
        answer = await socket.call(2, "tools/list")
        assert "result" in answer, answer
        assert not ws.closed
        await ws.close()


class SlowJwks:
    """A JWKS endpoint whose answers after the first wait until `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.fetches = 0

    async def handle(self, _: web.Request) -> web.Response:
        self.fetches += 1
        if self.fetches > 1:
            await self.release.wait()
        return web.json_response(jwks(rsa_key()))


@asynccontextmanager
async def slow_jwks() -> AsyncIterator[tuple[SlowJwks, str]]:
    endpoint = SlowJwks()
    app = web.Application()
    app.router.add_get("/jwks", endpoint.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield endpoint, f"http://127.0.0.1:{port}/jwks"
    finally:
        endpoint.release.set()
        await runner.cleanup()


async def test_a_reload_during_a_key_fetch_answers_the_requests_waiting_for_it(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    async with slow_jwks() as (endpoint, url):
        server = await reloadable(settings(url))
        await wait_for(lambda: endpoint.fetches == 1, what="the first key fetch")
        # A key id the set does not hold: the request waits for an on-demand fetch, which hangs.
        waiting = asyncio.create_task(status_of(http, server, token_for(server, kid="rotated-in")))
        await wait_for(lambda: endpoint.fetches == 2, what="the on-demand fetch")
        rewrite(server, settings(url, leeway_s=40))
        assert (await server.reload()).outcome == "applied"
        status, body = await asyncio.wait_for(waiting, 5)
        assert status == 401, body
        assert body["error"] == "invalid_token"


@pytest.mark.parametrize(
    ("secret_part", "shown"),
    [("user:hunter2-pass@", "user:***@"), ("", "?api_key=***&tenant=***")],
)
async def test_a_failed_fetch_logs_the_key_set_url_without_its_credentials(
    reloadable: Reloadable, caplog: pytest.LogCaptureFixture, secret_part: str, shown: str
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        authority.status = 500
        query = "" if secret_part else "?api_key=hunter2-key&tenant=plant"
        url = authority.url.replace("http://", f"http://{secret_part}") + query
        with caplog.at_level(logging.WARNING, logger="gateway.policy.oauth"):
            await reloadable(settings(url))
            await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
            await wait_for(lambda: "cannot load" in caplog.text, what="the failed fetch's log line")
        assert shown in caplog.text
        assert "hunter2" not in caplog.text


async def test_an_authorization_server_that_recovers_serves_at_once_after_a_reload(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    """The keys carried over by a reload need no on-demand fetch, so none is spent while the server is down."""
    authority: JwksServer
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url))
        await wait_for(lambda: authority.fetches == 1, what="the first key fetch")
        authority.status = 500
        rewrite(server, settings(authority.url, leeway_s=50))
        assert (await server.reload()).outcome == "applied"
        assert (await status_of(http, server, token_for(server)))[0] == 200
        authority.status = 200
        # A rotated-in key is fetched on demand at once: the bound was not spent during the outage.
        authority.document = jwks(rsa_key(), ec_key())
        assert (await status_of(http, server, token_for(server, ec_key())))[0] == 200


async def test_a_path_naming_no_endpoint_is_refused_without_a_metadata_url(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url))
        async with http.post(f"{server.url}/", data=orjson.dumps(INITIALIZE), headers=MCP_HEADERS) as response:
            assert response.status == 401
            body = await response.json()
        assert "None" not in body["error_description"]
        assert body["error_description"].startswith(
            "This endpoint needs authentication: send Authorization: Bearer <token> with an access token "
            f"from {ISSUER}."
        )
