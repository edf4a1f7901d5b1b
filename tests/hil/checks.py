"""What the hil checks share: pump-1's numbers from docs/pump-1.md, and status sampled with its time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from mcp import Client

from tests.sim.conftest import poll, refusal_of, status_of

__all__ = ["poll", "refusal_of", "status_of", "timed_samples"]

MIN_RPM = 300
MAX_RPM = 2900
RAMP_RPM_PER_S = 600
RATED_FLOW_LPM = 120.0
RATED_PRESSURE_BAR = 4.0
DEFAULT_SETPOINT_RPM = 1450
TICK_S = 0.1
"""The boards' control period: the ramp moves in steps of up to 60 rpm, one per tick."""
SAMPLE_GAP_S = 0.05

Status = dict[str, Any]


def ramp_time_s(from_rpm: float, to_rpm: float) -> float:
    return abs(to_rpm - from_rpm) / RAMP_RPM_PER_S


Sample = tuple[float, float, Status]
"""When get_status was asked, when it was answered (monotonic seconds), and the status: the board read
its model somewhere in between."""


async def timed_samples(client: Client, until: Callable[[Status], bool], timeout: float) -> list[Sample]:
    """get_status until `until` holds: every sample, the last one satisfying it."""
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        status = await status_of(client)
        samples.append((asked, time.monotonic(), status))
        if until(status):
            return samples
        assert time.monotonic() < deadline, f"not reached within {timeout} s; last statuses: {samples[-3:]}"
        await asyncio.sleep(SAMPLE_GAP_S)
