"""Client authentication: the entry-gate step that establishes who calls a client endpoint.

It runs after the Origin/Host check, and only when [auth] configures something (an unauthenticated
loopback gateway does not pay for it). It covers every client way in: `is_client_path` is the one
predicate, and it counts every path that is not the gateway's own (provider sockets, /healthz,
/readyz, /.well-known/...), so the other ways in (/<slot>/sse, /<slot>/messages, a raw WebSocket at
/<slot>) and any new one are protected without being listed anywhere. /metrics needs a caller with
the `metrics` scope once client authentication is configured.

Credentials are checked by a chain of verifiers, one module per kind (static_tokens.py, oauth.py,
request signing): each says "not mine", "this caller" or "refused" (verifier.py). A caller must then
hold the scopes [auth] required_scopes names for the slot. The caller is stored on the request
(request_principal.py) for the handlers: sessions belong to the caller that opened them.

Each request calls one OAuth resource: /<slot>/mcp (Streamable HTTP, the raw WebSocket), /<slot>/sse
(legacy SSE and its message POSTs), /mcp (the tool groups) or /metrics. Without public_url it is named
back as the client spelled its URL (its Host when that names this gateway, its slot segment), since an
OAuth client refuses metadata naming another URL (RFC 9728 section 3.3); an access token's audience
may name it in any spelling on any name of this gateway, and a slot's /mcp and /sse alike.

Refusals follow RFC 6750 and RFC 9728: 401 with `WWW-Authenticate: Bearer resource_metadata="..."`
(plus error="invalid_token" when a token was sent and is bad), 403 with error="insufficient_scope",
each with a JSON body that says what to do. No credential is ever logged, echoed or passed on.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.config.hosts import Authority, HostAllowList, MalformedAuthority, parse_authority
from gateway.core.gateway import Gateway
from gateway.core.groups.views import BRIDGE_PATH, BRIDGE_TARGET, is_bridge_path
from gateway.core.names import ALL_SLOT, BROKER_SLOT, SlotNameError, check_slot_name, decode_path_segment
from gateway.core.principal import Principal
from gateway.http_answers import http_error, json_response
from gateway.policy.hmac_auth import HmacVerifier
from gateway.policy.oauth import OAuthVerifier, protected_resource_metadata
from gateway.policy.origin import LOOPBACK_HOSTS
from gateway.policy.request_principal import PRINCIPAL_KEY
from gateway.policy.rules.subjects import caller_name, subjects_of
from gateway.policy.static_tokens import StaticTokenVerifier, regranted
from gateway.policy.verifier import AuthFailure, Endpoint, Verifier, bearer_token
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.client_auth")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"
METRICS_SCOPE = "metrics"
WELL_KNOWN_PREFIX = "/.well-known/"
METADATA_PREFIX = "/.well-known/oauth-protected-resource"
REALM = "mcp-gateway"
RETRY_AFTER_S = 5
SSE_SEGMENT = "sse"
LEGACY_SSE_SEGMENTS = frozenset({SSE_SEGMENT, "messages"})
"""The legacy HTTP+SSE paths of a slot (GET /<slot>/sse, POST /<slot>/messages): one resource, /<slot>/sse."""
RESOURCE_SEGMENTS = frozenset({"mcp", SSE_SEGMENT})
"""How a slot's resources end: /<slot>/mcp (Streamable HTTP, the raw WebSocket) and /<slot>/sse (legacy SSE)."""
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_ORIGINS = 64
"""Host headers remembered with the origin they give (a few names reach one gateway; any may arrive)."""
SEGMENT_AS_SENT = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+")
"""An RFC 3986 path segment: named back to the client as it sent it (it cannot break a quoted header value)."""
HOST_AS_SENT = re.compile(r"(?:[A-Za-z0-9.\-_]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")

VerifierFactory = Callable[[GatewayConfig, Metrics], Verifier | None]

VERIFIER_FACTORIES: tuple[VerifierFactory, ...] = (
    # First: a request that carries signing headers is judged by its signature, whatever else it sends.
    HmacVerifier.from_config,
    StaticTokenVerifier.from_config,
    OAuthVerifier.from_config,
)
"""The chain, in order. A factory returns None when its kind is not configured, and raises
ConfigError when its configuration cannot be used. A new kind of credential (signed requests, say)
is one module with a verifier and one line here."""


# -- which requests need a caller ------------------------------------------------------------------


OPEN_METHODS = frozenset({"GET", "HEAD"})
"""The only methods the provider upgrades, probes, /metrics and /.well-known documents answer; any other
method on those paths reaches the client routes (POST /provider/mcp is slot "provider"), so it is a
client request and authenticated as one."""


def is_provider_path(raw_path: str) -> bool:
    return raw_path in ("/providers", "/provider") or raw_path.startswith("/provider/")


def is_client_path(raw_path: str, method: str = "GET") -> bool:
    """True for every way a client reaches a slot (/<slot>/mcp, /_all/mcp, /_broker/mcp, and any later
    one): everything except provider sockets, health checks, /metrics and /.well-known documents,
    which are fetched with GET (or HEAD) only."""
    return method not in OPEN_METHODS or not (
        raw_path in OPEN_PATHS
        or raw_path == METRICS_PATH
        or raw_path.startswith(WELL_KNOWN_PREFIX)
        or is_provider_path(raw_path)
    )


def path_slot(raw_path: str) -> str | None:
    """The slot a client path names: its first segment, percent-decoded (/pump-1/mcp -> pump-1)."""
    segment = raw_path[1:].split("/", 1)[0]
    return decode_path_segment(segment) if segment else None


def slot_resource_path(raw_path: str) -> tuple[str | None, str]:
    """The slot a client path calls and the path of its resource, spelled as the client spelled the slot.

    /pump-1/mcp, the raw WebSocket at /pump-1 and any other path under /pump-1 call the resource
    /pump-1/mcp; /pump-1/sse and /pump-1/messages call /pump-1/sse. The slot's segment stays as sent
    (/line2:pump-1/mcp is not rewritten /line2%3Apump-1/mcp) when it is a plain RFC 3986 segment, since
    an OAuth client checks that the resource it is told about is the URL it used (RFC 9728 section 3.3).
    A path naming no slot gives (None, "/")."""
    first, _, rest = raw_path[1:].partition("/")
    if not first:
        return None, "/"
    slot = decode_path_segment(first)
    spelled = first if SEGMENT_AS_SENT.fullmatch(first) else quote(slot, safe="", errors="surrogateescape")
    legacy = bool(rest) and "/" not in rest and decode_path_segment(rest) in LEGACY_SSE_SEGMENTS
    return slot, f"/{spelled}/{SSE_SEGMENT if legacy else 'mcp'}"


def resource_key(path: str) -> tuple[str, str] | None:
    """Which endpoint a resource path names, however it is spelled: ("slot", name) for /<slot>/mcp and
    /<slot>/sse alike (one token serves both transports of a slot), ("bridge", "") for /mcp and the paths
    it serves, ("metrics", "") for /metrics; None for a path that is no resource of this gateway."""
    if path == METRICS_PATH:
        return ("metrics", "")
    if is_bridge_path(path):
        return ("bridge", "")
    segments = path.split("/")
    if len(segments) != 3 or segments[0] or not segments[1]:
        return None
    if decode_path_segment(segments[2]) not in RESOURCE_SEGMENTS:
        return None
    return ("slot", decode_path_segment(segments[1]))


class RequiredScopes:
    """[auth] required_scopes: an exact key wins, else the first matching pattern in file order."""

    def __init__(self, table: Mapping[str, list[str]]) -> None:
        self.exact = {key: tuple(scopes) for key, scopes in table.items()}
        self.patterns = [
            (re.compile(fnmatch.translate(key)), tuple(scopes))
            for key, scopes in table.items()
            if any(char in key for char in "*?[")
        ]

    def for_slot(self, slot: str | None) -> tuple[str, ...]:
        if slot is None:
            return ()
        scopes = self.exact.get(slot)
        if scopes is not None:
            return scopes
        for pattern, pattern_scopes in self.patterns:
            if pattern.match(slot):
                return pattern_scopes
        return ()

    def exact_for(self, slot: str) -> tuple[str, ...]:
        """The scopes of `slot`'s own key, patterns left out (none: ())."""
        return self.exact.get(slot, ())

    def supported(self, endpoint: Endpoint) -> tuple[str, ...]:
        """The scopes a client should ask for to use `endpoint` fully: its metadata's scopes_supported.

        A slot's, `_broker`'s and /metrics' are their own required scopes. `_all` and the tool groups
        (`_mcp`) serve the tools of every slot whose scopes the caller holds, so theirs are their own
        plus those of every slot the configuration names (keys not starting with "_", patterns
        included): which slots they serve changes at run time (a board connects, a group's pattern
        matches a new slot), and the configuration is what is known ahead."""
        if endpoint.slot not in (ALL_SLOT, BRIDGE_TARGET):
            return endpoint.required_scopes
        every_slot = (scope for key, scopes in self.exact.items() if not key.startswith("_") for scope in scopes)
        return tuple(sorted({*endpoint.required_scopes, *every_slot}))


# -- answers -----------------------------------------------------------------------------------------


def _header_text(text: str) -> str:
    """RFC 6750 error_description characters only (printable ASCII without '"' and '\\')."""
    return "".join(char if " " <= char <= "~" and char not in '"\\' else "'" if char == '"' else "?" for char in text)


def www_authenticate(
    *,
    resource_metadata: str | None,
    error: str | None = None,
    description: str | None = None,
    scope: str | None = None,
) -> str:
    params: list[str] = []
    if resource_metadata is None:
        params.append(f'realm="{REALM}"')
    if error is not None:
        params.append(f'error="{error}"')
    if description is not None:
        params.append(f'error_description="{_header_text(description)}"')
    if scope is not None:
        params.append(f'scope="{scope}"')
    if resource_metadata is not None:
        params.append(f'resource_metadata="{resource_metadata}"')
    return "Bearer " + ", ".join(params)


def refusal(failure: AuthFailure, endpoint: Endpoint, supported: tuple[str, ...] = ()) -> web.Response:
    """The HTTP answer to `failure`. `supported`: the scopes a client should ask for to use the endpoint
    fully (its metadata's scopes_supported, RequiredScopes.supported)."""
    response = http_error(failure.status, failure.error, failure.description)
    # MCP (2025-11-25 on) has a 401 name the scopes to ask for, which a client prefers to the metadata's
    # scopes_supported: the same list, so that an agent's token for `_all` or a group sees the tools of
    # every slot it serves; a 403 for missing scopes names the endpoint's own (RFC 6750 section 3).
    needed = " ".join(supported or endpoint.required_scopes) or None
    if failure.status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    elif failure.reason == "missing":
        response.headers["WWW-Authenticate"] = www_authenticate(resource_metadata=endpoint.metadata_url, scope=needed)
    elif failure.status == 403:
        response.headers["WWW-Authenticate"] = www_authenticate(
            resource_metadata=endpoint.metadata_url,
            error=failure.error,
            description=failure.description,
            scope=" ".join(endpoint.required_scopes),
        )
    else:
        response.headers["WWW-Authenticate"] = www_authenticate(
            resource_metadata=endpoint.metadata_url, error=failure.error, description=failure.description, scope=needed
        )
    return response


def own_names(config: GatewayConfig) -> HostAllowList:
    """The hosts a client may reach this gateway at without public_url, as the Host check accepts them:
    the loopback names, the bind address and allowed_hosts (compared as addresses)."""
    return HostAllowList((*LOOPBACK_HOSTS, config.host), config.allowed_hosts)


def url_authority(url: SplitResult) -> Authority | None:
    """`url`'s authority read strictly as `host[:port]` (gateway/config/hosts.py), None when it is not one:
    urlsplit's hostname ignores what follows ']' (`http://[::1].evil.example/` has hostname ::1), and
    a URL with user info names no resource of this gateway."""
    try:
        return parse_authority(url.netloc)
    except MalformedAuthority:
        return None


def resource_name(slot: str | None) -> str:
    if slot is None:
        return "mcp-gateway metrics"
    if slot == ALL_SLOT:
        return "mcp-gateway: every slot in the aggregate (_all)"
    if slot == BROKER_SLOT:
        return "mcp-gateway: the gateway itself (_broker)"
    if slot == BRIDGE_TARGET:
        return "mcp-gateway: tool groups (/mcp, /mcp/<group>, /groups, /mcp-servers)"
    return f'mcp-gateway slot "{slot}"'


# -- the step ----------------------------------------------------------------------------------------


class ClientAuth:
    def __init__(self, config: GatewayConfig, gateway: Gateway, verifiers: list[Verifier]) -> None:
        self.config = config
        self.gateway = gateway
        self.metrics = gateway.metrics
        self.verifiers = verifiers
        self.oauth = config.auth.oauth
        self.required = RequiredScopes(config.auth.required_scopes)
        self._base: tuple[int | None, str] | None = None
        self._origins: dict[str, str] = {}
        self.names = own_names(config)
        self.scopes_changed: Callable[[], None] = _unannounced
        """Called after a reload changed [auth] required_scopes or a static token's scopes, or an edited token
        file changed a token's scopes: who sees which slot's tools changes (the composition root tells every
        listener its tools/list may differ)."""
        self._install_hooks()

    @classmethod
    def from_config(
        cls, config: GatewayConfig, gateway: Gateway, factories: tuple[VerifierFactory, ...] = VERIFIER_FACTORIES
    ) -> ClientAuth | None:
        """The authentication step, or None when [auth] configures nothing (ConfigError when unusable)."""
        if not config.auth_configured:
            return None
        verifiers = [verifier for factory in factories if (verifier := factory(config, gateway.metrics)) is not None]
        return cls(config, gateway, verifiers)

    def swap(self, config: GatewayConfig, verifiers: list[Verifier]) -> None:
        """Use `config`'s [auth] and `verifiers` (prepared by a configuration reload) from the next request on.

        The slot-scope hooks of `_all` and the tool groups are pointed at the new required scopes; a
        verifier dropped here is closed by the caller, a new one started by it. Changed required scopes
        are announced (`scopes_changed`) once the hooks point at them."""
        scopes_before = self.config.auth.required_scopes
        grants_before = self.token_grants()
        self.config = config
        self.verifiers = verifiers
        self.oauth = config.auth.oauth
        self.required = RequiredScopes(config.auth.required_scopes)
        self.names = own_names(config)
        self._origins = {}
        self._install_hooks()
        self.install_scopes()
        if (
            list(config.auth.required_scopes.items()) != list(scopes_before.items())  # patterns match in order
            or regranted(grants_before, self.token_grants())
        ):
            self.scopes_changed()

    def install_scopes(self) -> None:
        """Point the scope hooks of `_all`, the tool groups and `_broker`'s operator rule at the required
        scopes in force."""
        self.gateway.aggregate.slot_scopes = self.required.for_slot
        self.gateway.aggregate.exact_scopes = self.required.exact_for
        self.gateway.groups.slot_scopes = self.required.for_slot

    def token_grants(self) -> dict[str, frozenset[str]]:
        """Which static token caller holds which scopes (a reload that changes them is announced)."""
        return {
            name: scopes
            for verifier in self.verifiers
            if isinstance(verifier, StaticTokenVerifier)
            for name, scopes in verifier.grants().items()
        }

    def _install_hooks(self) -> None:
        for verifier in self.verifiers:
            if isinstance(verifier, OAuthVerifier):
                verifier.audience_matches = self.same_resource
            elif isinstance(verifier, StaticTokenVerifier):
                verifier.grants_changed = self._tell_scopes_changed

    def _tell_scopes_changed(self) -> None:
        self.scopes_changed()  # looked up when called: the composition root sets it after __init__

    # -- what a request calls ------------------------------------------------------------------

    def base_url(self) -> str:
        port = self.gateway.bound_port
        if self._base is None or self._base[0] != port:
            self._base = (port, self.gateway.base_url())
            self._origins = {}
        return self._base[1]

    def port(self) -> int:
        port = self.gateway.bound_port
        return port if port is not None else self.config.port

    def origin(self, request: web.Request) -> str:
        """The scheme and authority of the resources a request is told about: public_url when configured
        (behind a proxy, clients use that); else the Host the client used when it names this gateway (a
        loopback name, the bind address or an allowed_hosts entry) on the port it listens on; else the
        canonical base URL."""
        base = self.base_url()
        host = request.headers.get("Host")
        if self.config.public_url or host is None:
            return base
        origin = self._origins.get(host)
        if origin is None:
            origin = self._origin_of(host) or base
            if len(self._origins) >= MAX_ORIGINS:
                self._origins.clear()
            self._origins[host] = origin
        return origin

    def _origin_of(self, host: str) -> str | None:
        if not HOST_AS_SENT.fullmatch(host):
            return None
        scheme = self.config.scheme
        url = urlsplit(f"{scheme}://{host}")
        if not self.on_this_listener(url, scheme):
            return None
        return f"{scheme}://{host.lower()}"

    def on_this_listener(self, url: SplitResult, scheme: str) -> bool:
        """Whether `url`'s host is a name of this gateway and its port the one it listens on."""
        authority = url_authority(url)
        if authority is None:
            return False
        return self.names.admits(authority) and (authority.port or DEFAULT_PORTS[scheme]) == self.port()

    def same_resource(self, audience: str, resource: str) -> bool:
        """Whether an access token's audience names the endpoint whose resource is `resource` (OAuthVerifier).

        With public_url: a URL of the public origin (scheme, host and port) whose path names the same
        endpoint. Without: the gateway's scheme, a name of this gateway (as for the Host check) and the
        port it listens on, and a path naming the same endpoint in any spelling (%3A or :, a slot's /mcp
        or its /sse). Nothing else: not another slot, port, host or scheme, nor a query or a user."""
        if "?" in audience or "#" in audience:
            return False
        aud = urlsplit(audience)
        if aud.username is not None or aud.password is not None:
            return False
        public = self.config.public_url
        if public:
            base = urlsplit(self.base_url())
            aud_authority, base_authority = url_authority(aud), url_authority(base)
            if aud_authority is None or base_authority is None or aud.scheme.lower() != base.scheme:
                return False
            same_origin = (aud_authority.host, aud_authority.port or DEFAULT_PORTS[base.scheme]) == (
                base_authority.host,
                base_authority.port or DEFAULT_PORTS[base.scheme],
            )
            if not same_origin:
                return False
            prefix = base.path.rstrip("/")
        else:
            if aud.scheme.lower() != self.config.scheme or not self.on_this_listener(aud, self.config.scheme):
                return False
            prefix = ""
        if not aud.path.startswith(prefix + "/"):
            return False
        key = resource_key(aud.path[len(prefix) :])
        return key is not None and key == resource_key(urlsplit(resource).path[len(prefix) :])

    def endpoint(self, slot: str | None, path: str, origin: str | None = None) -> Endpoint:
        """The endpoint of `slot` (None for /metrics and paths naming none) whose resource has `path`
        (/pump-1/mcp, /pump-1/sse, /mcp for the tool groups, /metrics), at `origin` (default: the base URL)."""
        origin = origin or self.base_url()
        scopes: tuple[str, ...]
        if path == METRICS_PATH:
            scopes = (METRICS_SCOPE,)
        elif slot is not None:
            scopes = self.required.for_slot(slot)
        else:
            scopes = ()
        metadata = f"{origin}{METADATA_PREFIX}{path}" if self.oauth is not None and path != "/" else None
        return Endpoint(slot=slot, resource=f"{origin}{path}", metadata_url=metadata, required_scopes=scopes)

    # -- the entry-gate check ------------------------------------------------------------------

    def request_endpoint(self, request: web.Request) -> Endpoint | None:
        """What `request` calls, as authentication sees it; None for a path that needs no caller."""
        path = request.rel_url.raw_path
        if path == METRICS_PATH and request.method in OPEN_METHODS:
            return self.endpoint(None, METRICS_PATH, self.origin(request))
        if not is_client_path(path, request.method):
            return None
        if is_bridge_path(path):
            # /mcp, /mcp/<group>, /groups, /mcp-servers: one resource (an OAuth token for /mcp serves them
            # all), the scopes of required_scopes key "_mcp"; each group still filters by slot scopes.
            return self.endpoint(BRIDGE_TARGET, BRIDGE_PATH, self.origin(request))
        slot, resource_path = slot_resource_path(path)
        return self.endpoint(slot, resource_path, self.origin(request))

    async def check(self, request: web.Request) -> web.StreamResponse | None:
        endpoint = self.request_endpoint(request)
        if endpoint is None:
            return None
        outcome = await self.judge(request, endpoint)
        if isinstance(outcome, AuthFailure):
            return refusal(outcome, endpoint, self.required.supported(endpoint))
        request[PRINCIPAL_KEY] = outcome
        return None

    async def recheck(self, request: web.Request) -> Principal | AuthFailure | None:
        """The credential of `request`, the upgrade of a raw WebSocket (or a stream) that is still open,
        judged exactly as the entry gate judged it, with the verifiers and required scopes in force now:
        the caller with the scopes it holds now, or why it no longer stands (a revoked static token, an
        expired access token, a scope of the endpoint taken away by a reload); None on an endpoint that
        needs no credential."""
        endpoint = self.request_endpoint(request)
        if endpoint is None:
            return None
        return await self.judge(request, endpoint)

    async def judge(self, request: web.Request, endpoint: Endpoint) -> Principal | AuthFailure:
        """The caller of `request` if its credential is good and holds the endpoint's scopes (a refusal
        is counted and logged here)."""
        outcome = await self.authenticate(request, endpoint)
        if isinstance(outcome, Principal) and not outcome.has_scopes(frozenset(endpoint.required_scopes)):
            outcome = AuthFailure(
                "insufficient_scope",
                f"{caller_name(subjects_of(outcome))} may not call this endpoint: it needs the scope(s) "
                f"{' '.join(endpoint.required_scopes)} and was granted {' '.join(sorted(outcome.scopes)) or 'none'}.",
                status=403,
                error="insufficient_scope",
            )
        if isinstance(outcome, AuthFailure):
            count_refusal(self.metrics, outcome.reason, request.rel_url.raw_path, request.remote)
        return outcome

    async def authenticate(self, request: web.Request, endpoint: Endpoint) -> Principal | AuthFailure:
        bearer = bearer_token(request)
        if isinstance(bearer, AuthFailure):
            return bearer
        for verifier in self.verifiers:
            outcome = await verifier.verify(request, bearer, endpoint)
            if outcome is not None:
                return outcome
        if bearer is not None:
            return AuthFailure(
                "invalid", "The bearer token is not known to this gateway (mistyped, revoked, or for another gateway)."
            )
        if "Authorization" in request.headers:
            return AuthFailure("malformed", "Only Authorization: Bearer <token> is accepted here.")
        return AuthFailure("missing", self.how_to_authenticate(endpoint), error="unauthorized")

    def how_to_authenticate(self, endpoint: Endpoint) -> str:
        ways = []
        if self.oauth is not None:
            # A path naming no endpoint has no metadata, and no audience a token could be asked for.
            named = f" with audience {endpoint.resource} (metadata: {endpoint.metadata_url})"
            ways.append(f"an access token from {self.oauth.issuer}{named if endpoint.metadata_url else ''}")
        if self.config.auth.tokens or self.config.auth.token_files:
            ways.append("a client token of this gateway ([auth] tokens, or one made with `mcp-gateway token create`)")
        if not ways and self.config.auth.hmac is not None:
            return (
                "This endpoint needs authentication: sign the request with an [auth.hmac] key "
                "(X-MCPGW-Key-Id, X-MCPGW-Timestamp, X-MCPGW-Nonce, X-MCPGW-Signature; see "
                "docs/security-auth.md#signed-stdio-bridge)."
            )
        if not ways:
            ways.append("a credential this gateway accepts")
        signed = (
            " Or sign the request with an [auth.hmac] key (docs/security-auth.md#signed-stdio-bridge)."
            if self.config.auth.hmac
            else ""
        )
        return (
            "This endpoint needs authentication: send Authorization: Bearer <token> with "
            + " or ".join(ways)
            + "."
            + signed
        )

    # -- RFC 9728 metadata ---------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        if self.oauth is None:
            return []
        return [web.get(METADATA_PREFIX + r"/{tail:[\s\S]*}", self.metadata)]

    async def metadata(self, request: web.Request) -> web.Response:
        """RFC 9728 metadata at /.well-known/oauth-protected-resource<resource path> (path insertion), for
        every spelling of a resource path the gateway serves, naming it as the client spelled it."""
        assert self.oauth is not None
        tail = request.rel_url.raw_path[len(METADATA_PREFIX) :]
        origin = self.origin(request)
        if tail == METRICS_PATH:
            endpoint = self.endpoint(None, METRICS_PATH, origin)
        elif is_bridge_path(tail):  # /mcp, /mcp/<group>, /groups, /mcp-servers: one resource, <base>/mcp
            endpoint = self.endpoint(BRIDGE_TARGET, BRIDGE_PATH, origin)
        else:
            parts = tail.split("/")
            if not (len(parts) == 3 and parts[0] == "" and parts[1] and parts[2] in RESOURCE_SEGMENTS):
                return http_error(
                    404,
                    "not_found",
                    f"Protected-resource metadata lives at {METADATA_PREFIX}/<slot>/mcp and "
                    f"{METADATA_PREFIX}/<slot>/sse (and {METADATA_PREFIX}/mcp, {METADATA_PREFIX}/metrics).",
                )
            slot, path = slot_resource_path(tail)
            try:
                if slot not in (ALL_SLOT, BROKER_SLOT):
                    check_slot_name(slot or "")
            except SlotNameError as exc:
                return http_error(404, "unknown_slot", str(exc))
            endpoint = self.endpoint(slot, path, origin)
        return json_response(
            protected_resource_metadata(
                endpoint.resource, self.oauth, self.required.supported(endpoint), resource_name(endpoint.slot)
            )
        )

    # -- life cycle and posture ----------------------------------------------------------------

    def posture(self) -> dict[str, Any]:
        """For broker_info: how many static tokens and HMAC keys, which OAuth issuer (never a secret)."""
        posture: dict[str, Any] = {"static_tokens": 0, "oauth": None, "hmac_keys": 0}
        for verifier in self.verifiers:
            posture.update(verifier.posture())
        return posture

    async def start(self) -> None:
        posture = self.posture()
        log.info(
            "client authentication required: %d static tokens, OAuth issuer %s, %d HMAC keys",
            posture["static_tokens"],
            posture["oauth"] or "none",
            posture["hmac_keys"],
        )
        if posture["static_tokens"] and not self.config.tls.enabled and not self.config.is_loopback:
            log.warning(
                "static tokens are accepted only from this machine while TLS is off (listening on %s): clients "
                "on other machines get 401 not_tls until [tls] is configured",
                self.config.host,
            )
        for verifier in self.verifiers:
            await verifier.start()

    async def close(self) -> None:
        for verifier in self.verifiers:
            await verifier.close()


def count_refusal(metrics: Metrics, reason: str, path: str, peer: str | None) -> None:
    """Count one refusal in mcpgw_auth_failures_total and log it at debug level: the reason, the path and
    the peer address, never the credential. Every refusal of a caller goes through here, the entry gate's
    and the session-era transports' (a session another caller opened), so they read alike in the log."""
    metrics.auth_failures.labels(reason).inc()
    log.debug("client authentication refused", extra={"reason": reason, "path": path[:200], "peer": peer})


CLIENT_AUTH_KEY = web.AppKey("client_auth", ClientAuth)
"""Where the composition root keeps the step on the application, when [auth] configures one."""


def check_client_auth(config: GatewayConfig) -> None:
    """Build every configured verifier once, as `run` would (for `config check`); ConfigError if unusable."""
    for factory in VERIFIER_FACTORIES:
        factory(config, Metrics())


def _unannounced() -> None:
    """No listener to tell (a ClientAuth built without the composition root, as some tests do)."""
