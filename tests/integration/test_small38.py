"""Small fixes, each with a real gateway: a stdio bridge stopped by a signal exits 128 + its number; a
failed OTLP metric export counts its data points in mcpgw_telemetry_dropped_total; a serial port's good
open clears the error it got past. (The key file advice that keeps a group's read is tested beside the
other mode messages, tests/unit/test_secret_file_modes.py.)"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import serial
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_serial_boards import SLOT, broker_call, port_of, serial_config, simulator_on
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge
from tests.integration.test_telemetry_otlp import telemetry
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.servers import demo_server

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


# -- the stdio bridge's exit status at a signal ---------------------------------------------------


@pytest.fixture
async def pump(gateway: GatewayServer, publishers: Publishers) -> GatewayServer:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"), aggregate=True)
    return gateway


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("in_flight", [True, False], ids=["call-in-flight", "idle"])
async def test_a_bridge_stopped_by_a_signal_exits_128_plus_its_number(
    pump: GatewayServer, how: signal.Signals, in_flight: bool
) -> None:
    raw = await RawBridge.start(pump.url)
    try:
        await raw.send(INITIALIZE)
        assert (await raw.receive())["id"] == 1  # serving: its signal handlers are set
        await raw.send(INITIALIZED)
        if in_flight:
            call = {"name": "sleep", "arguments": {"seconds": 30}}
            await raw.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call", "params": call})
            slot = pump.gateway.registry.slots["pump-1"]
            await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call at pump-1")
        raw.process.send_signal(how)
        status = await asyncio.wait_for(raw.process.wait(), 15)
        # As a shell reports a process a signal ended: a host's process manager sees the stop.
        assert status == 128 + how, status
        assert "Traceback" not in await raw.stderr()
    finally:
        if raw.process.returncode is None:
            raw.process.kill()
            await raw.process.wait()


async def test_a_bridge_at_eof_with_nothing_left_still_exits_0(pump: GatewayServer) -> None:
    raw = await RawBridge.start(pump.url)
    await raw.send(INITIALIZE)
    assert (await raw.receive())["id"] == 1
    assert await raw.close() == 0


# -- metric_export counts data points ------------------------------------------------------------


@dataclass
class RefusingReceiver(OtlpReceiver):
    """The test receiver, refusing every metrics export (400: not retried) and keeping how many data
    points each refused one held."""

    refused: list[int] = field(default_factory=list)

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await self._body(request))
        points = 0
        for resource_metrics in message.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    points += len(getattr(metric, kind).data_points) if kind else 0
        self.refused.append(points)
        return web.Response(status=400, text="refused by the test")


async def test_a_refused_metric_export_counts_its_data_points(gateway_factory: GatewayFactory) -> None:
    receiver = RefusingReceiver()
    await receiver.start()
    try:
        server = await gateway_factory(telemetry=telemetry(receiver))
        envelope = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
        async with aiohttp.ClientSession() as http:
            for endpoint in ("_all", "_broker"):  # a request count and a duration for each: 4 data points
                async with http.post(f"{server.url}/{endpoint}/mcp", json=listing, headers=headers) as answer:
                    await answer.read()
        dropped = server.gateway.metrics.telemetry_dropped.labels("metric_export")

        def counted() -> bool:
            points = sum(receiver.refused)
            return points > len(receiver.refused) and dropped._value.get() == points

        await wait_for(counted, 15, "the refused exports' data points counted")
    finally:
        await receiver.stop()


# -- a serial port's good open clears its last error -------------------------------------------------


async def test_a_good_open_clears_the_error_the_port_got_past(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial=serial_config(str(link)))
    simulator = simulator_on(link)
    port = {"port": str(link)}
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        assert (port_of(gateway)["last_error"], port_of(gateway)["last_error_at"]) == (None, None)
        # Taken back while another program holds it exclusively: the open fails (EAGAIN), and says so.
        await broker_call(gateway, "broker_serial_release", port)
        with serial.Serial(str(link), exclusive=True):
            resumed = await broker_call(gateway, "broker_serial_resume", port)
            assert (resumed["state"], resumed["closed"]) == ("backoff", True)
            assert port_of(gateway)["last_error"].startswith("cannot open: ")
            assert port_of(gateway)["last_error_at"] is not None
        await wait_ready_slot(gateway, SLOT, timeout=10)  # supervision opens it once the other program let go
        status = port_of(gateway)
        assert status["state"] == "open"
        assert (status["last_error"], status["last_error_at"]) == (None, None), status
        assert status["failures"] >= 1  # the count of failures stays
    finally:
        await simulator.stop()
