"""Judging again the credential of a connection a client keeps open: a raw WebSocket, an SSE stream.

The entry gate judges a request once, when it arrives. A raw WebSocket, the Streamable HTTP GET
stream, the legacy SSE stream and a 2026-07-28 `subscriptions/listen` stream outlive that judgement,
so while one is open the entry gate's own check runs again on the request that opened it, with the
verifiers and required scopes in force now (ClientAuth.recheck; a refusal is counted there, in
mcpgw_auth_failures_total{reason}). It runs at most once per RECHECK_EVERY_S per connection: before a
request or a frame on a WebSocket (and when it has been idle for limits.sse_keepalive_s), before a
write (a message or a keepalive) on a stream; and at the first of these after a configuration reload
whatever the time (`stale`), so the scopes a reload changed are taken (`adopt`) before anything more is
written. A listen stream is also judged when `_all` or a tool group compares its view after a reload
(listen_stream.py). Callers whose
connection is not judged again: anonymous ones (no [auth]: nobody to judge) and HMAC-signed ones (a
signature vouches for one request and its nonce cannot be presented twice). A judgement the gateway
cannot make (503: the authorization server's keys cannot be loaded) leaves the connection open, but not
past the access token's `exp` plus leeway_s (read from the token the connection opened with, verified
then), nor once the gateway has been unable to judge it for jwks_refresh_s in a row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from gateway.core import jsonrpc
from gateway.core.principal import Principal
from gateway.policy.client_auth import CLIENT_AUTH_KEY, ClientAuth
from gateway.policy.oauth import EXPIRED, unverified_expiry
from gateway.policy.request_principal import request_principal
from gateway.policy.verifier import AuthFailure, bearer_token

log = logging.getLogger("gateway.northbound.credential_watch")

RECHECK_EVERY_S = 1.0
"""How stale the judgement of an open connection's credential may be before it is judged again:
token files are looked at once a second anyway, and a signature check per message (an access token)
would cost more than the relay itself."""
UNAVAILABLE = 503
"""A refusal with this status (keys_unavailable) means the gateway cannot judge, not that the credential fell."""
UNRECHECKED_KINDS = frozenset({"anonymous", "hmac"})
"""Callers whose connection is not judged again: nobody to judge (no [auth]), or a one-request signature."""


def credential_gone(request_id: object, failure: AuthFailure) -> jsonrpc.JsonObject:
    """The answer to a request on a connection whose credential no longer stands (never the credential)."""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.FORBIDDEN,
        f"The credential this connection opened with no longer stands ({failure.reason}): {failure.description} "
        "Open a new connection with a valid credential.",
        {"reason": "credential_invalid", "auth": failure.reason, "error": failure.error},
    )


def credential_gone_close_reason(failure: AuthFailure) -> str:
    """The close reason of a raw WebSocket ended for its credential (never the credential)."""
    return f"Credential no longer valid ({failure.reason}): reconnect with a valid credential"


def credential_gone_comment(failure: AuthFailure) -> bytes:
    """The last line of a stream ended for its credential: an SSE comment, which every client skips
    (a notification the protocol does not define could confuse one), read by a person with curl."""
    return f": credential no longer valid ({failure.reason}): reconnect with a valid credential\n\n".encode()


class CredentialWatch:
    """Judges an open connection's credential again, through the entry gate's check (see the module docstring)."""

    def __init__(
        self,
        auth: ClientAuth | None,
        request: web.Request,
        transport: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.auth = None if request_principal(request).kind in UNRECHECKED_KINDS else auth
        self.request = request
        self.transport = transport
        self.clock = clock
        self.checked_at = clock()
        self.judged_under: object = auth.config if auth is not None else None
        """The configuration in force at the last judgement: a reload (another one) makes the next one due."""
        self.unjudged_since: float | None = None
        """When (by `clock`) the judgements the gateway could not make (503) began; None after one it made."""
        self.wall_clock: Callable[[], float] = time.time
        self.failed: AuthFailure | None = None
        # A WebSocket's reader and writer may both ask at once: one judgement, counted and logged once.
        self.judging = asyncio.Lock()
        self.adopt: Callable[[Principal], None] | None = None
        """Told the caller as judged again, when it still stands: a raw WebSocket's session and a listen
        stream take its scopes as granted now (a reload may have changed them; _all and the tool groups
        filter by them)."""

    @classmethod
    def of(cls, request: web.Request, transport: str) -> CredentialWatch:
        """The watch of a connection `request` opened, by the app's client authentication (none: not judged)."""
        return cls(request.app.get(CLIENT_AUTH_KEY), request, transport)

    def due(self) -> bool:
        """Whether `failure` would judge now: one time comparison, cheap enough for every write."""
        return self.stale() or (self.auth is not None and self.clock() - self.checked_at >= RECHECK_EVERY_S)

    def stale(self) -> bool:
        """Whether the configuration changed (a reload) since the credential was last judged."""
        return self.auth is not None and self.auth.config is not self.judged_under

    async def failure(self) -> AuthFailure | None:
        """Why the credential no longer stands; None while it does (or was judged less than a second ago).
        Once it has failed it stays failed, counted and logged once."""
        if self.failed is not None or not self.due():
            return self.failed
        async with self.judging:
            if self.failed is not None or not self.due():
                return self.failed  # judged while this caller waited
            assert self.auth is not None  # due() says so
            now, config = self.clock(), self.auth.config
            outcome = await self.auth.recheck(self.request)
            self.judged_under = config
            if not isinstance(outcome, AuthFailure):
                self.checked_at, self.unjudged_since = now, None
                if outcome is not None and self.adopt is not None:
                    self.adopt(outcome)
                return None
            if outcome.status == UNAVAILABLE:
                # The gateway cannot judge right now (no authorization server keys): that says nothing
                # against the credential, which stood when last judged; judged again a second later, up
                # to its bounds (unjudgeable).
                outcome = self.unjudgeable(outcome, now)
                if outcome is None:
                    self.checked_at = now
                    return None
            failure = self.failed = outcome
        principal = request_principal(self.request)
        log.info(
            "open %s ended: its caller's credential no longer stands (%s)",
            self.transport,
            failure.reason,
            extra={
                "reason": failure.reason,
                "transport": self.transport,
                "caller": f"{principal.kind}:{principal.name}",
                "path": self.request.rel_url.raw_path[:200],
                "peer": self.request.remote,
            },
        )
        return failure

    def unjudgeable(self, outcome: AuthFailure, now: float) -> AuthFailure | None:
        """Why a connection the gateway cannot judge (`outcome`, a 503) ends now: its access token's exp
        plus leeway_s has passed (EXPIRED), or it has gone unjudged for jwks_refresh_s (`outcome`); None
        while neither holds."""
        assert self.auth is not None
        if self.unjudged_since is None:
            self.unjudged_since = now
        oauth = self.auth.config.auth.oauth
        leeway_s, bound_s = (oauth.leeway_s, oauth.jwks_refresh_s) if oauth is not None else (0.0, 0.0)
        token = bearer_token(self.request)
        expiry = unverified_expiry(token) if isinstance(token, str) else None
        if expiry is not None and self.wall_clock() > expiry + leeway_s:
            return EXPIRED
        if now - self.unjudged_since >= bound_s:
            return outcome
        return None
