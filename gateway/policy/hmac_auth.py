"""The [auth.hmac] verifier of the client-auth chain: requests signed with HMAC-SHA256.

The arithmetic and the replay cache live in hmac_signing.py (pure); this module reads what a
signature covers from an aiohttp request (method, request target, body) and answers the chain.
The body is read here, before any handler: aiohttp keeps it, so the handler reads the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.config import ConnectionLimitsConfig, GatewayConfig
from gateway.core.principal import Principal
from gateway.policy.hmac_signing import SignatureChecker, SigningKey
from gateway.policy.request_body import read_body
from gateway.policy.verifier import AuthFailure, Endpoint
from gateway.telemetry.metrics import Metrics


class HmacVerifier:
    kind = "hmac"

    def __init__(
        self,
        checker: SignatureChecker,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
        body_pace: ConnectionLimitsConfig | None = None,
    ) -> None:
        self.checker = checker
        self.metrics = metrics
        self.clock = clock
        self.body_pace = body_pace or ConnectionLimitsConfig()
        """How long a signed body may take to arrive (the signature covers it, so it is read here first)."""

    @classmethod
    def from_config(cls, config: GatewayConfig, metrics: Metrics) -> HmacVerifier | None:
        settings = config.auth.hmac
        if settings is None:
            return None
        keys = [
            SigningKey(
                key.key_id,
                key.secret.get_secret_value().encode("utf-8"),
                Principal(key.principal_name, "hmac", frozenset(key.scopes)),
            )
            for key in settings.keys
        ]
        checker = SignatureChecker(keys, settings.max_skew_s, settings.nonce_cache)
        return cls(checker, metrics, body_pace=config.limits.connections)

    async def verify(
        self, request: web.Request, bearer: str | None, endpoint: Endpoint
    ) -> Principal | AuthFailure | None:
        if not SignatureChecker.is_signed(request.headers):
            return None
        body = await read_body(request, self.body_pace, self.metrics)
        outcome = self.checker.check(request.method, request.raw_path, request.headers, body, self.clock())
        if isinstance(outcome, Principal):
            return outcome
        if outcome.reason == "nonce_cache_full":
            self.metrics.limit_hit("auth.hmac.nonce_cache")
        return AuthFailure(outcome.reason, outcome.description, status=outcome.status)

    def posture(self) -> dict[str, Any]:
        return {"hmac_keys": len(self.checker.keys)}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
