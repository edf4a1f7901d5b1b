"""A stand-in authorization server for tests: real keys, real JWKS over HTTP, tokens signed with PyJWT.

Only the parts of an authorization server a resource server ever touches exist here: the signing
keys, published as a JWKS document at /jwks by a real aiohttp server on loopback (it counts fetches,
and the test may rotate keys), and access tokens signed with those keys.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ISSUER = "https://auth.plant.test/realms/plant"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    algorithm: str
    private: Any

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.algorithm)
        jwk: dict[str, Any] = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}


@functools.cache
def rsa_key(kid: str = "rsa-1") -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


@functools.cache
def ec_key(kid: str = "ec-1") -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.jwk() for key in keys]}


def access_token(
    key: SigningKey,
    audience: str | list[str],
    *,
    subject: str = "operator@plant",
    scope: str | None = None,
    issuer: str = ISSUER,
    expires_in: float = 300,
    not_before: float | None = None,
    kid: str | None = "same",
    **claims: Any,
) -> str:
    now = time.time()
    payload: dict[str, Any] = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "iat": int(now),
        "exp": int(now + expires_in),
    }
    if scope is not None:
        payload["scope"] = scope
    if not_before is not None:
        payload["nbf"] = int(not_before)
    payload.update(claims)
    headers = {} if kid is None else {"kid": key.kid if kid == "same" else kid}
    return jwt.encode(payload, key.private, algorithm=key.algorithm, headers=headers or None)


@dataclass
class JwksServer:
    """The authorization server's JWKS endpoint: `document` is what it serves now; `fetches` counts GETs."""

    document: dict[str, Any]
    url: str = ""
    fetches: int = 0
    status: int = 200
    seen_authorization: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.fetches += 1
        if "Authorization" in request.headers:
            self.seen_authorization.append(request.headers["Authorization"])
        return web.Response(body=orjson.dumps(self.document), status=self.status, content_type="application/json")


@asynccontextmanager
async def jwks_server(document: dict[str, Any]) -> AsyncIterator[JwksServer]:
    server = JwksServer(document)
    app = web.Application()
    app.router.add_get("/jwks", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}/jwks"
    try:
        yield server
    finally:
        await runner.cleanup()
