"""The relay benchmark runs with one command and prints its table (no speed is asserted here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

EXPECTED_ROWS = [
    "session era: sequential call, median (ms)",
    "session era: sequential call, p95 (ms)",
    "session era: throughput, 32 clients (calls/s)",
    "2026-07-28: sequential call, median (ms)",
    "2026-07-28: throughput, 32 clients (calls/s)",
    "2026-07-28: CPU per sequential call, gateway (us)",
    "gateway RSS per connected device (5 devices) (KiB)",
    "gateway peak RSS over the run (VmHWM) (MiB)",
]


def run_quick_bench(timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run the benchmark in its own process group, so a hang takes its gateway and server down too."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.relay", "--quick"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"bench.relay --quick did not finish within {timeout_s}s:\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.timeout(90)
def test_quick_run_prints_the_table() -> None:
    run = run_quick_bench(80)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert any(line.startswith("| metric ") and "| ratio " in line and "| result " in line for line in lines)
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}
    for metric in EXPECTED_ROWS:
        assert metric in rows, f"missing row {metric!r} in:\n{run.stdout}"
    # Every call succeeded on both paths: a failing path would print a warning on stderr.
    assert "failed calls" not in run.stderr, run.stderr[-3000:]
    latency = rows["session era: sequential call, median (ms)"].split("|")
    direct, gateway = float(latency[2]), float(latency[3])
    assert direct > 0 and gateway > 0
    assert "All targets met." in run.stdout or "TARGET MISSED:" in run.stdout
