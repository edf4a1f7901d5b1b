"""Prometheus metrics of one gateway instance (its own registry, so tests can run several)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.slot_connected = Gauge("mcpgw_slot_connected", "1 when a provider holds the slot", ["slot"], registry=r)
        self.slot_pending = Gauge(
            "mcpgw_slot_pending_requests",
            "Requests in flight towards the slot's provider",
            ["slot"],
            registry=r,
        )
        self.calls = Counter("mcpgw_calls", "Requests forwarded to providers", ["slot", "method"], registry=r)
        self.call_errors = Counter(
            "mcpgw_call_errors",
            "Forwarded requests that ended in an error",
            ["slot", "kind"],  # kind: provider, deadline, disconnected, not_connected, other
            registry=r,
        )
        self.latency = Histogram(
            "mcpgw_call_latency_seconds",
            "Time from forwarding a request to its answer",
            ["slot"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.heartbeat_misses = Counter(
            "mcpgw_heartbeat_misses", "Providers dropped for not answering a heartbeat", ["slot"], registry=r
        )
        self.provider_connects = Counter(
            "mcpgw_provider_connects", "Provider links admitted", ["slot", "transport"], registry=r
        )
        self.provider_refusals = Counter(
            "mcpgw_provider_refusals", "Provider links or slots refused", ["reason"], registry=r
        )
        self.unparsable = Counter(
            "mcpgw_unparsable_messages", "Messages that were not valid JSON-RPC", ["side"], registry=r
        )
        self.sessions = Gauge("mcpgw_client_sessions", "Session-era client sessions held", registry=r)
        self.sessions_expired = Counter(
            "mcpgw_client_sessions_expired", "Client sessions expired for idleness", registry=r
        )
        self.streams = Gauge("mcpgw_client_streams", "Open client notification streams", ["kind"], registry=r)
        self.http_requests = Counter(
            "mcpgw_http_requests",
            "HTTP requests by endpoint kind and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.refusals = Counter(
            "mcpgw_client_refusals", "Client requests refused before routing", ["reason"], registry=r
        )

    def forget_slot(self, slot: str) -> None:
        for metric in (self.slot_connected, self.slot_pending):
            with contextlib.suppress(KeyError):
                metric.remove(slot)

    def render(self) -> bytes:
        return generate_latest(self.registry)
