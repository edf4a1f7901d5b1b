"""The gateway's own credentials for a remote upstream: a static header, or an OAuth client-credentials token.

A client's token never goes upstream: the link builds every request's headers from scratch, and the
only credential on them comes from here. An OAuth token is fetched before first use, kept until
shortly before it expires (refreshed early), and fetched again once when the upstream answers 401.
With no token_url configured, the token endpoint is discovered from the upstream's metadata
(RFC 9728, then RFC 8414 or OpenID discovery); every URL learned that way passes the SSRF guard, a
metadata document that names another resource or issuer than the one it was fetched for is not used
(no secret goes anywhere it names), and the token is asked for the resource the metadata names (RFC 8707).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NoReturn, Protocol
from urllib.parse import quote_plus, urlsplit

import aiohttp
import orjson

from gateway.config import RemoteOAuthConfig, RemoteUpstreamConfig
from gateway.core.jsonrpc import JsonObject
from gateway.core.secret_keys import is_secret_argument, key_words
from gateway.http_body import BodyTooLarge, read_body, read_prefix
from gateway.policy.ssrf import UpstreamPlace, learned_url_refusal, origin_of
from gateway.southbound.remote.wire import public_url, snippet, www_authenticate_params

log = logging.getLogger("gateway.remote")

MAX_METADATA_BYTES = 65_536
REFRESH_MARGIN_MAX_S = 60.0
REFRESH_MARGIN_SHARE = 0.2
"""A token is refreshed when less than min(60 s, 20% of its lifetime) is left."""
MAX_SHOWN_VALUE = 120
"""Longest piece of a foreign metadata value quoted in an error (the value is the server's, any length)."""
DEFAULT_PORTS = {"http": 80, "https": 443}
REDACTED = "***"
MIN_MASKED_CHARS = 8
"""A secret (or a part of one) shorter than this is not masked in quoted text: "2" would hit every 2 of
an error page. A credential that short is weak anyway."""
AUTH_SCHEMES = frozenset(
    {"basic", "bearer", "digest", "token", "dpop", "gnap", "hoba", "mutual", "negotiate", "ntlm", "oauth"}
    | {"apikey", "api-key", "privatetoken", "concealed", "scram-sha-1", "scram-sha-256", "vapid", "aws4-hmac-sha256"}
)
"""First words of an Authorization-style value that name its scheme (the IANA HTTP authentication scheme
registry and common API-key forms): only such a value's parameter is a secret on its own."""
CREDENTIAL_HEADER_PARTS = ("session", "signature", "authentication")
"""Parts of a header name's words that make it a credential header beyond the command-argument rule."""
MAX_TOKENS_REMEMBERED = 4
"""Access tokens (the current one and those before it) whose echo in an upstream's text is redacted."""


class UpstreamError(Exception):
    """The remote upstream cannot be used now; `state` names why for status and diagnose."""

    state = "unreachable"


class UpstreamUnreachable(UpstreamError):
    state = "unreachable"


class UpstreamAuthFailed(UpstreamError):
    state = "auth_failed"


class UpstreamDropped(UpstreamError):
    """The connection broke during one exchange (the server may still be up): that request fails, the link stays."""


def credential_header(name: str) -> bool:
    """Whether a header named `name` carries a credential, whose value is masked where upstream text is
    quoted: the command-argument rule of gateway/core/secret_keys.py (Authorization, Proxy-Authorization,
    Cookie, X-Api-Key, X-Auth-Token, ...) or a word holding one of CREDENTIAL_HEADER_PARTS (X-Session-Id,
    X-Hub-Signature). Routing values (X-Api-Version, X-Site, X-Tenant) are not credentials."""
    return is_secret_argument(name) or any(part in word for word in key_words(name) for part in CREDENTIAL_HEADER_PARTS)


def secret_forms(value: str) -> set[str]:
    """`value` as an upstream may quote it: as sent, JSON-escaped, form-encoded; for a credential that
    names a known scheme ("Bearer x", "Basic x") its parameter alone too, and a Basic one decoded with its
    password alone. A form shorter than MIN_MASKED_CHARS is left out: masking it would garble any text
    that happens to contain it."""
    forms = {value}
    scheme, _, parameter = value.partition(" ")
    if parameter.strip() and scheme.lower() in AUTH_SCHEMES:
        forms.add(parameter.strip())
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(parameter.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            forms.update(part for part in (decoded, decoded.partition(":")[2]) if part)
    forms = {form for form in forms if len(form) >= MIN_MASKED_CHARS}
    for form in list(forms):
        forms.add(orjson.dumps(form).decode()[1:-1])
        forms.add(quote_plus(form))
    return forms


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` from an upstream (an error page, a challenge, a string of a JSON-RPC error) with every form of
    every secret replaced by ***, longest first so that a whole header value goes before its parts: whatever
    quotes upstream text to callers, status, diagnosis or the log passes it through here first."""
    forms: set[str] = set()
    for secret in secrets:
        forms |= secret_forms(secret)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


def redact_bytes(body: bytes, secrets: Iterable[str]) -> bytes:
    """`redact` for a body not yet decoded: bytes that are not UTF-8 stay as they are."""
    return redact(body.decode("utf-8", errors="surrogateescape"), secrets).encode("utf-8", errors="surrogateescape")


class Credentials(Protocol):
    kind: str

    async def headers(self) -> dict[str, str]:
        """The credential headers for the next request (fetching a token first when needed)."""
        ...

    async def rejected(self, challenge: str | None) -> bool:
        """The upstream answered 401: True when a fresh credential is ready and one retry makes sense."""
        ...

    def secrets(self) -> list[str]:
        """Every secret value this credential holds or sends, for `redact`."""
        ...

    def status(self) -> JsonObject: ...


class StaticCredentials:
    """Headers from the configuration (secret + header_name, or headers_file), or none at all."""

    def __init__(self, config: RemoteUpstreamConfig) -> None:
        self._headers = config.static_headers
        self.kind = "static header" if self._headers else "none"
        # `secret` is a credential whatever header carries it; of headers_file only credential headers.
        self._secret_names = {name for name in self._headers if config.secret is not None or credential_header(name)}

    async def headers(self) -> dict[str, str]:
        return {name: value.get_secret_value() for name, value in self._headers.items()}

    async def rejected(self, challenge: str | None) -> bool:
        return False  # the same header would be refused again

    def secrets(self) -> list[str]:
        return [value.get_secret_value() for name, value in self._headers.items() if name in self._secret_names]

    def status(self) -> JsonObject:
        return {"kind": self.kind, "headers": sorted(self._headers)}


def _basic(client_id: str, secret: str) -> str:
    # RFC 6749 §2.3.1: both parts are form-urlencoded before they are joined and base64-encoded.
    raw = f"{quote_plus(client_id)}:{quote_plus(secret)}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_VALUE else text[: MAX_SHOWN_VALUE - 3] + "..."


def _resource_key(url: str) -> tuple[str, str, int | None, str, str] | None:
    """A resource identifier as RFC 3986 §6.2.2-6.2.3 normalization compares it: scheme and host in lower
    case, the default port dropped, a trailing slash ignored (MCP treats `…/mcp` and `…/mcp/` alike); the
    user info is no part of the identity. None: not an absolute http(s) URL without a fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.fragment:
        return None
    if port == DEFAULT_PORTS[scheme]:
        port = None
    return (scheme, parts.hostname.lower(), port, parts.path.rstrip("/"), parts.query)


def same_resource(published: object, expected: str) -> bool:
    """RFC 9728 §3.3: protected-resource metadata counts only when its `resource` is the resource it was
    fetched for; anything else (another host, another path, a missing value) is not used."""
    if not isinstance(published, str):
        return False
    key = _resource_key(published)
    return key is not None and key == _resource_key(expected)


def same_issuer(published: object, expected: str) -> bool:
    """RFC 8414 §3.3: a simple string comparison, except that a root issuer with and without its trailing
    slash names the same server (the MCP SDK's client accepts both forms as well)."""
    if not isinstance(published, str):
        return False
    if published == expected:
        return True
    shorter, longer = sorted((published, expected), key=len)
    parts = urlsplit(shorter)
    return longer == f"{shorter}/" and shorter == f"{parts.scheme}://{parts.netloc}"


async def _read_json(response: aiohttp.ClientResponse, what: str, secrets: Iterable[str]) -> Any:
    try:
        body = await read_body(response, MAX_METADATA_BYTES)
    except BodyTooLarge:
        raise UpstreamAuthFailed(f"{what} is larger than {MAX_METADATA_BYTES} bytes") from None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise UpstreamAuthFailed(f"{what} is not JSON: {snippet(redact_bytes(body, secrets))}") from None


class ClientCredentials:
    """OAuth 2.0 client credentials grant (RFC 6749 §4.4) with an early-refreshed cached token."""

    kind = "oauth client credentials"

    def __init__(
        self,
        config: RemoteOAuthConfig,
        upstream_url: str,
        http: aiohttp.ClientSession,
        guarded_http: Callable[[], Awaitable[aiohttp.ClientSession]],
        place: Callable[[], UpstreamPlace],
        timeout_s: float,
    ) -> None:
        self.config = config
        self.upstream_url = upstream_url
        self.http = http
        self.guarded_http = guarded_http
        self.place = place
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.token_url = config.token_url
        self.token_url_learned = False
        self.learned_resource: str | None = None
        """The `resource` of the verified protected-resource metadata: sent when none is configured."""
        self.token: str | None = None
        self.tokens_held: list[str] = []
        self.expires_at: float | None = None
        self.refresh_at: float | None = None
        self.fetches = 0
        self.last_error = ""
        self._lock = asyncio.Lock()

    def _fresh(self) -> bool:
        return self.token is not None and (self.refresh_at is None or time.monotonic() < self.refresh_at)

    async def headers(self) -> dict[str, str]:
        if not self._fresh() and self.token_url is not None:
            async with self._lock:
                if not self._fresh():
                    await self._fetch()
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def rejected(self, challenge: str | None) -> bool:
        stale = self.token
        async with self._lock:
            if self.token is not None and self.token != stale:
                return True  # another request already fetched a new token
            self.token = None
            if self.token_url is None:
                await self._discover(challenge)
            await self._fetch()
        return True

    async def _fetch(self) -> None:
        assert self.token_url is not None
        config = self.config
        secret = config.client_secret.secret.get_secret_value()
        form = {"grant_type": "client_credentials"}
        for key in ("scope", "audience", "resource"):
            value = getattr(config, key)
            if value:
                form[key] = value
        # RFC 8707 as MCP authorization asks: a discovered authorization server learns which server the
        # token is for. A configured token_url gets only what is configured (some servers refuse `resource`).
        resource = self._resource()
        if resource and "resource" not in form:
            form["resource"] = resource
        headers = {"Accept": "application/json"}
        if config.auth_method == "client_secret_basic":
            headers["Authorization"] = _basic(config.client_id, secret)
        else:
            form.update(client_id=config.client_id, client_secret=secret)
        where = public_url(self.token_url)
        session = await self.guarded_http() if self.token_url_learned else self.http
        self.fetches += 1
        try:
            async with session.post(
                self.token_url, data=form, headers=headers, allow_redirects=False, timeout=self.timeout
            ) as response:
                if response.status != 200:
                    body = redact_bytes(await read_prefix(response, MAX_METADATA_BYTES), self.secrets())
                    self._fail(
                        f"token endpoint {where} refused the client credentials: HTTP {response.status} {snippet(body)}"
                    )
                answer = await _read_json(response, f"the answer of token endpoint {where}", self.secrets())
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._fail(f"token endpoint {where} unreachable: {exc or type(exc).__name__}")
        if (
            not isinstance(answer, dict)
            or not isinstance(answer.get("access_token"), str)
            or not answer["access_token"]
        ):
            self._fail(f"token endpoint {where} answered without an access_token")
        token_type = answer.get("token_type", "Bearer")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            self._fail(f"token endpoint {where} issued a {token_type!r} token; only Bearer tokens can be sent")
        now = time.monotonic()
        lifetime = answer.get("expires_in")
        self.token = answer["access_token"]
        self.tokens_held = [*self.tokens_held, self.token][-MAX_TOKENS_REMEMBERED:]
        if isinstance(lifetime, int | float) and not isinstance(lifetime, bool) and lifetime > 0:
            margin = min(REFRESH_MARGIN_MAX_S, lifetime * REFRESH_MARGIN_SHARE)
            self.expires_at = now + lifetime
            self.refresh_at = now + lifetime - margin
        else:
            self.expires_at = self.refresh_at = None  # kept until the upstream refuses it
        self.last_error = ""

    def secrets(self) -> list[str]:
        config = self.config
        secret = config.client_secret.secret.get_secret_value()
        return [secret, _basic(config.client_id, secret), *self.tokens_held]

    def _resource(self) -> str | None:
        """The `resource` the token is asked for: the configured one, else the one the verified metadata names."""
        return self.config.resource or (self.learned_resource if self.token_url_learned else None)

    def _fail(self, message: str) -> NoReturn:
        self.last_error = message
        self.token = None
        raise UpstreamAuthFailed(message)

    async def _get_metadata(self, url: str, what: str) -> Any:
        """Fetch a metadata document: same-origin ones as configured, others through the SSRF guard."""
        upstream = origin_of(self.upstream_url)
        if origin_of(url) == upstream:
            session = self.http
        else:
            refusal = learned_url_refusal(url, self.place())
            if refusal is not None:
                self._fail(f"{what} not fetched (SSRF guard): {refusal}")
            session = await self.guarded_http()
        try:
            async with session.get(
                url, headers={"Accept": "application/json"}, allow_redirects=False, timeout=self.timeout
            ) as response:
                if response.status != 200:
                    return None
                return await _read_json(response, what, self.secrets())
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._fail(f"{what} at {public_url(url)} could not be fetched: {exc or type(exc).__name__}")

    async def _discover(self, challenge: str | None) -> None:
        """Find the token endpoint: protected-resource metadata, then the authorization server's.

        A document is used only when it describes what it was fetched for (RFC 9728 §3.3, RFC 8414 §3.3);
        otherwise whoever served it could name a token endpoint of their own and receive the client secret.
        """
        params = www_authenticate_params(challenge) if challenge else {}
        parts = urlsplit(self.upstream_url)
        base = f"{parts.scheme}://{parts.netloc}"
        path = parts.path.rstrip("/")
        # (metadata URL, the resource its `resource` must name): the URL the 401 answered, or the resource
        # identifier the well-known suffix was inserted into.
        candidates = (
            [(params["resource_metadata"], self.upstream_url)]
            if params.get("resource_metadata")
            else [
                (f"{base}/.well-known/oauth-protected-resource{path}", self.upstream_url),
                (f"{base}/.well-known/oauth-protected-resource", base),
            ]
        )
        issuer: str | None = None
        refusals: list[str] = []
        for url, expected in candidates:
            document = await self._get_metadata(url, "protected-resource metadata")
            if not isinstance(document, dict):
                continue
            resource = document.get("resource")
            if not same_resource(resource, expected):
                refusals.append(
                    f"protected-resource metadata at {public_url(url)} names "
                    f"{f'resource {_shown(resource)}' if resource else 'no resource'}, not {public_url(expected)}: "
                    "not used (RFC 9728 §3.3) and no client secret sent"
                )
                continue
            servers = document.get("authorization_servers")
            if isinstance(servers, list) and servers and isinstance(servers[0], str):
                issuer = servers[0]
                self.learned_resource = resource
                break
        if issuer is None:
            if refusals:
                self._fail(
                    f"{refusals[0]}; have the server publish its own URL as `resource`, or set token_url "
                    "(and resource) under oauth_client_credentials"
                )
            self._fail(
                "the upstream names no authorization server (no RFC 9728 metadata); set token_url under "
                "oauth_client_credentials"
            )
        assert issuer is not None
        issuer_parts = urlsplit(issuer)
        issuer_base = f"{issuer_parts.scheme}://{issuer_parts.netloc}"
        issuer_path = issuer_parts.path.rstrip("/")
        issuer_refusals: list[str] = []
        for url in (
            f"{issuer_base}/.well-known/oauth-authorization-server{issuer_path}",
            f"{issuer_base}{issuer_path}/.well-known/openid-configuration",
        ):
            document = await self._get_metadata(url, "authorization-server metadata")
            if not isinstance(document, dict):
                continue
            if not same_issuer(document.get("issuer"), issuer):
                issuer_refusals.append(
                    f"authorization-server metadata at {public_url(url)} names issuer "
                    f"{_shown(document.get('issuer'))}, not {_shown(issuer)} it was fetched for: not used "
                    "(RFC 8414 §3.3) and no client secret sent"
                )
                continue
            endpoint = document.get("token_endpoint")
            if isinstance(endpoint, str) and endpoint:
                refusal = learned_url_refusal(endpoint, self.place())
                if refusal is not None:
                    self._fail(f"token endpoint {endpoint!r} not used (SSRF guard): {refusal}")
                self.token_url = endpoint
                self.token_url_learned = True
                log.info("discovered token endpoint %s for %s", public_url(endpoint), public_url(self.upstream_url))
                return
        if issuer_refusals:
            self._fail(f"{issuer_refusals[0]}; fix the authorization server's metadata, or set token_url")
        self._fail(f"authorization server {_shown(issuer)} publishes no token_endpoint; set token_url")

    def status(self) -> JsonObject:
        now = time.monotonic()
        return {
            "kind": self.kind,
            "token_url": public_url(self.token_url) if self.token_url else None,
            "token_url_discovered": self.token_url_learned,
            "resource": public_url(resource) if (resource := self._resource()) else None,
            "token": "held" if self.token else "none",
            "token_expires_in_s": round(self.expires_at - now, 1) if self.token and self.expires_at else None,
            "token_fetches": self.fetches,
            "last_error": self.last_error or None,
        }
