"""[limits]: every bound the gateway enforces, with the request rate buckets and the connection caps."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from gateway.config.base import MIN_TIMEOUT_S, PositiveInt, Section
from gateway.core.jsonrpc import MAX_DEPTH_CEILING

MAX_FRAME_BYTES = 1 << 30
"""The largest max_frame_bytes: 1 GiB. aiohttp keeps its WebSocket message bound in a C unsigned int, so
one of 4 GiB or more fails every WebSocket handshake; a message that large would not fit a gateway's
memory anyway."""
MAX_OUTBOX_BYTES = 1 << 30
"""The largest max_outbox_bytes: 1 GiB, as MAX_FRAME_BYTES; one client session holding more would not fit
a gateway's memory."""
MAX_HEADER_BYTES = 1 << 20
"""The largest max_header_bytes: 1 MiB, a hundred times aiohttp's default. aiohttp keeps it in a C size_t:
a larger number (a typo of extra digits) would fail every connection the gateway accepts."""
MAX_HEADERS = 65_535
"""The largest max_headers (aiohttp keeps it in a C size_t too); a real request has a few dozen."""
MAX_DESCRIPTORS = 1 << 20
"""The largest fd_reserve and max_refusing: Linux's default fs.nr_open, the most descriptors a process
may have at all."""
MIN_RATE_PER_S = 1e-6
"""The smallest rate_per_s other than 0 (off): one request per 11.6 days. A refused request's wait for a
token is at most 1 / rate_per_s, so it stays below the 30 days of the longest duration setting
(MAX_DURATION_S) and fits Retry-After and retryAfterMs as the numbers they are."""
MIN_MESSAGE_BYTES = 1024
"""The smallest max_header_bytes and max_frame_bytes (and below which max_body_bytes is warned of): an
MCP initialize takes 150 to 400 bytes, its answer more, and a request's line and headers (a bearer
token, cookies) easily a few hundred; below it the gateway answers nothing useful, not even /healthz."""


class RateBucketConfig(Section):
    """One token bucket: `rate_per_s` requests per second on average, `burst` at once after a quiet spell."""

    rate_per_s: Annotated[float, Field(ge=0)]
    """Refill rate in requests per second; 0 turns this limit off, else at least MIN_RATE_PER_S."""
    burst: PositiveInt
    """Requests let through at once by a full bucket."""

    @field_validator("rate_per_s")
    @classmethod
    def _slowest(cls, rate: float) -> float:
        if 0 < rate < MIN_RATE_PER_S:
            raise ValueError(
                f"{rate:g} is below the slowest rate, {MIN_RATE_PER_S:g} (one request per 11.6 days: the wait "
                "for a token must stay below the 30 days of the longest duration); give 0 to turn the limit off"
            )
        return rate


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
    """[limits.connections]: every TCP connection to the listener, whatever it carries
    (docs/security-limits.md, "Connections").

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
    max_refusing: Annotated[int, Field(gt=0, le=MAX_DESCRIPTORS)] = 64
    """Connections over a cap held at once to read their request and answer it 503 (each at most
    header_timeout_s); beyond that an over-cap connection is closed unanswered. At most MAX_DESCRIPTORS."""
    fd_reserve: Annotated[int, Field(gt=0, le=MAX_DESCRIPTORS)] = 256
    """File descriptors kept for everything but client and board connections: child processes' pipes,
    serial ports, upstream and MQTT connections, logs, and connections being accepted. At most
    MAX_DESCRIPTORS; with max_refusing it comes off the descriptor limit before max_connections does."""
    idle_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 60.0
    """A keep-alive connection with no request for this long is closed. Above the idle expiry of HTTP
    client pools (httpx 5 s, aiohttp 15 s), so a client does not find its pooled connection just closed."""
    header_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 15.0
    """A request's headers must be complete this long after the connection opened (its first request)
    or after the request's first byte (later ones); else 408 and close. Headers arrive in one packet on
    a LAN; 15 s leaves room for TCP retransmissions on poor Wi-Fi."""
    body_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 15.0
    """A request body that stops arriving for this long gets 408 and the connection is closed; also the
    grace before body_min_rate_bytes_per_s applies, and how long an unread body is drained after an answer."""
    body_min_rate_bytes_per_s: Annotated[int, Field(ge=0)] = 1024
    """After body_timeout_s, a request body must have arrived at this average rate, else 408 and close
    (a body dripped a byte at a time). Far below any working link (radio, VPN, cellular); 0 turns it off."""
    handshake_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 30.0
    """A TLS handshake, a /providers socket's first slot claim and a client WebSocket's initialize must
    be done this long after connecting, else the connection is closed (WebSockets with 1008 and a reason).
    A board doing TLS in software over weak Wi-Fi takes seconds; its first frame follows at once."""
    max_header_bytes: Annotated[int, Field(ge=MIN_MESSAGE_BYTES, le=MAX_HEADER_BYTES)] = 8190
    """Longest request line, and longest header line; longer gets 400 (aiohttp's own bound). At least
    1024: a bearer token or a browser's headers fill a few hundred bytes, and below that every request,
    /healthz included, would get 400. At most 1 MiB (MAX_HEADER_BYTES)."""
    max_headers: Annotated[int, Field(gt=0, le=MAX_HEADERS)] = 128
    """Most header lines in one request; more gets 400 (aiohttp's own bound). At most 65535 (MAX_HEADERS)."""

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

    max_frame_bytes: Annotated[int, Field(ge=MIN_MESSAGE_BYTES, le=MAX_FRAME_BYTES)] = 1_048_576
    """Largest WebSocket message a provider or client may send; larger ones close the link with 1009. At
    least 1024: a provider's initialize answer and tool list must fit in one. At most 1 GiB
    (MAX_FRAME_BYTES)."""
    max_body_bytes: PositiveInt = 4_194_304
    """Largest HTTP request body; larger ones get HTTP 413. Below 1024 (no initialize with a client's
    capabilities fits) `config check` and `run` warn (limits_warnings)."""
    max_json_depth: Annotated[int, Field(ge=16, le=MAX_DEPTH_CEILING)] = 64
    """Deepest nesting of objects and arrays in a message from a client or a provider, on every way in;
    deeper ones are refused (-32600 to a client, dropped from a provider). At least 16 (a tool's input
    schema inside tools/list already nests about ten), at most 200, so everything the gateway relays
    stays within what its JSON encoder writes (gateway/core/jsonrpc.py, MAX_DEPTH_CEILING)."""
    max_pending_per_slot: PositiveInt = 256
    """Requests in flight towards one provider."""
    max_pending_per_client: PositiveInt = 64
    """Requests in flight from one client session."""
    max_pending_approvals: PositiveInt = 256
    """Calls waiting for a person's approval (`mcp-gateway approve`), or approved and not yet used, at
    once; past it a new one is refused with -32000 approvals_full."""
    max_pending_approvals_per_caller: PositiveInt = 32
    """As many of one caller's (its principal), so one agent cannot fill max_pending_approvals and keep
    every other caller's calls from reaching a person."""
    max_used_confirmations: PositiveInt = 4096
    """Answered 2026-07-28 confirmations (input_required requestStates) remembered until they expire, so none
    is answered twice; past it a new answer is refused with -32000 confirmations_full until one expires."""
    max_used_confirmations_per_caller: PositiveInt = 256
    """As many of one caller's (its principal), so one caller answering its own questions in a loop cannot
    fill max_used_confirmations and keep every other caller's answers from counting."""
    max_budget_reservations: PositiveInt = 10_000
    """Records in the budget ledger (broker/budget/reserve): past it the oldest settled or expired record is
    dropped, and with every record a live grant a reservation is refused ledger_full."""
    max_budget_reservations_per_caller: PositiveInt = 1_000
    """Live (unsettled, unexpired) reservations made for one caller, so one caller cannot fill the ledger."""
    cancelled_call_hold_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    """How long a governed call that was cancelled or passed its deadline keeps its [[execution_limits]]
    concurrency places at most, waiting for the device's late answer (the device may still be working)."""
    max_batch_messages: PositiveInt = 32
    """Messages in one JSON-RPC batch, which only a session that negotiated 2025-03-26 may send; a
    larger batch is refused whole with -32600. Each request in it still counts against
    max_pending_per_client and the rate limits."""
    max_sessions: PositiveInt = 1024
    """Session-era client sessions held at once (see session_idle_when_full_s for what happens at it)."""
    session_idle_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 1800.0
    """A client session with no request and no open stream for this long is expired (404 afterwards)."""
    session_idle_when_full_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 60.0
    """At max_sessions or a caller's max_sessions_per_principal, a new session ends the one idle the
    longest (the caller's own at its cap) once it has idled this long, instead of being refused."""
    max_slots: PositiveInt = 1024
    """Slots the gateway tracks at once; vacant ones are forgotten, oldest first, to make room."""
    max_devices: PositiveInt = 4096
    """Boards the device registry (devices.db, `mcp-gateway devices`) keeps, about 100 bytes each on disk: a
    hello with a new device id past it takes the row of the board heard longest ago, never one an operator
    adopted or revoked nor one connected now; when every row is such, that hello is not recorded. A registry
    over it (an upgrade, a lowered bound) is kept and loses at most two rows per new board, oldest heard first."""
    max_slots_per_peer: Annotated[int, Field(ge=0)] = 128
    """Slots one WebSocket provider may hold at once, counted by its authenticated identity or, with
    no credential, by its IP address (0: no cap). Keeps one peer from taking every name."""
    vacant_slot_ttl_s: Annotated[float, Field(ge=0)] = 300.0
    """A slot whose provider left is forgotten after this long (declared and configured ones are
    kept); 0 keeps vacant slots until room is needed."""
    notification_queue: PositiveInt = 256
    """Notifications buffered per client stream; a stream that falls further behind is closed."""
    max_outbox_bytes: Annotated[int, Field(ge=MIN_MESSAGE_BYTES, le=MAX_OUTBOX_BYTES)] = 16 * 1024 * 1024
    """JSON-encoded bytes queued for one legacy SSE session or client WebSocket (on top of
    notification_queue); a session whose queue would pass it is ended as one that falls
    notification_queue messages behind. One message larger than it goes out when nothing else is
    queued. At least 1024 (MIN_MESSAGE_BYTES), at most 1 GiB (MAX_OUTBOX_BYTES)."""
    stream_write_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 30.0
    """How long one write to an SSE stream (a GET or listen stream, an SSE answer, a legacy SSE
    session) may wait for a client that does not read; then the stream's connection is aborted."""
    provider_send_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 30.0
    """How long one send to a WebSocket provider (a `/provider/<slot>` socket, or a whole `/providers`
    socket) may wait for a provider that does not read; then the connection is aborted and every request
    pending on it fails at once ("provider stopped reading"). It also bounds a polite close of such a
    link, and so how long frames waiting to be sent are held."""
    provider_send_buffer_bytes: Annotated[int, Field(ge=0, le=64 * 1024 * 1024)] = 64 * 1024
    """The kernel's send buffer of each provider WebSocket (SO_SNDBUF; Linux doubles it). Requests wait
    unwritten while it and the connection's buffer are full, so one whose caller gives up meanwhile never
    reaches the provider; left to itself Linux grows it to megabytes, minutes of requests for a slow
    reader. 0 leaves the kernel's own sizing."""
    sse_keepalive_s: Annotated[float, Field(ge=0.05)] = 15.0
    """Interval of SSE comment lines that keep idle streams open through proxies; at least 0.05 s."""
    max_sse_answer_bytes: PositiveInt = 524_288
    """Largest answer a Streamable HTTP POST gets as one SSE event when it is ready before anything else
    went out on the POST; a larger one goes as application/json to a client that accepts JSON. Below the
    mcp SDK's 1 MiB limit on one SSE event, which a JSON body does not have."""
    max_subscriptions: PositiveInt = 256
    """Open stateless-era subscriptions/listen streams across all clients."""
    max_subscriptions_per_principal: PositiveInt | None = None
    """Open subscriptions/listen streams of one caller (an anonymous one per peer address), so one caller
    cannot hold every max_subscriptions stream. Unset: a quarter of max_subscriptions, at least 1 (64 by
    default): a client needs one stream per endpoint it watches, so a caller watching dozens of slots fits."""
    max_subscription_uri_bytes: PositiveInt = 2048
    """Longest resource URI a client may subscribe to (UTF-8 bytes). 2048 is the length browsers and
    HTTP servers commonly accept for a URL; a device's resource URIs are far shorter."""
    max_subscribed_uris_per_slot: PositiveInt = 256
    """Resource URIs subscribed in one slot at once, by all its clients together (the gateway keeps one
    upstream subscription per URI and asks a 2026-07-28 provider for all of them in one listen request)."""
    max_tools_per_slot: PositiveInt = 1024
    """Tools of one provider the gateway lists; the ones beyond it (in the provider's order) are left out
    and the slot's provider_status says so. Bounds what one provider can make the gateway hold."""
    max_tool_list_bytes_per_slot: PositiveInt = 1_048_576
    """JSON-encoded bytes (each kept tool's encoding, summed) of the tools of one provider the gateway
    lists; the tool that would pass it and every later one (in the provider's order) are left out, the
    pages after it are not read, and the slot's provider_status says so. With max_tools_per_slot alone a
    provider could make each tool nearly a frame long (60 MiB per slot); this bounds the tool lists held
    to max_slots times it, max_slots_per_peer times it for one peer."""
    max_sessions_per_principal: PositiveInt = 64
    """Session-era sessions one principal may hold at once, so one caller cannot use up max_sessions."""
    max_relayed_requests_per_client: PositiveInt = 16
    """Provider requests (sampling, elicitation, roots) waiting on one client's answer at once: per
    session-era session, or per stateless-era call; more are answered -32000 to the provider."""
    max_input_required_states: PositiveInt = 256
    """Stateless-era calls held open after an input_required result until the client retries with
    inputResponses (each ends at its call's deadline); more are answered -32000 to the client."""
    max_input_required_states_per_caller: PositiveInt = 32
    """As many of one caller's (its principal; an anonymous caller per peer address), so one caller that
    never retries cannot fill max_input_required_states and keep every other caller from being asked.
    A held call does not count in max_pending_per_client (no client request is in flight for it)."""
    input_required_gather_ms: PositiveInt = 50
    """After a provider's first request during a stateless-era call, how long the gateway waits for
    more before answering input_required (a provider asking several things at once gets one round)."""
    max_input_rounds: PositiveInt = 16
    """A session-era client's call to a 2026-07-28 provider: input_required rounds the gateway answers
    for it (asking the client, then retrying); a provider that asks more gets the call ended with -32000."""
    max_pattern_ms: Annotated[int, Field(ge=1, le=2000)] = 50
    """How long the regular expressions of a tool's inputSchema (`pattern`, `patternProperties`) may take
    together to check one governed call's arguments; a call they take longer on is refused with -32602
    (data.reason "pattern_timeout"), never forwarded unchecked. A provider's pattern that backtracks
    (`(a|a)+$`) would otherwise hold the event loop for minutes on one crafted string; a pattern in a
    real schema takes microseconds. A check through the schema's `$ref`s (a recursive definition under
    oneOf/anyOf checks a value 2^depth times) is bounded by it too, pattern matches included."""
    max_schema_compile_ms: Annotated[int, Field(ge=1, le=600_000)] = 3000
    """How long a governed call waits for its tool's inputSchema to be compiled (on a thread of its own,
    off the event loop); past it the call is checked against the operator limits only, as for a schema
    that does not compile, and the compile goes on: calls are checked against the schema once it ends.
    A real schema compiles in about a millisecond; a crafted one (thousands of case-insensitive
    wide-range classes) takes minutes."""
    max_schema_compiles_waiting: Annotated[int, Field(ge=0, le=1024)] = 4
    """inputSchemas waiting to be compiled behind the one compiling; a call whose schema finds the queue
    full is checked against the operator limits only, and a later call queues it again."""
    max_schema_code_bytes: Annotated[int, Field(ge=1024, le=64 << 20)] = 1 << 20
    """Longest validator code (Python source that fastjsonschema generates from an inputSchema, about
    900 bytes per patterned property) the gateway compiles; a longer one is a schema that does not
    compile (its calls meet the operator limits only). Python compiles it holding the GIL, so the
    event loop, about 0.2 s per MB."""
    catalog_coalesce_ms: Annotated[int, Field(ge=0, le=10_000)] = 50
    """How long `_all` and the tool groups wait after a provider comes, goes or changes its tools before
    rebuilding their catalogs and announcing the change, so a burst (every board reconnecting after a
    restart) costs one rebuild; a client that lists sooner gets the catalog rebuilt for it at once."""
    rate: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    connections: ConnectionLimitsConfig = Field(default_factory=ConnectionLimitsConfig)

    @model_validator(mode="after")
    def _subscriptions_per_principal(self) -> LimitsConfig:
        if self.max_subscriptions_per_principal is None:
            # Set without validate_assignment's round trip: this runs inside validation.
            object.__setattr__(self, "max_subscriptions_per_principal", max(1, self.max_subscriptions // 4))
        return self

    @property
    def subscriptions_per_principal(self) -> int:
        """max_subscriptions_per_principal as it applies (filled in from max_subscriptions when unset)."""
        return self.max_subscriptions_per_principal or max(1, self.max_subscriptions // 4)


def limits_warnings(limits: LimitsConfig) -> list[str]:
    """What loads but leaves the gateway next to unusable: config_warnings (gateway/config/entries.py) reports it."""
    if limits.max_body_bytes >= MIN_MESSAGE_BYTES:
        return []
    return [
        f"limits.max_body_bytes = {limits.max_body_bytes}: every HTTP request with a longer body gets 413, and "
        f"an MCP initialize with a client's capabilities is longer; give at least {MIN_MESSAGE_BYTES} "
        "(the default is 4194304)"
    ]
