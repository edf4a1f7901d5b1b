"""`python -m bench.pump_paths --quick` runs the board-vs-simulator benchmark and prints its table
(no speed is asserted; a missing `micropython` fails it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_board_vs_simulator_bench_prints_its_table() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.pump_paths", "--quick"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hang takes the gateway, the board and the simulator down too
    )
    try:
        stdout, stderr = process.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"the benchmark hung:\n{stderr[-3000:]}") from None
    assert process.returncode == 0, stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines() if line.startswith("| ")}
    for era in ("session era", "2026-07-28"):
        for metric in ("sequential get_status, median (ms)", "CPU per call, pump process (us)"):
            assert f"{era}: {metric}" in rows, stdout
    header = stdout.splitlines()[1]
    assert "board (MicroPython)" in header
    assert "simulator (CPython)" in header
    assert "ratio board/sim" in header
