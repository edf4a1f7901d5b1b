"""Three simulated pumps in a real gateway, driven by real SDK clients in both protocol eras."""

from __future__ import annotations

import pytest
from mcp import Client

from gateway import __version__
from gateway.app import GatewayServer
from tests.conftest import wait_ready_slot
from tests.sim.conftest import SimulatorFactory, poll, refusal_of, status_of
from tests.support.southbound import provider_status

PUMP_TOOLS = ["get_status", "start", "set_speed", "stop", "reset_fault"]


def assert_physics(sample: dict[str, object]) -> None:
    """Flow follows speed (120 L/min at 2900 rpm), pressure follows speed squared (4.0 bar)."""
    speed = sample["speed_rpm"]
    assert isinstance(speed, int)
    assert sample["flow_lpm"] == pytest.approx(120 * speed / 2900, abs=0.1), sample
    assert sample["pressure_bar"] == pytest.approx(4.0 * (speed / 2900) ** 2, abs=0.02), sample


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_three_pumps_publish_and_pump_2_runs_through_the_gateway(
    gateway: GatewayServer, simulators: SimulatorFactory, mode: str
) -> None:
    await simulators(gateway.url, pumps=3)
    for slot in ("pump-1", "pump-2", "pump-3"):
        await wait_ready_slot(gateway, slot)

    status = await provider_status(gateway.url, "pump-2")
    assert status["hello"] == {
        "device_id": "sim-pump-2",
        "firmware": {"name": "pump-1-sim", "version": __version__},
        "schema": "05bcc58176efee25",
    }
    assert status["in_aggregate"] is True  # the register frame opted in to _all, as a board does
    assert status["transport"] == "websocket"

    async with Client(f"{gateway.url}/pump-2/mcp", mode=mode) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == PUMP_TOOLS
        idle = await status_of(client)
        assert (idle["state"], idle["speed_rpm"], idle["fault"]) == ("stopped", 0, None)
        assert "set_speed only changes a running pump" in await refusal_of(client, "set_speed", {"speed_rpm": 900})

        started = await status_of(client, "start", {"speed_rpm": 400})
        assert (started["state"], started["setpoint_rpm"]) == ("starting", 400)
        ramp = await poll(client, lambda s: s["state"] == "running")
        speeds = [s["speed_rpm"] for s in ramp]
        assert speeds == sorted(speeds), "the speed ramps up without going back"
        assert ramp[-1]["speed_rpm"] == 400
        for sample in ramp:
            assert_physics(sample)

        changed = await status_of(client, "set_speed", {"speed_rpm": 700})
        assert (changed["state"], changed["setpoint_rpm"]) == ("running", 700)
        faster = await poll(client, lambda s: s["speed_rpm"] == 700)
        assert all(400 <= s["speed_rpm"] <= 700 for s in faster)
        assert_physics(faster[-1])
        assert faster[-1]["motor_temp_c"] >= 25.0

        stopping = await status_of(client, "stop")
        assert stopping["state"] == "stopping"
        stopped = await poll(client, lambda s: s["state"] == "stopped")
        assert stopped[-1]["speed_rpm"] == 0
        assert stopped[-1]["flow_lpm"] == 0.0

    # The other pumps are separate devices: none of this touched them.
    for slot in ("pump-1", "pump-3"):
        async with Client(f"{gateway.url}/{slot}/mcp", mode=mode) as other:
            assert (await status_of(other))["state"] == "stopped"


async def test_all_lists_every_pump_under_its_slot(gateway: GatewayServer, simulators: SimulatorFactory) -> None:
    await simulators(gateway.url, pumps=2)
    for slot in ("pump-1", "pump-2"):
        await wait_ready_slot(gateway, slot)
    async with Client(f"{gateway.url}/_all/mcp", mode="legacy") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    for slot in ("pump-1", "pump-2"):
        assert {name for name in names if name.startswith(slot)}, names
