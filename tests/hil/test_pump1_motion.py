"""pump-1's motion as PUMP1.md specifies it: the ramp, its states, the setpoint, the affinity laws, stop.

Timing: the boards tick every 100 ms (TICK_S) and move the speed by at most 60 rpm a tick; a status
is read somewhere between the request and its answer. So between two samples the speed may change by
at most 600 rpm/s times (the time from the first request to the second answer plus one tick), plus
1 rpm of rounding; the whole ramp takes its nominal time give or take a tick and the polling.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from tests.hil.checks import (
    MAX_RPM,
    RAMP_RPM_PER_S,
    RATED_FLOW_LPM,
    RATED_PRESSURE_BAR,
    TICK_S,
    Sample,
    Status,
    poll,
    ramp_time_s,
    status_of,
    timed_samples,
)
from tests.hil.rig import Rig

RAMP_SLACK_S = 1.0
"""Extra time a ramp may take over its nominal length: polling, the loopback round trips, a busy CI."""
RELATIVE_TOLERANCE = 0.01
"""Affinity-law readings within 1 % of the model, plus the rounding of the field (below)."""
FLOW_ROUNDING = 0.05  # one decimal
PRESSURE_ROUNDING = 0.005  # two decimals


def running_at(speed: int) -> Callable[[Status], bool]:
    return lambda status: status["state"] == "running" and status["speed_rpm"] == speed


def assert_ramp_rate(samples: list[Sample]) -> None:
    for (asked, _, first), (_, answered, second) in itertools.pairwise(samples):
        most = RAMP_RPM_PER_S * (answered - asked + TICK_S) + 1
        change = abs(second["speed_rpm"] - first["speed_rpm"])
        assert change <= most, f"{change} rpm in {answered - asked:.3f} s is faster than 600 rpm/s: {first} {second}"


async def test_ramp_up_and_down_at_most_600_rpm_per_s_with_starting_and_stopping(rig: Rig) -> None:
    target = 1200
    async with rig.client() as client:
        started = await status_of(client, "start", {"speed_rpm": target})
        assert (started["state"], started["setpoint_rpm"]) == ("starting", target)
        up = await timed_samples(
            client, lambda s: s["state"] != "starting", timeout=ramp_time_s(0, target) + RAMP_SLACK_S + 2
        )
        assert_ramp_rate(up)
        # speed_rpm is reported rounded: the last tick before the target can leave less than half an rpm
        # to go, which reads as the target while the state is still starting (and as 0 while stopping).
        for _, _, status in up[:-1]:
            assert status["state"] == "starting" and status["speed_rpm"] <= target, status
        assert (up[-1][2]["state"], up[-1][2]["speed_rpm"]) == ("running", target), up[-1]
        took = up[-1][1] - up[0][0]
        # The first sample was asked right after start's answer: the ramp cannot have ended sooner.
        assert took >= ramp_time_s(0, target) - 2 * TICK_S - (up[0][1] - up[0][0]), f"reached {target} in {took:.2f} s"
        assert took <= ramp_time_s(0, target) + RAMP_SLACK_S, f"took {took:.2f} s to reach {target} rpm"

        asked_stop = time.monotonic()
        stopping = await status_of(client, "stop")
        assert stopping["state"] == "stopping", stopping
        down = await timed_samples(
            client, lambda s: s["state"] != "stopping", timeout=ramp_time_s(target, 0) + RAMP_SLACK_S + 2
        )
        assert_ramp_rate(down)
        speeds = [status["speed_rpm"] for _, _, status in down]
        assert speeds == sorted(speeds, reverse=True), f"a stop only slows down: {speeds}"
        for _, _, status in down[:-1]:
            assert status["state"] == "stopping" and status["speed_rpm"] >= 0, status
        assert (down[-1][2]["state"], down[-1][2]["speed_rpm"]) == ("stopped", 0), down[-1]
        assert down[-1][2]["setpoint_rpm"] == target, "stop keeps the setpoint"
        took = down[-1][1] - asked_stop
        # From stop's request to the answer that read 0 rpm: as long as the ramp, at most RAMP_SLACK_S more.
        assert took >= ramp_time_s(target, 0) - 2 * TICK_S, f"stopped from {target} rpm in {took:.2f} s"
        assert took <= ramp_time_s(target, 0) + RAMP_SLACK_S, f"took {took:.2f} s to stop from {target} rpm"


@pytest.mark.needs("ungoverned")  # a policy bounding speed_rpm refuses a start without one
async def test_start_without_speed_runs_at_the_last_setpoint(rig: Rig) -> None:
    async with rig.client() as client:
        await status_of(client, "start", {"speed_rpm": 600})
        await poll(client, lambda s: s["state"] == "running", timeout=ramp_time_s(0, 600) + RAMP_SLACK_S + 2)
        changed = await status_of(client, "set_speed", {"speed_rpm": 400})
        assert (changed["state"], changed["setpoint_rpm"]) == ("running", 400), "set_speed changes a running pump"
        await status_of(client, "stop")
        await poll(client, lambda s: s["state"] == "stopped", timeout=ramp_time_s(600, 0) + RAMP_SLACK_S + 2)
        resumed = await status_of(client, "start")
        assert (resumed["state"], resumed["setpoint_rpm"]) == ("starting", 400), "the last setpoint"
        running = await poll(client, lambda s: s["state"] == "running", timeout=ramp_time_s(0, 400) + RAMP_SLACK_S + 2)
        assert running[-1]["speed_rpm"] == 400


async def test_affinity_laws_at_a_steady_speed(rig: Rig) -> None:
    """Flow proportional to speed (120 L/min at 2900 rpm), pressure to its square (4.0 bar at 2900 rpm)."""
    async with rig.client() as client:
        for number, speed in enumerate((MAX_RPM, MAX_RPM // 2)):
            await status_of(client, "set_speed" if number else "start", {"speed_rpm": speed})
            steady = await poll(
                client,
                running_at(speed),
                timeout=ramp_time_s(0, MAX_RPM) + RAMP_SLACK_S + 2,
            )
            status = steady[-1]
            ratio = speed / MAX_RPM
            flow, pressure = RATED_FLOW_LPM * ratio, RATED_PRESSURE_BAR * ratio**2
            assert status["flow_lpm"] == pytest.approx(flow, abs=flow * RELATIVE_TOLERANCE + FLOW_ROUNDING), status
            assert status["pressure_bar"] == pytest.approx(
                pressure, abs=pressure * RELATIVE_TOLERANCE + PRESSURE_ROUNDING
            ), status
        await status_of(client, "stop")


async def test_stop_is_always_allowed(rig: Rig) -> None:
    async with rig.client() as client:
        idle = await status_of(client, "stop")
        assert (idle["state"], idle["speed_rpm"]) == ("stopped", 0), "stop on a stopped pump changes nothing"
        await status_of(client, "start", {"speed_rpm": 1200})
        await poll(client, lambda s: s["speed_rpm"] > 0, timeout=2)
        stopping = await status_of(client, "stop")
        assert stopping["state"] == "stopping", stopping
        again = await status_of(client, "stop")
        assert again["state"] in ("stopping", "stopped"), "stop twice is still allowed"
        await poll(client, lambda s: s["state"] == "stopped", timeout=ramp_time_s(1200, 0) + RAMP_SLACK_S + 2)
