"""The audit trail's durability guarantee: a decision id handed back is in the file, even when the process is
SIGKILLed mid-burst (one child process writing as fast as it can, killed, the file read afterwards)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import asyncio, os, sys
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, DecisionRecord

async def main(path: str, workers: int) -> None:
    trail = AuditTrail.open(AuditConfig(path=path))
    await trail.start()
    if not trail.healthy:
        raise SystemExit(trail.last_error)
    numbers = iter(range(10**9))

    async def worker() -> None:
        for n in numbers:
            record = DecisionRecord({"token:crash"}, "test", "pump-1", "/pump-1", "tool.control", "allow",
                                    tool="set_speed", arguments={"n": n, "pad": "x" * 200})
            decision_id = await trail.decision(record)
            os.write(1, b"%d\\n" % decision_id)  # unbuffered: printed means returned
            trail.result(decision_id, "ok", 0.1)

    await asyncio.gather(*(worker() for _ in range(workers)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def burst_then_kill(path: Path, workers: int, kill_after: int) -> list[int]:
    """Run the child until it printed `kill_after` ids, SIGKILL it, and return every id it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(workers)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    ids: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(ids) < kill_after and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            ids.append(int(line))
    finally:
        os.kill(child.pid, signal.SIGKILL)
    rest, errors = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGKILL, errors.decode()[-2000:]  # killed mid-burst, not ended
    assert len(ids) == kill_after, f"the child printed {len(ids)} ids in 30 s: {errors.decode()[-2000:]}"
    return ids + [int(line) for line in rest.splitlines()]  # printed before the kill, read after it


def stored_ids(path: Path) -> set[int]:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return {row[0] for row in conn.execute("SELECT id FROM decisions")}
    finally:
        conn.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 32])
def test_every_id_returned_before_a_sigkill_is_in_the_file(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "audit.db"
    for round_number in range(3):  # each round reopens the file the last kill left behind
        printed = burst_then_kill(path, workers, kill_after=200 + 150 * round_number)
        missing = set(printed) - stored_ids(path)
        assert not missing, f"round {round_number}: {len(missing)} returned ids not stored: {sorted(missing)[:10]}"
        assert len(printed) == len(set(printed))
