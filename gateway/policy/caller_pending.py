"""limits.max_pending_per_client in the stateless era (2026-07-28): requests in flight per caller.

The session era bounds each client session (session_era.too_many_pending). A stateless-era client
has no session, so its requests in flight are counted per caller instead: the authenticated
principal, or, for an anonymous caller (no [auth] configured), the principal "anonymous" together
with the peer address, so two programs on the machine do not share one bound while one program
cannot open more by opening more connections. The refusal is the session era's: JSON-RPC -32000
`Too many requests in flight for caller "token:bob"` (describe), data.reason "pending_limit", on HTTP 200.
"""

from __future__ import annotations

from typing import Any

from gateway.core import errors
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.policy.rules.subjects import caller_name, subjects_of

CallerKey = tuple[str, str, str | None]
"""(principal kind, principal name, peer address for an anonymous caller, else None)."""


def caller_key(principal: Principal, peer: str | None) -> CallerKey:
    """Whose requests in flight count together: the principal (an OAuth subject with its issuer, as
    Principal.key); an anonymous one per peer address."""
    kind = principal.kind  # principal.key spelled out: one call less on every stateless request
    return (kind, principal.name, peer if kind == "anonymous" else principal.issuer)


def describe(caller: CallerKey) -> str:
    """How a refusal names `caller`: by the subject it authenticated as (`caller "token:bob"`), since a
    static token, an OAuth subject and a signing key of one name are three callers with three quotas;
    the anonymous caller with its peer address (`caller "anonymous" at 127.0.0.1`)."""
    kind, name, peer = caller
    subject = caller_name(subjects_of(Principal(name, kind)))
    return f'caller "{subject}" at {peer}' if kind == "anonymous" else f'caller "{subject}"'


class CallerPending:
    """A counter per caller with requests in flight; callers with none hold no entry."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.limit = gateway.config.limits.max_pending_per_client
        self.in_flight: dict[CallerKey, int] = {}

    def enter(self, caller: CallerKey, request_id: Any) -> JsonObject | None:
        """Count one more request of `caller`; the error answer instead when it has `limit` in flight
        (then nothing is counted and `leave` must not be called)."""
        count = self.in_flight.get(caller, 0)
        if count >= self.limit:
            self.gateway.metrics.limit_hit("max_pending_per_client")
            return errors.too_many_pending(describe(caller), self.limit).response(request_id)
        self.in_flight[caller] = count + 1
        return None

    def leave(self, caller: CallerKey) -> None:
        count = self.in_flight[caller] - 1
        if count:
            self.in_flight[caller] = count
        else:
            del self.in_flight[caller]
