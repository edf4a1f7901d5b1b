"""How spans and the OTLP metrics name a request's method (docs/telemetry.md, "Spans and metrics"): MCP's
methods by their names (server/discover and initialize among them), any other as `other`, so a client
cannot make a span name or a metric series per name it sends; the name asked for stays on the span as
`mcpgw.method.raw`, cut to 256 characters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import TelemetryConfig, resolve_telemetry
from gateway.telemetry.metrics import Metrics, method_label
from gateway.telemetry.otlp_tracing import SdkTracing
from gateway.telemetry.tracing import RequestFacts

MCP_METHODS = ["initialize", "server/discover", "subscriptions/listen", "ping", "tools/call", "completion/complete"]


@pytest.fixture
def traced() -> Iterator[tuple[SdkTracing, InMemorySpanExporter]]:
    # Nothing is sent: the collector's port is closed and the batches would wait ten minutes; the spans
    # are read from the SDK's in-memory exporter beside the gateway's own.
    config = TelemetryConfig(
        endpoint="http://127.0.0.1:9", schedule_delay_ms=600_000, metric_interval_ms=600_000, export_timeout_ms=500
    )
    tracing = SdkTracing(resolve_telemetry(config, {}), Metrics())
    spans = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(spans))
    yield tracing, spans
    tracing.shutdown()


@pytest.mark.parametrize("method", MCP_METHODS)
def test_mcp_methods_are_named(method: str) -> None:
    assert method_label(method) == method


def request_span(tracing: SdkTracing, spans: InMemorySpanExporter, method: str) -> tuple[str, dict[str, Any]]:
    facts = RequestFacts("pump-1", method, {}, "streamable-http", "anonymous", "pump-1")
    trace = tracing.begin(None, None, None, facts)
    relay, _ = tracing.start_relay(trace, "pump-1", method, {}, "websocket")
    tracing.end_relay(relay, "error", -32601, "provider")
    tracing.end(trace, "error", -32601)
    finished = spans.get_finished_spans()
    assert len(finished) == 2
    request = finished[1]
    assert finished[0].name == request.name  # the relay's name is bounded the same way
    relay_attributes, request_attributes = dict(finished[0].attributes or {}), dict(request.attributes or {})
    assert relay_attributes["mcp.method.name"] == request_attributes["mcp.method.name"]
    spans.clear()
    return request.name, request_attributes


def test_an_unknown_method_is_other_in_the_span_name_and_kept_cut_in_an_attribute(
    traced: tuple[SdkTracing, InMemorySpanExporter],
) -> None:
    tracing, spans = traced
    asked = "vendor/" + "x" * 1000
    name, attributes = request_span(tracing, spans, asked)
    assert name == "other pump-1"
    assert attributes["mcp.method.name"] == "other"
    assert attributes["mcpgw.method.raw"] == asked[:256]


@pytest.mark.parametrize("method", ["server/discover", "tools/list"])
def test_an_mcp_method_names_its_span(traced: tuple[SdkTracing, InMemorySpanExporter], method: str) -> None:
    tracing, spans = traced
    name, attributes = request_span(tracing, spans, method)
    assert name == f"{method} pump-1"
    assert attributes["mcp.method.name"] == method
    assert "mcpgw.method.raw" not in attributes
