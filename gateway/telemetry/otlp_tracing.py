"""The gateway's spans and metrics over OTLP/HTTP with the OpenTelemetry SDK ([telemetry] on).

Imported only when export is on, so a gateway with telemetry off loads none of the SDK. Spans are
recorded on the event loop and exported in batches by the SDK's own thread (BatchSpanProcessor);
`BoundedSpans` keeps its queue to `max_queue_size` itself and counts what it drops, which the SDK
would drop with a log line each and no count. Metrics go out every `metric_interval_ms` from the
SDK's PeriodicExportingMetricReader thread. Nothing here blocks the loop but `shutdown`.

Spans of one request (docs/telemetry.md, "Spans"): the client request (SERVER), the policy decision
of a governed call (INTERNAL), the relay to the provider (CLIENT; its id is the parent the provider
gets), and the provider's answer as the event `mcp.provider.answer` on the relay span.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags, set_span_in_context

from gateway import __version__
from gateway.config import TelemetrySettings
from gateway.config.telemetry import mask_secret_arguments
from gateway.telemetry.metrics import LATENCY_BUCKETS, Metrics, method_label
from gateway.telemetry.trace_context import RequestTrace, caller_context
from gateway.telemetry.tracing import RequestFacts, Tracing, run_side_by_side

SCOPE = "mcp-gateway"
MAX_ATTRIBUTE_TEXT = 256
"""Characters of a tool name, or of a method that is not MCP's, put on a span."""
MAX_ARGUMENTS_TEXT = 4096
"""Characters of the JSON arguments on a span, when capture_arguments is on."""


def sampler_of(settings: TelemetrySettings) -> Sampler:
    """The sampler OTEL_TRACES_SAMPLER names (or [telemetry] sampling_ratio: parentbased_traceidratio)."""
    ratio = TraceIdRatioBased(settings.ratio)
    return {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": ParentBased(ALWAYS_ON),
        "parentbased_always_off": ParentBased(ALWAYS_OFF),
        "parentbased_traceidratio": ParentBased(ratio),
    }[settings.sampler]


def method_attributes(method: str) -> dict[str, str]:
    """`mcp.method.name` of a span: an MCP method as it is, any other as "other" (a client may send any
    name, and a span name or attribute per name would be unbounded) with the name asked for, cut to
    MAX_ATTRIBUTE_TEXT, in `mcpgw.method.raw`."""
    label = method_label(method)
    if label == method:
        return {"mcp.method.name": method}
    return {"mcp.method.name": label, "mcpgw.method.raw": method[:MAX_ATTRIBUTE_TEXT]}


def gateway_resource(settings: TelemetrySettings) -> Resource:
    return Resource.create({"service.name": settings.service_name, "service.version": __version__})


class CountedSpanExporter(OTLPSpanExporter):
    """The OTLP span exporter, counting what it sent and what it could not, and telling `BoundedSpans`
    that a batch left the queue."""

    def __init__(self, metrics: Metrics, bound: BoundedSpans, **options: Any) -> None:
        super().__init__(**options)
        self.counts = metrics
        self.bound = bound

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bound.taken(len(spans))
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            self.counts.telemetry_exported.labels("spans").inc(len(spans))
        else:
            self.counts.telemetry_dropped.labels("span_export").inc(len(spans))
        return result


class CountedMetricExporter(OTLPMetricExporter):
    """The OTLP metric exporter, counting the data points of the exports that failed (the items of
    `mcpgw_telemetry_dropped_total{kind="metric_export"}`)."""

    def __init__(self, metrics: Metrics, **options: Any) -> None:
        super().__init__(**options)
        self.counts = metrics

    def export(
        self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        result = super().export(metrics_data, timeout_millis, **kwargs)
        if result is not MetricExportResult.SUCCESS:
            self.counts.telemetry_dropped.labels("metric_export").inc(data_points(metrics_data))
        return result


def data_points(metrics_data: MetricsData) -> int:
    """How many data points `metrics_data` holds, over all its resources, scopes and metrics."""
    return sum(
        len(metric.data.data_points)
        for resource in metrics_data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    )


class BoundedSpans(SpanProcessor):
    """Hands ended spans to a BatchSpanProcessor while fewer than `limit` wait for export; drops and
    counts the others (the SDK's own queue would drop the oldest silently)."""

    def __init__(self, limit: int, metrics: Metrics) -> None:
        self.limit = limit
        self.metrics = metrics
        self.waiting = 0
        self.lock = threading.Lock()
        self.inner: SpanProcessor | None = None

    def taken(self, count: int) -> None:
        with self.lock:
            self.waiting = max(0, self.waiting - count)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock:
            full = self.waiting >= self.limit
            if not full:
                self.waiting += 1
        if full or self.inner is None:
            self.metrics.telemetry_dropped.labels("span_queue").inc()
            return
        self.inner.on_end(span)

    def shutdown(self) -> None:
        if self.inner is not None:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis) if self.inner is not None else True


class SdkTracing(Tracing):
    """Tracing that records: spans and metrics exported over OTLP/HTTP by the SDK's threads."""

    recording = True

    def __init__(self, settings: TelemetrySettings, metrics: Metrics) -> None:
        config = settings.config
        self.settings = settings
        self.capture_arguments = config.capture_arguments
        timeout_s = config.export_timeout_ms / 1000
        resource = gateway_resource(settings)
        self.bound = BoundedSpans(config.max_queue_size, metrics)
        exporter = CountedSpanExporter(
            metrics,
            self.bound,
            endpoint=settings.signal_endpoint("traces"),
            headers=settings.headers,
            timeout=timeout_s,
        )
        self.bound.inner = BatchSpanProcessor(
            exporter,
            max_queue_size=config.max_queue_size,
            schedule_delay_millis=config.schedule_delay_ms,
            max_export_batch_size=min(config.max_export_batch_size, config.max_queue_size),
            export_timeout_millis=config.export_timeout_ms,
        )
        # shutdown_on_exit=False: the SDK's exit handlers would wait for a collector that is away once
        # more (up to 30 s each) after the gateway's own stop gave up on it; `shutdown` is bounded.
        self.provider = TracerProvider(resource=resource, sampler=sampler_of(settings), shutdown_on_exit=False)
        self.provider.add_span_processor(self.bound)
        self.tracer = self.provider.get_tracer(SCOPE, __version__)
        reader = PeriodicExportingMetricReader(
            CountedMetricExporter(
                metrics, endpoint=settings.signal_endpoint("metrics"), headers=settings.headers, timeout=timeout_s
            ),
            export_interval_millis=config.metric_interval_ms,
            export_timeout_millis=config.export_timeout_ms,
        )
        self.meters = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
        meter = self.meters.get_meter(SCOPE, __version__)
        self.requests = meter.create_counter(
            "mcpgw.requests", unit="{request}", description="Client requests answered, by method, target and outcome"
        )
        # Bounds in seconds, as Prometheus's mcpgw_call_latency_seconds has them: the SDK's default
        # bounds (0, 5, 10 ... 10000) are meant for milliseconds and would put every request in one bucket.
        self.duration = meter.create_histogram(
            "mcpgw.request.duration",
            unit="s",
            description="Time from a client request to its answer",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )

    # -- the client request -------------------------------------------------------------------

    def begin(
        self, meta: object, header: str | None, header_state: str | None, facts: RequestFacts | None = None
    ) -> RequestTrace:
        caller = caller_context(meta, header, header_state)
        parent = Context()  # explicit: never the ambient context of whatever else runs in the process
        state = None
        if caller is not None:
            trace_id, caller_span, flags, state = caller
            remote = SpanContext(int(trace_id, 16), int(caller_span, 16), True, TraceFlags(int(flags, 16)))
            parent = set_span_in_context(NonRecordingSpan(remote), parent)
        name = f"{method_label(facts.method)} {facts.target}" if facts is not None else "request"
        span = self.tracer.start_span(name, parent, SpanKind.SERVER, self._request_attributes(facts))
        context = span.get_span_context()
        return RequestTrace(
            f"{context.trace_id:032x}",
            f"{context.span_id:016x}",
            f"{context.trace_flags:02x}",
            state,
            caller[1] if caller is not None else None,
            span if span.is_recording() else None,
            time.perf_counter(),
            facts,
        )

    def _request_attributes(self, facts: RequestFacts | None) -> dict[str, Any]:
        if facts is None:
            return {}
        attributes: dict[str, Any] = {
            **method_attributes(facts.method),
            "mcpgw.slot": facts.target,
            "mcpgw.transport": facts.transport,
            "mcpgw.principal": facts.principal,
        }
        params = facts.params if isinstance(facts.params, dict) else {}
        tool = params.get("name") if facts.method == "tools/call" else None
        if isinstance(tool, str):
            attributes["mcpgw.tool"] = tool[:MAX_ATTRIBUTE_TEXT]
            if self.capture_arguments:
                # Masked as the audit trail masks them: a span leaves the appliance.
                arguments = orjson.dumps(mask_secret_arguments(params.get("arguments")), default=str).decode()
                attributes["mcpgw.arguments"] = arguments[:MAX_ARGUMENTS_TEXT]
        return attributes

    def end(self, trace: RequestTrace, outcome: str, error_code: int | None) -> None:
        span = trace.span
        if span is not None:
            _finish(span, outcome, error_code)
        facts = trace.facts
        if isinstance(facts, RequestFacts):
            labels = {"mcp.method.name": method_label(facts.method), "mcpgw.slot": facts.metric_slot}
            self.duration.record(time.perf_counter() - trace.started, labels)
            self.requests.add(1, {**labels, "mcpgw.outcome": outcome})

    # -- the relay and the provider's answer --------------------------------------------------

    def start_relay(self, trace: RequestTrace, slot: str, method: str, params: Any, link: str) -> tuple[Any, str]:
        attributes: dict[str, Any] = {**method_attributes(method), "mcpgw.slot": slot, "mcpgw.link": link}
        tool = params.get("name") if method == "tools/call" and isinstance(params, dict) else None
        if isinstance(tool, str):
            attributes["mcpgw.tool"] = tool[:MAX_ATTRIBUTE_TEXT]
        parent = set_span_in_context(trace.span, Context())
        span = self.tracer.start_span(f"{method_label(method)} {slot}", parent, SpanKind.CLIENT, attributes)
        return span, f"{span.get_span_context().span_id:016x}"

    def end_relay(self, span: Any, outcome: str, error_code: int | None, reason: str | None) -> None:
        answer: dict[str, Any] = {"mcpgw.outcome": outcome}
        if error_code is not None:
            answer["rpc.jsonrpc.error_code"] = error_code
        if reason is not None:
            answer["mcpgw.error.reason"] = reason
        span.add_event("mcp.provider.answer", answer)
        _finish(span, outcome, error_code)

    # -- the policy decision ------------------------------------------------------------------

    def start_policy(self, trace: RequestTrace, slot: str, tool: str) -> Any:
        attributes = {"mcpgw.slot": slot, "mcpgw.tool": tool[:MAX_ATTRIBUTE_TEXT]}
        parent = set_span_in_context(trace.span, Context())
        return self.tracer.start_span("policy tools/call", parent, attributes=attributes)

    def end_policy(self, span: Any, effect: str) -> None:
        # The effect only, never a refusal's reason: its words may quote argument values.
        span.set_attribute("mcpgw.policy.effect", effect)
        span.end()

    def shutdown(self) -> bool:
        """Spans and metrics flush side by side, each with export_timeout_ms at most: one after the other,
        a collector that hangs would cost the stop that long for each. The SDK's threads are daemons: one
        still blocked on the collector when the time is up is left to end with the process. True when both
        finished within export_timeout_ms."""
        timeout_ms = self.settings.config.export_timeout_ms
        return run_side_by_side(
            (self.provider.shutdown, lambda: self.meters.shutdown(timeout_millis=timeout_ms)),
            timeout_ms / 1000,
            "mcpgw-otlp-stop",
        )


def _finish(span: Any, outcome: str, error_code: int | None) -> None:
    span.set_attribute("mcpgw.outcome", outcome)
    if error_code is not None:
        span.set_attribute("rpc.jsonrpc.error_code", error_code)
        span.set_status(StatusCode.ERROR)
    span.end()
