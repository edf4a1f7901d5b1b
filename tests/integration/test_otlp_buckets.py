"""The OTLP histogram of request durations is in seconds with bounds in seconds (docs/telemetry.md,
"Spans and metrics"): the bounds of Prometheus's mcpgw_call_latency_seconds, 1 ms to 60 s, not the
SDK's default ones (0, 5, 10 ... 10000, meant for milliseconds), under which every request would fall
in the first bucket. A real OTLP/HTTP receiver decodes the histogram the gateway sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from tests.conftest import GatewayFactory, wait_for
from tests.support.otlp_receiver import OtlpReceiver

SECONDS_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
"""docs/operations.md's mcpgw_call_latency_seconds buckets, which docs/telemetry.md names for the OTLP one."""


@dataclass
class Histogram:
    name: str
    unit: str
    bounds: list[float]
    counts: list[int]


@dataclass
class HistogramReceiver(OtlpReceiver):
    """The test receiver, also keeping every histogram point with its bucket bounds and counts."""

    histograms: list[Histogram] = field(default_factory=list)

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await self._body(request))
        for resource_metrics in message.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.WhichOneof("data") == "histogram":
                        for point in metric.histogram.data_points:
                            self.histograms.append(
                                Histogram(
                                    metric.name, metric.unit, list(point.explicit_bounds), list(point.bucket_counts)
                                )
                            )
        return await super()._metrics(request)


@pytest.fixture
async def receiver() -> AsyncIterator[HistogramReceiver]:
    found = HistogramReceiver()
    await found.start()
    yield found
    await found.stop()


async def test_the_request_duration_histogram_has_bounds_in_seconds(
    receiver: HistogramReceiver, gateway_factory: GatewayFactory
) -> None:
    server = await gateway_factory(
        telemetry={"endpoint": receiver.url, "schedule_delay_ms": 50, "metric_interval_ms": 1000}
    )
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
    async with aiohttp.ClientSession() as http:
        for _ in range(5):
            async with http.post(f"{server.url}/_all/mcp", json=listing, headers=headers) as answer:
                assert answer.status == 200
                await answer.read()

    def durations() -> list[Histogram]:
        return [found for found in receiver.histograms if found.name == "mcpgw.request.duration"]

    await wait_for(lambda: any(sum(found.counts) >= 5 for found in durations()), 10, "the duration histogram")
    # Every histogram the gateway sends (it has one) is in seconds, with bounds in seconds.
    assert {(found.name, found.unit) for found in receiver.histograms} == {("mcpgw.request.duration", "s")}
    point = next(found for found in durations() if sum(found.counts) >= 5)
    assert point.bounds == SECONDS_BOUNDS
    # A request answered from the gateway's own table takes well under a minute: never past the last bound.
    assert point.counts[-1] == 0
