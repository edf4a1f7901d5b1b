"""A stand-in OAuth 2.1 authorization server that the MCP SDK's own OAuth client can log in at, and that
client, ready to use.

The server is a real aiohttp server on loopback with the parts an MCP client's login touches:
metadata (RFC 8414), dynamic client registration (RFC 7591), an authorization endpoint that approves
at once and redirects with a code (PKCE S256 checked at the token endpoint), a token endpoint that
signs a JWT for the `resource` (RFC 8707) and `scope` asked for, and the JWKS the gateway checks
those tokens with. It records what each token request asked for. `agent_auth` gives the SDK's
`OAuthClientProvider` with a "browser" that follows the authorization redirect by itself.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from aiohttp import web
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.support.oauth import access_token, jwks, rsa_key

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never reached: the test's "browser" reads the redirect itself


@dataclass
class AuthorizationServer:
    url: str = ""
    token_requests: list[dict[str, str]] = field(default_factory=list)
    """What each token request asked for: grant_type, resource, scope, client_id (never a secret)."""
    codes: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def oauth_settings(self) -> dict[str, Any]:
        """The gateway's [auth.oauth] for this server."""
        return {"issuer": self.url, "jwks_url": f"{self.url}/jwks"}

    async def metadata(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.url,
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "registration_endpoint": f"{self.url}/register",
                "jwks_uri": f"{self.url}/jwks",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            }
        )

    async def keys(self, _: web.Request) -> web.Response:
        return web.json_response(jwks(rsa_key()))

    async def register(self, request: web.Request) -> web.Response:
        body = await request.json()
        client = {**body, "client_id": "agent-" + secrets.token_hex(4), "client_id_issued_at": 0}
        if body.get("token_endpoint_auth_method", "client_secret_post") != "none":
            client["client_secret"] = secrets.token_urlsafe(16)
            client.setdefault("token_endpoint_auth_method", "client_secret_post")
        return web.json_response(client, status=201)

    async def authorize(self, request: web.Request) -> web.Response:
        code = secrets.token_urlsafe(16)
        self.codes[code] = dict(request.query)
        answer = {
            "code": code,
            "iss": self.url,
            **({"state": request.query["state"]} if "state" in request.query else {}),
        }
        raise web.HTTPFound(request.query["redirect_uri"] + "?" + urlencode(answer))

    async def token(self, request: web.Request) -> web.Response:
        form = {key: str(value) for key, value in (await request.post()).items()}
        asked = self.codes.pop(form.get("code", ""), None)
        if form.get("grant_type") != "authorization_code" or asked is None:
            return web.json_response({"error": "invalid_grant"}, status=400)
        verifier = form.get("code_verifier", "").encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
        if challenge != asked.get("code_challenge"):
            return web.json_response({"error": "invalid_grant", "error_description": "PKCE"}, status=400)
        client_id = form.get("client_id") or asked.get("client_id", "")
        resource = form.get("resource") or asked.get("resource", "")
        scope = asked.get("scope", form.get("scope", ""))
        self.token_requests.append({"resource": resource, "scope": scope, "client_id": client_id})
        token = access_token(rsa_key(), resource, subject=f"user-of-{client_id}", scope=scope, issuer=self.url)
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": 300, "scope": scope})


@asynccontextmanager
async def authorization_server() -> AsyncIterator[AuthorizationServer]:
    server = AuthorizationServer()
    app = web.Application()
    app.router.add_get("/.well-known/oauth-authorization-server", server.metadata)
    app.router.add_get("/jwks", server.keys)
    app.router.add_post("/register", server.register)
    app.router.add_get("/authorize", server.authorize)
    app.router.add_post("/token", server.token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


class MemoryStorage:
    """The SDK's TokenStorage, in memory: one agent's registration and tokens."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def agent_auth(server_url: str, storage: MemoryStorage | None = None) -> OAuthClientProvider:
    """The SDK's OAuth client for the MCP endpoint `server_url` (authorization code + PKCE + registration),
    with a "browser" that approves at once."""
    pending: list[AuthorizationCodeResult] = []

    async def redirect_handler(authorization_url: str) -> None:
        async with httpx2.AsyncClient() as browser:
            answer = await browser.get(authorization_url, follow_redirects=False)
        query = parse_qs(urlsplit(answer.headers["location"]).query)
        pending.append(
            AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0], iss=query["iss"][0])
        )

    async def callback_handler() -> AuthorizationCodeResult:
        return pending.pop()

    metadata = OAuthClientMetadata(
        client_name="test-agent",
        redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    return OAuthClientProvider(server_url, metadata, storage or MemoryStorage(), redirect_handler, callback_handler)
