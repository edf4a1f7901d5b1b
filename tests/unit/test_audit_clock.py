"""The audit trail on a board whose wall clock jumps (a Raspberry Pi without a real-time clock boots at
1970 or at its last shutdown, and NTP sets the clock minutes later): pruning by age never takes this
run's records before the run has lasted max_age, a record stamped by a clock that was behind never takes
the ones before it, and a jump of the wall clock is logged once (docs/governance-audit.md#retention)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.core.clock import WallClockWatch, jump_words
from gateway.policy.audit import AuditTrail
from gateway.policy.audit.records import now_ms
from tests.unit import test_audit_trail
from tests.unit.test_audit_trail import TrailFactory, record, rows

DAY_MS = 86_400_000
trails = test_audit_trail.trails  # the fixture that opens and closes trails


async def test_this_runs_records_stamped_before_the_clock_was_set_are_not_pruned(trails: TrailFactory) -> None:
    # The board booted with its clock 120 days behind, wrote three records, then NTP set the clock.
    trail = await trails(max_age_days=90)
    behind = [await trail.decision(record(time_ms=now_ms() - 120 * DAY_MS)) for _ in range(3)]
    after = await trail.decision(record())
    assert await trail.prune() == 0
    assert [entry["id"] for entry in trail.query()] == [*behind, after]
    assert trail.status()["pruned_by_age"] == 0


async def test_an_earlier_runs_records_keep_their_wall_clock_age(tmp_path: Path, trails: TrailFactory) -> None:
    path = tmp_path / "audit.db"
    earlier = await trails(path, max_age_days=90)
    old = [await earlier.decision(record(time_ms=now_ms() - 120 * DAY_MS)) for _ in range(3)]
    await earlier.close()
    trail = await trails(path, max_age_days=90)  # the next run: the pruning due at start has run
    recent = await trail.decision(record())
    assert await trail.prune() == 0
    assert [entry["id"] for entry in trail.query()] == [recent]
    assert trail.status()["pruned_by_age"] == len(old)


async def test_this_runs_records_age_by_the_wall_clock_once_the_run_has_lasted_max_age(trails: TrailFactory) -> None:
    trail = await trails(max_age_days=90)
    old = [await trail.decision(record(time_ms=now_ms() - 120 * DAY_MS)) for _ in range(2)]
    assert await trail.prune() == 0
    trail._writer._started -= 90 * 86_400  # the run has lasted 90 days by the monotonic clock
    assert await trail.prune() == len(old)


async def test_a_record_stamped_by_a_clock_behind_never_takes_the_ones_before_it(
    tmp_path: Path, trails: TrailFactory
) -> None:
    path = tmp_path / "audit.db"
    earlier = await trails(path, max_age_days=90)
    kept = [
        await earlier.decision(record(time_ms=now_ms() - DAY_MS)),
        await earlier.decision(record(time_ms=0)),  # stamped while the clock read 1970
        await earlier.decision(record()),
    ]
    await earlier.close()
    trail = await trails(path, max_age_days=90)
    assert await trail.prune() == 0
    assert [entry["id"] for entry in trail.query()] == kept
    assert trail.status()["pruned"] == 0


async def test_the_size_bound_still_prunes_this_runs_records(tmp_path: Path) -> None:
    trail = AuditTrail(tmp_path / "audit.db", max_age_days=90, max_bytes=1024 * 1024)
    await trail.start()
    try:
        padding = "x" * 1000
        for n in range(1500):
            await trail.decision(record(time_ms=now_ms() - 120 * DAY_MS, arguments={"n": n, "pad": padding}))
        await trail.prune()
        assert trail.status()["pruned_by_size"] > 0
    finally:
        await trail.close()


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.monotonic = 50.0


def test_a_jump_of_the_wall_clock_is_told_from_the_time_that_passed() -> None:
    clocks = Clocks()
    watch = WallClockWatch(wall=lambda: clocks.wall, monotonic=lambda: clocks.monotonic)
    clocks.wall += 300
    clocks.monotonic += 300
    assert watch.jumped() is None  # five minutes passed on both clocks
    clocks.wall += 30.5  # NTP slewing, or a second of scheduling: within the tolerance
    clocks.monotonic += 1
    assert watch.jumped() is None
    clocks.wall += 120 * 86_400 + 10
    clocks.monotonic += 10
    assert watch.jumped() == 120 * 86_400
    assert watch.jumped() is None  # told once
    clocks.wall -= 3600
    assert watch.jumped() == -3600
    assert jump_words(120 * 86_400 + 300) == "forward by 120 d 0 h 5 min"
    assert jump_words(-3600) == "back by 1 h 0 min"
    assert jump_words(-90) == "back by 1 min 30 s"


async def test_the_writer_logs_a_jump_of_the_wall_clock_once(
    trails: TrailFactory, caplog: pytest.LogCaptureFixture
) -> None:
    trail = await trails()
    clocks = Clocks()
    trail._writer._clock = WallClockWatch(wall=lambda: clocks.wall, monotonic=lambda: clocks.monotonic)
    first = await trail.decision(record())
    with caplog.at_level(logging.WARNING, logger="gateway.policy.audit"):
        clocks.wall += 120 * 86_400
        await trail.decision(record())
        await trail.decision(record())
    jumps = [r.getMessage() for r in caplog.records if "wall clock jumped" in r.getMessage()]
    assert jumps == [
        f"audit trail {trail.path}: the wall clock jumped forward by 120 d 0 h 0 min (set by NTP or by hand); "
        f"records up to id {first} carry time_ms on the clock before the jump"
    ]
    assert len(rows(trail.path)) == 3
