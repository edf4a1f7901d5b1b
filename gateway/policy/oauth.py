"""OAuth 2.1 resource server: JWT access tokens checked against the authorization server's keys.

A token is accepted when its signature verifies with a key from the configured JWKS (fetched over
HTTP with aiohttp, or read from a file), with an accepted public-key algorithm, and its claims hold:
`iss` is the configured issuer, `exp` and `nbf` are in range (with leeway), `sub` names the caller,
and `aud` names the endpoint called (`<base>/<slot>/mcp`, RFC 8707; which spellings of it count is the
authentication step's rule, installed as `audience_matches`), so a token obtained for pump-1 does not
open pump-2. Scopes come from `scope` (space-separated) or `scp` (list).

The key set is fetched at start, again every `jwks_refresh_s`, and when a token names a key id the
set does not hold or its signature verifies with none of the keys held (key rotation, also without a
new key id: tokens without `kid`, or a `kid` reused for new key material). That last refetch happens
at most once per `jwks_refetch_min_s` and concurrent askers share one fetch, so tokens with made-up
key ids or signatures cannot make the gateway hammer the authorization server. Each fetch replaces
the set, an empty one (`"keys": []`) included; a failed refresh (unreachable, unparsable, or no entry
usable here) keeps the keys already held.

Everything here is policy; the core never imports a JOSE library.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import operator
import re
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import yarl
from aiohttp import web

from gateway.config import ConfigError, GatewayConfig, OAuthConfig
from gateway.config.base import masked_url_and_query
from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file
from gateway.config.hosts import is_wildcard
from gateway.core.principal import Principal
from gateway.http_body import BodyTooLarge, read_body
from gateway.policy.claims import ClaimsRefused, client_from_claims, groups_from_claims
from gateway.policy.verifier import AuthFailure, Endpoint
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.oauth")

MAX_JWKS_BYTES = 1_048_576
MAX_JWKS_KEYS = 100
FETCH_TIMEOUT_S = 10.0
RETRY_AFTER_FAILURE_S = 30.0
"""After a failed scheduled refresh, the next attempt comes this soon (or at jwks_refresh_s if sooner)."""
MAX_CANDIDATE_KEYS = 8
"""A token without a key id is tried against at most this many keys of its algorithm."""
MAX_SUBJECT_CHARS = 256
SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
"""An RFC 6749 scope token, as config/auth.py's Scope reads it: printable ASCII, no space, quote or backslash."""

NUMERIC_DATES = ("exp", "nbf", "iat")
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}


class JwksError(Exception):
    """A key set that cannot be used; the message says why."""


@dataclass(frozen=True)
class SigningKey:
    kid: str | None
    algorithms: frozenset[str]
    key: Any
    """The public key object PyJWT verifies with."""


def key_algorithms(jwk: dict[str, Any]) -> frozenset[str]:
    """The algorithms one JWK may verify: its `alg` if it names one, else what its key type allows.
    Members of the wrong type (checked by entry_problem first) count as absent."""
    alg = jwk.get("alg")
    if isinstance(alg, str):
        return frozenset({alg})
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "RSA":
        return RSA_ALGORITHMS
    if kty == "EC" and isinstance(crv, str) and crv in EC_ALGORITHMS:
        return frozenset({EC_ALGORITHMS[crv]})
    if kty == "OKP" and crv in ("Ed25519", "Ed448"):
        return frozenset({"EdDSA"})
    return frozenset()


STRING_MEMBERS = ("kty", "use", "alg", "kid", "crv", "x", "y", "n", "e")
"""JWK members that are strings (RFC 7517, 7518, 8037) wherever they appear."""


def entry_problem(entry: Any, allowed: frozenset[str]) -> str | None:
    """Why one JWKS entry cannot verify a token here (its members type-checked first); None if it may."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    for member in STRING_MEMBERS:
        if member in entry and not isinstance(entry[member], str):
            return f'"{member}" is not a string'
    ops = entry.get("key_ops")
    if ops is not None and not (isinstance(ops, list) and all(isinstance(op, str) for op in ops)):
        return '"key_ops" is not an array of strings'
    if "kty" not in entry:
        return 'no "kty"'
    if entry.get("use", "sig") != "sig":
        return f'"use" is {entry["use"][:20]!r}, not "sig"'
    if entry["kty"] == "oct":
        return "a symmetric key"
    if not key_algorithms(entry) & allowed:
        return f"no accepted algorithm (accepted: {', '.join(sorted(allowed))})"
    return None


def entry_label(index: int, entry: Any) -> str:
    """How a log line names one JWKS entry: its position, and its key id when that is a string."""
    kid = entry.get("kid") if isinstance(entry, dict) else None
    return f"#{index} (kid {kid[:64]!r})" if isinstance(kid, str) else f"#{index}"


def parse_jwks(document: Any, allowed: frozenset[str] | set[str], skipped: list[str] | None = None) -> list[SigningKey]:
    """The signing keys of a JWKS document usable with the allowed algorithms (JwksError if none).

    Keys for encryption (`use` other than "sig"), symmetric keys, keys of other algorithms and entries
    whose members have the wrong type (a "crv" that is an array, say) are skipped, each with its
    reason appended to `skipped`: they cannot verify an access token under this configuration. An empty
    "keys" array is a valid set of no keys (the authorization server withdrew them all) and yields [];
    entries of which none is usable are refused, as a set that does not fit this configuration."""
    import jwt  # PyJWT, and cryptography under it: about 9 MiB, loaded only where OAuth is configured

    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError('not a JWKS: expected a JSON object with a "keys" array')
    entries = document["keys"]
    if len(entries) > MAX_JWKS_KEYS:
        raise JwksError(f"{len(entries)} keys; at most {MAX_JWKS_KEYS} are accepted")
    reasons = skipped if skipped is not None else []
    accepted = frozenset(allowed)
    keys: list[SigningKey] = []
    for index, entry in enumerate(entries):
        problem = entry_problem(entry, accepted)
        if problem is None:
            algorithms = key_algorithms(entry) & accepted
            try:
                key = jwt.PyJWK(entry, algorithm=sorted(algorithms)[0]).key
            except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
                problem = f"not a valid key ({type(exc).__name__})"
            else:
                keys.append(SigningKey(entry.get("kid"), algorithms, key))
                continue
        reasons.append(f"entry {entry_label(index, entry)}: {problem}")
    if entries and not keys:
        raise JwksError(
            f"no usable signing key ({len(reasons)} skipped: {'; '.join(reasons[:3])}): none is a public "
            f"signing key for {', '.join(sorted(allowed))}"
        )
    return keys


def scopes_from_claims(claims: dict[str, Any]) -> frozenset[str]:
    """`scope` (RFC 8693/9068: one space-separated string) or `scp` (a list, as some servers write it).

    Tokens are separated by the space (0x20) alone, and only RFC 6749 section 3.3 scope tokens count
    (printable ASCII without space, double quote or backslash, as [auth] requires of every scope it
    names): "x\tpump-1" is one malformed token that grants nothing, not "x" and "pump-1"."""
    scopes: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            scopes.update(token for token in value.split(" ") if SCOPE_TOKEN.fullmatch(token))
        elif isinstance(value, list):
            scopes.update(item for item in value if isinstance(item, str) and SCOPE_TOKEN.fullmatch(item))
    return frozenset(scopes)


def subject_from_claims(claims: dict[str, Any]) -> str | AuthFailure:
    """The caller `sub` names, or why it names no one: it must be a string with a visible character
    (not only whitespace, invisible format characters such as U+200B and U+FEFF, combining marks, or
    the Hangul fillers and blank Braille pattern that draw as a space) and without a
    control character (C0, DEL, C1), a line or paragraph separator, or a bidirectional override
    (U+202A-U+202E, U+2066-U+2069), since a caller shows as its subject in refusals, the audit trail and
    approvals, where " " would pass for no one, a line break for another line and an override for
    another name. A subject longer than MAX_SUBJECT_CHARS is refused too."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not any(map(_visible, subject)):
        return AuthFailure("invalid_subject", "The access token's subject (sub) is empty or blank.")
    if any(_unprintable_in_a_name(char) for char in subject):
        return AuthFailure(
            "invalid_subject",
            "The access token's subject (sub) holds a control character, a line break or a bidirectional override.",
        )
    if len(subject) > MAX_SUBJECT_CHARS:
        # Refused, not cut: two subjects sharing their first characters would become one caller (one
        # session owner, one audit name, one rate bucket).
        return AuthFailure(
            "invalid_subject", f"The access token's subject (sub) is longer than {MAX_SUBJECT_CHARS} characters."
        )
    return subject


_OVERRIDES = frozenset({"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"})
_UNSEEN = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Me"})
"""Categories that draw nothing of their own: spaces, separators, controls, format and combining marks."""
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Hangul fillers and the blank Braille pattern: letters and symbols by category that draw as a space."""


def _visible(char: str) -> bool:
    return unicodedata.category(char) not in _UNSEEN and char not in _BLANK_LETTERS


def _unprintable_in_a_name(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or unicodedata.bidirectional(char) in _OVERRIDES


EXPIRED = AuthFailure(
    "expired",
    "The access token has expired; get a new one from the authorization server. If a freshly issued "
    "token is refused so, the clocks of the authorization server and this gateway disagree: check both.",
)


def unverified_expiry(token: str) -> float | None:
    """The `exp` of an access token read without checking its signature; None when it has none readable.
    Only for a token the gateway accepted earlier (an open connection's), whose exp it verified then."""
    import jwt

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
        return None
    return float(exp)


def failure_for(exc: Exception, settings: OAuthConfig, audience: str) -> AuthFailure:
    """What a client is told about a token PyJWT refused (never the token itself)."""
    import jwt

    if isinstance(exc, jwt.ExpiredSignatureError):
        return EXPIRED
    if isinstance(exc, jwt.ImmatureSignatureError):
        return AuthFailure(
            "not_yet_valid",
            "The access token is not valid yet (nbf or iat lies in the future); check the clocks of the "
            "authorization server and this gateway.",
        )
    if isinstance(exc, jwt.InvalidIssuerError):
        return AuthFailure(
            "wrong_issuer", f"The access token was issued by another issuer; this gateway accepts {settings.issuer}."
        )
    if isinstance(exc, jwt.InvalidAudienceError):
        return AuthFailure(
            "wrong_audience",
            f"The access token is not meant for this endpoint: its audience (aud) must be {audience}. "
            f"Request it with resource={audience} (RFC 8707).",
        )
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return AuthFailure("invalid", f"The access token lacks the {exc.claim!r} claim.")
    if isinstance(exc, jwt.exceptions.InvalidSubjectError):
        return SUBJECT_NOT_A_STRING
    if isinstance(exc, jwt.InvalidIssuedAtError):
        return not_a_number("iat")
    if isinstance(exc, jwt.exceptions.InvalidJTIError):
        return AuthFailure("invalid", "The access token's jti claim is not a string.")
    return AuthFailure("invalid", "The access token is not valid.")


SUBJECT_NOT_A_STRING = AuthFailure("invalid_subject", "The access token's subject (sub) is not a string.")
KID_NOT_A_STRING = AuthFailure("malformed", "The access token's key id (kid) is not a string.")
UNDECODABLE_HEADER = AuthFailure("malformed", "The bearer token looks like a JWT but its header cannot be decoded.")


def not_a_number(name: str) -> AuthFailure:
    return AuthFailure("invalid", f"The access token's {name} claim is not a number (NumericDate).")


def unverified_part(token: str, index: int) -> dict[str, Any]:
    """One JSON part of a JWT (0: the header, 1: the claims) read without any check; {} when unreadable.
    Only to name what is wrong with a token PyJWT refused."""
    segment = token.split(".")[index]
    try:
        value = orjson.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except ValueError:  # binascii.Error and orjson.JSONDecodeError are ValueErrors
        return {}
    return value if isinstance(value, dict) else {}


def header_failure(header: dict[str, Any]) -> AuthFailure:
    """Why PyJWT refused a header that decodes (it checks `kid` and `crit`, RFC 7515 section 4.1)."""
    if "kid" in header and not isinstance(header["kid"], str):
        return KID_NOT_A_STRING
    crit = header.get("crit")
    if "crit" in header:
        if not isinstance(crit, list) or not crit or not all(isinstance(name, str) for name in crit):
            return AuthFailure("malformed", "The access token's crit header is not a non-empty array of names.")
        # The names are not echoed: they are the sender's text.
        return AuthFailure(
            "invalid",
            f"The access token's crit header marks {len(crit)} extension(s) critical that this gateway does not "
            "support (or the header lacks), so it refuses the token (RFC 7515 section 4.1.11).",
        )
    return UNDECODABLE_HEADER


def malformed_claim(claims: dict[str, Any]) -> AuthFailure | None:
    """A claim of the wrong JSON type, named; None when each present has its type. PyJWT lets
    "exp": "9999999999" pass as a number and reports a `sub` of 123 or null vaguely."""
    for name in NUMERIC_DATES:
        value = claims.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return not_a_number(name)
    if "sub" in claims and not isinstance(claims["sub"], str):
        return SUBJECT_NOT_A_STRING
    if "jti" in claims and not isinstance(claims["jti"], str):
        return AuthFailure("invalid", "The access token's jti claim is not a string.")
    return None


def protected_resource_metadata(
    resource: str, settings: OAuthConfig, scopes: tuple[str, ...], resource_name: str
) -> dict[str, Any]:
    """RFC 9728 protected-resource metadata of one endpoint."""
    metadata: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": list(settings.authorization_servers or [settings.issuer]),
    }
    if scopes:
        # Absent rather than []: a client asks for the scopes listed here, and an empty list would make
        # it ask for none (RFC 9728 makes the field optional).
        metadata["scopes_supported"] = list(scopes)
    metadata["bearer_methods_supported"] = ["header"]
    metadata["resource_name"] = resource_name
    return metadata


def audiences_of(claims: dict[str, Any]) -> list[str]:
    """The `aud` claim as a list (RFC 7519: one string or an array of strings); [] when it is neither.

    Every entry counts, once each: the Authorization header's bound (verifier.MAX_BEARER_CHARS) bounds
    the array, and only a token whose signature verified gets here."""
    audience = claims.get("aud")
    if isinstance(audience, str):
        return [audience]
    if isinstance(audience, list) and all(isinstance(item, str) for item in audience):
        return list(dict.fromkeys(audience))
    return []


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class JwksCache:
    """The authorization server's signing keys, kept fresh without ever blocking the event loop."""

    def __init__(self, settings: OAuthConfig, metrics: Metrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.allowed = frozenset(settings.algorithms)
        self.keys: list[SigningKey] = []
        self.loaded = False
        self.last_failed = False
        """Whether the last fetch failed: the scheduled one after it comes within RETRY_AFTER_FAILURE_S."""
        self.fetched_at = -math.inf
        self.failed_at = -math.inf
        """When (by `clock`) the last fetch succeeded and the last one failed: the schedule counts from them,
        and a reload that carries the keys over carries these too, so it never postpones a refresh."""
        self.skipped: list[str] = []
        """The entries the last fetch skipped, and why (logged when they change)."""
        self.last_error: str | None = None
        """Why the last fetch failed (no credential of the URL in it); None after a fetch that succeeded."""
        self.fetches = 0
        self.last_on_demand = -math.inf
        self._inflight: asyncio.Future[bool] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._refresher: asyncio.Task[None] | None = None

    @property
    def source(self) -> str:
        """The key source as log lines name it: never a credential in the URL."""
        if self.settings.jwks_url is not None:
            return masked_url_and_query(self.settings.jwks_url)
        return f"file {self.settings.jwks_file}"

    def same_source(self, other: JwksCache) -> bool:
        """Whether `other` holds keys from the same place, judged under the same algorithms."""
        mine, theirs = self.settings, other.settings
        return (mine.jwks_url, mine.jwks_file, self.allowed) == (theirs.jwks_url, theirs.jwks_file, other.allowed)

    def adopt(self, previous: JwksCache) -> None:
        """Start from the keys `previous` holds (a reload that left the key source alone), so requests are
        judged on them while the authorization server is unreachable, rather than answered 503."""
        if self.loaded or not previous.loaded or not self.same_source(previous):
            return
        self.keys, self.loaded, self.last_failed = previous.keys, True, previous.last_failed
        self.last_error = previous.last_error
        self.skipped, self.last_on_demand = previous.skipped, previous.last_on_demand
        self.fetched_at, self.failed_at = previous.fetched_at, previous.failed_at

    def load_file_now(self) -> None:
        """At startup with jwks_file: read and parse it at once, so a bad file stops the gateway."""
        assert self.settings.jwks_file is not None
        try:
            document = orjson.loads(self._read_file())
            self.keys = parse_jwks(document, self.allowed)
            if not self.keys:
                raise JwksError('no keys ("keys" is empty)')
        except (OSError, orjson.JSONDecodeError, JwksError) as exc:
            raise ConfigError(f"auth.oauth.jwks_file {self.settings.jwks_file}: {exc}") from exc
        self.loaded = True
        self.fetched_at = self.clock()

    def _read_file(self) -> bytes:
        """The key set file, read as the configuration checks it: a regular file (or a device such as
        /dev/null), within its bound, never a wait on a FIFO; JwksError naming what is wrong."""
        assert self.settings.jwks_file is not None
        try:
            return read_regular_file(self.settings.jwks_file, "jwks_file", MAX_SECRET_FILE_BYTES, devices=True)
        except FileRefused as exc:
            raise JwksError(exc.reason) from None

    async def _document(self) -> Any:
        if self.settings.jwks_file is not None:
            return orjson.loads(await asyncio.to_thread(self._read_file))
        assert self.settings.jwks_url is not None
        if self._http is None:
            self._http = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
        # No redirects: the keys come from the configured URL or not at all.
        async with self._http.get(self.settings.jwks_url, allow_redirects=False, timeout=timeout) as response:
            if response.status != 200:
                raise JwksError(f"HTTP {response.status}")
            try:
                body = await read_body(response, MAX_JWKS_BYTES)
            except BodyTooLarge as exc:
                raise JwksError(str(exc)) from None
        return orjson.loads(body)

    def _why(self, exc: Exception) -> str:
        """What a failed fetch logs: the error without the URL's credentials (aiohttp quotes the URL)."""
        if isinstance(exc, JwksError):
            text = str(exc)
        elif isinstance(exc, TimeoutError):  # aiohttp's total timeout says nothing of its own
            detail = f" ({type(exc).__name__}: {exc})" if str(exc) else ""
            text = f"no complete answer within {FETCH_TIMEOUT_S:g} s{detail}"
        else:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} (no further detail)"
        url = self.settings.jwks_url
        if url is not None:
            for spelling in {url, str(yarl.URL(url, encoded=True)), str(yarl.URL(url))}:
                text = text.replace(spelling, self.source)
        return text[:500]

    async def _fetch(self) -> bool:
        self.fetches += 1
        skipped: list[str] = []
        try:
            keys = parse_jwks(await self._document(), self.allowed, skipped)
        except Exception as exc:  # any document that cannot be read or used is a failed refresh
            self.last_failed, self.failed_at = True, self.clock()
            self.last_error = self._why(exc)
            self.metrics.jwks_fetches.labels("error").inc()
            log.warning(
                "cannot load the authorization server's keys from %s (keeping %d): %s",
                self.source,
                len(self.keys),
                self.last_error,
            )
            return False
        self.metrics.jwks_fetches.labels("ok").inc()
        if skipped != self.skipped:
            for reason in skipped:
                log.info("authorization server key set at %s: skipped %s", self.source, reason)
        if not keys and self.keys:
            log.warning("the authorization server's key set at %s is empty: every access token is refused", self.source)
        elif {key.kid for key in keys} != {key.kid for key in self.keys}:
            log.info("authorization server keys loaded from %s: %d keys", self.source, len(keys))
        self.keys, self.skipped = keys, skipped
        self.loaded = True
        self.last_failed, self.fetched_at, self.last_error = False, self.clock(), None
        return True

    async def refresh(self) -> bool:
        """Fetch the key set now; concurrent callers share one fetch."""
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._fetch())
            self._inflight.add_done_callback(self._clear_inflight)
        return await self._share(self._inflight)

    @staticmethod
    async def _share(fetch: asyncio.Future[bool]) -> bool:
        """The outcome of a shared fetch; False when the cache closed during it (a reload replaced the
        verifier), so the request waiting on it is answered (503 or 401) rather than dropped."""
        try:
            return await asyncio.shield(fetch)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if fetch.cancelled() and task is not None and not task.cancelling():
                return False
            raise

    def _clear_inflight(self, _: asyncio.Future[bool]) -> None:
        self._inflight = None

    async def refresh_on_demand(self) -> bool:
        """A refetch asked for by a request (unknown key id, nothing loaded yet): rate-limited."""
        if self._inflight is not None:
            return await self._share(self._inflight)
        now = self.clock()
        if now - self.last_on_demand < self.settings.jwks_refetch_min_s:
            return False
        self.last_on_demand = now
        return await self.refresh()

    def find(self, kid: str | None, alg: str) -> list[SigningKey]:
        return [key for key in self.keys if alg in key.algorithms and (kid is None or key.kid == kid)]

    async def candidates(self, kid: str | None, alg: str) -> list[SigningKey] | None:
        """Keys that may have signed a token with this header; None when no key set is available at all."""
        if not self.loaded:
            await self.refresh_on_demand()
            if not self.loaded:
                return None
        found = self.find(kid, alg)
        # Perhaps the authorization server rotated its keys since the last fetch: a key id it does not
        # hold, one held for other algorithms (a key id reused for a new key), or no key of the algorithm.
        if not found and await self.refresh_on_demand():
            found = self.find(kid, alg)
        return found[:MAX_CANDIDATE_KEYS]

    def status(self) -> dict[str, Any]:
        """For broker_info and broker_diagnose: where the keys come from, how many are held, and how the
        last fetch went (never a credential of the URL)."""
        now = self.clock()
        return {
            "source": self.source,
            "loaded": self.loaded,
            "keys": len(self.keys),
            "last_fetch_failed": self.last_failed,
            "last_error": self.last_error,
            "fetched_ago_s": round(now - self.fetched_at, 1) if self.loaded else None,
            "next_fetch_in_s": round(self.next_refresh_in(), 1),
        }

    def next_refresh_in(self) -> float:
        """The wait before the next scheduled fetch, counted from the last fetch (0 before any): sooner
        after a failed one. Keys carried over by a reload keep their schedule (adopt)."""
        if self.last_failed or not self.loaded:
            due = self.failed_at + min(self.settings.jwks_refresh_s, RETRY_AFTER_FAILURE_S)
        else:
            due = self.fetched_at + self.settings.jwks_refresh_s
        return max(0.0, min(due - self.clock(), self.settings.jwks_refresh_s))

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.next_refresh_in())
            await self._scheduled_refresh()

    async def _scheduled_refresh(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # the schedule outlives any one fetch: withdrawn keys must still leave
            self.last_failed, self.failed_at = True, self.clock()
            self.last_error = f"the refresh failed ({type(exc).__name__}); the gateway's log has the traceback"
            log.exception("refreshing the authorization server's keys from %s failed", self.source)

    def start(self) -> None:
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def close(self) -> None:
        """Stop refreshing; never raises (a reload settles after it whatever became of the schedule)."""
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.wait([self._refresher])
            if not self._refresher.cancelled() and self._refresher.exception() is not None:
                log.error("the key refresh of %s had stopped", self.source, exc_info=self._refresher.exception())
        if self._inflight is not None:
            self._inflight.cancel()  # its waiters get False (_share)
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.close()


class OAuthVerifier:
    kind = "oauth"

    def __init__(self, settings: OAuthConfig, metrics: Metrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.keys = JwksCache(settings, metrics, clock)
        self.audience_matches: Callable[[str, str], bool] = operator.eq
        """Whether one `aud` value names the endpoint whose canonical resource is the second argument.
        Exact equality unless the authentication step installs the gateway's rule (client_auth.py: any
        spelling of the same endpoint on a name of this gateway, a slot's /mcp and /sse alike)."""

    @classmethod
    def from_config(cls, config: GatewayConfig, metrics: Metrics) -> OAuthVerifier | None:
        settings = config.auth.oauth
        if settings is None:
            return None
        if is_wildcard(config.host) and not config.public_url:
            # The audience of a token is this gateway's canonical URL; a wildcard bind has none.
            raise ConfigError(
                f"auth.oauth: bound to {config.host!r}, so the gateway cannot know the URL clients use, which "
                "access tokens must name as their audience; set public_url (e.g. https://gateway.plant.lan:3000)"
            )
        verifier = cls(settings, metrics)
        if settings.jwks_file is not None:
            verifier.keys.load_file_now()
        return verifier

    async def verify(
        self, request: web.Request, bearer: str | None, endpoint: Endpoint
    ) -> Principal | AuthFailure | None:
        if bearer is None or not looks_like_jwt(bearer):
            return None
        return await self.validate(bearer, endpoint.resource)

    async def validate(self, token: str, audience: str) -> Principal | AuthFailure:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            return UNDECODABLE_HEADER
        except jwt.PyJWTError:
            return header_failure(unverified_part(token, 0))
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.keys.allowed:
            return AuthFailure(
                "invalid",
                "The access token's signature algorithm is not accepted here "
                f"(accepted: {', '.join(self.settings.algorithms)}).",
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            return KID_NOT_A_STRING
        fetched_at = self.keys.fetched_at
        candidates = await self.keys.candidates(kid, alg)
        if candidates is None:
            return AuthFailure(
                "keys_unavailable",
                "The gateway cannot load the authorization server's keys right now, so it cannot check tokens; "
                "try again shortly (operators: see the gateway log and mcpgw_jwks_fetches).",
                status=503,
                error="temporarily_unavailable",
            )
        outcome = self.decode(token, candidates, kid, alg, audience)
        if outcome is not None:
            return outcome
        # No key held verifies the signature. The authorization server may have rotated its keys without
        # a new key id (tokens without kid, a kid reused for new key material): fetch them once more.
        if self.keys.fetched_at == fetched_at:
            if not await self.keys.refresh_on_demand():
                return self.unverified_with_keys_held()
            outcome = self.decode(token, self.keys.find(kid, alg)[:MAX_CANDIDATE_KEYS], kid, alg, audience)
            if outcome is not None:
                return outcome
        return AuthFailure(
            "invalid",
            "The access token's signature does not verify with the authorization server's keys (fetched again "
            "just now).",
        )

    def unverified_with_keys_held(self) -> AuthFailure:
        """A signature no key held verifies, when the keys could not be fetched again for it."""
        if self.keys.last_failed:
            why = "fetching them again failed just now (operators: see the gateway log and mcpgw_jwks_fetches)"
        else:
            why = (
                f"they are fetched again for such a token at most every {self.settings.jwks_refetch_min_s:g} s "
                "(jwks_refetch_min_s): if the authorization server has just rotated its keys, retry after that"
            )
        return AuthFailure(
            "invalid",
            "The access token's signature does not verify with the authorization server's keys the gateway "
            f"holds; {why}.",
        )

    def no_key(self, kid: str | None, alg: str) -> AuthFailure:
        """The refusal of a token no key held may have signed (after the refetch candidates may make)."""
        published = [key for key in self.keys.keys if kid is not None and key.kid == kid]
        if published:
            return AuthFailure(
                "invalid",
                f"The access token is signed with {alg}, which is not accepted for the key it names: the "
                f"authorization server publishes that key for {', '.join(sorted(published[0].algorithms))}.",
            )
        return AuthFailure(
            "unknown_key", "The access token is signed with a key the authorization server does not publish."
        )

    def decode(
        self, token: str, candidates: list[SigningKey], kid: str | None, alg: str, audience: str
    ) -> Principal | AuthFailure | None:
        """The caller `token` names when one of `candidates` verifies it, or why it is refused; None when
        every candidate refuses its signature (and only that)."""
        import jwt

        if not candidates:
            return self.no_key(kid, alg)
        failure: AuthFailure | None = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    issuer=self.settings.issuer,
                    leeway=self.settings.leeway_s,
                    # The audience is checked below, by audience_matches rather than by string equality.
                    options={"require": ["exp", "iss", "aud", "sub"], "verify_aud": False},
                )
            except jwt.InvalidSignatureError:
                continue  # without a kid, another key of the set may have signed it
            except (jwt.InvalidAlgorithmError, jwt.InvalidKeyError) as exc:
                return failure_for(exc, self.settings, audience)
            except jwt.PyJWTError as exc:
                # PyJWT checks the claims only once the signature verified, and names a claim of the
                # wrong type vaguely or not at all (a `sub` of null "lacks" it): named here.
                return malformed_claim(unverified_part(token, 1)) or failure_for(exc, self.settings, audience)
            except (TypeError, ValueError):
                failure = AuthFailure("invalid", "The access token is not valid.")
                continue
            problem = malformed_claim(claims)
            if problem is not None:
                return problem
            if not any(self.audience_matches(item, audience) for item in audiences_of(claims)):
                return failure_for(jwt.InvalidAudienceError("Audience doesn't match"), self.settings, audience)
            subject = subject_from_claims(claims)
            if isinstance(subject, AuthFailure):
                return subject
            try:
                groups, client = groups_from_claims(claims), client_from_claims(claims)
            except ClaimsRefused as exc:
                # Refused, not cut: a [[deny]] naming a group past the cut would not apply.
                return AuthFailure("invalid_subject", str(exc))
            return Principal(
                subject,
                self.kind,
                scopes_from_claims(claims),
                groups=groups,
                client=client,
                issuer=self.settings.issuer,
            )
        return failure

    def posture(self) -> dict[str, Any]:
        return {"oauth": self.settings.issuer, "oauth_keys": self.keys.status()}

    async def start(self) -> None:
        self.keys.start()

    async def close(self) -> None:
        await self.keys.close()
