"""A real OTLP/HTTP receiver for tests: an aiohttp server on a free loopback port that decodes what the
exporters POST to /v1/traces, /v1/logs and /v1/metrics with the OpenTelemetry proto package, and keeps
every span, log record and metric point with its resource's attributes."""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(items: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    item: KeyValue
    for item in items:
        found[item.key] = value_of(item.value)
    return found


@dataclass
class Span:
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int


@dataclass
class Log:
    resource: dict[str, Any]
    event_name: str
    severity_text: str
    body: Any
    attributes: dict[str, Any]
    trace_id: str
    span_id: str


@dataclass
class Point:
    resource: dict[str, Any]
    name: str
    kind: str
    value: float
    unit: str
    attributes: dict[str, Any]


@dataclass
class OtlpReceiver:
    spans: list[Span] = field(default_factory=list)
    logs: list[Log] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=lambda: {"traces": 0, "logs": 0, "metrics": 0})
    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> OtlpReceiver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/logs", self._logs)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
        return body

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await self._body(request))
        self.requests["traces"] += 1
        for resource_spans in message.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Span(
                            resource,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            span.kind,
                            attributes_of(span.attributes),
                            [(event.name, attributes_of(event.attributes)) for event in span.events],
                            span.status.code,
                        )
                    )
        return self._answer(ExportTraceServiceResponse().SerializeToString())

    async def _logs(self, request: web.Request) -> web.Response:
        message = ExportLogsServiceRequest()
        message.ParseFromString(await self._body(request))
        self.requests["logs"] += 1
        for resource_logs in message.resource_logs:
            resource = attributes_of(resource_logs.resource.attributes)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    self.logs.append(
                        Log(
                            resource,
                            record.event_name,
                            record.severity_text,
                            value_of(record.body),
                            attributes_of(record.attributes),
                            record.trace_id.hex(),
                            record.span_id.hex(),
                        )
                    )
        return self._answer(ExportLogsServiceResponse().SerializeToString())

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await self._body(request))
        self.requests["metrics"] += 1
        for resource_metrics in message.resource_metrics:
            resource = attributes_of(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data") or ""
                    data = getattr(metric, kind) if kind else None
                    for point in getattr(data, "data_points", []):
                        if kind in ("gauge", "sum"):
                            value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                        else:
                            value = getattr(point, "count", 0)
                        self.points.append(
                            Point(resource, metric.name, kind, value, metric.unit, attributes_of(point.attributes))
                        )
        return self._answer(ExportMetricsServiceResponse().SerializeToString())

    @staticmethod
    def _answer(body: bytes) -> web.Response:
        return web.Response(body=body, content_type="application/x-protobuf")

    def trace(self, trace_id: str) -> list[Span]:
        return [span for span in self.spans if span.trace_id == trace_id]
