"""HMAC-SHA256 request signing: the signer the stdio bridge uses and the checks the gateway makes.

Pure (no HTTP library, the clock is passed in). The canonical string of a request is five lines
joined by "\\n", without a trailing newline:

    METHOD                      upper case, e.g. POST
    PATH                        the request target exactly as sent: /pump-1/mcp (percent-encoding kept,
                                ?query included when there is one)
    TIMESTAMP                   Unix time in whole seconds, decimal, as in X-MCPGW-Timestamp
    NONCE                       as in X-MCPGW-Nonce: 16 to 128 characters of A-Z a-z 0-9 - _
    BODY_SHA256                 lower-case hex SHA-256 of the body bytes (of b"" for GET and DELETE)

The signature is the lower-case hex HMAC-SHA256 of that string (UTF-8) under the key's secret (the
secret's UTF-8 bytes), sent in X-MCPGW-Signature with the key id in X-MCPGW-Key-Id. The gateway
accepts a timestamp at most max_skew_s (whole seconds) from its own clock and each (key id, nonce)
once: it remembers a nonce until its timestamp leaves the window, so a captured request cannot be
replayed. Across a restart, a timestamp before the gateway started is refused (the nonces an earlier
process saw may be gone), and the nonces of an orderly stop are saved and loaded again (nonce_store.py).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import math
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.principal import Principal

HEADER_KEY_ID = "X-MCPGW-Key-Id"
HEADER_TIMESTAMP = "X-MCPGW-Timestamp"
HEADER_NONCE = "X-MCPGW-Nonce"
HEADER_SIGNATURE = "X-MCPGW-Signature"
SIGNING_HEADERS = (HEADER_KEY_ID, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE)

_NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")

BAD_SIGNATURE = "The request signature does not match."
"""How a bad_signature refusal's description starts (the stdio bridge reads its secret file again on it)."""
SIGNED_BEFORE_START = "The request was signed before this gateway started."
"""How a signed_before_start refusal's description starts (the stdio bridge signs again and resends on it)."""


def canonical_string(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    return "\n".join((method.upper(), path, timestamp, nonce, hashlib.sha256(body).hexdigest())).encode("utf-8")


def signature(secret: bytes, canonical: bytes) -> str:
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


def new_nonce() -> str:
    return secrets.token_urlsafe(18)  # 24 characters, 144 random bits


def sign(
    key_id: str,
    secret: bytes,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The four headers that sign one request."""
    timestamp = str(int(time.time() if now is None else now))
    nonce = new_nonce() if nonce is None else nonce
    return {
        HEADER_KEY_ID: key_id,
        HEADER_TIMESTAMP: timestamp,
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: signature(secret, canonical_string(method, path, timestamp, nonce, body)),
    }


# -- verification ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    secret: bytes
    principal: Principal


@dataclass(frozen=True)
class Refusal:
    """Why a signed request is refused. `reason` is a bounded label; `description` says what to do and
    holds no secret, signature or nonce."""

    reason: str
    description: str
    status: int = 401
    error: str = "invalid_token"


NonceEntry = tuple[str, str, float]
"""(key id, nonce, expiry): one remembered nonce, as nonce_store.py saves it."""


class NonceCache:
    """(key id, nonce) pairs seen, each kept until its request's timestamp leaves the skew window.

    Bounded: when full of live nonces it refuses to take more rather than forget one early (an
    early-forgotten nonce would make its request replayable). `since` is when the cache began (0: no
    such rule): a request signed before it may have been taken by an earlier process whose nonces are
    gone, so it is refused. A configuration reload carries the cache, and with it `since`."""

    def __init__(self, max_entries: int, since: float = 0.0) -> None:
        self.max_entries = max_entries
        self.since = since
        self._expiry: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, tuple[str, str]]] = []

    def _prune(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            expires, key = heapq.heappop(self._heap)
            if self._expiry.get(key) == expires:
                del self._expiry[key]

    def seen(self, key: tuple[str, str], now: float) -> bool:
        self._prune(now)
        return key in self._expiry

    def full(self, now: float) -> bool:
        self._prune(now)
        return len(self._expiry) >= self.max_entries

    def add(self, key: tuple[str, str], expires: float) -> None:
        self._expiry[key] = expires
        heapq.heappush(self._heap, (expires, key))

    def __len__(self) -> int:
        return len(self._expiry)

    def live(self, now: float) -> list[NonceEntry]:
        """The nonces still inside the window, latest expiry first."""
        self._prune(now)
        entries = [(key_id, nonce, expires) for (key_id, nonce), expires in self._expiry.items()]
        return sorted(entries, key=lambda entry: entry[2], reverse=True)

    def restore(self, entries: list[NonceEntry], now: float) -> int:
        """Remember saved nonces again (expired ones dropped, at most the room left); how many were taken."""
        self._prune(now)
        taken = 0
        for key_id, nonce, expires in sorted(entries, key=lambda entry: entry[2], reverse=True):
            if len(self._expiry) >= self.max_entries:
                break
            if expires > now and self._expiry.get((key_id, nonce), -math.inf) < expires:
                self.add((key_id, nonce), expires)
                taken += 1
        return taken


class SignatureChecker:
    """Checks signed requests against the configured keys; the caller supplies the clock."""

    def __init__(self, keys: list[SigningKey], max_skew_s: float, nonce_cache: int, since: float = 0.0) -> None:
        self.keys = {key.key_id: key for key in keys}
        self.max_skew_s = max_skew_s
        self.nonces = NonceCache(nonce_cache, since)

    def restore(self, saved: list[NonceEntry], now: float) -> int:
        """Remember the nonces an earlier process saved, but only those it can still matter to hold: of
        requests signed at or after this start (the start-time rule refuses the earlier ones anyway,
        and their nonces would only fill the cache), none expiring later than a request signed now
        could (a clock that ran ahead at the stop). How many were taken."""
        first = math.floor(self.nonces.since) + self.max_skew_s + 1  # expiry = timestamp + max_skew_s + 1
        last = math.floor(now) + 2 * self.max_skew_s + 1
        return self.nonces.restore([entry for entry in saved if first <= entry[2] <= last], now)

    @staticmethod
    def is_signed(headers: Mapping[str, str]) -> bool:
        """True when the request carries any signing header (then it must carry all four, valid)."""
        return any(name in headers for name in SIGNING_HEADERS)

    def check(self, method: str, path: str, headers: Mapping[str, str], body: bytes, now: float) -> Principal | Refusal:
        missing = [name for name in SIGNING_HEADERS if not headers.get(name)]
        if missing:
            return Refusal(
                "malformed",
                f"A signed request carries all of {', '.join(SIGNING_HEADERS)}; missing: {', '.join(missing)}.",
            )
        key_id, timestamp = headers[HEADER_KEY_ID], headers[HEADER_TIMESTAMP]
        nonce, sent = headers[HEADER_NONCE], headers[HEADER_SIGNATURE]
        if not _KEY_ID.fullmatch(key_id) or not _TIMESTAMP.fullmatch(timestamp):
            return Refusal("malformed", f"{HEADER_KEY_ID} or {HEADER_TIMESTAMP} (whole Unix seconds) is malformed.")
        if not _NONCE.fullmatch(nonce):
            return Refusal("malformed", f"{HEADER_NONCE} must be 16 to 128 characters of A-Z a-z 0-9 - _.")
        if not _SIGNATURE.fullmatch(sent):
            return Refusal("malformed", f"{HEADER_SIGNATURE} must be 64 lower-case hex digits (HMAC-SHA256).")
        key = self.keys.get(key_id)
        if key is None:
            return Refusal("invalid", "The signing key id is not known to this gateway (see [auth.hmac] keys).")
        # Whole seconds on both sides (the timestamp has no fraction), so exactly max_skew_s either way is accepted.
        skew = int(timestamp) - math.floor(now)
        if abs(skew) > self.max_skew_s:
            direction = "ahead of" if skew > 0 else "behind"
            return Refusal(
                "clock_skew",
                f"The request's timestamp is {abs(skew)} s {direction} the gateway's clock; at most "
                f"{self.max_skew_s:g} s is accepted (auth.hmac.max_skew_s). Set the signing machine's clock (NTP).",
            )
        expected = signature(key.secret, canonical_string(method, path, timestamp, nonce, body))
        if not hmac.compare_digest(expected, sent):
            return Refusal(
                "bad_signature",
                f"{BAD_SIGNATURE} Sign METHOD, PATH, TIMESTAMP, NONCE and the body's "
                "SHA-256 (hex), joined by newlines, with the key's secret "
                "(docs/security-auth.md#the-signature).",
            )
        # Whole seconds again: a request signed in the second the gateway started is taken (a crash and a
        # new start within one second is the edge docs/security-auth.md names).
        if int(timestamp) < math.floor(self.nonces.since):
            return Refusal(
                "signed_before_start",
                f"{SIGNED_BEFORE_START} Sign it again and resend it (the stdio bridge does so by itself); "
                "a request from before a restart is refused so that it cannot be replayed.",
            )
        # Only a request signed with a known key reaches the cache, so strangers cannot fill it.
        seen_key = (key_id, nonce)
        if self.nonces.seen(seen_key, now):
            return Refusal("replayed", "replayed request: this nonce was already used; sign each request anew.")
        if self.nonces.full(now):
            return Refusal(
                "nonce_cache_full",
                "Too many signed requests within the replay window (auth.hmac.nonce_cache); retry shortly.",
                status=503,
                error="temporarily_unavailable",
            )
        # Kept one second past the window: the window is judged in whole seconds of the gateway's clock.
        self.nonces.add(seen_key, int(timestamp) + self.max_skew_s + 1)
        return key.principal
