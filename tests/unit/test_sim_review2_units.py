"""The simulator's second review, in one process: its telemetry sends without a full garbage collection
each, the dead-man's text writes its seconds as '%g', a broker URL with port 0 is refused, and the
configuration `run --sim-pumps` serves with has room for every pump, after a reload too."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from gateway.config import GatewayConfig, MqttBrokerConfig
from gateway.reload import ConfigSource
from sim import firmware
from sim.pump import PumpSettings, SimulatedPump


def test_the_simulators_telemetry_sends_without_a_full_collection_each() -> None:
    registry = firmware.load_registry(firmware.schema_file())
    pump = SimulatedPump("pump-1", registry, PumpSettings(telemetry_period_s=0))
    assert pump.telemetry is not None
    pump.telemetry.interval_s = 0  # send as fast as the loop turns
    sent: list[bytes] = []
    full: list[int] = []

    def counted(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    async def send(frame: bytes) -> None:
        sent.append(frame)

    async def main() -> None:
        task = pump.report(send)
        assert task is not None
        for number in range(20):
            pump.telemetry.event(b"pump.test", {"n": number})
            while pump.telemetry.queue:  # noqa: ASYNC110 (the board's task empties the queue; it sets no event)
                await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    enabled = gc.isenabled()
    gc.disable()  # no automatic collection: a full one counted is one the telemetry asked for
    gc.callbacks.append(counted)
    try:
        asyncio.run(main())
    finally:
        gc.callbacks.remove(counted)
        if enabled:
            gc.enable()
    assert len(sent) >= 20
    assert full == []


@pytest.mark.parametrize(("deadman_s", "shown"), [(2.5, "2.5"), (0.5, "0.5"), (35, "35"), (90, "90")])
def test_the_dead_man_text_writes_the_configured_seconds_as_percent_g(deadman_s: float, shown: str) -> None:
    now = [0]
    hardware = firmware.hardware_sim.SimulatedHardware(firmware.physics.PumpPhysics())
    controller = firmware.controller.PumpController(hardware, deadman_s=deadman_s, clock=lambda: now[0])
    assert controller.start() is None
    now[0] += int(deadman_s * 1000) + 100
    controller.tick()
    assert controller.fault is not None and controller.fault["code"] == "link_lost"
    assert controller.fault["text"].startswith(f"No request or ping from the gateway for {shown} s while"), (
        controller.fault
    )


@pytest.mark.parametrize("url", ["mqtt://broker.lan:0", "mqtts://127.0.0.1:0", "mqtt://[::1]:0"])
def test_a_broker_url_with_port_0_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="port 0 is no broker's port"):
        MqttBrokerConfig.model_validate({"url": url})


def test_a_broker_url_without_a_port_takes_the_schemes_default() -> None:
    assert MqttBrokerConfig.model_validate({"url": "mqtt://broker.lan"}).port == 1883
    assert MqttBrokerConfig.model_validate({"url": "mqtts://broker.lan"}).port == 8883


@pytest.mark.parametrize(("configured", "pumps", "served"), [(128, 200, 200), (500, 200, 500), (0, 200, 0)])
def test_run_sim_pumps_raises_the_per_peer_limit_to_its_pumps(configured: int, pumps: int, served: int) -> None:
    from sim.embedded import with_room_for

    config = GatewayConfig.model_validate({"limits": {"max_slots_per_peer": configured}})
    assert with_room_for(config, pumps).limits.max_slots_per_peer == served


def test_a_reload_keeps_the_room_for_the_simulated_pumps(tmp_path: Path) -> None:
    from sim.embedded import SimulatorSource

    file = tmp_path / "gateway.toml"
    file.write_text("[limits]\nmax_slots_per_peer = 16\n")
    source = SimulatorSource(str(file), {}, {}, pumps=300)
    assert ConfigSource(str(file), {}, {}).load().limits.max_slots_per_peer == 16
    assert source.load().limits.max_slots_per_peer == 300
    file.write_text("[limits]\nmax_slots_per_peer = 400\n")  # a higher value of the file's own stays
    assert source.load().limits.max_slots_per_peer == 400
