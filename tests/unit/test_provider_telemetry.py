"""Providers' broker/telemetry intake: what is refused, the per-slot bounds, the export queue."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.config import ProviderTelemetryConfig
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.provider_telemetry import (
    Batch,
    MetricPoint,
    ProviderEvent,
    ProviderSpan,
    ProviderTelemetry,
    Refused,
    envelope,
    parse_items,
)

NOW = str(time.time_ns())
SPAN: dict[str, Any] = {
    "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
    "spanId": "00f067aa0ba902b7",
    "parentSpanId": "a3ce929d0e0e4736",
    "name": "pump.state",
    "kind": 1,
    "startTimeUnixNano": NOW,
    "endTimeUnixNano": NOW,
    "attributes": {"previous": "running", "state": "fault", "speed_rpm": 1450, "temp_c": 81.5, "ok": False},
    "status": {"code": 2, "message": "overtemp"},
}


class Sink:
    def __init__(self, room: int = 1000) -> None:
        self.batches: list[Batch] = []
        self.room = room

    def put(self, batch: Batch) -> bool:
        if len(self.batches) >= self.room:
            return False
        self.batches.append(batch)
        return True

    def shutdown(self) -> None:
        return


def intake(sink: Sink | None = None, **bounds: Any) -> tuple[ProviderTelemetry, Metrics]:
    metrics = Metrics()
    found = ProviderTelemetry(ProviderTelemetryConfig(**bounds), metrics, max_slots=8)
    found.configure(found.settings, sink)
    return found, metrics


def count(metrics: Metrics, slot: str, outcome: str) -> float:
    return float(metrics.provider_telemetry.labels(slot, outcome)._value.get())


def events(number: int) -> dict[str, Any]:
    return {
        "version": 1,
        "signal": "logs",
        "events": [{"name": "fault", "attributes": {"n": n}} for n in range(number)],
    }


def test_pump_1s_span_is_taken_as_it_sends_it() -> None:
    signal, raw = envelope({"version": 1, "signal": "traces", "span": SPAN}, 32)
    (span,) = parse_items(signal, raw, ProviderTelemetryConfig())
    assert isinstance(span, ProviderSpan)
    assert (span.parent_span_id, span.kind, span.status_code, span.status_message) == (
        "a3ce929d0e0e4736",
        1,
        2,
        "overtemp",
    )
    assert span.start_ns == int(NOW) and span.attributes["temp_c"] == 81.5


def test_events_and_metric_points_are_taken() -> None:
    params = {
        "signal": "logs",
        "events": [
            {"name": "fault", "severity": "error", "body": "overtemp", "timeUnixNano": 5, "attributes": {"code": 3}},
            {"name": "fault_reset", "traceId": SPAN["traceId"], "spanId": SPAN["spanId"]},
        ],
    }
    first, second = parse_items(*envelope(params, 32), ProviderTelemetryConfig())
    assert isinstance(first, ProviderEvent) and (first.severity, first.severity_text, first.time_ns) == (17, "ERROR", 5)
    assert isinstance(second, ProviderEvent) and second.trace_id == SPAN["traceId"] and second.time_ns is None
    points = {
        "signal": "metrics",
        "metrics": [{"name": "t", "value": 41.5, "unit": "Cel"}, {"name": "n", "kind": "sum", "value": 2}],
    }
    gauge, total = parse_items(*envelope(points, 32), ProviderTelemetryConfig())
    assert isinstance(gauge, MetricPoint) and (gauge.kind, gauge.value, gauge.unit) == ("gauge", 41.5, "Cel")
    assert isinstance(total, MetricPoint) and total.kind == "sum"


def replace(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


@pytest.mark.parametrize(
    "params",
    [
        None,
        [],
        {"signal": "traces"},
        {"signal": "profiles", "span": SPAN},
        {"version": 2, "signal": "traces", "span": SPAN},
        {"signal": "logs", "events": []},
        {"signal": "logs", "events": [{"name": ""}]},
        {"signal": "logs", "events": [{"name": "x", "severity": "loud"}]},
        {"signal": "logs", "events": [{"name": "x", "traceId": SPAN["traceId"]}]},
        {"signal": "logs", "events": [{"name": "x", "attributes": {"a": {"nested": 1}}}]},
        {"signal": "logs", "events": [{"name": "x", "attributes": {"a": float("nan")}}]},
        {"signal": "logs", "events": [{"name": "x", "timeUnixNano": "-5"}]},
        {"signal": "metrics", "metrics": [{"name": "t", "value": True}]},
        {"signal": "metrics", "metrics": [{"name": "t", "value": 1, "kind": "histogram"}]},
        {"signal": "metrics", "metrics": [{"name": "t", "value": -1, "kind": "sum"}]},
        {"signal": "traces", "span": replace(SPAN, traceId="0" * 32)},
        {"signal": "traces", "span": replace(SPAN, spanId=SPAN["spanId"].upper())},
        {"signal": "traces", "span": replace(SPAN, kind=6)},
        {"signal": "traces", "span": replace(SPAN, startTimeUnixNano=1.5)},
        {"signal": "traces", "span": replace(SPAN, endTimeUnixNano="0")},
        {"signal": "traces", "span": replace(SPAN, status={"code": 3})},
        {"signal": "traces", "span": replace(SPAN, events=[{"name": "tx"}])},
    ],
)
def test_a_notification_breaking_a_rule_is_refused_whole(params: Any) -> None:
    with pytest.raises(Refused):
        signal, raw = envelope(params, 32)
        parse_items(signal, raw, ProviderTelemetryConfig())


def test_the_bounds_on_items_attributes_and_strings() -> None:
    settings = ProviderTelemetryConfig(max_items=3, max_attributes=2, max_string_length=8)
    with pytest.raises(Refused, match="max_items"):
        envelope(events(4), settings.max_items)
    with pytest.raises(Refused, match="max_attributes"):
        parse_items("logs", [{"name": "x", "attributes": {"a": 1, "b": 2, "c": 3}}], settings)
    with pytest.raises(Refused, match="max_string_length"):
        parse_items("logs", [{"name": "x", "attributes": {"a": "123456789"}}], settings)
    with pytest.raises(Refused, match="max_string_length"):
        parse_items("logs", [{"name": "123456789"}], settings)


def test_a_flood_from_one_slot_is_dropped_and_counted_for_that_slot_alone(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    telemetry, metrics = intake(sink, rate_per_s=0.001, burst=10, max_items=5)
    for _ in range(6):
        telemetry.accept("pump-1", None, events(5))
    telemetry.accept("pump-2", "board-2", events(5))
    assert count(metrics, "pump-1", "accepted") == 2 and count(metrics, "pump-1", "rate_limited") == 4
    assert count(metrics, "pump-2", "accepted") == 1 and count(metrics, "pump-2", "rate_limited") == 0
    assert [(batch.slot, batch.identity, len(batch.items)) for batch in sink.batches] == [
        ("pump-1", None, 5),
        ("pump-1", None, 5),
        ("pump-2", "board-2", 5),
    ]
    assert sum("faster than" in record.getMessage() for record in caplog.records) == 1  # once per slot


def test_invalid_ones_are_counted_and_logged_once_per_slot(caplog: pytest.LogCaptureFixture) -> None:
    telemetry, metrics = intake(Sink())
    for _ in range(3):
        telemetry.accept("pump-1", None, {"signal": "nope"})
    assert count(metrics, "pump-1", "invalid") == 3
    assert sum("dropped" in record.getMessage() for record in caplog.records) == 1


def test_off_upstreams_and_a_full_queue_are_counted() -> None:
    off, metrics = intake(None)
    off.accept("pump-1", None, events(1))
    assert count(metrics, "pump-1", "off") == 1
    telemetry, metrics = intake(Sink(room=1))
    telemetry.accept("stdio-1", None, events(1), board=False)
    assert count(metrics, "stdio-1", "not_a_board") == 1
    telemetry.accept("pump-1", None, events(2))
    telemetry.accept("pump-1", None, events(2))
    assert count(metrics, "pump-1", "accepted") == 1 and count(metrics, "pump-1", "queue_full") == 1
    assert metrics.telemetry_dropped.labels("provider_queue")._value.get() == 2


def test_buckets_stay_bounded_by_the_slot_count() -> None:
    telemetry, _ = intake(Sink(), rate_per_s=1000, burst=10, max_items=4)
    for number in range(50):
        telemetry.accept(f"pump-{number}", None, events(1))
    assert len(telemetry.buckets) <= telemetry.max_slots
