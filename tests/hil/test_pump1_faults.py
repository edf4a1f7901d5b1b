"""pump-1's faults as PUMP1.md specifies them: the dead-man (link_lost) on every target whose gateway the
suite runs, and faults injected through the simulator's control endpoint (the simulator only)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.hil.checks import poll, ramp_time_s, refusal_of, status_of
from tests.hil.rig import Rig

SPEED = 900
DOWN_MARGIN_S = 1.0
"""The gateway stays down this much longer than the dead-man and the ramp down together."""
SHORT_OUTAGE_S = 0.3
"""A gateway restart far shorter than any dead-man."""
SHORT_OUTAGE_DEADMAN_S = 20.0
"""The dead-man of a board the suite boots for the short-outage check. pump1-host redials about 1, 3, 7 and
15 s after its link drops (its own back-off, doubling from 1 s) and the gateway takes a second or two to
stop and start, so it is back about 4 s after a 0.3 s outage, 8 s on a slow machine: over the suite's 2 s
dead-man, well under this one."""
IDLE_MARGIN_S = 1.0
"""The idle check stays quiet this much longer than the dead-man."""


@pytest.mark.needs("restart_gateway")
async def test_the_dead_man_stops_a_running_pump_when_the_gateway_goes_silent(rig: Rig) -> None:
    async with rig.client() as client:
        await status_of(client, "start", {"speed_rpm": SPEED})
        await poll(client, lambda s: s["state"] == "running", timeout=ramp_time_s(0, SPEED) + 3)
    down_s = rig.deadman_s + ramp_time_s(SPEED, 0) + DOWN_MARGIN_S
    await rig.restart_gateway(down_s)
    async with rig.client() as client:
        back = await status_of(client)
        # Silent longer than the dead-man and the ramp: the board stopped the motor on its own.
        assert back["speed_rpm"] == 0, f"the pump still turns after {down_s:.1f} s without a gateway: {back}"
        assert back["state"] == "fault", back
        assert back["fault"] is not None and back["fault"]["code"] == "link_lost", back
        assert back["fault"]["text"], back

        refusal = await refusal_of(client, "start", {"speed_rpm": SPEED})
        assert "link_lost" in refusal, refusal
        refusal = await refusal_of(client, "set_speed", {"speed_rpm": SPEED})
        assert "link_lost" in refusal, refusal
        in_fault = await status_of(client, "stop")
        assert (in_fault["state"], in_fault["fault"]["code"]) == ("fault", "link_lost"), "stop is allowed in fault"

        cleared = await status_of(client, "reset_fault")
        assert (cleared["state"], cleared["fault"], cleared["speed_rpm"]) == ("stopped", None, 0), cleared
        restarted = await status_of(client, "start", {"speed_rpm": SPEED})
        assert restarted["state"] == "starting", "the cleared pump starts again"
        await status_of(client, "stop")


@pytest.mark.needs("restart_gateway")
@pytest.mark.board_deadman(SHORT_OUTAGE_DEADMAN_S)
async def test_an_outage_shorter_than_the_dead_man_leaves_the_pump_running(rig: Rig) -> None:
    """link_lost only after deadman_s of silence: a link that drops and comes back in time changes nothing."""
    async with rig.client() as client:
        await status_of(client, "start", {"speed_rpm": SPEED})
        await poll(client, lambda s: s["state"] == "running", timeout=ramp_time_s(0, SPEED) + 3)
    silent_from = time.monotonic()
    await rig.restart_gateway(SHORT_OUTAGE_S)
    async with rig.client() as client:
        back = await status_of(client)
    silent_s = time.monotonic() - silent_from
    assert silent_s < rig.deadman_s, (
        f"the board took {silent_s:.1f} s to attach again, not less than its {rig.deadman_s:g} s dead-man: "
        "the check needs a board configured with a longer one (--deadman-s)"
    )
    assert (back["state"], back["speed_rpm"], back["fault"]) == ("running", SPEED, None), (
        f"a {SHORT_OUTAGE_S} s outage ({silent_s:.1f} s without a link) stopped a pump whose dead-man is "
        f"{rig.deadman_s:g} s: {back}"
    )
    async with rig.client() as client:
        await status_of(client, "stop")


async def test_gateway_pings_alone_keep_a_running_pump_alive(rig: Rig) -> None:
    """The gateway's heartbeat pings feed the dead-man: no tool call for longer than it stops nothing."""
    async with rig.client() as client:
        await status_of(client, "start", {"speed_rpm": SPEED})
        await poll(client, lambda s: s["state"] == "running", timeout=ramp_time_s(0, SPEED) + 3)
        idle_s = rig.deadman_s + IDLE_MARGIN_S
        await asyncio.sleep(idle_s)
        after = await status_of(client)
        assert (after["state"], after["speed_rpm"], after["fault"]) == ("running", SPEED, None), (
            f"{idle_s:g} s without a tool call, the gateway pinging, stopped a pump whose dead-man is "
            f"{rig.deadman_s:g} s: {after}"
        )
        await status_of(client, "stop")


@pytest.mark.needs("inject_faults")
async def test_an_injected_fault_blocks_start_and_its_reset_until_the_cause_is_gone(rig: Rig) -> None:
    async with rig.client() as client:
        await status_of(client, "start", {"speed_rpm": SPEED})
        await poll(client, lambda s: s["speed_rpm"] > 0, timeout=2)
        injected = await rig.inject("sensor_failure")
        assert injected["injected"] == ["sensor_failure"], injected
        tripped = await poll(client, lambda s: s["fault"] is not None, timeout=2)
        assert (tripped[-1]["state"], tripped[-1]["fault"]["code"]) == ("fault", "sensor_failure"), tripped[-1]
        assert tripped[-1]["flow_lpm"] is None and tripped[-1]["pressure_bar"] is None, "the sensors read nothing"

        refusal = await refusal_of(client, "start", {"speed_rpm": SPEED})
        assert "sensor_failure" in refusal, refusal
        in_fault = await status_of(client, "stop")
        assert in_fault["state"] == "fault", "stop is allowed in fault and changes nothing"
        await poll(client, lambda s: s["speed_rpm"] == 0, timeout=ramp_time_s(SPEED, 0) + 3)  # the drive ramps down

        refusal = await refusal_of(client, "reset_fault")
        assert "sensor_failure" in refusal and "persists" in refusal, refusal
        assert (await status_of(client))["fault"]["code"] == "sensor_failure", "a refused reset leaves it latched"

        await rig.inject("sensor_failure", clear=True)
        cleared = await status_of(client, "reset_fault")
        assert (cleared["state"], cleared["fault"]) == ("stopped", None), cleared
        restarted = await status_of(client, "start", {"speed_rpm": SPEED})
        assert restarted["state"] == "starting", restarted
        await status_of(client, "stop")
