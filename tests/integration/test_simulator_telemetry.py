"""The simulated pump's own `broker/telemetry` (the board's firmware modules: mcpdevice.telemetry and
pump1.controller) through a real gateway to a real OTLP/HTTP receiver (docs/pump-1.md "Telemetry",
docs/telemetry.md "Provider telemetry"): state changes as log records under the caller's trace,
samples as gauges, the slot as the resource, and a flooding pump that costs only itself."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.telemetry_wire import SAMPLE_METRICS
from tests.integration.test_telemetry_otlp import CLIENT, ERAS, TRACE_ID, TRACEPARENT, receiver, telemetry  # noqa: F401
from tests.support.otlp_receiver import Log, OtlpReceiver, Point


@contextlib.asynccontextmanager
async def plant(server: GatewayServer, first: int, period_s: float) -> AsyncIterator[Simulator]:
    pump = PumpSettings(telemetry_period_s=period_s)
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, first=first, pump=pump, backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, f"pump-{first}")
        yield simulator
    finally:
        await simulator.stop()


def changes(logs: list[Log], slot: str) -> list[Log]:
    return [
        log for log in logs if log.event_name == "pump.state_change" and log.resource.get("mcp.provider.slot") == slot
    ]


def samples(points: list[Point], slot: str) -> list[Point]:
    return [
        point for point in points if point.resource.get("mcp.provider.slot") == slot and point.name in SAMPLE_METRICS
    ]


def counted(server: GatewayServer, slot: str, outcome: str) -> float:
    return float(server.gateway.metrics.provider_telemetry.labels(slot, outcome)._value.get())


@pytest.mark.parametrize("mode", ERAS)
async def test_the_pumps_state_changes_join_the_callers_trace_and_its_samples_are_gauges(
    receiver: OtlpReceiver,  # noqa: F811
    gateway_factory: GatewayFactory,
    mode: str,
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    async with plant(server, 1, 0.3), Client(f"{server.url}/pump-1/mcp", mode=mode) as client:
        started = await client.call_tool("start", {"speed_rpm": 900}, meta={"traceparent": TRACEPARENT})  # type: ignore[arg-type]
        assert not started.is_error

        def arrived() -> bool:
            states = [log.attributes["state"] for log in changes(receiver.logs, "pump-1")]
            return "starting" in states and "running" in states and bool(samples(receiver.points, "pump-1"))

        await wait_for(arrived, 15, "pump-1's state changes and a sample at the receiver")
        await wait_for(
            lambda: any(span.kind == CLIENT for span in receiver.trace(TRACE_ID)), 10, "the gateway's relay span"
        )

    relay = next(span for span in receiver.trace(TRACE_ID) if span.kind == CLIENT)
    starting = next(log for log in changes(receiver.logs, "pump-1") if log.attributes["state"] == "starting")
    running = next(log for log in changes(receiver.logs, "pump-1") if log.attributes["state"] == "running")
    # The call caused "starting": the board's event sits under the gateway's relay span of that call.
    assert (starting.trace_id, starting.span_id) == (TRACE_ID, relay.span_id)
    assert starting.attributes["previous_state"] == "stopped" and starting.severity_text == "INFO"
    # The ramp's end is the board's own doing: no trace.
    assert running.trace_id == "" and running.attributes["speed_rpm"] == 900
    assert starting.resource["service.instance.id"] == "pump-1"
    assert starting.resource["service.namespace"] == "mcp-gateway.provider"
    sampled = samples(receiver.points, "pump-1")
    assert {point.kind for point in sampled} == {"gauge"}
    assert {point.name for point in sampled} >= SAMPLE_METRICS - {"pump.motor_temp_c"}  # a reading may be invalid
    assert all(point.attributes["state"] in ("stopped", "starting", "running") for point in sampled)
    assert counted(server, "pump-1", "accepted") >= 3 and counted(server, "pump-1", "invalid") == 0


async def test_a_flooding_pump_is_held_to_its_own_bucket_and_the_other_is_untouched(
    receiver: OtlpReceiver,  # noqa: F811
    gateway_factory: GatewayFactory,
) -> None:
    # 5 items a second with a burst of 14 (two samples of 7 gauges): a sample every 100 ms (about 70
    # items a second) is far past it; a sample every 2 s (3.5 items a second) is well within it, even
    # when two of its samples arrive together after a stall.
    server = await gateway_factory(telemetry=telemetry(receiver, rate_per_s=5, burst=14, max_items=7))
    async with plant(server, 1, 0.01), plant(server, 2, 2.0):
        began = time.monotonic()
        await wait_for(lambda: counted(server, "pump-1", "rate_limited") >= 5, 30, "pump-1 held to its bucket")
        await wait_for(lambda: counted(server, "pump-2", "accepted") >= 2, 30, "pump-2's samples")
        elapsed = time.monotonic() - began
        flood_accepted = counted(server, "pump-1", "accepted")
        quiet: dict[str, Any] = {
            "accepted": counted(server, "pump-2", "accepted"),
            "rate_limited": counted(server, "pump-2", "rate_limited"),
        }
    assert quiet["rate_limited"] == 0, quiet
    # pump-1 got through what its bucket holds and what it refills, never more: 7 items a notification.
    assert flood_accepted * 7 <= 14 + 5 * (elapsed + 2), (flood_accepted, elapsed)
    await wait_for(
        lambda: len({point.name for point in samples(receiver.points, "pump-2")}) >= len(SAMPLE_METRICS) - 1,
        10,
        "pump-2's gauges at the receiver",
    )
    assert not any(
        log.resource.get("mcp.provider.slot") == "pump-2" and log.severity_text == "ERROR" for log in receiver.logs
    )
