"""Prometheus metrics of one gateway instance (its own registry, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from gateway.telemetry.hot_metrics import Count, CounterFamily, HistogramFamily, Latency

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Label values must stay bounded: a client may send any method name, so only MCP's own are kept.
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "server/discover",
        "subscriptions/listen",
        "tools/call",
        "tools/list",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "ping",
    }
)

PROVIDER_FAULT_KINDS = ("unparsable", "unmatched_responses", "foreign_answers", "protocol_violations")
"""Per-slot counters of provider misbehaviour, copied from the sessions at scrape time."""


CREATED_TYPES = frozenset({"counter", "histogram", "summary"})


class WithoutCreated:
    """A registry as /metrics exposes it: without the `<name>_created` series of its counters and histograms.

    prometheus-client adds one per labelled child (a timestamp few scrapers use, as many series again).
    Its switch, disable_created_metrics(), is a process-wide flag (every registry, the default one
    too) that prometheus-client 0.26 offers no per-registry form of, and it does not reach the
    collectors of hot_metrics.py, which add theirs themselves: so they are left out here, for this
    registry only."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            if metric.type not in CREATED_TYPES:
                yield metric
                continue
            created = f"{metric.name}_created"
            # A copy: a collector may hand out a Metric it keeps, and other readers still see all of it.
            trimmed = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            trimmed.samples = [sample for sample in metric.samples if sample.name != created]
            yield trimmed


class SlotSeries:
    """The label values of every series each slot has in the slot-labelled prometheus-client families,
    noted as callers ask for them: forgetting a slot then touches that slot's series only, not every
    series of every family (with limits.max_slots names shown, a scan per forgotten name stalls the loop)."""

    def __init__(self) -> None:
        self.of: dict[str, set[tuple[SlotCounter | SlotGauge, tuple[str, ...]]]] = {}

    def note(
        self, family: SlotCounter | SlotGauge, labelvalues: tuple[object, ...], labelkwargs: dict[str, object]
    ) -> None:
        names = family.slot_labelnames
        values = tuple(str(labelkwargs[name]) for name in names) if labelkwargs else tuple(str(v) for v in labelvalues)
        if len(values) != len(names):
            return  # prometheus-client refused the call already
        series = self.of.get(values[family.slot_at])
        if series is None:
            series = self.of[values[family.slot_at]] = set()
        series.add((family, values))

    def forget(self, slot: str) -> int:
        """Remove the slot's series; how many there were."""
        series = self.of.pop(slot, ())
        for family, values in series:
            family.remove(*values)
        return len(series)


class SlotCounter(Counter):
    """A Counter labelled by slot whose series are noted in a SlotSeries (set by Metrics)."""

    slot_series: SlotSeries
    slot_labelnames: tuple[str, ...]
    slot_at: int

    def labels(self, *labelvalues: object, **labelkwargs: object) -> SlotCounter:
        child = super().labels(*labelvalues, **labelkwargs)
        self.slot_series.note(self, labelvalues, labelkwargs)
        return child


class SlotGauge(Gauge):
    """A Gauge labelled by slot whose series are noted in a SlotSeries (set by Metrics)."""

    slot_series: SlotSeries
    slot_labelnames: tuple[str, ...]
    slot_at: int

    def labels(self, *labelvalues: object, **labelkwargs: object) -> SlotGauge:
        child = super().labels(*labelvalues, **labelkwargs)
        self.slot_series.note(self, labelvalues, labelkwargs)
        return child


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.exposed = WithoutCreated(self.registry)
        r = self.registry
        self.slot_connected = SlotGauge(
            "mcpgw_slot_connected", "1 when a provider holds the slot", ["slot"], registry=r
        )
        self.slot_pending = SlotGauge(
            "mcpgw_slot_pending_requests",
            "Requests in flight towards the slot's provider",
            ["slot"],
            registry=r,
        )
        # The three metrics every request bumps are plain numbers read at scrape time (hot_metrics.py).
        self.calls = CounterFamily("mcpgw_calls", "Requests forwarded to providers", ["slot", "method"], registry=r)
        self.call_errors = SlotCounter(
            "mcpgw_call_errors",
            "Forwarded requests that ended in an error",
            ["slot", "kind"],  # kind: see docs/operations.md (provider, deadline, ..., message_refused, other)
            registry=r,
        )
        self.latency = HistogramFamily(
            "mcpgw_call_latency_seconds",
            "Time from forwarding a request to its answer",
            ["slot"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.heartbeat_misses = SlotCounter(
            "mcpgw_heartbeat_misses", "Providers dropped for not answering a heartbeat", ["slot"], registry=r
        )
        self.provider_connects = SlotCounter(
            "mcpgw_provider_connects", "Provider links admitted", ["slot", "transport"], registry=r
        )
        self.provider_refusals = Counter(
            "mcpgw_provider_refusals", "Provider links or slots refused", ["reason"], registry=r
        )
        self.provider_auth_refusals = Counter(
            "mcpgw_provider_auth_refusals",
            "Provider connections or slots refused by [providers.auth]",
            ["reason"],  # missing_secret, unknown_secret, slot_forbidden
            registry=r,
        )
        self.tls_reloads = Counter(
            "mcpgw_tls_reloads", "Certificate reloads on SIGHUP by result (ok, failed)", ["result"], registry=r
        )
        self.unparsable = Counter(
            "mcpgw_unparsable_messages", "Messages that were not valid JSON-RPC", ["side"], registry=r
        )
        self.unencodable = Counter(
            "mcpgw_unencodable_messages",
            "Notifications and requests for a client stream dropped because they could not be encoded as JSON",
            registry=r,
        )
        self.sessions = Gauge("mcpgw_client_sessions", "Session-era client sessions held", registry=r)
        self.sessions_expired = Counter(
            "mcpgw_client_sessions_expired", "Client sessions expired for idleness", registry=r
        )
        self.streams = Gauge("mcpgw_client_streams", "Open client notification streams", ["kind"], registry=r)
        self.http_requests = CounterFamily(
            "mcpgw_http_requests",
            "HTTP requests by endpoint kind and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.refusals = Counter(
            "mcpgw_client_refusals", "Client requests refused before routing", ["reason"], registry=r
        )
        self.auth_failures = Counter(
            "mcpgw_auth_failures",
            "Client requests refused by authentication ([auth])",
            # missing, malformed, invalid, expired, not_yet_valid, wrong_issuer, wrong_audience, unknown_key,
            # insufficient_scope, not_tls, keys_unavailable, session_owner, invalid_subject; signed requests:
            # clock_skew, bad_signature, replayed, nonce_cache_full
            ["reason"],
            registry=r,
        )
        self.jwks_fetches = Counter(
            "mcpgw_jwks_fetches", "Fetches of the authorization server's keys ([auth.oauth])", ["outcome"], registry=r
        )
        # Bounds ([limits]): each one's configured value, and how often it refused something.
        self.limit = Gauge(
            "mcpgw_limit", "Configured value of each bound, by its configuration key", ["limit"], registry=r
        )
        self.limit_hits = Counter(
            "mcpgw_limit_hits",
            "Times a bound refused or cut something, by its configuration key",
            ["limit"],
            registry=r,
        )
        self.devices_forgotten = Counter(
            "mcpgw_devices_forgotten",
            "Device registry rows of boards heard longest ago forgotten to stay within limits.max_devices",
            registry=r,
        )
        self.policy_decisions = Counter(
            "mcpgw_policy_decisions",
            "Governed tools/call decisions, by their effect in the audit trail's words",
            ["effect"],
            registry=r,
        )
        self.rate_limited = Counter(
            "mcpgw_rate_limited",
            "Client requests refused by a rate limit",
            ["scope"],  # principal, slot
            registry=r,
        )
        self.rate_buckets = Gauge("mcpgw_rate_buckets", "Rate-limit buckets held", ["scope"], registry=r)
        # The listener's connections ([limits.connections]): held now, refused over a cap, cut by a timeout.
        self.connections = Gauge(
            "mcpgw_connections", "Connections open to the listener (bounded by its connection cap)", registry=r
        )
        self.connections_largest_peer = Gauge(
            "mcpgw_connections_largest_peer",
            "Connections held by the peer address holding the most (compare with limits.connections.max_per_peer)",
            registry=r,
        )
        self.connection_refusals = Counter(
            "mcpgw_connection_refusals",
            "Connections refused over a cap",
            ["reason"],  # max_connections, max_per_peer (answered 503), max_refusing (closed unanswered)
            registry=r,
        )
        self.connection_cuts = Counter(
            "mcpgw_connection_cuts",
            "Connections closed, or requests ended, by a timeout",
            # idle_timeout, header_timeout, body_timeout, body_too_slow, handshake_timeout, slots_refused,
            # stream_write_timeout
            ["reason"],
            registry=r,
        )
        self.stream_overflows = Counter(
            "mcpgw_client_stream_overflows",
            "Client streams that fell limits.notification_queue messages behind: closed, or for an SSE answer its "
            "notifications dropped until the answer",
            ["kind"],  # get, listen, request
            registry=r,
        )
        self.client_in_flight = Gauge(
            "mcpgw_client_requests_in_flight", "Session-era client requests being answered", registry=r
        )
        self.sessions_largest_principal = Gauge(
            "mcpgw_client_sessions_largest_principal",
            "Sessions held by the principal holding the most (compare with limits.max_sessions_per_principal)",
            registry=r,
        )
        self.provider_disconnects = SlotCounter(
            "mcpgw_provider_disconnects", "Provider links that ended (any reason)", ["slot"], registry=r
        )
        self.provider_faults = SlotCounter(
            "mcpgw_provider_faults",
            "Provider misbehaviour: unparsable messages, responses nobody waited for, batches",
            ["slot", "kind"],
            registry=r,
        )
        self.slot_tools = SlotGauge("mcpgw_slot_tools", "Tools the slot's provider lists", ["slot"], registry=r)
        self.slot_in_aggregate = SlotGauge(
            "mcpgw_slot_in_aggregate", "1 when the slot's tools are part of _all", ["slot"], registry=r
        )
        self.aggregate_tools = Gauge("mcpgw_aggregate_tools", "Tools listed by _all", registry=r)
        self.slots = Gauge("mcpgw_slots", "Slots the gateway tracks (declared, held or asked for)", registry=r)
        self.info = Gauge(
            "mcpgw_info",
            "Always 1; labels carry the version and the security posture",
            ["version", "insecure_lan"],
            registry=r,
        )
        self.start_time = Gauge("mcpgw_start_time_seconds", "Unix time the gateway started", registry=r)
        # The process's own memory, CPU and descriptors, read from /proc at each scrape (nothing on
        # other systems): an appliance runs for months, and a leak shows here first.
        ProcessCollector(namespace="mcpgw", registry=r)
        self.relay_requests = Counter(
            "mcpgw_relay_requests",
            "Requests providers sent towards clients (sampling, elicitation, roots), by how they ended",
            # outcome: answered, client_error, unattributed, no_capability, no_channel, client_gone,
            # relay_limit, ended, cancelled, other (docs/protocol-clients.md, "Metrics")
            ["method", "outcome"],
            registry=r,
        )
        self.relay_in_flight = Gauge(
            "mcpgw_relay_in_flight", "Provider requests relayed towards clients and not answered yet", registry=r
        )
        self.input_required_held = Gauge(
            "mcpgw_input_required_held",
            "Stateless-era calls held open until the client retries with inputResponses",
            registry=r,
        )
        # [telemetry] (docs/telemetry.md): what the OTLP export sent and dropped, and providers' telemetry.
        self.telemetry_exported = Counter(
            "mcpgw_telemetry_exported",
            "Items the OTLP export sent, by kind (spans, provider_spans, provider_logs, provider_metrics)",
            ["kind"],
            registry=r,
        )
        self.telemetry_dropped = Counter(
            "mcpgw_telemetry_dropped",
            "Items the OTLP export dropped, by kind (span_queue, span_export, metric_export: data points, "
            "provider_queue, provider_export, provider_item)",
            ["kind"],
            registry=r,
        )
        self.provider_telemetry = SlotCounter(
            "mcpgw_provider_telemetry",
            "Providers' broker/telemetry notifications by outcome (accepted, rate_limited, invalid, queue_full, off, "
            "not_a_board)",
            ["slot", "outcome"],
            registry=r,
        )
        self.slot_series = SlotSeries()
        slot_families: tuple[tuple[SlotCounter | SlotGauge, tuple[str, ...]], ...] = (
            (self.slot_connected, ("slot",)),
            (self.slot_pending, ("slot",)),
            (self.call_errors, ("slot", "kind")),
            (self.heartbeat_misses, ("slot",)),
            (self.provider_connects, ("slot", "transport")),
            (self.provider_disconnects, ("slot",)),
            (self.provider_faults, ("slot", "kind")),
            (self.slot_tools, ("slot",)),
            (self.slot_in_aggregate, ("slot",)),
            (self.provider_telemetry, ("slot", "outcome")),
        )
        # Every prometheus-client family labelled by slot (the hot ones, calls and latency, are
        # hot_metrics families): each notes its series in slot_series, which forget_slot empties.
        for family, labelnames in slot_families:
            family.slot_series = self.slot_series
            family.slot_labelnames = labelnames
            family.slot_at = labelnames.index("slot")
        self.before_render: list[Callable[[], None]] = []
        """Called before each scrape to copy state that is read, not counted (pending, connected, faults)."""
        self._call_children: dict[str, dict[str, tuple[Count, Latency]]] = {}
        """The hot path's children by slot, then method (any name a client sent, and its label's)."""

    def call_metrics(self, slot: str, method: str) -> tuple[Count, Latency]:
        """The (calls counter, latency histogram) children of one slot and method (any method name:
        unknown ones are counted as "other"), looked up once: two dict lookups per forwarded request.
        Bounded: a method that is not a known one is remembered under "other" after its first call."""
        by_method = self._call_children.get(slot)
        if by_method is None:
            by_method = self._call_children[slot] = {}
        children = by_method.get(method)
        if children is None:
            label = method_label(method)
            children = by_method.get(label)
            if children is None:
                children = (self.calls.labels(slot, label), self.latency.labels(slot))
                by_method[label] = children
        return children

    def limit_hit(self, limit: str, times: int = 1) -> None:
        """A bound refused something (`times` things at once); `limit` is its key, under [limits] (e.g.
        "max_body_bytes") or the section's (e.g. "mqtt.brokers[0].max_backlog")."""
        self.limit_hits.labels(limit).inc(times)

    def policy_decided(self, effect: str) -> None:
        """One governed tools/call decided, with its effect (`allow`, `refuse-arguments`, ...)."""
        self.policy_decisions.labels(effect).inc()

    def forget_slot(self, slot: str) -> None:
        """Remove every series of a slot the registry no longer tracks, so label values stay bounded by
        limits.max_slots; a slot made again under the name starts its series from nothing. Costs what
        the slot's own series number: a forgotten name, or one forgotten before, costs a lookup."""
        self.slot_series.forget(slot)
        # The hot path's cached children of the slot go too: they would count into series no longer shown.
        if self._call_children.pop(slot, None) is not None:
            self.calls.remove_matching("slot", slot)
            self.latency.remove_matching("slot", slot)

    def has_series(self, slot: str) -> bool:
        """Whether any series is labelled with `slot` (a lookup, whatever the number of slots)."""
        return slot in self.slot_series.of or slot in self._call_children

    def render(self) -> bytes:
        for refresh in self.before_render:
            refresh()
        return generate_latest(self.exposed)
