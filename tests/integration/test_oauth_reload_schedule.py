"""The OAuth key schedule and open connections across reloads, against a real gateway and a real JWKS
endpoint on loopback: a reload that keeps the keys keeps their refresh schedule, a connection the
gateway cannot judge (keys unavailable) ends at its token's expiry or after jwks_refresh_s unjudged,
and a key id reused for a key of another algorithm is fetched again before the token is refused.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from tests.conftest import Publishers, wait_for
from tests.integration.test_oauth_keys_edges import settings, status_of, token_for
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.integration.test_websocket_clients import RawSocket, connect
from tests.support.oauth import ec_key, jwks, jwks_server, rsa_key
from tests.support.servers import demo_server

__all__ = ["reloadable"]  # the fixture, used by name

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE_S = 20.0
"""How long a socket the gateway should end is given before the test gives up on it."""


async def reload_with(server: GatewayServer, text: str) -> None:
    rewrite(server, text)
    report = await server.reload()
    assert report.outcome == "applied", report.refusals


async def ended_after(socket: RawSocket, ws: aiohttp.ClientWebSocketResponse) -> tuple[float, Any]:
    """Seconds until the gateway ends the socket (calls sent every 0.2 s), and its last answer."""
    start = time.monotonic()
    answer: Any = None
    request_id = 10
    while time.monotonic() - start < DEADLINE_S:
        request_id += 1
        try:
            answer = await socket.call(request_id, "tools/list")
        except (AssertionError, ConnectionResetError, aiohttp.ClientError):
            break  # closed before an answer
        if "error" in answer:
            break
        await asyncio.sleep(0.2)
    await wait_for(lambda: ws.closed or "error" in (answer or {}), what="the socket ended")
    return time.monotonic() - start, answer


async def test_a_withdrawn_key_is_refused_within_jwks_refresh_s_however_often_the_gateway_reloads(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    """A reload that keeps the key source keeps the schedule of its keys: the next fetch is not postponed."""
    async with jwks_server(jwks(rsa_key(), ec_key())) as authority:
        server = await reloadable(settings(authority.url, refresh_s=1.5))
        await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
        assert (await status_of(http, server, token_for(server)))[0] == 200
        authority.document = jwks(ec_key())  # the RSA key is withdrawn
        withdrawn = time.monotonic()
        # Reloads with an unrelated change, more often than jwks_refresh_s.
        for round_ in range(8):
            await reload_with(server, settings(authority.url, leeway_s=31 - round_ % 2, refresh_s=1.5))
            await asyncio.sleep(0.3)
        assert time.monotonic() - withdrawn >= 2.4
        status, body = await status_of(http, server, token_for(server))
        assert status == 401, body
        assert (await status_of(http, server, token_for(server, ec_key())))[0] == 200


async def test_a_socket_the_gateway_cannot_judge_ends_when_its_token_expires(
    reloadable: Reloadable, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url, leeway_s=0))
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        token = token_for(server, expires_in=4)
        ws, socket = await connect(http, server, "pump-1", headers={"Authorization": f"Bearer {token}"})
        await socket.initialize()
        authority.status = 500
        # The key source moves to a server that cannot serve keys: every judgement from now on is a 503.
        await reload_with(server, settings(authority.url + "?v=2", leeway_s=0))
        assert (await status_of(http, server, token_for(server)))[0] == 503
        lasted, answer = await ended_after(socket, ws)
        assert lasted < 7, lasted
        assert answer is not None and answer["error"]["data"]["auth"] == "expired", answer
        await ws.close()


async def test_a_socket_left_unjudged_for_jwks_refresh_s_ends(
    reloadable: Reloadable, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url, refresh_s=2))
        await publishers.start(server, "pump-1", demo_server("pump-1"))
        token = token_for(server, expires_in=300)
        ws, socket = await connect(http, server, "pump-1", headers={"Authorization": f"Bearer {token}"})
        await socket.initialize()
        authority.status = 500
        await reload_with(server, settings(authority.url + "?v=2", refresh_s=2))
        lasted, answer = await ended_after(socket, ws)
        assert 1 <= lasted < 6, lasted
        assert answer is not None and answer["error"]["data"]["auth"] == "keys_unavailable", answer
        await ws.close()


async def test_a_key_id_reused_for_another_algorithm_is_fetched_again(
    reloadable: Reloadable, http: aiohttp.ClientSession
) -> None:
    """The authorization server replaces an RS256 key by an ES256 one under the same key id."""
    async with jwks_server(jwks(rsa_key())) as authority:
        server = await reloadable(settings(authority.url))
        await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
        assert (await status_of(http, server, token_for(server)))[0] == 200
        reused = ec_key(rsa_key().kid)
        authority.document = jwks(reused)
        status, body = await status_of(http, server, token_for(server, reused))
        assert status == 200, body
        assert authority.fetches == 2
