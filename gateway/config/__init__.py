"""The gateway's one configuration model: TOML file, then MCP_GATEWAY_* environment, then CLI flags.

Loading fails closed: an unknown key, a missing named file or an invalid value stops the gateway
with one message that names the key (and where it came from) or the file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args
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

from gateway.core.jsonrpc import MAX_DEPTH_CEILING
from gateway.core.names import SlotNameError, check_slot_name
from gateway.southbound.mqtt import topics as mqtt_topics

ENV_PREFIX = "MCP_GATEWAY_"
ENV_CONFIG_FILE = "MCP_GATEWAY_CONFIG"
ENV_CLIENT_TOKEN = "MCP_GATEWAY_TOKEN"
"""The bearer token `mcp-gateway stdio` sends: a client-side variable, not a gateway setting, so a shell
that sets it for the bridge can still run the gateway."""
DEFAULT_PORT = 3000  # mcp-broker's port, so boards flashed for it connect unchanged

TakeoverPolicy = Literal["liveness", "reject", "always"]
IdStyle = Literal["brk", "numeric"]
ProviderEra = Literal["auto", "session"]
"""The protocol era spoken to a provider: auto (server/discover first, 2026-07-28 to a provider that
answers it, else initialize) or session (initialize only); see docs/protocol.md."""

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key or the file."""


def masked_url(url: str) -> str:
    """`url` as a message may quote it: the password of its userinfo replaced by `***`.

    A userinfo without a password is masked whole: a lone user name is often a token. Works on any
    text, however malformed (the URL being quoted is usually the one that was rejected)."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    authority_end = min((index for index in map(rest.find, "/?#") if index >= 0), default=len(rest))
    userinfo, at, host = rest[:authority_end].rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}://{shown}@{host}{rest[authority_end:]}"


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


class ConnectionLimitsConfig(Section):
    """[limits.connections]: every TCP connection to the listener, whatever it carries (docs/security.md).

    A connection over a cap is answered 503 with a JSON body once its request is read, or closed at
    once when max_refusing are already being answered. Open streams (SSE, WebSocket) and requests being
    answered are never idle; a keep-alive connection between requests is."""

    max_connections: PositiveInt = 4096
    """Connections held at once. Room for max_slots boards on dedicated sockets and max_sessions client
    streams, with as many again for short requests; lowered at start to what the descriptor limit
    (RLIMIT_NOFILE) leaves after fd_reserve, so the process never runs out of descriptors."""
    max_per_peer: PositiveInt = 256
    """Connections one peer address holds at once, so one host cannot take them all. A board holds one
    socket, a client a few; a simulator publishing many boards from one host stays well below it."""
    per_peer_exempt: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])
    """Addresses or networks (CIDR) max_per_peer does not apply to: by default the gateway's own host,
    where a local reverse proxy (every client behind it is one address), the simulator and the stdio
    bridge connect from. Add a reverse proxy's address here; max_connections still applies."""
    max_refusing: PositiveInt = 64
    """Connections over a cap held at once to read their request and answer it 503 (each at most
    header_timeout_s); beyond that an over-cap connection is closed unanswered."""
    fd_reserve: PositiveInt = 256
    """File descriptors kept for everything but client and board connections: child processes' pipes,
    serial ports, upstream and MQTT connections, logs, and connections being accepted."""
    idle_timeout_s: PositiveFloat = 60.0
    """A keep-alive connection with no request for this long is closed. Above the idle expiry of HTTP
    client pools (httpx 5 s, aiohttp 15 s), so a client does not find its pooled connection just closed."""
    header_timeout_s: PositiveFloat = 15.0
    """A request's headers must be complete this long after the connection opened (its first request)
    or after the request's first byte (later ones); else 408 and close. Headers arrive in one packet on
    a LAN; 15 s leaves room for TCP retransmissions on poor Wi-Fi."""
    body_timeout_s: PositiveFloat = 15.0
    """A request body that stops arriving for this long gets 408 and the connection is closed; also the
    grace before body_min_rate_bytes_per_s applies, and how long an unread body is drained after an answer."""
    body_min_rate_bytes_per_s: Annotated[int, Field(ge=0)] = 1024
    """After body_timeout_s, a request body must have arrived at this average rate, else 408 and close
    (a body dripped a byte at a time). Far below any working link (radio, VPN, cellular); 0 turns it off."""
    handshake_timeout_s: PositiveFloat = 30.0
    """A TLS handshake, a /providers socket's first slot claim and a client WebSocket's initialize must
    be done this long after connecting, else the connection is closed (WebSockets with 1008 and a reason).
    A board doing TLS in software over weak Wi-Fi takes seconds; its first frame follows at once."""
    max_header_bytes: PositiveInt = 8190
    """Longest request line, and longest header line; longer gets 400 (aiohttp's own bound)."""
    max_headers: PositiveInt = 128
    """Most header lines in one request; more gets 400 (aiohttp's own bound)."""

    @field_validator("per_peer_exempt")
    @classmethod
    def _networks(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/24)") from None
        return entries


class LimitsConfig(Section):
    """Every bound the gateway enforces; all are explicit so an operator can see and change them."""

    max_frame_bytes: PositiveInt = 1_048_576
    """Largest WebSocket message a provider or client may send; larger ones close the link with 1009."""
    max_body_bytes: PositiveInt = 4_194_304
    """Largest HTTP request body; larger ones get HTTP 413."""
    max_json_depth: Annotated[int, Field(ge=16, le=MAX_DEPTH_CEILING)] = 64
    """Deepest nesting of objects and arrays in a message from a client or a provider, on every way in;
    deeper ones are refused (-32600 to a client, dropped from a provider). At least 16 (a tool's input
    schema inside tools/list already nests about ten), at most 200, so everything the gateway relays
    stays within what its JSON encoder writes (gateway/core/jsonrpc.py, MAX_DEPTH_CEILING)."""
    max_pending_per_slot: PositiveInt = 256
    """Requests in flight towards one provider."""
    max_pending_per_client: PositiveInt = 64
    """Requests in flight from one client session."""
    max_sessions: PositiveInt = 1024
    """Session-era client sessions held at once (see session_idle_when_full_s for what happens at it)."""
    session_idle_timeout_s: PositiveFloat = 1800.0
    """A client session with no request and no open stream for this long is expired (404 afterwards)."""
    session_idle_when_full_s: PositiveFloat = 60.0
    """At max_sessions or a caller's max_sessions_per_principal, a new session ends the one idle the
    longest (the caller's own at its cap) once it has idled this long, instead of being refused."""
    max_slots: PositiveInt = 1024
    """Slots the gateway tracks at once; vacant ones are forgotten, oldest first, to make room."""
    max_slots_per_peer: Annotated[int, Field(ge=0)] = 128
    """Slots one WebSocket provider may hold at once, counted by its authenticated identity or, with
    no credential, by its IP address (0: no cap). Keeps one peer from taking every name."""
    vacant_slot_ttl_s: Annotated[float, Field(ge=0)] = 300.0
    """A slot whose provider left is forgotten after this long (declared and configured ones are
    kept); 0 keeps vacant slots until room is needed."""
    notification_queue: PositiveInt = 256
    """Notifications buffered per client stream; a stream that falls further behind is closed."""
    sse_keepalive_s: PositiveFloat = 15.0
    """Interval of SSE comment lines that keep idle streams open through proxies."""
    max_subscriptions: PositiveInt = 256
    """Open stateless-era subscriptions/listen streams across all clients."""
    max_sessions_per_principal: PositiveInt = 64
    """Session-era sessions one principal may hold at once, so one caller cannot use up max_sessions."""
    max_relayed_requests_per_client: PositiveInt = 16
    """Provider requests (sampling, elicitation, roots) waiting on one client's answer at once: per
    session-era session, or per stateless-era call; more are answered -32000 to the provider."""
    max_input_required_states: PositiveInt = 256
    """Stateless-era calls held open after an input_required result until the client retries with
    inputResponses (each ends at its call's deadline); more are answered -32000 to the client."""
    input_required_gather_ms: PositiveInt = 50
    """After a provider's first request during a stateless-era call, how long the gateway waits for
    more before answering input_required (a provider asking several things at once gets one round)."""
    max_input_rounds: PositiveInt = 16
    """A session-era client's call to a 2026-07-28 provider: input_required rounds the gateway answers
    for it (asking the client, then retrying); a provider that asks more gets the call ended with -32000."""
    catalog_coalesce_ms: Annotated[int, Field(ge=0, le=10_000)] = 50
    """How long `_all` and the tool groups wait after a provider comes, goes or changes its tools before
    rebuilding their catalogs and announcing the change, so a burst (every board reconnecting after a
    restart) costs one rebuild; a client that lists sooner gets the catalog rebuilt for it at once."""
    rate: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    connections: ConnectionLimitsConfig = Field(default_factory=ConnectionLimitsConfig)


MIN_PROVIDER_SECRET_CHARS = 16
"""A provider secret shorter than this is refused: it could be guessed from the plant network."""


def read_secret(env: str | None, file: str | None, what: str, min_chars: int = MIN_PROVIDER_SECRET_CHARS) -> SecretStr:
    """The secret named by exactly one of `env` (a variable name) or `file` (a path), stripped.

    Read once at load time so a missing variable or file stops the gateway before it listens.
    `min_chars` guards secrets the gateway checks; a credential it only sends (to a remote
    upstream) is as long as its issuer made it, so those pass min_chars=1."""
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
        except UnicodeDecodeError:
            raise ValueError(f"{what}: file {file} is not UTF-8 text") from None
        except OSError as exc:  # not readable, a directory, below a file, a name too long, ...
            raise ValueError(f"{what}: file {file} is not readable ({exc.strerror or exc})") from None
    secret = text.strip()
    if len(secret) < min_chars:
        where = f"environment variable {env}" if env is not None else f"file {file}"
        raise ValueError(
            f"{what}: the secret in {where} is shorter than {min_chars} characters; "
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
    upgrades_per_turn: PositiveInt = 16
    """Provider WebSocket upgrades (`/provider/<slot>`, `/providers`) handled per turn of the event
    loop; the others wait for the next turns (gateway/southbound/websocket/pacing.py). A turn then stays short
    however many boards dial at once, and the gateway keeps answering everyone else."""
    max_concurrent_handshakes: PositiveInt = 32
    """Providers whose handshake (server/discover or initialize, then tools/list) runs at once; the
    others wait their turn, connected. Keeps the gateway answering while every board of a plant
    reconnects at once: each handshake decodes a tool list, and a thousand at once would hold the
    event loop for a second."""
    id_style: IdStyle = "brk"
    """Request ids sent to providers: 'brk' (brk-<n>, mcp-broker compatible) or 'numeric'."""
    max_tools_pages: PositiveInt = 64
    """A provider paging tools/list for more pages than this is cut off (a cursor loop cannot hang it)."""
    register_wait_ms: Annotated[int, Field(ge=0)] = 500
    """/provider/<slot>: how long initialize waits for the link's first frame, which may be a register frame
    whose hello asks for numeric ids; a board that sends its register frame is not kept waiting. 0: never wait."""
    era: ProviderEra = "auto"
    """auto: ask each provider server/discover first and speak 2026-07-28 to one that answers it (its callers'
    own capabilities, input_required passed through), else the session era; session: initialize only."""
    auth: ProviderAuthConfig = Field(default_factory=ProviderAuthConfig)
    """Who may connect as a provider, and which slot names each may publish ([providers.auth])."""


class SlotConfig(Section):
    """Settings for one named slot."""

    request_timeout_ms: PositiveInt | None = None
    tool_timeouts_ms: dict[str, PositiveInt] = Field(default_factory=dict)
    takeover: TakeoverPolicy | None = None
    id_style: IdStyle | None = None
    era: ProviderEra | None = None
    """The protocol era spoken to this slot's provider (default: providers.era)."""


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
                raise ValueError(f"jwks_url {masked_url(self.jwks_url)!r} is not an http(s) URL")
            if parsed.scheme == "http" and not is_loopback_host(parsed.hostname):
                raise ValueError(
                    f"jwks_url {masked_url(self.jwks_url)!r}: keys fetched over plain http could be forged on the way; "
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


# ---------------------------------------------------------------------------------------------
# [upstreams]: MCP servers the gateway runs or reaches itself, each in its own slot

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An environment variable name a child process can be given (POSIX portable names)."""


def _is_dir(path: str) -> bool:
    """Path.is_dir, but False for a name the system refuses (too long, a NUL) instead of an exception."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def _is_file(path: str) -> bool:
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


class StdioUpstreamConfig(Section):
    """One [[upstreams.stdio]] entry: a command the gateway runs as a child speaking MCP on stdin/stdout."""

    name: str
    """The slot the child's tools are served in (/<name>/mcp); no board may claim it."""
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """The program and its arguments, e.g. ["npx", "-y", "@modelcontextprotocol/server-memory"]; a string
    is split like a shell would (shlex), but no shell runs it."""
    cwd: str | None = None
    """Working directory of the child (default: the gateway's)."""
    env: dict[str, SecretStr] = Field(default_factory=dict)
    """Variables given to the child with these values (they win over everything else). Masked in
    `config show`: they often hold the upstream's own keys (better kept out of the file: env_passthrough)."""
    env_passthrough: list[str] = Field(default_factory=list)
    """Names of the gateway's own variables copied to the child when set. Nothing else of the gateway's
    environment reaches it except PATH, HOME, LANG, LC_ALL, TZ and TMPDIR (see docs/upstreams.md)."""
    startup_timeout_s: PositiveFloat = 10.0
    """The child must answer the gateway's initialize and tools/list within this, else it is killed and restarted."""
    restart_initial_s: PositiveFloat = 1.0
    """First wait before restarting a child that exited; doubles per failure in a row (jittered)."""
    restart_max_s: PositiveFloat = 60.0
    """Longest wait between restarts."""
    stable_after_s: PositiveFloat = 60.0
    """A child that served this long before it ended starts its back-off over: the next start waits only
    the first step (0.5-1x restart_initial_s), as if it had never failed."""
    stop_grace_s: PositiveFloat = 5.0
    """On shutdown (or when the gateway drops it) the child gets SIGTERM, then SIGKILL after this long."""
    max_stderr_bytes: PositiveInt = 16_384
    """The child's most recent stderr lines kept for provider_status (older lines are dropped)."""
    aggregate: bool = False
    """Also offer the child's tools in _all."""
    era: ProviderEra | None = None
    """The protocol era spoken to the child (default: providers.era). One stdio pipe carries one era: an
    SDK server that takes 2026-07-28 refuses initialize after it; "session" for a server whose tools ask
    their client mid-call the session era's way (docs/upstreams.md)."""

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"command {value!r} cannot be split: {exc}") from None
        return value

    @field_validator("name")
    @classmethod
    def _slot_name(cls, value: str) -> str:
        try:
            check_slot_name(value)
        except SlotNameError as exc:
            raise ValueError(f"upstream {value!r}: {exc}") from exc
        return value

    @field_validator("env", "env_passthrough")
    @classmethod
    def _env_names(cls, value: Any) -> Any:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _cwd_exists(self) -> StdioUpstreamConfig:
        if self.restart_max_s < self.restart_initial_s:
            raise ValueError("restart_max_s must be at least restart_initial_s")
        if self.cwd is not None and not _is_dir(self.cwd):
            raise ValueError(f"cwd {self.cwd}: not a directory")
        return self


RemoteTransport = Literal["auto", "streamable-http", "sse"]
HTTP_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""An HTTP header name (RFC 9110 token)."""
HOP_HEADERS = frozenset(
    {"host", "content-length", "content-type", "accept", "connection", "transfer-encoding", "mcp-session-id"}
    | {"mcp-protocol-version", "mcp-method", "mcp-name", "last-event-id"}
)
"""Headers the remote link writes itself; a credential may not replace them."""


def _header_name(name: str, what: str) -> str:
    if not HTTP_TOKEN.match(name):
        raise ValueError(f"{what}: {name!r} is not an HTTP header name")
    if name.lower() in HOP_HEADERS or name.lower().startswith("mcp-param-"):
        raise ValueError(f"{what}: {name!r} is written by the gateway itself and cannot carry a credential")
    return name


def _header_value(value: str, what: str) -> str:
    if any(ch in value for ch in "\r\n\0"):
        raise ValueError(f"{what}: the value contains a line break or NUL")
    return value


class UpstreamSecretConfig(Section):
    """A credential the gateway sends to a remote upstream: from an environment variable or a file (exactly one)."""

    env: str | None = None
    file: str | None = None
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> UpstreamSecretConfig:
        secret = read_secret(self.env, self.file, "secret", min_chars=1)
        self._secret = SecretStr(_header_value(secret.get_secret_value(), "secret"))
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret


def _check_remote_url(url: str, what: str, allow_insecure_http: bool) -> str:
    parsed = urlsplit(url)
    quoted = repr(masked_url(url))
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        raise ValueError(f"{what} {quoted} is not an http(s) URL")
    if parsed.username is not None or parsed.password is not None:
        raise ValueError(
            f"{what} {quoted}: no credentials in the URL; use secret, headers_file or oauth_client_credentials"
        )
    if parsed.fragment:
        raise ValueError(f"{what} {quoted}: a URL fragment is never sent; remove it")
    if parsed.scheme == "http" and not is_loopback_host(parsed.hostname) and not allow_insecure_http:
        raise ValueError(
            f"{what} {quoted}: plain http would expose the gateway's credentials and every call on the network; "
            "use https (http is accepted on a loopback address, or with allow_insecure_http = true)"
        )
    return url


class RemoteOAuthConfig(Section):
    """[upstreams.remote.oauth_client_credentials]: the gateway gets its own access token (RFC 6749 §4.4)."""

    token_url: str | None = None
    """The authorization server's token endpoint. Unset: discovered from the upstream's metadata (its 401's
    resource_metadata, RFC 9728, then the authorization server's RFC 8414 metadata), through the SSRF guard."""
    client_id: Annotated[str, Field(min_length=1)]
    client_secret: UpstreamSecretConfig
    scope: str | None = None
    """Space-separated scopes to ask for (none: the authorization server's default)."""
    audience: str | None = None
    """Sent as `audience` (Auth0, Okta and others name the API this way)."""
    resource: str | None = None
    """Sent as `resource` (RFC 8707), e.g. the upstream's URL; some servers require it, some refuse it."""
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    """How the client secret reaches the token endpoint: HTTP Basic (default) or form fields."""


class RemoteUpstreamConfig(Section):
    """One [[upstreams.remote]] entry: an MCP server the gateway reaches over HTTP, served in its own slot."""

    name: str
    """The slot the server's tools are served in (/<name>/mcp); no board may claim it."""
    url: str
    """The server's MCP endpoint, e.g. https://tools.plant.lan/mcp (for transport "sse": its SSE URL)."""
    transport: RemoteTransport = "auto"
    """auto: Streamable HTTP, probing server/discover (2026-07-28) and falling back to initialize;
    streamable-http: Streamable HTTP with the initialize handshake only (session era); sse: legacy HTTP+SSE."""
    header_name: str | None = None
    """The header that carries `secret` (default Authorization, sent as "Bearer <secret>" unless the secret
    already names a scheme, e.g. "Basic ..."); e.g. X-API-Key for an API key."""
    secret: UpstreamSecretConfig | None = None
    """A static credential: {env = "VAR"} or {file = "/path"}."""
    headers_file: str | None = None
    """A file of `Name: value` lines (blank lines and # comments ignored), each sent on every request."""
    oauth_client_credentials: RemoteOAuthConfig | None = None
    aggregate: bool = False
    """Also offer the server's tools in _all."""
    request_timeout_ms: PositiveInt | None = None
    """Deadline of a call forwarded to this server (default: providers.request_timeout_ms)."""
    allow_insecure_http: bool = False
    """Accept a plain http URL on a non-loopback host (credentials and calls travel unencrypted)."""
    ca_file: str | None = None
    """PEM CA certificates to verify the server's TLS certificate with (default: the system's)."""
    connect_timeout_s: PositiveFloat = 10.0
    """How long connecting (and each handshake step) may take before the attempt counts as failed."""
    reconnect_initial_s: PositiveFloat = 0.5
    """First wait before connecting again after the server was unreachable; doubles per failure (jittered)."""
    reconnect_max_s: PositiveFloat = 30.0
    """Longest wait between attempts."""
    tools_poll_s: Annotated[float, Field(ge=0)] = 60.0
    """2026-07-28 servers without subscriptions/listen: how often tools/list is fetched again to notice
    changes (0: never)."""
    _headers: dict[str, SecretStr] = PrivateAttr(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _slot_name(cls, value: str) -> str:
        try:
            check_slot_name(value)
        except SlotNameError as exc:
            raise ValueError(f"upstream {value!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RemoteUpstreamConfig:
        what = f"upstream {self.name!r}"
        _check_remote_url(self.url, f"{what}: url", self.allow_insecure_http)
        kinds = [kind for kind in ("secret", "headers_file", "oauth_client_credentials") if getattr(self, kind)]
        if len(kinds) > 1:
            raise ValueError(f"{what}: give one credential, not {' and '.join(kinds)}")
        if self.header_name is not None and self.secret is None:
            raise ValueError(f"{what}: header_name needs secret = {{env = ...}} or {{file = ...}}")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ValueError(f"{what}: reconnect_max_s must be at least reconnect_initial_s")
        if self.ca_file is not None and not _is_file(self.ca_file):
            raise ValueError(f"{what}: ca_file {self.ca_file}: not found")
        oauth = self.oauth_client_credentials
        if oauth is not None and oauth.token_url is not None:
            _check_remote_url(oauth.token_url, f"{what}: token_url", self.allow_insecure_http)
        headers: dict[str, SecretStr] = {}
        if self.secret is not None:
            name = _header_name(self.header_name or "Authorization", f"{what}: header_name")
            value = self.secret.secret.get_secret_value()
            if name.lower() == "authorization" and " " not in value:
                value = f"Bearer {value}"
            headers[name] = SecretStr(value)
        if self.headers_file is not None:
            headers = _read_headers_file(self.headers_file, what)
        self._headers = headers
        return self

    @property
    def static_headers(self) -> dict[str, SecretStr]:
        """The credential headers sent on every request (none with OAuth or without a credential)."""
        return dict(self._headers)


def _read_headers_file(path: str, what: str) -> dict[str, SecretStr]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{what}: headers_file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what}: headers_file {path} is not readable UTF-8 text ({exc})") from None
    headers: dict[str, SecretStr] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        where = f"{what}: headers_file {path} line {number}"
        if not colon or not value.strip():
            raise ValueError(f"{where}: expected `Name: value`")
        headers[_header_name(name.strip(), where)] = SecretStr(_header_value(value.strip(), where))
    if not headers:
        raise ValueError(f"{what}: headers_file {path} holds no `Name: value` line")
    return headers


class UpstreamsConfig(Section):
    """[upstreams]: MCP servers behind the gateway that it runs (stdio) or reaches (remote) itself."""

    stdio: list[StdioUpstreamConfig] = Field(default_factory=list)
    remote: list[RemoteUpstreamConfig] = Field(default_factory=list)
    """MCP servers reached over Streamable HTTP or legacy SSE ([[upstreams.remote]]; docs/upstreams.md)."""

    def names(self) -> list[str]:
        """Every upstream's slot name, stdio ones first, in file order."""
        return [upstream.name for upstream in self.stdio] + [upstream.name for upstream in self.remote]

    @model_validator(mode="after")
    def _unique(self) -> UpstreamsConfig:
        names = self.names()
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"upstream names must be unique (each is a slot); repeated: {', '.join(repeated)}")
        return self


# ---------------------------------------------------------------------------------------------
# [mqtt]: boards and MCP servers reached through MQTT brokers (gateway/southbound/mqtt/brokers.py, WIRE.md §5)

MqttProfile = Literal["plain", "mcp"]
MQTT_PROFILES: tuple[MqttProfile, ...] = ("plain", "mcp")


class MqttBrokerConfig(Section):
    """One [[mqtt.brokers]] entry: one connection to one broker, carrying the profiles it enables."""

    url: str
    """mqtt://HOST[:PORT] (default port 1883) or mqtts://HOST[:PORT] (TLS, default port 8883)."""
    username: str | None = None
    password: UpstreamSecretConfig | None = None
    """{env = "VAR"} or {file = "/path"}; sent with `username` when connecting."""
    ca_file: str | None = None
    """PEM CA certificates to verify an mqtts:// broker with (default: the system's)."""
    client_id: str | None = None
    """The gateway's MQTT client id; default mcp-gateway-<random>, new on each connection (the MCP over
    MQTT specification wants one per initialization; one connection serves every server: docs/protocol.md
    Departures)."""
    profiles: list[MqttProfile] = Field(default_factory=lambda: list(MQTT_PROFILES))
    """plain: boards under <topic_prefix>/<slot>/...; mcp: MCP over MQTT servers (EMQX specification)."""
    protocol: Literal["5", "3.1.1"] = "5"
    """MQTT version of the connection; 3.1.1 only with the plain profile alone."""
    topic_prefix: str = "mcpb"
    """Plain profile: the first topic level(s) of every board's topics, e.g. "site-a/cell-3/mcpb"."""
    server_filter: list[str] = Field(default_factory=lambda: ["#"])
    """MCP profile: server-name filters to discover ($mcp-server/presence/+/<filter>); a broker that suggests
    filters in its CONNACK (MCP-SERVER-NAME-FILTERS) overrides them."""
    slot_naming: Literal["last_segment", "dashed"] = "last_segment"
    """MCP profile: a server's slot is the last level of its server-name (plant/pumps/pump-7 -> pump-7), or the
    whole server-name with "/" replaced by "-" (plant-pumps-pump-7)."""
    aggregate: bool = False
    """MCP profile: offer the servers' tools in _all too (plain-profile boards opt in themselves)."""
    max_payload_bytes: PositiveInt = 1_048_576
    """A larger message is dropped and counted (oversize). MQTT 3.1.1: also the most a request published to a
    board may carry (MQTT 5: the broker's CONNACK Maximum Packet Size bounds the whole packet)."""
    announce_max_packet_size: bool = False
    """MQTT 5: announce a Maximum Packet Size of max_payload_bytes + 16 KiB in CONNECT, so the broker drops far
    larger messages instead of sending them. Off by default: mosquitto 2.0.11 never frees the in-flight slot
    of a QoS 1 message it drops that way, and after 20 of them sends the gateway nothing more. For brokers that
    drop without stalling (EMQX); with mosquitto set its own max_packet_size instead (docs/mqtt-broker.md)."""
    max_backlog: PositiveInt = 10_000
    """Messages received and not yet handled by the event loop; past this they are dropped and counted
    (backlog). Keep it above max_instances: the retained announcements arrive at once after each connect."""
    max_instances: PositiveInt = 4096
    """Announced devices known per broker (plain statuses, MCP server instances); more are dropped (refused)."""
    keepalive_s: Annotated[int, Field(ge=5, le=65535)] = 30
    connect_timeout_s: PositiveFloat = 10.0
    reconnect_initial_s: PositiveFloat = 0.5
    """First wait before connecting again after the broker was lost, or attaching again a device whose
    announcement stands but whose slot is not served; doubles per failure (jittered)."""
    reconnect_max_s: PositiveFloat = 30.0
    check_anonymous: bool = True
    """After each connection, connect a throw-away client without credentials to the same broker and try a
    board topic with it: a broker that lets it in is logged as a warning and reported by broker_diagnose
    (mqtt.broker_anonymous). Off: no such client connects (the broker logs a refused one otherwise)."""

    @field_validator("server_filter", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> MqttBrokerConfig:
        parsed = urlsplit(self.url)
        what = f"mqtt broker {masked_url(self.url)!r}"
        if parsed.scheme not in ("mqtt", "mqtts") or not parsed.hostname:
            raise ValueError(f"{what}: use mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
        if parsed.username is not None or parsed.password is not None:
            raise ValueError(f"{what}: no credentials in the URL; use username and password = {{env|file}}")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"{what}: a broker URL has no path, query or fragment")
        try:
            parsed.port  # noqa: B018 (raises ValueError for a port out of range)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if not self.profiles:
            raise ValueError(f"{what}: profiles is empty; enable plain, mcp or both")
        if self.protocol == "3.1.1" and "mcp" in self.profiles:
            raise ValueError(f'{what}: MCP over MQTT needs MQTT 5; use protocol = "5" or profiles = ["plain"]')
        if self.protocol == "3.1.1" and self.announce_max_packet_size:
            raise ValueError(f"{what}: announce_max_packet_size needs MQTT 5 (MQTT 3.1.1 cannot announce one)")
        if self.password is not None and self.username is None:
            raise ValueError(f"{what}: password needs a username")
        if self.ca_file is not None and not _is_file(self.ca_file):
            raise ValueError(f"{what}: ca_file {self.ca_file}: not found")
        prefix = self.topic_prefix
        if mqtt_topics.prefix_problem(prefix) is not None:
            raise ValueError(
                f"{what}: topic_prefix {prefix!r}: one or more topic levels without '+', '#', empty levels or a "
                'leading \'$\', e.g. "mcpb" or "site-a/cell-3/mcpb"'
            )
        for pattern in self.server_filter:
            problem = mqtt_topics.server_filter_problem(pattern)
            if problem is not None:
                raise ValueError(f"{what}: server_filter {pattern[:60]!r} is not an MQTT topic filter: {problem}")
        if self.client_id is not None and (not self.client_id or any(c in self.client_id for c in "/+#\x00")):
            raise ValueError(f"{what}: client_id must be non-empty, without '/', '+', '#' (it is used in topics)")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ValueError(f"{what}: reconnect_max_s must be at least reconnect_initial_s")
        return self

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parsed = urlsplit(self.url)
        return parsed.port or (8883 if parsed.scheme == "mqtts" else 1883)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def label(self) -> str:
        """How the broker is named in metrics, logs and status: scheme, host and port, never a credential."""
        host = self.host
        return f"{urlsplit(self.url).scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"


class MqttConfig(Section):
    """[mqtt]: the brokers the gateway connects to (docs/configuration.md, docs/mqtt-broker.md)."""

    brokers: list[MqttBrokerConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> MqttConfig:
        labels = [broker.label for broker in self.brokers]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"each broker once (one connection per broker); repeated: {', '.join(repeated)}")
        return self


# ---------------------------------------------------------------------------------------------
# [serial]: boards on serial lines, UART or USB (gateway/southbound/serial/ports.py, WIRE.md §4)

DEFAULT_SERIAL_BAUD = 115_200
DEFAULT_SERIAL_FRAME_CAP = 8192
DEFAULT_HOTPLUG_VID_PID = ("303a:1001", "10c4:ea60", "1a86:7523", "1a86:55d4", "0403:6001")
"""WIRE.md §4: Espressif USB-JTAG/serial, Silicon Labs CP210x, WCH CH340 and CH9102, FTDI FT232R."""
VID_PID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")


class SerialLineConfig(Section):
    """What a serial port carries and which slots a board on it may publish (ports and hot-plug alike)."""

    baud: Annotated[int, Field(ge=50, le=12_000_000)] = DEFAULT_SERIAL_BAUD
    frame_cap: Annotated[int, Field(ge=256, le=1_048_576)] = DEFAULT_SERIAL_FRAME_CAP
    """Largest decoded JSON message accepted on the port; a larger frame is dropped and counted (oversize)."""
    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["*"]
    )
    """Slot names or fnmatch patterns a board on this port may publish (serial boards are trusted by port)."""
    debug_json_lines: bool = False
    """Also accept a line starting with { as one unframed JSON message (a person at a terminal). No CRC:
    never on a port that drives actuators in production."""


class SerialPortConfig(SerialLineConfig):
    """One [[serial.ports]] entry: a tty the gateway opens and keeps open (and reopens when it fails)."""

    path: Annotated[str, Field(min_length=1)]
    """e.g. /dev/ttyUSB0, or better a stable /dev/serial/by-id/... name."""


class SerialHotplugConfig(SerialLineConfig):
    """[serial.hotplug]: attach USB serial devices whose VID:PID is listed when they are plugged in."""

    enabled: bool = False
    """Off on a developer machine (the gateway would take every ESP32 plugged in to be flashed); the
    appliance's config turns it on."""
    vid_pid: list[str] = Field(default_factory=lambda: list(DEFAULT_HOTPLUG_VID_PID))
    backend: Literal["auto", "udev", "poll"] = "auto"
    """auto: udev events where udev runs (pyudev), else polling pyserial's port list."""
    poll_interval_s: PositiveFloat = 2.0

    @field_validator("vid_pid")
    @classmethod
    def _vid_pid(cls, value: list[str]) -> list[str]:
        normalized = [entry.strip().lower() for entry in value]
        for entry in normalized:
            if not VID_PID.match(entry):
                raise ValueError(f"{entry!r} is not VID:PID in hex, e.g. 303a:1001")
        return normalized


SERIAL_LIMIT_KEYS = ("backlog_messages", "register_request_interval_s", "write_timeout_s")
"""The [serial]-wide bounds (fields of SerialConfig): mcpgw_limit's serial.<key> and the serial status's limits."""


class SerialConfig(Section):
    """[serial]: configured ports, USB hot-plug, and how a failing port is retried."""

    ports: list[SerialPortConfig] = Field(default_factory=list)
    hotplug: SerialHotplugConfig = Field(default_factory=SerialHotplugConfig)
    retry_initial_s: PositiveFloat = 0.5
    """First wait before opening a port again after it failed or disappeared; doubles per failure (jittered)."""
    retry_max_s: PositiveFloat = 30.0
    write_timeout_s: PositiveFloat = 5.0
    """A frame not written within this long (a board that stopped reading its USB port) fails the port."""
    backlog_messages: Annotated[int, Field(ge=1, le=65_536)] = 64
    """Messages of one port read while an earlier one (a register frame) is still being attached; more are
    dropped and counted (backlog)."""
    register_request_interval_s: Annotated[float, Field(ge=0.05, le=3600)] = 1.0
    """At most one broker/register per port in this long while an unregistered board keeps sending
    (one always goes out as the port opens)."""

    @model_validator(mode="after")
    def _consistent(self) -> SerialConfig:
        paths = [port.path for port in self.ports]
        repeated = sorted({path for path in paths if paths.count(path) > 1})
        if repeated:
            raise ValueError(f"each serial port once; repeated: {', '.join(repeated)}")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be at least retry_initial_s")
        return self


# ---------------------------------------------------------------------------------------------
# [groups.<name>]: tool groups served at /mcp and /mcp/<name> (gateway/core/groups/catalog.py)

GROUP_ENV_PREFIX = "MCP_GROUP_"
"""MCP_GROUP_<NAME>=true|false turns a configured group on or off at start (the original bridge's toggles)."""
GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RESERVED_GROUP_NAMES = frozenset({"mcp", "sse", "messages", "overview", "groups", "tool"})
"""Not group names: /mcp/mcp, /mcp/sse and /mcp/messages stay the endpoints of a slot named "mcp", and
overview, groups and tool are topics of the guidance tool."""
GROUPS_SEPARATOR = re.compile(r"^[_-]{1,4}$")
"""Only _ and -: a separator can then never occur in the built-in tool names (guidance, search)."""


def group_env_name(group: str) -> str:
    """The toggle variable of a group: MCP_GROUP_ + its name upper-cased, '-' as '_'."""
    return GROUP_ENV_PREFIX + group.upper().replace("-", "_")


class GroupConfig(Section):
    """One [groups.<name>]: the tools of matching slots whose names start with one of the prefixes."""

    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["*"]
    )
    """Slot names or fnmatch patterns (case-sensitive), e.g. ["pump-*", "tank-1"]; default every slot."""
    tools: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Tool-name prefixes, e.g. ["get_", "set_speed"]; empty: every tool of the matching slots."""
    enabled: bool = True
    """Served at /mcp and /mcp/<name>; MCP_GROUP_<NAME>=true|false overrides it at start."""
    description: str = ""
    """What the group is for, in words an agent can choose by (shown by guidance and GET /groups)."""
    _enabled_by: str = PrivateAttr(default="config")

    @property
    def enabled_by(self) -> str:
        """Where `enabled` came from: "config", or the environment variable that set it."""
        return self._enabled_by


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "text"] = "auto"
    """auto: text on a terminal, one JSON object per line otherwise."""


MDNS_INSTANCE_NAME_BYTES = 63
"""A DNS-SD instance name is one DNS label: at most 63 bytes of UTF-8."""


class MdnsConfig(Section):
    """[mdns]: advertise the gateway on the local network (docs/discovery.md)."""

    enabled: bool = False
    """Advertise _mcp-broker._tcp and _mcp._tcp. Off on a developer machine; the appliance's config turns it on."""
    instance_name: str | None = None
    """The name clients list, e.g. "Line 3 gateway"; default "mcp-gateway on <hostname>". Shown to the network."""
    interfaces: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Advertise only on these interfaces (names such as "eth0", or addresses the listener serves); default every
    interface the listener serves. A loopback-bound gateway is never advertised."""
    refresh_s: PositiveFloat = 30.0
    """How often the interface addresses are read again: a changed address is re-advertised, a failure retried."""

    @field_validator("instance_name")
    @classmethod
    def _instance_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip() or len(value.encode("utf-8")) > MDNS_INSTANCE_NAME_BYTES:
            raise ValueError(f"an instance name is 1 to {MDNS_INSTANCE_NAME_BYTES} bytes of UTF-8 text")
        if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
            raise ValueError("an instance name cannot hold control characters")
        return value


class LanSide(NamedTuple):
    """One side a LAN bind must authenticate, as the refusal, the logs and broker_info name it."""

    off: str
    """What is off when the side is open, e.g. "client authentication"."""
    short: str
    """The same in a log line's prefix, e.g. "client auth"."""
    risk: str
    """What anyone who reaches the port can then do."""


# The two sides a LAN bind must authenticate (GatewayConfig.lan_open_sides).
LAN_SIDES: dict[str, LanSide] = {
    "clients": LanSide("client authentication", "client auth", "call every device"),
    "providers": LanSide(
        "provider authentication", "provider auth", "publish a free slot and answer its calls with false readings"
    ),
}


def lan_sides_text(sides: Sequence[str]) -> tuple[str, str]:
    """What the open sides leave off and what anyone can then do, as prose: ("client authentication or
    provider authentication", "call every device and publish a free slot ...")."""
    return " or ".join(LAN_SIDES[side].off for side in sides), " and ".join(LAN_SIDES[side].risk for side in sides)


class GatewayConfig(Section):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    public_url: str | None = None
    """The URL clients use to reach this gateway (shown in guides); derived from host and port if unset."""
    insecure_lan: bool = False
    """Allow a non-loopback bind without client or provider authentication. Every log line and broker_info
    then say which side is open."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed on every HTTP and WebSocket entry: exact ('https://console.plant.lan') or
    patterns ('http://localhost:*', 'https://*.plant.lan'). Requests without an Origin header pass."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Extra Host header names accepted while bound to loopback (DNS-rebinding guard)."""
    session_answers: Literal["sse", "json"] = "sse"
    """How Streamable HTTP answers a session-era request whose client accepts text/event-stream: "sse"
    (one event, then the end, as the MCP SDK's own server answers) or "json" (cheaper; the answer
    still becomes SSE once a notification or a request to the client goes with it)."""
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    """The event loop `mcp-gateway run` serves on: "auto" (uvloop when installed, else asyncio's own),
    "uvloop" (refuse to start without it) or "asyncio". broker_info says which one runs."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig)
    slots: SlotsConfig = Field(default_factory=SlotsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    """Client authentication ([auth]): static tokens, OAuth 2.1 access tokens, required scopes."""
    upstreams: UpstreamsConfig = Field(default_factory=UpstreamsConfig)
    """MCP servers the gateway runs as children ([[upstreams.stdio]]) or reaches itself."""
    mdns: MdnsConfig = Field(default_factory=MdnsConfig)
    """mDNS advertisement ([mdns]): off by default; see docs/discovery.md."""
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    """MQTT brokers ([[mqtt.brokers]]): boards (plain profile) and MCP over MQTT servers; docs/mqtt-broker.md."""
    serial: SerialConfig = Field(default_factory=SerialConfig)
    """Boards on serial lines ([serial]): configured ports and USB hot-plug; docs/device-serial.md."""

    groups: dict[str, GroupConfig] = Field(default_factory=dict)
    """Tool groups ([groups.<name>]): /mcp serves every enabled one, /mcp/<name> one (docs/groups.md)."""
    groups_separator: str = "__"
    """Between slot and tool in /mcp names: <slot>__<tool> as the original MCP bridge named them."""

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: dict[str, GroupConfig]) -> dict[str, GroupConfig]:
        toggles: dict[str, str] = {}
        for name in value:
            if not GROUP_NAME.match(name):
                raise ValueError(
                    f"group {name!r}: a group name is 1 to 64 letters, digits, _ or -, starting with a letter "
                    "or digit (it is a URL path segment, /mcp/<name>)"
                )
            if name in RESERVED_GROUP_NAMES:
                raise ValueError(f"group {name!r}: reserved ({', '.join(sorted(RESERVED_GROUP_NAMES))}); rename it")
            other = toggles.setdefault(group_env_name(name), name)
            if other != name:
                raise ValueError(
                    f"groups {other!r} and {name!r} would share the toggle {group_env_name(name)}; rename one"
                )
        return value

    @field_validator("groups_separator")
    @classmethod
    def _separator(cls, value: str) -> str:
        if not GROUPS_SEPARATOR.match(value):
            raise ValueError('use 1 to 4 of the characters _ and -, e.g. "__" (the default) or "-"')
        return value

    @model_validator(mode="after")
    def _upstreams_declared(self) -> GatewayConfig:
        if self.slots.only_declared:
            for name in self.upstreams.names():
                if name not in self.slots.declared:
                    raise ValueError(
                        f"upstream {name!r}: slots.only_declared is true but the slot is not declared; "
                        f"add [slots.declared.{name}]"
                    )
        return self

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def auth_configured(self) -> bool:
        """Client authentication is set up ([auth]); a LAN bind then needs no --insecure-lan."""
        return self.auth.configured

    @property
    def provider_auth_configured(self) -> bool:
        """Provider authentication is set up ([providers.auth] mode other than "none")."""
        return self.providers.auth.mode != "none"

    @property
    def lan_open_sides(self) -> list[str]:
        """What a non-loopback bind leaves unauthenticated: "clients" (no [auth]) and "providers"
        ([providers.auth] mode = "none"). A LAN bind needs both closed, or --insecure-lan."""
        if self.is_loopback:
            return []
        sides = [] if self.auth_configured else ["clients"]
        return sides if self.provider_auth_configured else [*sides, "providers"]

    @property
    def insecure_lan_open(self) -> list[str]:
        """The sides left open under --insecure-lan (empty without it): every log line and broker_info name them."""
        return self.lan_open_sides if self.insecure_lan else []

    @property
    def lan_without_auth(self) -> bool:
        """Listening on the network with client or provider authentication off (only possible with --insecure-lan)."""
        return bool(self.insecure_lan_open)

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
        for depth, part in enumerate(path[:-1], start=1):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                # MCP_GATEWAY_LIMITS=5 next to MCP_GATEWAY_LIMITS__MAX_SLOTS=3: no table to set a key in.
                above = ".".join(path[:depth])
                raise ConfigError(
                    f"environment variable {name}: {sources.get(above, above)} already sets {above!r} to a value "
                    "that is not a table, so no key can be set inside it; remove one of the two"
                )
            node = child
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
    except UnicodeDecodeError as exc:
        # TOML is UTF-8; tomllib decodes before it parses, so this is not a TOMLDecodeError.
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from exc
    except OSError as exc:  # a directory, a name too long, ...
        raise ConfigError(f"config file {path}: not readable ({exc.strerror or exc})") from exc


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
        existing = node.get(parts[-1])
        # A repeatable flag (--stdio NAME=COMMAND) adds to the entries of the file and environment.
        node[parts[-1]] = [*existing, *value] if isinstance(value, list) and isinstance(existing, list) else value
        sources[key] = f"command-line flag for {key}"
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _describe(first["loc"])
        origin = _origin_of(key, sources, file_label)
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{origin}: unknown setting {key!r}; see docs/configuration.md") from exc
        raise ConfigError(f"{origin}: setting {key!r}: {first['msg']}") from exc
    apply_group_toggles(config, environ)
    return config


GROUP_TOGGLE_VALUES = {"true": True, "false": False}


def apply_group_toggles(config: GatewayConfig, environ: Mapping[str, str]) -> None:
    """MCP_GROUP_<NAME>=true|false turns [groups.<name>] on or off (read once, at start).

    Fails closed like MCP_GATEWAY_*: a value other than true or false, or a variable naming no
    configured group (a typo would otherwise leave a group silently in its default state), stops
    the gateway with a message naming the variable."""
    by_variable = {group_env_name(name): name for name in config.groups}
    for variable, text in sorted(environ.items()):
        if not variable.startswith(GROUP_ENV_PREFIX):
            continue
        name = by_variable.get(variable)
        if name is None:
            known = ", ".join(sorted(by_variable)) or "none: no [groups.<name>] is configured"
            raise ConfigError(
                f"environment variable {variable}: no such group; toggles of the configured groups: {known}. "
                "Fix the name, define the group under [groups.<name>], or remove the variable"
            )
        value = GROUP_TOGGLE_VALUES.get(text.strip().lower())
        if value is None:
            raise ConfigError(f"environment variable {variable}: {text[:40]!r} is not true or false")
        group = config.groups[name]
        group.enabled = value
        group._enabled_by = f"environment variable {variable}"


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
