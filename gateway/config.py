"""The gateway's one configuration model: TOML file, then MCP_GATEWAY_* environment, then CLI flags.

Loading fails closed: an unknown key, a missing named file or an invalid value stops the gateway
with one message that names the key (and where it came from) or the file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.core.names import SlotNameError, check_slot_name

ENV_PREFIX = "MCP_GATEWAY_"
ENV_CONFIG_FILE = "MCP_GATEWAY_CONFIG"
ENV_CLIENT_TOKEN = "MCP_GATEWAY_TOKEN"
"""The bearer token `mcp-gateway stdio` sends: a client-side variable, not a gateway setting, so a shell
that sets it for the bridge can still run the gateway."""
DEFAULT_PORT = 3000  # mcp-broker's port, so boards flashed for it connect unchanged

TakeoverPolicy = Literal["liveness", "reject", "always"]
IdStyle = Literal["brk", "numeric"]

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key or the file."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class RateBucketConfig(Section):
    """One token bucket: `rate_per_s` requests per second on average, `burst` at once after a quiet spell."""

    rate_per_s: Annotated[float, Field(ge=0)]
    """Refill rate in requests per second; 0 turns this limit off."""
    burst: PositiveInt
    """Requests let through at once by a full bucket."""


class PrincipalRateConfig(RateBucketConfig):
    # An agent in a loop or a script gone wrong is stopped at 50/s; people, agents thinking between
    # calls and dashboards polling a few dozen devices stay far below it.
    rate_per_s: Annotated[float, Field(ge=0)] = 50.0
    burst: PositiveInt = 100


class SlotRateConfig(RateBucketConfig):
    # Several callers share a device, so its bucket is larger than one caller's; 100/s is still
    # well under what floods a board's radio link or a serial line.
    rate_per_s: Annotated[float, Field(ge=0)] = 100.0
    burst: PositiveInt = 200


class RateLimitsConfig(Section):
    """[limits.rate]: token buckets for client requests (notifications and streams are not counted)."""

    per_principal: PrincipalRateConfig = Field(default_factory=PrincipalRateConfig)
    """Requests of one authenticated caller (all unauthenticated loopback callers are one: "anonymous")."""
    per_slot: SlotRateConfig = Field(default_factory=SlotRateConfig)
    """Requests addressed to one slot, from every caller: at /<slot>/mcp, and tools/call routed by _all."""
    max_buckets: PositiveInt = 4096
    """Buckets kept per kind; idle (refilled) buckets are dropped first."""


class LimitsConfig(Section):
    """Every bound the gateway enforces; all are explicit so an operator can see and change them."""

    max_frame_bytes: PositiveInt = 1_048_576
    """Largest WebSocket message a provider or client may send; larger ones close the link with 1009."""
    max_body_bytes: PositiveInt = 4_194_304
    """Largest HTTP request body; larger ones get HTTP 413."""
    max_pending_per_slot: PositiveInt = 256
    """Requests in flight towards one provider."""
    max_pending_per_client: PositiveInt = 64
    """Requests in flight from one client session."""
    max_sessions: PositiveInt = 1024
    """Session-era client sessions held at once; the oldest idle one is not evicted, new ones are refused."""
    session_idle_timeout_s: PositiveFloat = 1800.0
    """A client session with no request and no open stream for this long is expired (404 afterwards)."""
    max_slots: PositiveInt = 1024
    """Slots the gateway tracks at once."""
    notification_queue: PositiveInt = 256
    """Notifications buffered per client stream; a stream that falls further behind is closed."""
    sse_keepalive_s: PositiveFloat = 15.0
    """Interval of SSE comment lines that keep idle streams open through proxies."""
    max_subscriptions: PositiveInt = 256
    """Open stateless-era subscriptions/listen streams across all clients."""
    max_sessions_per_principal: PositiveInt = 64
    """Session-era sessions one principal may hold at once, so one caller cannot use up max_sessions."""
    rate: RateLimitsConfig = Field(default_factory=RateLimitsConfig)


MIN_PROVIDER_SECRET_CHARS = 16
"""A provider secret shorter than this is refused: it could be guessed from the plant network."""


def read_secret(env: str | None, file: str | None, what: str) -> SecretStr:
    """The secret named by exactly one of `env` (a variable name) or `file` (a path), stripped.

    Read once at load time so a missing variable or file stops the gateway before it listens."""
    if (env is None) == (file is None):
        raise ValueError(f"{what}: give exactly one of env (a variable name) or file (a path)")
    if env is not None:
        text = os.environ.get(env, "")
        if not text.strip():
            raise ValueError(f"{what}: environment variable {env} is not set or empty")
    else:
        assert file is not None
        try:
            text = Path(file).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"{what}: file {file} not found") from None
        except (PermissionError, IsADirectoryError) as exc:
            raise ValueError(f"{what}: file {file} is not readable ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{what}: file {file} is not UTF-8 text") from None
    secret = text.strip()
    if len(secret) < MIN_PROVIDER_SECRET_CHARS:
        where = f"environment variable {env}" if env is not None else f"file {file}"
        raise ValueError(
            f"{what}: the secret in {where} is shorter than {MIN_PROVIDER_SECRET_CHARS} characters; "
            "use a random one (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return SecretStr(secret)


class ProviderSecretConfig(Section):
    """The shared provider secret, from an environment variable or a file (exactly one)."""

    env: str | None = None
    file: str | None = None
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> ProviderSecretConfig:
        self._secret = read_secret(self.env, self.file, "shared_secret")
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret


class ProviderIdentityConfig(Section):
    """One provider identity: its name, its secret (sha256 of it, or env, or file), the slots it may publish."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")]
    sha256: SecretStr | None = None
    """Hex SHA-256 of the secret, so the configuration does not hold the secret itself."""
    env: str | None = None
    file: str | None = None
    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """Slot names or fnmatch patterns (case-sensitive), e.g. ["pump-*", "tank-1"]."""
    _secret: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _load(self) -> ProviderIdentityConfig:
        what = f"identity {self.name!r}"
        if self.sha256 is not None:
            if self.env is not None or self.file is not None:
                raise ValueError(f"{what}: give exactly one of sha256, env or file")
            digest = self.sha256.get_secret_value().strip().lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"{what}: sha256 must be 64 hex digits (sha256sum of the secret)")
            self.sha256 = SecretStr(digest)
        else:
            self._secret = read_secret(self.env, self.file, what)
        return self

    def secret_sha256(self) -> str:
        """Hex SHA-256 of this identity's secret (as configured, or computed from env or file)."""
        if self.sha256 is not None:
            return self.sha256.get_secret_value()
        assert self._secret is not None
        return hashlib.sha256(self._secret.get_secret_value().encode("utf-8")).hexdigest()


ProviderAuthMode = Literal["none", "shared", "identities"]


class ProviderAuthConfig(Section):
    """[providers.auth]: how providers prove who they are on /provider/<slot> and /providers."""

    mode: ProviderAuthMode = "none"
    """none: any peer that reaches the port may publish; shared: one secret for every provider;
    identities: a secret per provider identity, each limited to the slot names it lists."""
    shared_secret: ProviderSecretConfig | None = None
    identities: list[ProviderIdentityConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> ProviderAuthConfig:
        if self.mode == "shared" and self.shared_secret is None:
            raise ValueError('mode "shared" needs shared_secret = {env = "..."} or {file = "..."}')
        if self.mode == "identities" and not self.identities:
            raise ValueError('mode "identities" needs at least one [[providers.auth.identities]] entry')
        if self.mode != "shared" and self.shared_secret is not None:
            raise ValueError(f'shared_secret is set but mode is "{self.mode}"; set mode = "shared" or remove it')
        if self.mode != "identities" and self.identities:
            raise ValueError(f'identities are listed but mode is "{self.mode}"; set mode = "identities" or remove them')
        names = [identity.name for identity in self.identities]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"identity names must be unique; repeated: {', '.join(duplicates)}")
        # Two identities with one secret would make the identity depend on list order: refuse it.
        owners: dict[str, str] = {}
        for identity in self.identities:
            digest = identity.secret_sha256()
            other = owners.setdefault(digest, identity.name)
            if other != identity.name:
                raise ValueError(f"identities {other!r} and {identity.name!r} have the same secret; give each its own")
        return self


class TlsConfig(Section):
    """[tls]: serve HTTPS and WSS on the listener. Both files or neither; reloaded on SIGHUP."""

    cert_file: str | None = None
    """PEM certificate (optionally followed by its chain), e.g. from `mcp-gateway tls self-signed`."""
    key_file: str | None = None
    """PEM private key of that certificate (unencrypted; keep it mode 0600)."""
    client_ca_file: str | None = None
    """Optional: PEM CA certificates; when set, every client and board must present a certificate
    signed by one of them (mutual TLS)."""

    @model_validator(mode="after")
    def _files(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file, or neither")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client_ca_file needs cert_file and key_file")
        for key in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, key)
            if path is None:
                continue
            try:
                with open(path, "rb") as handle:
                    handle.read(1)
            except FileNotFoundError:
                raise ValueError(f"{key} {path}: not found") from None
            except OSError as exc:
                raise ValueError(f"{key} {path}: not readable ({exc.strerror})") from None
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class ProvidersConfig(Section):
    heartbeat_interval_s: PositiveFloat = 30.0
    """How often every provider is pinged; one that has not answered since the previous sweep is dropped."""
    takeover: TakeoverPolicy = "liveness"
    """Who may claim a held slot: liveness (only if the holder missed a heartbeat), reject, always."""
    takeover_probe_ms: PositiveInt = 1000
    """Under 'liveness', how long the holder gets to answer an immediate ping before a newcomer wins."""
    request_timeout_ms: PositiveInt = 60_000
    """Default deadline for a request forwarded to a provider."""
    initialize_timeout_ms: PositiveInt = 10_000
    """Deadline for a provider to answer the gateway's initialize and tools/list."""
    id_style: IdStyle = "brk"
    """Request ids sent to providers: 'brk' (brk-<n>, mcp-broker compatible) or 'numeric'."""
    max_tools_pages: PositiveInt = 64
    """A provider paging tools/list for more pages than this is cut off (a cursor loop cannot hang it)."""
    auth: ProviderAuthConfig = Field(default_factory=ProviderAuthConfig)
    """Who may connect as a provider, and which slot names each may publish ([providers.auth])."""


class SlotConfig(Section):
    """Settings for one named slot."""

    request_timeout_ms: PositiveInt | None = None
    tool_timeouts_ms: dict[str, PositiveInt] = Field(default_factory=dict)
    takeover: TakeoverPolicy | None = None
    id_style: IdStyle | None = None


class SlotsConfig(Section):
    only_declared: bool = False
    """When true, only slots listed under [slots.declared] exist; every other name is refused."""
    declared: dict[str, SlotConfig] = Field(default_factory=dict)

    @field_validator("declared")
    @classmethod
    def _names_are_valid(cls, value: dict[str, SlotConfig]) -> dict[str, SlotConfig]:
        for name in value:
            try:
                check_slot_name(name)
            except SlotNameError as exc:
                raise ValueError(f"slot {name!r}: {exc}") from exc
        return value


# ---------------------------------------------------------------------------------------------
# [auth]: client authentication (applied by gateway/policy/client_auth.py)

PrincipalName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:+-]*$")]
"""A caller's name as logs and broker_info show it: letters, digits and . _ @ : + - (at most 64)."""
Scope = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\x21\x23-\x5b\x5d-\x7e]+$")]
"""An OAuth scope token (RFC 6749 §3.3): printable ASCII without space, double quote or backslash."""

BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750 §2.1 b64token: the only characters a bearer token can carry."""

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""JWT signature algorithms [auth.oauth] accepts: public-key ones only (the gateway holds no signing secret)."""


def check_sha256_hex(value: str, what: str) -> str:
    digest = value.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{what}: sha256 must be 64 hex digits (the SHA-256 of the token, e.g. from sha256sum)")
    return digest


class ClientTokenConfig(Section):
    """One static client token ([[auth.tokens]]): the caller it stands for, its scopes, its value or hash."""

    name: PrincipalName
    scopes: list[Scope] = Field(default_factory=list)
    sha256: SecretStr | None = None
    """Hex SHA-256 of the token, so the configuration does not hold the token itself."""
    env: str | None = None
    """Name of an environment variable that holds the token itself."""
    file: str | None = None
    """A file that holds the token itself."""
    _digest: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _load(self) -> ClientTokenConfig:
        what = f"auth.tokens {self.name!r}"
        if self.sha256 is not None:
            if self.env is not None or self.file is not None:
                raise ValueError(f"{what}: give exactly one of sha256, env or file")
            self._digest = check_sha256_hex(self.sha256.get_secret_value(), what)
            self.sha256 = SecretStr(self._digest)
        else:
            # Read now, so a missing variable or file stops the gateway before it listens.
            secret = read_secret(self.env, self.file, what).get_secret_value()
            if not BEARER_TOKEN.fullmatch(secret):
                # Such a token could never be sent: the gateway refuses it as malformed on every request.
                raise ValueError(
                    f"{what}: the token may contain only A-Z a-z 0-9 - . _ ~ + / (and = at the end), the characters "
                    "a bearer token can carry (RFC 6750); make one with `mcp-gateway token create`"
                )
            self._digest = hashlib.sha256(secret.encode("utf-8")).hexdigest()
        return self

    @property
    def digest(self) -> str:
        """Hex SHA-256 of the token (as configured, or computed from env or file)."""
        return self._digest


class OAuthConfig(Section):
    """[auth.oauth]: accept JWT access tokens of one OAuth 2.1 authorization server."""

    issuer: Annotated[str, Field(min_length=1)]
    """The `iss` every token must carry, exactly as the authorization server writes it."""
    jwks_url: str | None = None
    """The authorization server's signing keys (JWKS): https, or http only on a loopback address."""
    jwks_file: str | None = None
    """A local JWKS file instead of jwks_url (re-read every jwks_refresh_s)."""
    jwks_refresh_s: PositiveFloat = 600.0
    """How often the keys are fetched again (key rotation)."""
    jwks_refetch_min_s: Annotated[float, Field(ge=0)] = 30.0
    """A token signed with an unknown key id fetches the keys again at most this often, so a stranger
    cannot make the gateway hammer the authorization server."""
    algorithms: list[str] = Field(default_factory=lambda: list(ASYMMETRIC_ALGORITHMS))
    """Accepted signature algorithms; public-key ones only (never `none`, never HS*)."""
    leeway_s: Annotated[float, Field(ge=0, le=300)] = 30.0
    """Clock skew tolerated on exp and nbf."""
    authorization_servers: list[str] = Field(default_factory=list)
    """Announced in the RFC 9728 metadata; default: [issuer]."""

    @field_validator("algorithms")
    @classmethod
    def _public_key_only(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError('name at least one algorithm, e.g. ["RS256", "ES256"]')
        for name in value:
            if name.lower() == "none":
                raise ValueError('"none" is never accepted: an unsigned token proves nothing')
            if name.upper().startswith("HS"):
                raise ValueError(
                    f"{name} is not accepted: HMAC algorithms would need the authorization server's signing "
                    "secret on this gateway; use its public keys (RS256, ES256, ...)"
                )
            if name not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ASYMMETRIC_ALGORITHMS)}")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> OAuthConfig:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("give exactly one of jwks_url or jwks_file")
        if self.jwks_url is not None:
            parsed = urlsplit(self.jwks_url)
            if parsed.scheme not in ("https", "http") or not parsed.hostname:
                raise ValueError(f"jwks_url {self.jwks_url!r} is not an http(s) URL")
            if parsed.scheme == "http" and not is_loopback_host(parsed.hostname):
                raise ValueError(
                    f"jwks_url {self.jwks_url!r}: keys fetched over plain http could be forged on the way; "
                    "use https (http is accepted only on a loopback address)"
                )
        if self.jwks_file is not None:
            try:
                with open(self.jwks_file, "rb") as handle:
                    handle.read(1)
            except FileNotFoundError:
                raise ValueError(f"jwks_file {self.jwks_file}: not found") from None
            except OSError as exc:
                raise ValueError(f"jwks_file {self.jwks_file}: not readable ({exc.strerror})") from None
        return self


class HmacKeyConfig(Section):
    """One request-signing key ([[auth.hmac.keys]]): its id, its secret (env or file), the caller it stands for."""

    key_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    """Sent in X-MCPGW-Key-Id so the gateway knows which secret to check the signature with."""
    env: str | None = None
    """Name of an environment variable that holds the secret (HMAC needs the secret itself, not a hash)."""
    file: str | None = None
    """A file that holds the secret (keep it mode 0600)."""
    principal: PrincipalName | None = None
    """The caller a request signed with this key is; default: the key id."""
    scopes: list[Scope] = Field(default_factory=list)
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> HmacKeyConfig:
        # Read now, so a missing variable or file stops the gateway before it listens.
        self._secret = read_secret(self.env, self.file, f"auth.hmac.keys {self.key_id!r}")
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret

    @property
    def principal_name(self) -> str:
        return self.principal or self.key_id


class HmacConfig(Section):
    """[auth.hmac]: HMAC-SHA256 signed requests (the `mcp-gateway stdio` bridge, scripts); see docs/security.md."""

    keys: Annotated[list[HmacKeyConfig], Field(min_length=1)]
    max_skew_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    """A signed request whose X-MCPGW-Timestamp is further than this from the gateway's clock is refused."""
    nonce_cache: PositiveInt = 65_536
    """Nonces remembered (each for max_skew_s past its timestamp) so a captured request cannot be replayed;
    when full of live nonces, signed requests get 503 until some expire (the cache never forgets early)."""

    @model_validator(mode="after")
    def _unique(self) -> HmacConfig:
        ids = [key.key_id for key in self.keys]
        repeated = sorted({key_id for key_id in ids if ids.count(key_id) > 1})
        if repeated:
            raise ValueError(f"key ids must be unique; repeated: {', '.join(repeated)}")
        return self


class AuthConfig(Section):
    """[auth]: who may call the client endpoints (/<slot>/mcp, /_all/mcp, /_broker/mcp) and /metrics."""

    tokens: list[ClientTokenConfig] = Field(default_factory=list)
    token_files: list[str] = Field(default_factory=list)
    """Token files written by `mcp-gateway token create` (hashes only); re-read when they change."""
    oauth: OAuthConfig | None = None
    required_scopes: dict[str, list[Scope]] = Field(default_factory=dict)
    """Scopes a caller needs per endpoint. Key: a slot name, `_all`, `_broker`, or an fnmatch pattern
    ("pump-*", "*"); an exact key wins, else the first matching pattern in file order, else none."""
    hmac: HmacConfig | None = None
    """Signed requests ([auth.hmac]): keys, clock-skew window, replay (nonce) cache."""

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        names = [token.name for token in self.tokens]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"token names must be unique; repeated: {', '.join(repeated)}")
        owners: dict[str, str] = {}
        for token in self.tokens:
            other = owners.setdefault(token.digest, token.name)
            if other != token.name:
                raise ValueError(f"tokens {other!r} and {token.name!r} are the same token; give each its own")
        for key in self.required_scopes:
            if not key:
                raise ValueError("required_scopes: an empty key matches nothing; use a slot name or a pattern")
        return self

    @property
    def configured(self) -> bool:
        """True when any client authentication is set up (then every client endpoint requires it)."""
        return bool(self.tokens or self.token_files or self.oauth is not None or self.hmac is not None)


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "text"] = "auto"
    """auto: text on a terminal, one JSON object per line otherwise."""


class GatewayConfig(Section):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    public_url: str | None = None
    """The URL clients use to reach this gateway (shown in guides); derived from host and port if unset."""
    insecure_lan: bool = False
    """Allow a non-loopback bind without authentication. Logged on every start and shown in broker_info."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed on every HTTP and WebSocket entry: exact ('https://console.plant.lan') or
    patterns ('http://localhost:*', 'https://*.plant.lan'). Requests without an Origin header pass."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Extra Host header names accepted while bound to loopback (DNS-rebinding guard)."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig)
    slots: SlotsConfig = Field(default_factory=SlotsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    """Client authentication ([auth]): static tokens, OAuth 2.1 access tokens, required scopes."""

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def auth_configured(self) -> bool:
        """Client authentication is set up ([auth]); a LAN bind then needs no --insecure-lan."""
        return self.auth.configured

    @property
    def lan_without_auth(self) -> bool:
        """Listening on the network with no client authentication (only possible with --insecure-lan)."""
        return self.insecure_lan and not self.is_loopback and not self.auth_configured

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def scheme(self) -> str:
        """https when the listener serves TLS ([tls]), else http."""
        return "https" if self.tls.enabled else "http"

    def slot_settings(self, slot: str) -> SlotConfig | None:
        return self.slots.declared.get(slot)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------
# Loading


def _describe(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _env_value(text: str) -> Any:
    """Environment values are JSON when they parse as JSON (numbers, booleans, lists), else strings."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _known_path(path: list[str]) -> bool:
    model: type[BaseModel] | None = GatewayConfig
    for index, part in enumerate(path):
        if model is None:
            return False
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        # An optional section (`X | None`, e.g. providers.auth.shared_secret) is walked like X.
        optional = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(optional) == 1 and isinstance(optional[0], type) and issubclass(optional[0], BaseModel):
            annotation = optional[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif index < len(path) - 1:
            # dict-valued fields (slots.declared.<name>...) accept any key below them
            return part in {"declared", "tool_timeouts_ms"}
        else:
            model = None
    return True


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn MCP_GATEWAY_A__B=value into {"a": {"b": value}}; unknown names are an error."""
    overrides: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in (ENV_CONFIG_FILE, ENV_CLIENT_TOKEN):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path) or not _known_path(path):
            raise ConfigError(
                f"environment variable {name}: no such setting {'.'.join(path)!r}; "
                "see docs/configuration.md for the names"
            )
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _env_value(text)
        sources[".".join(path)] = f"environment variable {name}"
    return overrides, sources


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path}: not found") from exc
    except PermissionError as exc:
        raise ConfigError(f"config file {path}: not readable ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from exc


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """Build the effective configuration: defaults < file < environment < flags."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(ENV_CONFIG_FILE):
        path = environ[ENV_CONFIG_FILE]
    sources: dict[str, str] = {}
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml(Path(path))
        file_label = f"config file {path}"
    else:
        file_label = "defaults"
    env_data, env_sources = env_overrides(environ)
    sources.update(env_sources)
    data = _merge(data, env_data)
    for key, value in (flags or {}).items():
        if value is None:
            continue
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        sources[key] = f"command-line flag for {key}"
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _describe(first["loc"])
        origin = _origin_of(key, sources, file_label)
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{origin}: unknown setting {key!r}; see docs/configuration.md") from exc
        raise ConfigError(f"{origin}: setting {key!r}: {first['msg']}") from exc


def _origin_of(key: str, sources: Mapping[str, str], file_label: str) -> str:
    for candidate, label in sources.items():
        if key == candidate or key.startswith(candidate + "."):
            return label
    # A validator on a parent (slots.declared checks its names) reports the parent's key; blame the
    # override below it rather than a file (or "defaults") that may not mention it at all.
    for candidate, label in sources.items():
        if candidate.startswith(key + "."):
            return label
    return file_label


def masked_dump(config: GatewayConfig) -> dict[str, Any]:
    """The effective configuration as plain data with every secret replaced by '***'."""

    def walk(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***"
        if isinstance(value, BaseModel):
            return {name: walk(getattr(value, name)) for name in type(value).model_fields}
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    dumped: dict[str, Any] = walk(config)
    return dumped
