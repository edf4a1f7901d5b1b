"""Providers' telemetry exported over OTLP/HTTP: one thread, one bounded queue, every slot
(docs/telemetry.md, "Provider telemetry").

Imported only when export is on. The event loop only appends validated batches
(gateway/telemetry/provider_telemetry.py); this thread wakes every `schedule_delay_ms`, or as soon as a
full batch waits, turns up to `max_export_batch_size` items into the SDK's data model (spans, log
records, metric points) and sends them with the SDK's OTLP exporters, each slot under a Resource of its
own: `mcp.provider.slot` and `service.instance.id` name the slot, `service.name` the provider's
authenticated identity (else the slot), `service.namespace` is "mcp-gateway.provider" (mcp-broker's
attributes). A failed export is counted and not retried beyond the exporter's own retries: an absent
collector must not grow memory or slow the devices.
"""

from __future__ import annotations

import threading
import time
from collections import deque
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

SCOPE = InstrumentationScope("mcp-gateway.provider-telemetry", __version__)
NAMESPACE = "mcp-gateway.provider"
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class ProviderExport:
    """The export queue and thread of providers' telemetry (implements provider_telemetry.ExportSink)."""

    def __init__(self, settings: TelemetrySettings, metrics: Metrics, max_slots: int) -> None:
        config = settings.config
        self.metrics = metrics
        self.max_queue = config.providers.max_queue
        self.batch_items = config.max_export_batch_size
        self.delay_s = config.schedule_delay_ms / 1000
        self.max_resources = max_slots
        timeout = config.export_timeout_ms / 1000
        options: dict[str, Any] = {"headers": settings.headers, "timeout": timeout}
        self.spans = OTLPSpanExporter(endpoint=settings.signal_endpoint("traces"), **options)
        self.logs = OTLPLogExporter(endpoint=settings.signal_endpoint("logs"), **options)
        self.points = OTLPMetricExporter(endpoint=settings.signal_endpoint("metrics"), **options)
        self.queue: deque[Batch] = deque()
        self.queued_items = 0
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self._resources: dict[tuple[str, str | None], Resource] = {}
        self.thread = threading.Thread(target=self._run, name="mcpgw-provider-telemetry", daemon=True)
        self.thread.start()

    # -- the event loop's side ----------------------------------------------------------------

    def put(self, batch: Batch) -> bool:
        count = len(batch.items)
        with self.lock:
            if self.stopping or self.queued_items + count > self.max_queue:
                return False
            self.queue.append(batch)
            self.queued_items += count
            full = self.queued_items >= self.batch_items
        if full:
            self.wake.set()
        return True

    # -- the export thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self.wake.wait(self.delay_s)
            self.wake.clear()
            stopping = self.stopping
            while self._export_some():
                pass
            if stopping:
                return

    def _take(self) -> list[Batch]:
        taken: list[Batch] = []
        items = 0
        with self.lock:
            while self.queue and items < self.batch_items:
                batch = self.queue.popleft()
                taken.append(batch)
                items += len(batch.items)
            self.queued_items -= items
        return taken

    def _export_some(self) -> bool:
        """Export one batch of what waits; False when nothing waited."""
        taken = self._take()
        if not taken:
            return False
        spans: list[ReadableSpan] = []
        logs: list[ReadableLogRecord] = []
        points: dict[Resource, list[MetricPoint]] = {}
        for batch in taken:
            resource = self._resource(batch.slot, batch.identity)
            for item in batch.items:
                if isinstance(item, ProviderSpan):
                    spans.append(_span(item, resource))
                elif isinstance(item, ProviderEvent):
                    logs.append(_log(item, resource, batch.received_ns))
                else:
                    points.setdefault(resource, []).append(item)
        if spans:
            self._sent("provider_spans", len(spans), self.spans.export(spans) is SpanExportResult.SUCCESS)
        if logs:
            self._sent("provider_logs", len(logs), self.logs.export(logs) is LogRecordExportResult.SUCCESS)
        if points:
            count = sum(len(values) for values in points.values())
            data = _metrics_data(points, time.time_ns())
            self._sent("provider_metrics", count, self.points.export(data) is MetricExportResult.SUCCESS)
        return True

    def _sent(self, kind: str, count: int, ok: bool) -> None:
        if ok:
            self.metrics.telemetry_exported.labels(kind).inc(count)
        else:
            self.metrics.telemetry_dropped.labels("provider_export").inc(count)

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

    def shutdown(self) -> None:
        """Send what waits (bounded by the export timeout of each request) and stop the thread."""
        with self.lock:
            self.stopping = True
        self.wake.set()
        self.thread.join()
        for exporter in (self.spans, self.logs, self.points):
            exporter.shutdown()


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
        kind=SpanKind(item.kind),
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
        timestamp=item.time_ns,
        observed_timestamp=received_ns,
        context=context,
        severity_text=item.severity_text,
        severity_number=SeverityNumber(item.severity),
        body=item.body,
        attributes=item.attributes,
        event_name=item.name,
    )
    return ReadableLogRecord(log_record=record, resource=resource, instrumentation_scope=SCOPE)


def _metrics_data(points: dict[Resource, list[MetricPoint]], now_ns: int) -> MetricsData:
    resource_metrics = []
    for resource, values in points.items():
        metrics = []
        for point in values:
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
            metrics.append(Metric(point.name, None, point.unit, data))
        resource_metrics.append(ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], ""))
    return MetricsData(resource_metrics)
