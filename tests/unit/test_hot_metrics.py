"""The request-path metrics kept as plain numbers expose what prometheus-client's own would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.hot_metrics import CounterFamily, HistogramFamily
from gateway.telemetry.metrics import LATENCY_BUCKETS, Metrics

# Bounds themselves, between them, below the first and past the last (+Inf only).
OBSERVED = (0.0, 0.0005, 0.001, 0.0011, 0.0025, 0.003, 0.07, 1.0, 2.5, 59.9, 60.0, 100.0)


def exposition(registry: CollectorRegistry) -> str:
    """The text exposition with the creation times (which differ by construction) blanked."""
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


def test_counter_and_histogram_expose_the_same_samples_as_prometheus_clients_own() -> None:
    ours, theirs = CollectorRegistry(auto_describe=True), CollectorRegistry(auto_describe=True)
    counter = CounterFamily("mcpgw_calls", "Requests", ["slot", "method"], registry=ours)
    histogram = HistogramFamily("mcpgw_call_latency_seconds", "Time", ["slot"], LATENCY_BUCKETS, registry=ours)
    their_counter = Counter("mcpgw_calls", "Requests", ["slot", "method"], registry=theirs)
    their_histogram = Histogram(
        "mcpgw_call_latency_seconds", "Time", ["slot"], buckets=LATENCY_BUCKETS, registry=theirs
    )
    for seconds in OBSERVED:
        histogram.labels("pump-1").observe(seconds)
        their_histogram.labels("pump-1").observe(seconds)
        counter.labels("pump-1", "tools/call").value += 1
        their_counter.labels("pump-1", "tools/call").inc()
    counter.labels("pump-2", "ping")  # created, never counted: exposed at 0
    their_counter.labels("pump-2", "ping")
    histogram.labels("idle")
    their_histogram.labels("idle")
    assert exposition(ours) == exposition(theirs)


def test_a_child_is_made_once_per_label_values() -> None:
    registry = CollectorRegistry(auto_describe=True)
    counter = CounterFamily("mcpgw_http_requests", "Requests", ["endpoint", "status"], registry=registry)
    child = counter.labels("slot", "200")
    assert counter.labels("slot", "200") is child
    assert counter.labels("slot", "404") is not child


def test_wrong_label_arity_is_a_named_error() -> None:
    registry = CollectorRegistry(auto_describe=True)
    counter = CounterFamily("mcpgw_calls", "Requests", ["slot", "method"], registry=registry)
    with pytest.raises(ValueError, match=r"mcpgw_calls takes labels \('slot', 'method'\)"):
        counter.labels("pump-1")


def test_a_second_metric_of_the_same_name_is_refused_by_the_registry() -> None:
    registry = CollectorRegistry(auto_describe=True)
    CounterFamily("mcpgw_calls", "Requests", ["slot"], registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("mcpgw_calls", "Requests", ["slot"], registry=registry)


def test_the_gateway_metrics_render_the_request_path_families() -> None:
    metrics = Metrics()
    calls, latency = metrics.call_metrics("pump-1", "tools/call")
    assert metrics.call_metrics("pump-1", "tools/call") == (calls, latency)
    calls.value += 1
    latency.observe(0.002)
    metrics.http_requests.labels("slot", "200").value += 1
    text = metrics.render().decode()
    assert 'mcpgw_calls_total{method="tools/call",slot="pump-1"} 1.0' in text
    assert 'mcpgw_call_latency_seconds_bucket{le="0.0025",slot="pump-1"} 1.0' in text
    assert 'mcpgw_http_requests_total{endpoint="slot",status="200"} 1.0' in text


def slot_values(metrics: Metrics) -> dict[str, set[str]]:
    """Each exposed family that has a slot label, with the slot values it shows."""
    shown: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if "slot" in sample.labels:
                shown.setdefault(family.name, set()).add(sample.labels["slot"])
    return shown


def test_forgetting_a_slot_removes_its_series_from_every_family_labelled_by_slot() -> None:
    metrics = Metrics()
    for slot in ("gone-1", "kept-1"):
        calls, latency = metrics.call_metrics(slot, "tools/call")
        calls.value += 1
        latency.observe(0.01)
        metrics.call_metrics(slot, "x/unknown")[0].value += 1  # counted as "other"
        metrics.call_errors.labels(slot, "deadline").inc()
        metrics.heartbeat_misses.labels(slot).inc()
        metrics.provider_connects.labels(slot, "websocket").inc()
        metrics.provider_disconnects.labels(slot).inc()
        metrics.provider_faults.labels(slot, "unparsable").inc()
        metrics.provider_telemetry.labels(slot, "accepted").inc()
        for gauge in (metrics.slot_connected, metrics.slot_pending, metrics.slot_tools, metrics.slot_in_aggregate):
            gauge.labels(slot).set(1)
    families = {
        "mcpgw_slot_connected",
        "mcpgw_slot_pending_requests",
        "mcpgw_calls",
        "mcpgw_call_errors",
        "mcpgw_call_latency_seconds",
        "mcpgw_heartbeat_misses",
        "mcpgw_provider_connects",
        "mcpgw_provider_disconnects",
        "mcpgw_provider_faults",
        "mcpgw_slot_tools",
        "mcpgw_slot_in_aggregate",
        "mcpgw_provider_telemetry",
    }
    assert slot_values(metrics) == {name: {"gone-1", "kept-1"} for name in families}
    metrics.forget_slot("gone-1")
    assert slot_values(metrics) == {name: {"kept-1"} for name in families}
    # A slot made again under the name counts from nothing, through the hot path's own children too.
    calls, latency = metrics.call_metrics("gone-1", "tools/call")
    calls.value += 1
    text = metrics.render().decode()
    assert 'mcpgw_calls_total{method="tools/call",slot="gone-1"} 1.0' in text
    assert 'mcpgw_call_latency_seconds_count{slot="gone-1"} 0.0' in text
    assert 'mcpgw_calls_total{method="tools/call",slot="kept-1"} 1.0' in text
