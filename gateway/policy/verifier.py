"""What a client-authentication verifier is and what it answers (the chain lives in client_auth.py).

Each kind of credential has its own verifier module (static_tokens.py, oauth.py, and request signing
in hmac_auth.py, over the pure hmac_signing.py). For one request a verifier answers one of three things:

- None: no credential of its kind is here; the next verifier looks.
- a Principal: the caller is known (scopes are checked afterwards by the chain).
- an AuthFailure: a credential of its kind is here and it is not good; the chain stops and refuses.

A verifier never puts a credential, or any part of one, into a failure description or a log line.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from gateway.config import BEARER_TOKEN
from gateway.core.principal import Principal

MAX_BEARER_CHARS = 16_384
"""Longer Authorization values are refused before any parsing or hashing (bounded work per request)."""


@dataclass(frozen=True)
class Endpoint:
    """What one request calls, as authentication sees it."""

    slot: str | None
    """The decoded slot name (`_all` and `_broker` included); None for /metrics and paths naming none."""
    resource: str
    """The canonical URL of the endpoint: the audience an OAuth access token must name."""
    metadata_url: str | None
    """Its RFC 9728 protected-resource metadata (only when OAuth is configured)."""
    required_scopes: tuple[str, ...]


@dataclass(frozen=True)
class AuthFailure:
    """Why a request is refused. `description` is shown to the client: it says what to do, and it
    never contains a credential."""

    reason: str
    """Bounded label for /metrics: missing, malformed, invalid, expired, not_yet_valid, wrong_issuer,
    wrong_audience, insufficient_scope, not_tls, keys_unavailable, ..."""
    description: str
    status: int = 401
    error: str = "invalid_token"


class Verifier(Protocol):
    kind: str
    """The Principal kind this verifier establishes: "token", "oauth", "hmac"."""

    async def verify(
        self, request: web.Request, bearer: str | None, endpoint: Endpoint
    ) -> Principal | AuthFailure | None: ...

    def posture(self) -> dict[str, Any]:
        """Its part of broker_info's auth posture, e.g. {"static_tokens": 3}; never a secret."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def bearer_token(request: web.Request) -> str | AuthFailure | None:
    """The token of `Authorization: Bearer <token>`, None when there is no bearer credential.

    Only the Authorization header counts: a token in the query string or the body is never read
    (URLs end up in logs and browser histories). Another scheme is left to the verifier that speaks it.
    """
    values = request.headers.getall("Authorization", [])
    if not values:
        return None
    if len(values) > 1:
        # A malformed request, not a bad token (RFC 6750 section 3.1): which header counts is unknowable.
        return AuthFailure(
            "malformed",
            f"The request carries {len(values)} Authorization headers; send exactly one.",
            status=400,
            error="invalid_request",
        )
    value = values[0]
    if len(value) > MAX_BEARER_CHARS:
        return AuthFailure("malformed", f"The Authorization header is longer than {MAX_BEARER_CHARS} characters.")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token:
        return AuthFailure("malformed", "The Authorization header says Bearer but carries no token.")
    if not BEARER_TOKEN.fullmatch(token):
        return AuthFailure(
            "malformed", "The bearer token contains characters a token cannot have (RFC 6750: A-Z a-z 0-9 - . _ ~ + /)."
        )
    return token


def is_loopback_peer(remote: str | None) -> bool:
    """True when the TCP peer is this machine (127.0.0.0/8, ::1, or ::ffff:127.x.y.z)."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
