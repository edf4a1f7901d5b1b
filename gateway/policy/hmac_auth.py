"""The [auth.hmac] verifier of the client-auth chain: requests signed with HMAC-SHA256.

The arithmetic and the replay cache live in hmac_signing.py (pure); this module reads what a
signature covers from an aiohttp request (method, request target, body) and answers the chain.
The body is read here, before any handler: aiohttp keeps it, so the handler reads the same bytes.
The replay cache outlives the process: saved at an orderly stop, loaded at start (nonce_store.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.config import ConnectionLimitsConfig, GatewayConfig
from gateway.core.principal import Principal
from gateway.policy import nonce_store
from gateway.policy.hmac_signing import SignatureChecker, SigningKey
from gateway.policy.request_body import read_body
from gateway.policy.verifier import AuthFailure, Endpoint
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.auth")


class HmacVerifier:
    kind = "hmac"

    def __init__(
        self,
        checker: SignatureChecker,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
        body_pace: ConnectionLimitsConfig | None = None,
        nonce_file: Path | None = None,
    ) -> None:
        self.checker = checker
        self.metrics = metrics
        self.clock = clock
        self.body_pace = body_pace or ConnectionLimitsConfig()
        """How long a signed body may take to arrive (the signature covers it, so it is read here first)."""
        self.nonce_file = nonce_file
        """Where the nonces are saved at close and loaded at start (None: kept in memory only)."""

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
        # Requests signed before now are refused: an earlier process may have taken them, and after a
        # crash its nonces are lost (a configuration reload carries the cache, and this moment with it).
        checker = SignatureChecker(keys, settings.max_skew_s, settings.nonce_cache, since=time.time())
        return cls(checker, metrics, body_pace=config.limits.connections, nonce_file=nonce_store.default_nonce_file())

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
        return AuthFailure(outcome.reason, outcome.description, status=outcome.status, error=outcome.error)

    def posture(self) -> dict[str, Any]:
        return {"hmac_keys": len(self.checker.keys)}

    async def start(self) -> None:
        if self.nonce_file is None:
            return
        saved = nonce_store.load_nonces(self.nonce_file, self.clock())
        taken = self.checker.restore(saved, self.clock())
        if taken:
            log.info("loaded %d HMAC nonces still inside the replay window from %s", taken, self.nonce_file)

    async def close(self) -> None:
        if self.nonce_file is None:
            return
        nonces = self.checker.nonces
        try:
            nonce_store.save_nonces(self.nonce_file, nonces.live(self.clock()), nonces.max_entries)
        except OSError as exc:
            log.warning(
                "could not save the HMAC nonces to %s (%s): until max_skew_s has passed, requests signed by a "
                "clock ahead of this gateway's could be replayed after the next start",
                self.nonce_file,
                exc,
            )
