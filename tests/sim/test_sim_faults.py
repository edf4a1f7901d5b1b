"""Fault injection through the simulator's control endpoint (HTTP and the CLI), seen through MCP."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.sim.conftest import SimulatorFactory, cli, poll, refusal_of, status_of
from tests.support.southbound import provider_status


async def post_fault(simulator: Simulator, slot: str, body: Any, **headers: str) -> tuple[int, Any]:
    assert simulator.control_url is not None
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{simulator.control_url}/pumps/{slot}/faults", data=orjson.dumps(body), headers=headers) as response,
    ):
        return response.status, orjson.loads(await response.read())


async def running_pump(gateway: GatewayServer, simulators: SimulatorFactory, **pump: Any) -> Simulator:
    simulator = await simulators(gateway.url, pumps=2, **pump)
    await wait_ready_slot(gateway, "pump-2")
    return simulator


async def test_dry_run_latches_and_blocks_start_until_reset(
    gateway: GatewayServer, simulators: SimulatorFactory
) -> None:
    simulator = await running_pump(gateway, simulators, dry_run_s=0.3)
    async with Client(f"{gateway.url}/pump-2/mcp", mode="legacy") as client:
        await status_of(client, "start", {"speed_rpm": 300})
        await poll(client, lambda s: s["state"] == "running")

        status, state = await post_fault(simulator, "pump-2", {"fault": "dry_run"})
        assert status == 200
        assert state["injected"] == ["dry_run"]
        dry = await poll(client, lambda s: s["fault"] is not None)
        assert dry[-1]["state"] == "fault"
        assert dry[-1]["fault"]["code"] == "dry_run"
        assert dry[-1]["flow_lpm"] == 0.0  # no water: no flow while it still turned
        assert "running dry" in dry[-1]["fault"]["text"]

        refusal = await refusal_of(client, "start", {"speed_rpm": 300})
        assert refusal.startswith("The pump is in fault dry_run")
        await poll(client, lambda s: s["speed_rpm"] == 0)  # the drive ramped it down
        # Stopped, the pump cannot show a dry run, but the simulator knows it is still injected.
        refusal = await refusal_of(client, "reset_fault")
        assert refusal.startswith("The dry_run fault persists: the pump still has no water"), refusal
        assert (await status_of(client))["fault"]["code"] == "dry_run"

        status, state = await post_fault(simulator, "pump-2", {"fault": "dry_run", "clear": True})
        assert (status, state["injected"]) == (200, [])
        assert (await status_of(client, "reset_fault"))["fault"] is None
        assert (await status_of(client, "start", {"speed_rpm": 300}))["state"] == "starting"

    # The other pump on the same simulator never saw the fault.
    async with Client(f"{gateway.url}/pump-1/mcp", mode="2026-07-28") as other:
        assert (await status_of(other))["fault"] is None


async def test_overtemp_from_the_cli_trips_the_drive_and_reset_waits_for_cooling(
    gateway: GatewayServer, simulators: SimulatorFactory
) -> None:
    simulator = await running_pump(gateway, simulators, thermal_tau_s=0.5)
    control = simulator.control_url
    assert control is not None
    async with Client(f"{gateway.url}/pump-2/mcp", mode="2026-07-28") as client:
        await status_of(client, "start", {"speed_rpm": 300})

        code, out, err = await cli("sim-fault", "--control", control, "pump-2", "overtemp")
        assert (code, err) == (0, "")
        assert orjson.loads(out)["injected"] == ["overtemp"]
        tripped = await status_of(client)
        assert tripped["state"] == "fault"
        assert tripped["fault"]["code"] == "overtemp"
        assert tripped["motor_temp_c"] > 95
        assert "persists" in await refusal_of(client, "reset_fault")
        assert "in fault overtemp" in await refusal_of(client, "start")

        code, out, _ = await cli("sim-fault", "--control", control, "pump-2", "overtemp", "--clear")
        assert (code, orjson.loads(out)["injected"]) == (0, [])
        await poll(client, lambda s: s["motor_temp_c"] < 85)  # cools with the (shortened) thermal lag
        assert (await status_of(client, "reset_fault"))["fault"] is None


async def test_sensor_failure_reads_null_and_trips(gateway: GatewayServer, simulators: SimulatorFactory) -> None:
    simulator = await running_pump(gateway, simulators)
    async with Client(f"{gateway.url}/pump-2/mcp", mode="legacy") as client:
        status, _ = await post_fault(simulator, "pump-2", {"fault": "sensor_failure"})
        assert status == 200
        failed = await status_of(client)
        assert (failed["flow_lpm"], failed["pressure_bar"]) == (None, None)
        assert failed["fault"]["code"] == "sensor_failure"
        assert "still reads nothing valid" in await refusal_of(client, "reset_fault")

        await post_fault(simulator, "pump-2", {"fault": "sensor_failure", "clear": True})
        repaired = await status_of(client, "reset_fault")
        assert repaired["fault"] is None
        assert repaired["flow_lpm"] == 0.0


async def test_reboot_from_the_cli_gives_a_new_session_with_fresh_firmware_state(
    gateway: GatewayServer, simulators: SimulatorFactory
) -> None:
    simulator = await running_pump(gateway, simulators)
    async with Client(f"{gateway.url}/pump-2/mcp", mode="legacy") as client:
        await status_of(client, "start", {"speed_rpm": 300})
        await poll(client, lambda s: s["state"] == "running")
    before = await provider_status(gateway.url, "pump-2")

    assert simulator.control_url is not None
    code, out, _ = await cli("sim-fault", "--control", simulator.control_url, "pump-2", "reboot")
    assert code == 0
    assert orjson.loads(out)["boots"] == 2

    slot = gateway.gateway.registry.slots["pump-2"]
    await wait_for(lambda: slot.connects == before["connects"] + 1 and bool(slot.live and slot.live.ready))
    after = await provider_status(gateway.url, "pump-2")
    assert after["connected"] is True
    assert after["connected_since"] != before["connected_since"]
    assert after["connects"] == before["connects"] + 1
    assert after["last_disconnect_reason"] is not None
    async with Client(f"{gateway.url}/pump-2/mcp", mode="legacy") as client:
        booted = await status_of(client)
    # A rebooted board starts stopped, with its boot-time setpoint and fresh counters.
    assert (booted["state"], booted["speed_rpm"], booted["setpoint_rpm"]) == ("stopped", 0, 1450)
    assert booted["run_hours"] == 0.0


async def test_link_drop_disconnects_the_slot_and_it_comes_back(
    gateway: GatewayServer, simulators: SimulatorFactory
) -> None:
    simulator = await running_pump(gateway, simulators)
    slot = gateway.gateway.registry.slots["pump-2"]
    connects = slot.connects

    status, state = await post_fault(simulator, "pump-2", {"fault": "link_drop", "seconds": 0.6})
    assert status == 200
    assert state["link"]["offline_for_s"] > 0
    assert state["link"]["connected"] is False  # the answer reflects the drop it made
    await wait_for(lambda: slot.live is None, what="the slot to lose its provider")
    gone = await provider_status(gateway.url, "pump-2")
    assert (gone["connected"], gone["state"]) == (False, "empty")
    async with aiohttp.ClientSession() as http, http.get(f"{simulator.control_url}/pumps") as response:
        listed = orjson.loads(await response.read())
    offline = next(p for p in listed["pumps"] if p["slot"] == "pump-2")
    assert offline["link"]["connected"] is False
    assert offline["link"]["last_down_reason"] == "link_drop from the control endpoint"

    await wait_for(lambda: bool(slot.live and slot.live.ready), timeout=5, what="the pump to come back")
    assert slot.connects == connects + 1
    async with Client(f"{gateway.url}/pump-2/mcp", mode="legacy") as client:
        assert (await status_of(client))["state"] == "stopped"

    # Without seconds, the pump dials again after its back-off.
    status, _ = await post_fault(simulator, "pump-2", {"fault": "link_drop"})
    assert status == 200
    await wait_for(lambda: slot.connects == connects + 2 and bool(slot.live and slot.live.ready), timeout=5)


async def test_control_endpoint_refusals_and_status(gateway: GatewayServer, simulators: SimulatorFactory) -> None:
    simulator = await running_pump(gateway, simulators)
    control = simulator.control_url
    assert control is not None

    status, body = await post_fault(simulator, "pump-9", {"fault": "dry_run"})
    assert status == 404
    assert body["error"] == "unknown_pump"
    assert body["pumps"] == ["pump-1", "pump-2"]

    status, body = await post_fault(simulator, "pump-1", {"fault": "flood"})
    assert status == 400
    assert body["error"] == "unknown_fault"
    assert body["faults"] == ["dry_run", "sensor_failure", "overtemp", "reboot", "link_drop"]
    assert "dry_run, sensor_failure, overtemp, reboot, link_drop" in body["error_description"]

    status, body = await post_fault(simulator, "pump-1", {"fault": "reboot", "clear": True})
    assert (status, body["error"]) == (400, "bad_request")
    status, body = await post_fault(simulator, "pump-1", {"fault": "dry_run", "seconds": 3})
    assert (status, body["error"]) == (400, "bad_request")

    # A web page elsewhere must not inject faults, also not by DNS rebinding; a local page may.
    status, body = await post_fault(simulator, "pump-1", {"fault": "dry_run"}, Origin="https://evil.example")
    assert (status, body["error"]) == (403, "origin_not_allowed")
    status, body = await post_fault(simulator, "pump-1", {"fault": "dry_run"}, Host="evil.example:3901")
    assert (status, body["error"]) == (403, "host_not_allowed")
    assert simulator.pumps["pump-1"].injected() == []
    status, _ = await post_fault(simulator, "pump-1", {"fault": "dry_run"}, Origin="http://localhost:5173")
    assert status == 200

    code, out, _ = await cli("sim-status", "--control", control)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["SLOT", "LINK", "STATE"]
    assert lines[1].split()[:3] == ["pump-1", "up", "stopped"]
    assert lines[1].split()[-1] == "dry_run"
    assert lines[2].split()[:2] == ["pump-2", "up"]

    code, _, err = await cli("sim-fault", "--control", control, "pump-7", "reboot")
    assert code == 1
    assert "no simulated pump 'pump-7'" in err
    code, _, err = await cli("sim-status", "--control", "http://127.0.0.1:1")
    assert code == 1
    assert "control endpoint did not answer at http://127.0.0.1:1/pumps" in err


async def test_a_taken_control_port_is_refused_by_name() -> None:
    first = Simulator("http://127.0.0.1:1", SimulatorSettings(pumps=1))
    second = Simulator("http://127.0.0.1:1", SimulatorSettings(pumps=1))
    control = await first.start_control(0)
    port = int(control.rsplit(":", 1)[1])
    try:
        with pytest.raises(OSError, match=rf"127.0.0.1:{port}: .*choose another port with --sim-control-port"):
            await second.start_control(port, "--sim-control-port")
    finally:
        await first.stop()
        await second.stop()


async def test_gateway_pings_feed_the_dead_man_and_a_long_link_drop_trips_it(
    gateway_factory: GatewayFactory, simulators: SimulatorFactory
) -> None:
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.2})
    simulator = await simulators(gateway.url, deadman_s=1)
    await wait_ready_slot(gateway, "pump-1")
    async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
        await status_of(client, "start", {"speed_rpm": 300})
        await poll(client, lambda s: s["state"] == "running")
    # No request for longer than the dead-man time: the gateway's WebSocket pings keep it alive.
    await asyncio.sleep(1.5)
    assert simulator.pumps["pump-1"].status()["state"] == "running"

    status, _ = await post_fault(simulator, "pump-1", {"fault": "link_drop", "seconds": 1.6})
    assert status == 200
    pump = simulator.pumps["pump-1"]
    await wait_for(lambda: pump.status()["fault"] is not None, timeout=3, what="the dead-man to trip")
    assert pump.status()["fault"]["code"] == "link_lost"
    await wait_ready_slot(gateway, "pump-1", timeout=5)
    async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
        tripped = await status_of(client)
        assert (tripped["state"], tripped["fault"]["code"]) == ("fault", "link_lost")
        assert (await status_of(client, "reset_fault"))["fault"] is None  # the link is back
