"""What is wrong with this gateway right now, as a list of named problems with evidence and a fix.

Pure: a snapshot of the registry, the client sessions and the configuration in, problems out. The
snapshot is taken by `gateway.core.status`; `broker_diagnose`, `broker://diagnose` and the
troubleshooting guide show the result. Every problem id is documented in docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

NEAR_CAP = 0.8
"""A bounded resource counts as nearly exhausted at this share of its limit."""


@dataclass(frozen=True)
class SlotView:
    """One slot as diagnosis sees it."""

    name: str
    declared: bool = False
    connected: bool = False
    state: str = "empty"  # empty | initializing | ready
    transport: str | None = None
    id_style: str = "brk"
    pending: int = 0
    max_pending: int = 256
    connects: int = 0
    connected_for_s: float | None = None
    last_disconnect_ago_s: float | None = None
    last_disconnect_reason: str = ""
    last_error: str = ""
    request_timeout_ms: int = 60_000
    counters: Mapping[str, int] = field(default_factory=dict)
    """Totals over every link this slot has had since the gateway started."""
    upstream: Mapping[str, Any] | None = None
    """provider_status "upstream": what a configured upstream's manager knows (None for boards)."""
    way_in: str = "websocket"
    """How its provider comes in: websocket, serial (a board on a port) or mqtt (a broker), now or last."""
    provider_url: str = ""
    """Where: the provider URL, the serial port's path, or the MQTT link's broker and topic (provider_url)."""


@dataclass(frozen=True)
class GroupCheck:
    """One enabled tool group ([groups.<name>]) as diagnosis sees it."""

    name: str
    slot_patterns: Sequence[str]
    prefixes: Sequence[str]
    members: Sequence[str]
    """Ready slots matching its patterns now."""
    tools: int


@dataclass(frozen=True)
class GatewayView:
    """The gateway as diagnosis sees it."""

    url: str
    host: str
    is_loopback: bool
    insecure_lan: bool
    """--insecure-lan with client authentication off (provider authentication off is its own finding)."""
    public_url: str | None = None
    allowed_origins: Sequence[str] = ()
    provider_auth: str = "none"
    """[providers.auth] mode: none, shared or identities."""
    static_tokens: int = 0
    """Static client tokens configured ([auth] tokens and token files)."""
    tls: bool = False
    """Whether the listener serves TLS."""
    heartbeat_interval_s: float = 30.0
    initialize_timeout_ms: int = 10_000
    sessions: int = 0
    max_sessions: int = 1024
    subscriptions: int = 0
    max_subscriptions: int = 256
    max_slots: int = 1024
    aggregate_members: Sequence[str] = ()
    slots: Sequence[SlotView] = ()
    groups: Sequence[GroupCheck] = ()
    """Enabled tool groups."""
    mdns: Mapping[str, Any] = field(default_factory=lambda: {"enabled": False, "state": "off"})
    """The mDNS advertisement's status (gateway.discovery.mdns: state, reason, addresses)."""
    mqtt: Sequence[Mapping[str, Any]] = ()
    """Each MQTT broker connection's status (gateway.southbound.mqtt.brokers: state, last_error, dropped counters)."""
    serial: Mapping[str, Any] = field(default_factory=lambda: {"ports": [], "hotplug": {"enabled": False}})
    """The serial ports' status (gateway.southbound.serial.ports: state, failures, frames, dropped by reason, slots)."""


@dataclass(frozen=True)
class Problem:
    id: str
    severity: Severity
    summary: str
    evidence: str
    fix: str
    slot: str | None = None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": self.id, "severity": self.severity}
        if self.slot is not None:
            entry["slot"] = self.slot
        entry.update(summary=self.summary, evidence=self.evidence, fix=self.fix)
        return entry


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "at an unknown time"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _last_link(slot: SlotView) -> str:
    if slot.last_disconnect_reason:
        return f"the last provider left {_ago(slot.last_disconnect_ago_s)}: {slot.last_disconnect_reason}"
    return "no provider has connected since the gateway started"


def _ws_base(view: GatewayView) -> str:
    return view.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)


def _provider_url(view: GatewayView, slot: str) -> str:
    name = slot if slot == "<slot>" else quote(slot, safe="")
    return f"{_ws_base(view)}/provider/{name}"


def _bring_back(view: GatewayView, slot: SlotView) -> str:
    """The fix's first sentence for a slot without its provider, by the way its provider comes in."""
    if slot.way_in == "serial":
        return (
            f"Check the board on serial port {slot.provider_url}: its power and cable, and the port's state and "
            "last_error in broker_info serial.ports. An open port asks an unregistered board to register "
            f'(broker/register); the board must answer with its register frame naming "{slot.name}".'
        )
    if slot.way_in == "upstream":
        return (
            f"The gateway runs this slot's provider itself ({slot.provider_url}): see provider_status upstream "
            "for its state, restarts and last error, and fix its entry under [upstreams]."
        )
    if slot.way_in == "mqtt":
        return (
            f"Check the device and its MQTT connection ({slot.provider_url}); broker_info mqtt shows the broker's "
            "state."
        )
    url = slot.provider_url or _provider_url(view, slot.name)
    if slot.declared:
        return f"Power the device and check its network, then connect it to {url}."
    return f"Reconnect the provider to {url}."


# -- slot problems ----------------------------------------------------------------------------


def _stderr_evidence(upstream: Mapping[str, Any], lines: int = 5) -> str:
    tail = [str(line) for line in upstream.get("stderr_tail") or []][-lines:]
    return "last stderr lines: " + (" | ".join(tail) if tail else "(none)")


def _stdio_upstream_presence(slot: SlotView, upstream: Mapping[str, Any]) -> list[Problem]:
    """A stdio upstream is not a board: its absence is a child that exits, hangs or cannot start."""
    name = slot.name
    command = " ".join(str(part) for part in upstream.get("command") or [])
    failures = int(upstream.get("failures_in_a_row") or 0)
    last_exit = upstream.get("last_exit") or "none yet"
    next_in = upstream.get("next_restart_in_s")
    restart = f"; next start in {next_in:.1f}s" if isinstance(next_in, int | float) else ""
    run_by_hand = (
        f"Run the command by hand with the same working directory and environment to see it fail: {command}. "
        "The child sees only PATH, HOME, LANG, LC_ALL, TZ, TMPDIR and the variables named in its env and "
        f"env_passthrough (provider_status {name!r} lists them): a missing variable is a common cause. "
        "An MCP stdio server must answer initialize on stdin/stdout and log only to stderr."
    )
    if upstream.get("crash_loop"):
        return [
            Problem(
                "upstream.crash_loop",
                "error",
                f'The stdio upstream "{name}" keeps ending: {failures} times in a row',
                f"last end: {last_exit}{restart} (back-off doubles up to restart_max_s "
                f"{upstream.get('restart_max_s')}s); {_stderr_evidence(upstream)}",
                run_by_hand,
                name,
            )
        ]
    if slot.connected:
        return []
    if upstream.get("last_exit_kind") == "startup_timeout":
        return [
            Problem(
                "upstream.startup_timeout",
                "error",
                f'The stdio upstream "{name}" did not answer initialize and tools/list in time',
                f"last end: {last_exit}{restart}; {_stderr_evidence(upstream)}",
                f"The child must answer within startup_timeout_s ({upstream.get('startup_timeout_s')}s); raise it "
                f"for a slow starter (a package manager fetching on first run). {run_by_hand}",
                name,
            )
        ]
    if upstream.get("state") == "starting" and not upstream.get("last_exit"):
        return [
            Problem(
                "upstream.starting",
                "info",
                f'The stdio upstream "{name}" is starting',
                f"pid {upstream.get('pid')}; it has startup_timeout_s ({upstream.get('startup_timeout_s')}s) "
                "to answer initialize and tools/list",
                "Wait; clients get 'Provider \"" + name + "\" not connected' until it is ready.",
                name,
            )
        ]
    return [
        Problem(
            "upstream.down",
            "warning",
            f'The stdio upstream "{name}" is not serving',
            f"state {upstream.get('state')}; last end: {last_exit}{restart}; {_stderr_evidence(upstream)}",
            f"The gateway restarts it on its own. If it keeps ending: {run_by_hand}",
            name,
        )
    ]


def _remote_upstream_presence(slot: SlotView, upstream: Mapping[str, Any]) -> list[Problem]:
    """A remote upstream is reached by the gateway: its absence is a server it cannot reach or that refuses it."""
    name = slot.name
    url = upstream.get("url")
    state = upstream.get("state")
    failures = int(upstream.get("failures_in_a_row") or 0)
    next_in = upstream.get("next_attempt_in_s")
    retry = f"; next attempt in {next_in:.1f}s" if isinstance(next_in, int | float) else ""
    evidence = (
        f"{url}: {upstream.get('last_error') or 'no error recorded'}{retry}; {failures} failed attempt(s) in a row"
    )
    waiting = (
        f"Clients get 'Provider \"{name}\" not connected' until it succeeds; the gateway keeps trying with back-off."
    )
    if state == "auth_failed":
        credential = (upstream.get("credential") or {}).get("kind", "none")
        if credential == "oauth client credentials":
            fix = (
                "Check client_id and client_secret with the authorization server's administrator, the token_url, "
                "scope and audience under oauth_client_credentials, and that the server accepts tokens from it."
            )
        elif credential == "none":
            fix = (
                "The server requires a credential: configure secret (with header_name), headers_file or "
                "oauth_client_credentials."
            )
        else:
            fix = (
                "Replace the secret (the file or environment variable named by secret, or headers_file) with one the "
                "server accepts, check header_name, and restart the gateway (secrets are read at start)."
            )
        return [
            Problem(
                "upstream.auth_failed",
                "error",
                f'The remote upstream "{name}" refuses the gateway\'s credentials ({credential})',
                evidence,
                f"{fix} {waiting}",
                name,
            )
        ]
    if state in ("unreachable", "incompatible", "refused"):
        return [
            Problem(
                "upstream.unreachable",
                "error",
                f'The remote upstream "{name}" cannot be reached',
                evidence,
                "Check the URL (provider_status shows it), that the server runs and listens there, DNS and firewalls, "
                "TLS (ca_file for a private CA), and that it speaks MCP over the configured transport "
                f"({upstream.get('transport')}). {waiting}",
                name,
            )
        ]
    if slot.connected:
        return []
    if state == "connecting" and not failures:
        return [
            Problem(
                "upstream.connecting",
                "info",
                f'The remote upstream "{name}" is being connected',
                f"{url}: attempt {upstream.get('attempts')}",
                f"Wait a moment. {waiting}",
                name,
            )
        ]
    return [
        Problem(
            "upstream.down",
            "warning",
            f'The remote upstream "{name}" is not serving',
            f"state {state}; {evidence}",
            f"The gateway connects again on its own. {waiting}",
            name,
        )
    ]


def _upstream_presence(view: GatewayView, slot: SlotView) -> list[Problem] | None:
    """Problems of a configured upstream's slot, or None when the slot is not one (or of a kind not known here)."""
    upstream = slot.upstream
    if upstream is None:
        return None
    if upstream.get("kind") == "stdio":
        return _stdio_upstream_presence(slot, upstream)
    if upstream.get("kind") == "remote":
        return _remote_upstream_presence(slot, upstream)
    return None


def _slot_presence(view: GatewayView, slot: SlotView) -> list[Problem]:
    upstream = _upstream_presence(view, slot)
    if upstream is not None:
        return upstream
    if slot.connected:
        return []
    if slot.last_error.startswith("initialize failed"):
        return [
            Problem(
                "provider.initialize_failed",
                "error",
                f'The provider for "{slot.name}" connected but did not complete initialize and tools/list',
                f"{slot.last_error}; {_last_link(slot)}",
                "The provider must answer initialize, then tools/list, within "
                f"providers.initialize_timeout_ms ({view.initialize_timeout_ms} ms). Check the device's log for "
                "the failure; raise providers.initialize_timeout_ms for a slow board.",
                slot.name,
            )
        ]
    if slot.declared:
        return [
            Problem(
                "slot.disconnected",
                "error",
                f'Declared slot "{slot.name}" has no provider',
                f"declared under [slots.declared]; {_last_link(slot)}",
                f"{_bring_back(view, slot)} Clients of this slot get 'Provider \"{slot.name}\" not connected' "
                "until then.",
                slot.name,
            )
        ]
    if slot.connects:
        return [
            Problem(
                "slot.disconnected",
                "warning",
                f'Slot "{slot.name}" lost its provider',
                f"{_last_link(slot)}; it had {slot.connects} connection(s) since start",
                f"{_bring_back(view, slot)} If it should always be there, declare it under [slots.declared] so "
                "its absence is an error.",
                slot.name,
            )
        ]
    return [
        Problem(
            "slot.never_connected",
            "warning",
            f'Clients asked for slot "{slot.name}" but no provider ever connected to it',
            "the name was referenced by a client request; no provider has used it since the gateway started",
            f"Check the spelling against providers_list; or connect a provider to {_provider_url(view, slot.name)}.",
            slot.name,
        )
    ]


def _slot_faults(view: GatewayView, slot: SlotView) -> list[Problem]:
    problems: list[Problem] = []
    counters = slot.counters
    misses = counters.get("heartbeat_misses", 0)
    if misses:
        problems.append(
            Problem(
                "provider.heartbeat_misses",
                "warning",
                f'The provider for "{slot.name}" missed heartbeats and was dropped',
                f"{misses} missed heartbeat(s) at an interval of {view.heartbeat_interval_s:g}s since start; "
                f"{slot.connects} connection(s); {_last_link(slot)}",
                "The provider must answer WebSocket pings (or JSON-RPC ping) within one heartbeat interval. "
                "Check Wi-Fi signal and power; a board that blocks its loop for long (sensor reads, flash writes) "
                "needs to service the socket; raise providers.heartbeat_interval_s for sleepy devices.",
                slot.name,
            )
        )
    unparsable = counters.get("unparsable", 0)
    if unparsable:
        problems.append(
            Problem(
                "provider.unparsable_messages",
                "warning",
                f'The provider for "{slot.name}" sent messages that are not JSON-RPC',
                f"{unparsable} unparsable message(s) since start (each was dropped; the first one is in the log)",
                "The child prints text on stdout, where only JSON-RPC lines belong: log to stderr instead (the "
                "latest such lines are in provider_status upstream.stdout_not_jsonrpc_tail)."
                if slot.transport == "stdio" or (slot.upstream or {}).get("kind") == "stdio"
                else "Send exactly one JSON-RPC 2.0 object per WebSocket text frame (wrapped in an envelope on "
                "/providers); keep debug prints and log text off the link.",
                slot.name,
            )
        )
    unmatched = counters.get("unmatched_responses", 0)
    if unmatched:
        if slot.id_style == "numeric":
            hint = (
                "This slot sends integer ids; echo them as integers. If the provider expects brk-<n> strings, "
                'remove id_style = "numeric" for it.'
            )
        else:
            hint = (
                'This slot sends string ids like "brk-7" and the answer must carry exactly that string. A board '
                'that parses ids as numbers needs integer ids: set id_style = "numeric" under '
                f'[slots.declared.{slot.name}] or send hello {{"ids": "numeric"}} in its register frame.'
            )
        problems.append(
            Problem(
                "provider.unmatched_responses",
                "warning",
                f'The provider for "{slot.name}" answered requests nobody waits for',
                f"{unmatched} response(s) with an unknown id since start (id style {slot.id_style}); "
                "late answers after a deadline count here too",
                hint,
                slot.name,
            )
        )
    violations = counters.get("protocol_violations", 0)
    if violations:
        problems.append(
            Problem(
                "provider.protocol_violations",
                "warning",
                f'The provider for "{slot.name}" sent JSON-RPC batches',
                f"{violations} batch(es) since start; batches are not relayed",
                "Send one JSON-RPC message per frame (batches were removed from MCP in 2025-06-18).",
                slot.name,
            )
        )
    deadlines = counters.get("deadlines", 0)
    if deadlines:
        problems.append(
            Problem(
                "provider.deadlines",
                "warning",
                f'Requests to "{slot.name}" ran past their deadline',
                f"{deadlines} request(s) got no answer within their deadline since start "
                f"(slot default {slot.request_timeout_ms} ms)",
                "The provider is slow or drops requests. Check it answers every request id once; for tools that "
                f"legitimately take long set tool_timeouts_ms under [slots.declared.{slot.name}], or raise its "
                "request_timeout_ms.",
                slot.name,
            )
        )
    if slot.connected and slot.max_pending and slot.pending >= slot.max_pending * NEAR_CAP:
        full = slot.pending >= slot.max_pending
        problems.append(
            Problem(
                "provider.pending_high",
                "error" if full else "warning",
                f'Requests to "{slot.name}" are piling up',
                f"{slot.pending} of at most {slot.max_pending} requests in flight"
                + ("; new requests are refused" if full else ""),
                "The provider answers slower than clients call it. Find the slow tool with provider_status and "
                "the latency histogram in /metrics; reduce client concurrency or raise limits.max_pending_per_slot.",
                slot.name,
            )
        )
    if slot.connected and slot.last_error:
        problems.append(
            Problem(
                "provider.error",
                "warning",
                f'The provider for "{slot.name}" reported a failure',
                slot.last_error,
                "See the gateway log for this slot; the provider keeps serving its previous tool list meanwhile.",
                slot.name,
            )
        )
    return problems


# -- gateway-wide problems --------------------------------------------------------------------


def _near(used: int, limit: int) -> bool:
    return limit > 0 and used >= limit * NEAR_CAP


def _gateway_problems(view: GatewayView) -> list[Problem]:
    problems: list[Problem] = []
    if view.insecure_lan and not view.is_loopback:
        problems.append(
            Problem(
                "security.insecure_lan",
                "warning",
                "The gateway listens on the network without client authentication (--insecure-lan)",
                f"bound to {view.host} with insecure_lan = true and no [auth]; anyone who can reach {view.url} can "
                "call every device",
                "Configure client authentication ([auth] tokens, token_files or oauth; docs/security.md), or bind to "
                '127.0.0.1 (host = "127.0.0.1") behind a reverse proxy that authenticates, or restrict the network '
                "with a firewall; drop --insecure-lan once client and provider authentication are configured.",
            )
        )
    if not view.is_loopback and view.provider_auth == "none":
        problems.append(
            Problem(
                "security.providers_unauthenticated",
                "warning",
                "Any device on the network can publish a slot (provider authentication is off)",
                f'bound to {view.host} with [providers.auth] mode = "none": whoever reaches '
                f"{_ws_base(view)}/provider/<slot> can claim a free slot and answer its clients' calls",
                'Give each board a secret: set [providers.auth] mode = "identities" with one identity per device and '
                'the slots it may publish (or mode = "shared" for a quick setup), and put the secret in the board\'s '
                "provider_token (X-Provider-Token); see docs/security.md.",
            )
        )
    if not view.is_loopback and view.static_tokens and not view.tls:
        problems.append(
            Problem(
                "security.static_tokens_without_tls",
                "warning",
                "Static client tokens work only from this machine: the listener has no TLS",
                f"bound to {view.host} with {view.static_tokens} static tokens and no [tls]; clients on other "
                "machines get 401 not_tls (a token sent over plain HTTP could be read on the way)",
                "Configure [tls] (mcp-gateway tls self-signed makes a certificate), replace any token already sent "
                "over plain HTTP (mcp-gateway token create NAME --replace), or use OAuth access tokens.",
            )
        )
    if not view.is_loopback and not view.public_url:
        problems.append(
            Problem(
                "config.public_url_missing",
                "info",
                "Guides show a loopback URL because public_url is not set",
                f"bound to {view.host}; guides and broker_info show {view.url}",
                'Set public_url (e.g. "http://gateway.plant.lan:3000") so guides show the address boards and '
                "clients on the network use.",
            )
        )
    if not view.allowed_origins:
        problems.append(
            Problem(
                "security.no_origins_configured",
                "info",
                "Browser-based clients are refused (no allowed origins)",
                "allowed_origins is empty: requests with an Origin header get HTTP 403 origin_not_allowed; native "
                "clients and boards (no Origin header) are not affected",
                "To use a browser client (web console, browser Inspector), add its origin to allowed_origins, e.g. "
                '["http://localhost:6274"].',
            )
        )
    if _near(view.sessions, view.max_sessions):
        problems.append(
            Problem(
                "sessions.near_cap",
                "error" if view.sessions >= view.max_sessions else "warning",
                "Client sessions are close to their limit",
                f"{view.sessions} of at most {view.max_sessions} session-era client sessions are held",
                "Clients should end sessions with DELETE when done; lower limits.session_idle_timeout_s so idle "
                "ones expire sooner, or raise limits.max_sessions.",
            )
        )
    if _near(view.subscriptions, view.max_subscriptions):
        problems.append(
            Problem(
                "subscriptions.near_cap",
                "error" if view.subscriptions >= view.max_subscriptions else "warning",
                "Open subscriptions/listen streams are close to their limit",
                f"{view.subscriptions} of at most {view.max_subscriptions} streams are open",
                "Close streams that are no longer read, or raise limits.max_subscriptions.",
            )
        )
    if _near(len(view.slots), view.max_slots):
        problems.append(
            Problem(
                "slots.near_cap",
                "warning",
                "The number of slots is close to its limit",
                f"{len(view.slots)} of at most {view.max_slots} slots are tracked",
                "Raise limits.max_slots, or set slots.only_declared = true so unknown names are refused.",
            )
        )
    if not any(slot.connects for slot in view.slots):
        problems.append(
            Problem(
                "providers.none",
                "info",
                "No provider has connected yet",
                "no slot has had a provider since the gateway started",
                f"Connect a board or server to {_provider_url(view, '<slot>')} (one slot) or to "
                f"{_ws_base(view)}/providers (many slots); see broker_guide topic publish-provider.",
            )
        )
    if not view.aggregate_members:
        problems.append(
            Problem(
                "aggregate.empty",
                "info",
                "_all lists no tools: no provider has opted in",
                "no ready provider registered with aggregate = true",
                'A provider joins _all by sending {"jsonrpc":"2.0","method":"notifications/register",'
                '"params":{"aggregate":true}} as its first frame (in an envelope on /providers).',
            )
        )
    problems.extend(_group_problems(view))
    problems.extend(_mdns_problems(view))
    problems.extend(_mqtt_problems(view))
    problems.extend(_serial_problems(view))
    return problems


def _mqtt_problems(view: GatewayView) -> list[Problem]:
    """A broker the gateway cannot reach, one that would send it far larger packets than it takes, one that
    lets clients in without credentials, and messages it received but could not use."""
    problems: list[Problem] = []
    for broker in view.mqtt:
        label = str(broker.get("broker"))
        if not broker.get("connected"):
            problems.append(
                Problem(
                    "mqtt.broker_unreachable",
                    "error",
                    f"MQTT broker {label} is not connected: its boards and servers are detached",
                    f"{broker.get('last_error') or 'not connected yet'}; {broker.get('attempts', 0)} attempts, "
                    f"next in {broker.get('next_attempt_in_s')}s",
                    "Check that the broker runs (systemctl status mosquitto), its address and port in "
                    "[[mqtt.brokers]] url, and the gateway's username and password (a refusal names 'Not "
                    "authorized'); see docs/mqtt-broker.md.",
                )
            )
        elif broker.get("subscribe_error"):
            problems.append(
                Problem(
                    "mqtt.subscription_refused",
                    "error",
                    f"MQTT broker {label} refused some of the gateway's subscriptions",
                    str(broker.get("subscribe_error")),
                    "Give the gateway's broker user read access to its topics in the broker's ACL file "
                    "(docs/mqtt-broker.md).",
                )
            )
        for problem in (_mqtt_packet_size_problem(label, broker), _mqtt_anonymous_problem(label, broker)):
            if problem is not None:
                problems.append(problem)
        dropped = {reason: count for reason, count in (broker.get("dropped") or {}).items() if count}
        if dropped:
            examples = broker.get("dropped_examples") or {}
            counts = ", ".join(f"{reason} {count}" for reason, count in sorted(dropped.items()))
            latest = "; ".join(f"{reason}: {examples[reason]}" for reason in sorted(dropped) if reason in examples)
            problems.append(
                Problem(
                    "mqtt.messages_dropped",
                    "warning",
                    f"MQTT broker {label}: messages were dropped",
                    f"{counts} since the gateway started; latest: {latest}",
                    "malformed: fix the device's payloads (one JSON-RPC message per MQTT message, status = the "
                    "register frame with params.slot); wrong_topic: check topic_prefix and the device's topic names; "
                    "oversize: raise max_payload_bytes or shrink the device's messages; unregistered: the device "
                    "must publish its status (or presence) first; refused: the slot is held, reserved or "
                    "undeclared (provider_status), or max_instances devices are known; backlog: the gateway fell "
                    "behind (max_backlog). See docs/protocol.md.",
                )
            )
    return problems


MQTT_ANONYMOUS_FIX = (
    "The broker's ACL is the security boundary for MQTT boards: anyone it lets publish on a board's topics can "
    "drive that board. Use the appliance's mosquitto configuration, image/mosquitto/mcp-gateway.conf with its "
    "acl: allow_anonymous false, a password per board (its username is its slot) and an ACL that confines each "
    "board to its own topics; give the gateway its own username and password in [[mqtt.brokers]] "
    "(docs/mqtt-broker.md)."
)
"""What to do about a broker that accepts clients without credentials (broker_diagnose and the log)."""


def mqtt_anonymous_summary(board_topics_open: bool | None) -> str:
    """What a broker that accepted the gateway's client without credentials lets such a client do, as far
    as that check saw (gateway/southbound/mqtt/anonymous.py)."""
    if board_topics_open:
        return (
            "accepts clients without a username and password, and lets them publish where requests reach a "
            "board: anyone who can reach the broker can drive its boards"
        )
    if board_topics_open is False:
        return "accepts clients without a username and password (an ACL kept the check's client off board topics)"
    return "accepts clients without a username and password"


def _mqtt_anonymous_problem(label: str, broker: Mapping[str, Any]) -> Problem | None:
    """A broker that let the gateway's throw-away client in without credentials."""
    check = broker.get("anonymous_clients") or {}
    if check.get("accepted") is not True:
        return None
    return Problem(
        "mqtt.broker_anonymous",
        "warning",
        f"MQTT broker {label} {mqtt_anonymous_summary(check.get('board_topics_open'))}",
        f"{check.get('evidence')} (checked at {check.get('checked_at')})",
        MQTT_ANONYMOUS_FIX,
    )


def _mqtt_packet_size_problem(label: str, broker: Mapping[str, Any]) -> Problem | None:
    """An MQTT 5 broker that would send the gateway packets far over max_payload_bytes: the gateway's MQTT
    library reads each packet whole before the size check, so the broker's own limit is the bound."""
    limits = broker.get("limits") or {}
    announced = limits.get("broker_max_packet_size")  # None: unknown (not connected, MQTT 3.1.1)
    wanted = limits.get("max_packet_bytes")
    payload = limits.get("max_payload_bytes")
    if not broker.get("connected") or announced is None or limits.get("announce_max_packet_size"):
        return None
    if not isinstance(wanted, int) or not isinstance(payload, int):
        return None
    if isinstance(announced, int) and announced <= wanted:
        return None
    accepts = f"up to {announced} bytes" if isinstance(announced, int) else "of any size"
    return Problem(
        "mqtt.broker_packet_size",
        "warning",
        f"MQTT broker {label} accepts packets {accepts}: a board could make the gateway read that much",
        f"the broker's CONNACK announces "
        f"{f'a Maximum Packet Size of {announced} bytes' if isinstance(announced, int) else 'no Maximum Packet Size'}"
        f"; max_payload_bytes is {payload}, so the gateway drops such a message, but only after reading it whole",
        f"Set max_packet_size {payload + 1024} in mosquitto.conf (at most {wanted}: max_payload_bytes + 16 KiB), as "
        "image/mosquitto/mcp-gateway.conf does, and restart the broker. A broker that drops oversize messages "
        "without stalling (EMQX; not mosquitto 2.0.11) can be told the limit by the gateway instead: "
        "announce_max_packet_size = true in its [[mqtt.brokers]] entry (docs/mqtt-broker.md).",
    )


SERIAL_FAILURES_NOTABLE = 3
"""Failed opens of a serial port in a row from which it counts as unavailable (not a board still booting)."""
SERIAL_DAMAGE_SHARE = 0.01
"""Share of a port's frames lost to line damage (cobs, crc) from which it is worth a look ..."""
SERIAL_DAMAGE_FLOOR = 3
"""... once at least this many were lost: one flipped bit is no finding."""
SERIAL_NO_BOARD_AFTER_S = 30.0
"""A port open this long without a registered board is a finding (a board registers when asked, at once)."""


def _serial_port_unavailable(port: Mapping[str, Any]) -> Problem | None:
    failures = int(port.get("failures_in_a_row") or 0)
    if port.get("state") not in ("backoff", "opening") or failures < SERIAL_FAILURES_NOTABLE:
        return None
    path = port.get("path")
    error = str(port.get("last_error") or "no error recorded")
    if "ENOENT" in error:
        cause = (
            "The path does not exist: check the cable and the name (ls -l /dev/serial/by-id/; a by-id name "
            "follows the adapter), or remove the [[serial.ports]] entry."
        )
    elif "EACCES" in error or "EPERM" in error:
        cause = "The gateway's user may not open the tty: add it to the group dialout and restart the gateway."
    elif "EAGAIN" in error or "EBUSY" in error:
        cause = "Another program holds the port (a second gateway, a terminal program, mpremote, esptool): stop it."
    else:
        cause = "See docs/device-serial.md#when-it-does-not-work for what last_error means."
    retry = port.get("next_retry_in_s")
    return Problem(
        "serial.port_unavailable",
        "error",
        f"Serial port {path} "
        + ("cannot be opened" if error.startswith("cannot open") else "keeps failing")
        + ": the slots of a board on it are detached",
        f"{error}; {failures} failed attempts in a row"
        + (f", next in {retry:g}s" if isinstance(retry, int | float) else "")
        + f" ({port.get('source')} port, {port.get('opens', 0)} opens since start)",
        f"{cause} The gateway keeps retrying with back-off up to serial.retry_max_s.",
    )


def _serial_line_damage(port: Mapping[str, Any]) -> Problem | None:
    dropped = port.get("dropped") or {}
    damaged = int(dropped.get("cobs") or 0) + int(dropped.get("crc") or 0)
    frames = int(port.get("frames_in") or 0)
    if damaged < SERIAL_DAMAGE_FLOOR or damaged < (frames + damaged) * SERIAL_DAMAGE_SHARE:
        return None
    share = damaged / (frames + damaged)
    return Problem(
        "serial.frames_damaged",
        "error" if frames == 0 else "warning",
        f"Serial port {port.get('path')} "
        + ("receives nothing but damaged frames" if frames == 0 else "loses frames to line damage"),
        f"{damaged} damaged frames (cobs {dropped.get('cobs', 0)}, crc {dropped.get('crc', 0)}) against {frames} "
        f"valid ones since the gateway started ({share:.1%}), at {port.get('baud')} baud",
        f"Both ends must use the same baud rate (this port: {port.get('baud')}; the board: its serial.baud), with "
        "TX crossed to RX, RX to TX and GND connected: a mismatch loses every frame. Frames lost now and then are "
        "noise: a shorter wire, a ground beside the signals, or a lower baud rate. A damaged frame never delivers "
        "a wrong message; it costs the call it carried (the caller gets a deadline error).",
    )


def _serial_oversize(port: Mapping[str, Any]) -> Problem | None:
    oversize = int((port.get("dropped") or {}).get("oversize") or 0)
    if not oversize:
        return None
    key = f"{port.get('config_key') or 'serial.ports[<i>]'}.frame_cap"
    return Problem(
        "serial.frames_oversize",
        "warning",
        f"Serial port {port.get('path')} dropped messages larger than its frame cap",
        f"{oversize} messages over frame_cap {port.get('frame_cap')} bytes since the gateway started "
        f'(mcpgw_limit_hits_total{{limit="{key}"}})',
        f"Raise {key}, or lower the board's frame_max_bytes so that its pages and answers fit.",
    )


def _serial_no_board(port: Mapping[str, Any]) -> Problem | None:
    open_for = port.get("open_for_s")
    if port.get("state") != "open" or port.get("slots") or not isinstance(open_for, int | float):
        return None
    if open_for < SERIAL_NO_BOARD_AFTER_S:
        return None
    dropped = port.get("dropped") or {}
    frames = int(port.get("frames_in") or 0)
    if dropped.get("refused"):
        patterns = ", ".join(str(pattern) for pattern in port.get("slots_allowed") or [])
        fix = (
            f"Its register frames were refused (the board got the reason as an error with id null, and the log "
            f"warned once): the slot name is outside the port's slots ({patterns}), or held, reserved or "
            "undeclared. Fix the port's slots or the board's slot name."
        )
    elif frames:
        fix = (
            "The board talks but never registers: it must send notifications/register with params.slot first, "
            "and again whenever the gateway sends broker/register."
        )
    elif dropped.get("text"):
        fix = (
            "Only text arrives: the board prints (a REPL, a boot log) instead of speaking frames. Its app must run "
            'with "transport": "serial" on the UART wired to this port (docs/device-serial.md#which-uart).'
        )
    else:
        fix = (
            "Nothing arrives: check that a board is wired and powered, that its app runs with "
            f'"transport": "serial", TX to RX, RX to TX, GND to GND, and {port.get("baud")} baud on both ends.'
        )
    return Problem(
        "serial.no_board",
        "warning" if port.get("source") == "config" else "info",
        f"Serial port {port.get('path')} is open but no board has registered on it",
        f"open for {open_for:.0f}s; {frames} valid frames in, {port.get('register_requests', 0)} broker/register "
        f"sent; dropped: unregistered {dropped.get('unregistered', 0)}, refused {dropped.get('refused', 0)}, "
        f"text {dropped.get('text', 0)}",
        fix,
    )


def _serial_problems(view: GatewayView) -> list[Problem]:
    """A port that cannot be opened, a line that damages frames, a port without a registered board."""
    problems: list[Problem] = []
    for port in view.serial.get("ports") or []:
        unavailable = _serial_port_unavailable(port)
        if unavailable is not None:
            problems.append(unavailable)
            continue
        damage = _serial_line_damage(port)
        found = [damage, _serial_oversize(port), None if damage is not None else _serial_no_board(port)]
        problems.extend(problem for problem in found if problem is not None)
    return problems


def _mdns_problems(view: GatewayView) -> list[Problem]:
    """[mdns] is on but boards and clients cannot find the gateway by browsing."""
    state = view.mdns.get("state")
    reason = str(view.mdns.get("reason") or "")
    if state == "not_advertised":
        return [
            Problem(
                "mdns.not_advertised",
                "info",
                "mDNS is enabled but nothing is advertised: the gateway listens on loopback only",
                reason,
                'Bind to the network (host = "0.0.0.0", with [auth] and [providers.auth] configured) so boards '
                "and clients can reach and find the gateway, or turn mDNS off ([mdns] enabled = false, or run "
                "--no-mdns).",
            )
        ]
    if state == "failed":
        return [
            Problem(
                "mdns.failed",
                "warning",
                "The gateway cannot advertise itself with mDNS: browsing does not find it",
                f"{reason}; retried every refresh, the gateway itself serves normally",
                "Check that the network interface has an address and multicast on (ip link show: MULTICAST), that "
                "the firewall lets UDP port 5353 through, and the names in [mdns] interfaces. Boards and clients can "
                "always use the gateway's address directly; see docs/discovery.md.",
            )
        ]
    return []


def _group_problems(view: GatewayView) -> list[Problem]:
    """Enabled groups that serve nothing although providers are ready: most often a typo in the
    group's slot patterns or tool prefixes, which would otherwise only show as an agent missing tools."""
    ready = [slot.name for slot in view.slots if slot.state == "ready"]
    if not ready:
        return []
    problems: list[Problem] = []
    for group in view.groups:
        if not group.members:
            problems.append(
                Problem(
                    "group.no_members",
                    "info",
                    f'Tool group "{group.name}" has no members: /mcp/{group.name} lists no device tool',
                    f"its slot patterns {', '.join(group.slot_patterns)} match none of the {len(ready)} ready "
                    f"slots ({', '.join(ready[:10])}{', …' if len(ready) > 10 else ''})",
                    f"Check slots under [groups.{group.name}] against providers_list (fnmatch patterns, "
                    "case-sensitive), or connect the devices it is meant for.",
                )
            )
        elif not group.tools:
            problems.append(
                Problem(
                    "group.no_tools",
                    "warning",
                    f'Tool group "{group.name}" lists no tool although it has members',
                    f"no tool of {', '.join(group.members[:10])} starts with one of its prefixes "
                    f"{', '.join(group.prefixes)}",
                    f"Check tools under [groups.{group.name}] against the tools the members list "
                    "(prefixes are case-sensitive; guidance with topic groups shows them).",
                )
            )
    return problems


def diagnose(view: GatewayView, slot: str | None = None) -> list[Problem]:
    """Every problem, worst first; with `slot`, only that slot's (a name never seen is itself a finding)."""
    if slot is not None:
        found = next((entry for entry in view.slots if entry.name == slot), None)
        if found is None:
            known = ", ".join(entry.name for entry in view.slots) or "none"
            return [
                Problem(
                    "slot.unknown",
                    "warning",
                    f'No slot "{slot}" has been seen',
                    f"no provider or client has used this name since the gateway started; known slots: {known}",
                    f"Check the spelling against providers_list; a provider creates the slot by connecting to "
                    f"{_provider_url(view, slot)}.",
                    slot,
                )
            ]
        problems = _slot_presence(view, found) + _slot_faults(view, found)
    else:
        problems = _gateway_problems(view)
        for entry in view.slots:
            problems.extend(_slot_presence(view, entry))
            problems.extend(_slot_faults(view, entry))
    return sorted(problems, key=lambda p: (SEVERITY_ORDER[p.severity], p.slot or "", p.id))


def worst(problems: Sequence[Problem]) -> str:
    """'ok' when nothing is wrong, else the most severe level present."""
    if not problems:
        return "ok"
    return min((p.severity for p in problems), key=lambda s: SEVERITY_ORDER[s])
