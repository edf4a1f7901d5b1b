"""Providers' telemetry exported over OTLP/HTTP: one thread, one bounded queue, every slot
(docs/telemetry.md, "Provider telemetry").

Imported only when export is on. The event loop only appends validated batches
(gateway/telemetry/provider_telemetry.py); this thread wakes every `schedule_delay_ms`, or as soon as a
full batch waits, turns up to `max_export_batch_size` items into the SDK's data model (spans, log
records, metric points) and sends them with the SDK's OTLP exporters, each slot under a Resource of its
own: `mcp.provider.slot` and `service.instance.id` name the slot, `service.name` the provider's
authenticated identity (else the slot), `service.namespace` is "mcp-gateway.provider" (mcp-broker's
attributes). A failed export is counted and not retried beyond the exporter's own retries: an absent
collector must not grow memory or slow the devices. An item the thread cannot turn into the SDK's model
is dropped and counted, and logged once per slot; nothing a board sends stops the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from gateway import __version__
from gateway.config import TelemetrySettings
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.provider_telemetry import Batch, MetricPoint, ProviderEvent, ProviderSpan

EXPORT_BATCH_BYTES = 4 * 1024 * 1024
"""Estimated bytes of provider items in one export request, at most (a collector's usual limit of one
request); one notification larger than that still goes alone."""

log = logging.getLogger("gateway.telemetry")

SCOPE = InstrumentationScope("mcp-gateway.provider-telemetry", __version__)
NAMESPACE = "mcp-gateway.provider"
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
SPAN_KINDS = (
    SpanKind.INTERNAL,  # 0 UNSPECIFIED: OTLP says to take it as INTERNAL
    SpanKind.INTERNAL,
    SpanKind.SERVER,
    SpanKind.CLIENT,
    SpanKind.PRODUCER,
    SpanKind.CONSUMER,
)
"""The API's span kind of each OTLP kind number a board sends (0 to 5); the API's own enum counts from
INTERNAL = 0, one step off OTLP's numbering."""


class ProviderExport:
    """The export queue and thread of providers' telemetry (implements provider_telemetry.ExportSink)."""

    def __init__(self, settings: TelemetrySettings, metrics: Metrics, max_slots: int) -> None:
        config = settings.config
        self.metrics = metrics
        self.max_queue = config.providers.max_queue
        self.max_queue_bytes = config.providers.max_queue_bytes
        self.batch_items = config.max_export_batch_size
        self.delay_s = config.schedule_delay_ms / 1000
        self.max_resources = max_slots
        timeout = self.timeout_s = config.export_timeout_ms / 1000
        options: dict[str, Any] = {"headers": settings.headers, "timeout": timeout}
        self.spans = OTLPSpanExporter(endpoint=settings.signal_endpoint("traces"), **options)
        self.logs = OTLPLogExporter(endpoint=settings.signal_endpoint("logs"), **options)
        self.points = OTLPMetricExporter(endpoint=settings.signal_endpoint("metrics"), **options)
        self.queue: deque[Batch] = deque()
        self.queued_items = 0
        self.queued_bytes = 0
        self.queue_sizes: deque[tuple[int, int]] = deque()
        """(items, estimated bytes) of each batch in `queue`, in the same order."""
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.give_up_at = float("inf")
        """time.monotonic() past which a stopping thread sends nothing more (shutdown sets it)."""
        self.ended_at: float | None = None
        """time.monotonic() when the stopping thread ended (None while it runs)."""
        self._resources: dict[tuple[str, str | None], Resource] = {}
        self._warned: set[str] = set()
        """Slots whose unconvertible item was logged (at most max_slots; counted either way)."""
        self.thread = threading.Thread(target=self._run, name="mcpgw-provider-telemetry", daemon=True)
        self.thread.start()

    # -- the event loop's side ----------------------------------------------------------------

    def put(self, batch: Batch) -> bool:
        count, size = batch.cost, batch.size
        with self.lock:
            if (
                self.stopping
                or self.queued_items + count > self.max_queue
                or self.queued_bytes + size > self.max_queue_bytes
            ):
                return False
            self.queue.append(batch)
            self.queue_sizes.append((count, size))
            self.queued_items += count
            self.queued_bytes += size
            full = self.queued_items >= self.batch_items or self.queued_bytes >= EXPORT_BATCH_BYTES
        if full:
            self.wake.set()
        return True

    # -- the export thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self.wake.wait(self.delay_s)
            self.wake.clear()
            stopping = self.stopping
            try:
                while time.monotonic() < self.give_up_at and self._export_some():
                    pass
            except Exception as exc:  # a fault of the gateway's own: keep serving the other slots
                self._warn("*thread", "provider telemetry: the export thread met %s; it goes on", type(exc).__name__)
            if stopping:
                self._drop_waiting()
                self.ended_at = time.monotonic()
                return

    def _drop_waiting(self) -> None:
        """At stop, what the export timeout left no time for: dropped and counted."""
        with self.lock:
            left, self.queued_items, self.queued_bytes = self.queued_items, 0, 0
            self.queue.clear()
            self.queue_sizes.clear()
        if left:
            self.metrics.telemetry_dropped.labels("provider_export").inc(left)

    def _take(self) -> list[Batch]:
        taken: list[Batch] = []
        items = size = 0
        with self.lock:
            while self.queue and items < self.batch_items and size < EXPORT_BATCH_BYTES:
                if taken and size + self.queue_sizes[0][1] > EXPORT_BATCH_BYTES:
                    break
                taken.append(self.queue.popleft())
                count, bytes_ = self.queue_sizes.popleft()
                items += count
                size += bytes_
            self.queued_items -= items
            self.queued_bytes -= size
        return taken

    def queued(self) -> dict[str, int]:
        """Items and estimated bytes waiting for export now (the gateway's telemetry status)."""
        with self.lock:
            return {"items": self.queued_items, "bytes": self.queued_bytes}

    def _export_some(self) -> bool:
        """Export one batch of what waits; False when nothing waited. Raises nothing: the thread serves
        every slot, so an item it cannot convert, or an export that raises, costs only those items."""
        taken = self._take()
        if not taken:
            return False
        spans: list[ReadableSpan] = []
        logs: list[ReadableLogRecord] = []
        points: dict[Resource, list[Metric]] = {}
        now_ns = time.time_ns()
        for batch in taken:
            for item in batch.items:
                try:
                    resource = self._resource(batch.slot, batch.identity)
                    if isinstance(item, ProviderSpan):
                        spans.append(_span(item, resource))  # its events travel in it
                    elif isinstance(item, ProviderEvent):
                        logs.append(_log(item, resource, batch.received_ns))
                    else:
                        points.setdefault(resource, []).append(_metric(item, now_ns))
                except Exception as exc:
                    self.metrics.telemetry_dropped.labels("provider_item").inc()
                    self._warn(
                        batch.slot,
                        "%s sent a telemetry item the export could not convert (%s); it was dropped",
                        f"provider for slot {batch.slot}",
                        type(exc).__name__,
                    )
        if spans:
            self._send("provider_spans", len(spans), lambda: self.spans.export(spans) is SpanExportResult.SUCCESS)
        if logs:
            self._send("provider_logs", len(logs), lambda: self.logs.export(logs) is LogRecordExportResult.SUCCESS)
        if points:
            count = sum(len(metrics) for metrics in points.values())
            data = _metrics_data(points)
            self._send("provider_metrics", count, lambda: self.points.export(data) is MetricExportResult.SUCCESS)
        return True

    def _send(self, kind: str, count: int, export: Callable[[], bool]) -> None:
        """Run one export and count its items as sent or dropped (an export that raises drops them)."""
        try:
            ok = export()
        except Exception as exc:
            ok = False
            self._warn("*export", "provider telemetry: exporting %s raised %s; dropped", kind, type(exc).__name__)
        if ok:
            self.metrics.telemetry_exported.labels(kind).inc(count)
        else:
            self.metrics.telemetry_dropped.labels("provider_export").inc(count)

    def _warn(self, key: str, text: str, *args: Any) -> None:
        """Once per slot (`key`; "*..." for a fault of the export as a whole, no slot's name); the counters
        carry the rest. Never the item itself: what a board sent is not printed into the gateway's log."""
        if key in self._warned:
            return
        if len(self._warned) >= self.max_resources:
            self._warned.clear()
        self._warned.add(key)
        log.warning(text, *args, extra=None if key.startswith("*") else {"slot": key})

    def _resource(self, slot: str, identity: str | None) -> Resource:
        key = (slot, identity)
        found = self._resources.get(key)
        if found is None:
            if len(self._resources) >= self.max_resources:
                self._resources.clear()
            attributes = {
                "service.name": identity or slot,
                "service.namespace": NAMESPACE,
                "service.instance.id": slot,
                "mcp.provider.slot": slot,
            }
            if identity:
                attributes["mcp.provider.principal"] = identity
            found = self._resources[key] = Resource(attributes)
        return found

    def shutdown(self) -> bool:
        """Send what waits within export_timeout_ms and stop the thread; True when it ended by then. The
        thread is a daemon: an export still blocked on the collector when the time is up ends with the
        process."""
        with self.lock:
            self.stopping = True
            give_up_at = self.give_up_at = time.monotonic() + self.timeout_s
        self.wake.set()
        self.thread.join(self.timeout_s)
        # The thread's own end time decides: this one may run again late, after the export gave up.
        ended_at = self.ended_at
        for exporter in (self.spans, self.logs, self.points):
            exporter.shutdown()  # ends the exporters' retry waits; a request under way keeps its own timeout
        return ended_at is not None and ended_at <= give_up_at


def _span(item: ProviderSpan, resource: Resource) -> ReadableSpan:
    context = SpanContext(int(item.trace_id, 16), int(item.span_id, 16), False, SAMPLED)
    parent = None
    if item.parent_span_id is not None:
        parent = SpanContext(int(item.trace_id, 16), int(item.parent_span_id, 16), True, SAMPLED)
    status = Status(StatusCode(item.status_code), item.status_message if item.status_code == 2 else None)
    return ReadableSpan(
        name=item.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=item.attributes,
        events=[Event(event.name, event.attributes, event.time_ns) for event in item.events],
        kind=SPAN_KINDS[item.kind],
        status=status,
        start_time=item.start_ns,
        end_time=item.end_ns,
        instrumentation_scope=SCOPE,
    )


def _log(item: ProviderEvent, resource: Resource, received_ns: int) -> ReadableLogRecord:
    context = Context()
    if item.trace_id is not None and item.span_id is not None:
        linked = SpanContext(int(item.trace_id, 16), int(item.span_id, 16), True, SAMPLED)
        context = set_span_in_context(NonRecordingSpan(linked), context)
    record = LogRecord(
        timestamp=item.time_ns if item.time_ns is not None else received_ns,  # unset: the arrival time
        observed_timestamp=received_ns,
        context=context,
        severity_text=item.severity_text,
        severity_number=SeverityNumber(item.severity),
        body=item.body,
        attributes=item.attributes,
        event_name=item.name,
    )
    return ReadableLogRecord(log_record=record, resource=resource, instrumentation_scope=SCOPE)


def _metric(point: MetricPoint, now_ns: int) -> Metric:
    data_point = NumberDataPoint(
        attributes=point.attributes,
        start_time_unix_nano=0,
        time_unix_nano=point.time_ns or now_ns,
        value=point.value,
    )
    data: Gauge | Sum
    if point.kind == "sum":
        data = Sum([data_point], AggregationTemporality.CUMULATIVE, is_monotonic=True)
    else:
        data = Gauge([data_point])
    return Metric(point.name, None, point.unit, data)


def _metrics_data(points: dict[Resource, list[Metric]]) -> MetricsData:
    return MetricsData(
        [ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], "") for resource, metrics in points.items()]
    )
