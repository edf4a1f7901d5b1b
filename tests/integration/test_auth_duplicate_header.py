"""A request carrying several Authorization headers is malformed (RFC 6750 section 3.1): 400 with
error="invalid_request" on every client way in, whatever the headers hold (the same good static
token twice, a static token and an access token, a good token and garbage), counted as
`malformed`, not as a bad token. A real gateway on loopback, a real JWKS server, raw requests from aiohttp
(a list of header pairs keeps both Authorization headers)."""

from __future__ import annotations

import secrets

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_client_auth import authority, bearer, metric, sha
from tests.support.oauth import ISSUER, JwksServer, access_token, rsa_key
from tests.support.raw_mcp import INITIALIZE

__all__ = ["authority"]  # the fixture, used by name

SCADA = secrets.token_urlsafe(32)
OPS = secrets.token_urlsafe(32)
SSE_ACCEPT = ("Accept", "text/event-stream")
JSON_POST = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")]
WEBSOCKET_UPGRADE = [
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
]
WAYS_IN = {
    "streamable HTTP POST": ("POST", "/pump-1/mcp", JSON_POST),
    "streamable HTTP GET stream": ("GET", "/pump-1/mcp", [SSE_ACCEPT]),
    "legacy SSE stream": ("GET", "/pump-1/sse", [SSE_ACCEPT]),
    "legacy SSE message": ("POST", "/pump-1/messages?sessionId=abc", JSON_POST),
    "raw WebSocket upgrade": ("GET", "/pump-1", WEBSOCKET_UPGRADE),
    "tool groups": ("POST", "/mcp", JSON_POST),
    "_broker": ("POST", "/_broker/mcp", JSON_POST),
    "metrics": ("GET", "/metrics", []),
}


@pytest.fixture
async def server(gateway_factory: GatewayFactory, authority: JwksServer) -> GatewayServer:
    return await gateway_factory(
        auth={
            "tokens": [
                {"name": "scada", "scopes": ["pump-1"], "sha256": sha(SCADA)},
                {"name": "ops", "scopes": ["pump-1", "metrics"], "sha256": sha(OPS)},
            ],
            "oauth": {"issuer": ISSUER, "jwks_url": authority.url},
            "required_scopes": {"pump-1": ["pump-1"]},
        }
    )


def credential_pairs(server: GatewayServer) -> list[tuple[str, str]]:
    """Two Authorization values each: the same good token twice, a static and an access token, good and bad."""
    user = access_token(rsa_key(), f"{server.url}/pump-1/mcp", scope="pump-1")
    return [
        (f"Bearer {OPS}", f"Bearer {OPS}"),
        (f"Bearer {OPS}", f"Bearer {user}"),
        (f"Bearer {user}", "Basic b3BzOm9wcw=="),
    ]


async def send(
    http: aiohttp.ClientSession, method: str, url: str, headers: list[tuple[str, str]]
) -> tuple[int, dict[str, str], bytes]:
    data = orjson.dumps(INITIALIZE) if method == "POST" else None
    async with http.request(method, url, headers=headers, data=data) as response:
        return response.status, dict(response.headers), await response.read()


@pytest.mark.parametrize("way_in", list(WAYS_IN))
async def test_several_authorization_headers_are_a_400_invalid_request(
    server: GatewayServer, http: aiohttp.ClientSession, way_in: str
) -> None:
    method, path, extra = WAYS_IN[way_in]
    pairs = credential_pairs(server)
    for first, second in pairs:
        headers = [*extra, ("Authorization", first), ("Authorization", second)]
        status, answer_headers, body = await send(http, method, server.url + path, headers)
        assert status == 400, (way_in, status, body)
        payload = orjson.loads(body)
        assert payload == {
            "error": "invalid_request",
            "error_description": "The request carries 2 Authorization headers; send exactly one.",
        }
        challenge = answer_headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer ") and 'error="invalid_request"' in challenge, challenge
        shown = body.decode() + str(answer_headers)
        for token in (*first.split(), *second.split()):
            assert token in ("Bearer", "Basic") or token not in shown
    # Three are refused alike; the metric counts each as malformed, none as a bad token.
    three = [*extra, *(("Authorization", f"Bearer {OPS}") for _ in range(3))]
    status, _, body = await send(http, method, server.url + path, three)
    assert status == 400 and b"carries 3 Authorization headers" in body
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="malformed"}', OPS) == len(pairs) + 1
    assert await metric(http, server, 'mcpgw_auth_failures_total{reason="invalid"}', OPS) == 0


async def test_one_authorization_header_still_passes(server: GatewayServer, http: aiohttp.ClientSession) -> None:
    status, _, body = await send(http, "POST", f"{server.url}/_broker/mcp", [*JSON_POST, *bearer(SCADA).items()])
    assert status == 200, body
    status, _, _ = await send(http, "GET", f"{server.url}/metrics", list(bearer(OPS).items()))
    assert status == 200
