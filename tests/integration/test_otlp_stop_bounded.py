"""A gateway process whose OTLP collector hangs stops within export_timeout_ms (docs/telemetry.md,
"Turning export on"): the collector here accepts every connection, reads what is sent and never
answers, so each last export of spans and metrics waits for its full timeout."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bench.ports import free_port
from gateway.config import TelemetryConfig, resolve_telemetry
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.otlp_providers import ProviderExport
from gateway.telemetry.otlp_tracing import SdkTracing
from gateway.telemetry.provider_telemetry import Batch, MetricPoint
from gateway.telemetry.tracing import run_side_by_side
from tests.integration.test_shutdown import spawn, wait_until_ready

EXPORT_TIMEOUT_MS = 4000
MARGIN_S = 3.0
"""Room for the gateway's own stop (closing listeners, sessions, the store) and a busy machine; well
under a second export_timeout_ms, so a stop that waits for the exports one after the other, or for the
SDK's exit handlers once more, fails."""


class HungCollector:
    """Accepts OTLP/HTTP connections and never answers them."""

    def __init__(self) -> None:
        self.connections = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> HungCollector:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):  # take the request, answer nothing
                pass

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def collector() -> AsyncIterator[HungCollector]:
    found = await HungCollector().start()
    yield found
    await found.stop()


@pytest.mark.timeout(60)
async def test_sigterm_with_a_hung_collector_exits_within_export_timeout(
    collector: HungCollector, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "gateway.toml"
    # Spans and metrics wait until the stop (a long schedule delay and metric interval), so the stop has
    # both a span export and a metric export to give up on.
    config.write_text(
        f'port = {port}\n[telemetry]\nendpoint = "{collector.url}"\nexport_timeout_ms = {EXPORT_TIMEOUT_MS}\n'
        "schedule_delay_ms = 600000\nmetric_interval_ms = 600000\n"
    )
    gateway = await spawn("-m", "gateway.cli", "run", "--config", str(config), "--log-level", "warning")
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_until_ready(url, gateway)
        envelope = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
        headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                async with http.post(f"{url}/_all/mcp", json=request, headers=headers) as answer:
                    assert answer.status == 200
                    await answer.read()
        started = time.monotonic()
        gateway.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(gateway.communicate(), 45)
        took = time.monotonic() - started
    finally:
        if gateway.returncode is None:
            gateway.kill()
            await gateway.wait()
    assert collector.connections >= 1, "the gateway never tried to export"
    assert gateway.returncode == 0, err.decode()
    assert took < EXPORT_TIMEOUT_MS / 1000 + MARGIN_S, f"the stop took {took:.1f} s: {err.decode()[-2000:]}"
    assert b"did not finish within export_timeout_ms" in err


def test_a_job_that_ends_past_the_deadline_is_late_however_late_the_waiter_looks() -> None:
    """On a busy machine the stopping thread may look only after an export given up on by its own
    timeout (which began after the deadline was set) has ended: that export is still late."""
    timeout_s = 0.2

    def job() -> None:
        # Holds the interpreter past the deadline: the waiting thread runs again only once this ended.
        end = time.monotonic() + timeout_s + 0.3
        while time.monotonic() < end:
            pass

    previous = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        assert run_side_by_side([job], timeout_s, "test-late-job") is False
    finally:
        sys.setswitchinterval(previous)


@pytest.mark.timeout(30)
async def test_the_sdk_tracing_stop_says_a_hung_collector_kept_its_exports(collector: HungCollector) -> None:
    """Its answer is what the gateway's stop logs the warning by; an answer lost here leaves only the
    race of when the stopping thread looks."""
    config = TelemetryConfig(
        endpoint=collector.url, schedule_delay_ms=600_000, metric_interval_ms=600_000, export_timeout_ms=1000
    )
    tracing = SdkTracing(resolve_telemetry(config, {}), Metrics())
    tracing.tracer.start_span("waits for the stop").end()
    assert await asyncio.to_thread(tracing.shutdown) is False
    assert collector.connections >= 1


@pytest.mark.timeout(30)
async def test_the_provider_export_stop_says_a_hung_collector_kept_its_exports(collector: HungCollector) -> None:
    config = TelemetryConfig(endpoint=collector.url, schedule_delay_ms=600_000, export_timeout_ms=1000)
    export = ProviderExport(resolve_telemetry(config, {}), Metrics(), max_slots=4)
    point = MetricPoint("pump.flow", "gauge", 1.5, "l/min", None, {})
    assert export.put(Batch("pump-1", None, time.time_ns(), (point,)))
    assert await asyncio.to_thread(export.shutdown) is False
    assert collector.connections >= 1
