"""The MQTT benchmark runs with one command and prints its table (no speed is asserted here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mqtt_bench_quick_run_prints_every_path_and_era() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.mqtt", "--quick", "--calls", "5", "--warmup", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"bench.mqtt --quick did not finish: {stderr[-2000:]}") from None
    assert process.returncode == 0, stderr[-3000:]
    header = next(line for line in stdout.splitlines() if line.startswith("| metric"))
    assert [cell.strip() for cell in header.strip("|").split("|")][1:4] == ["websocket", "mqtt plain", "mqtt mcp"]
    for row in (
        "session era: sequential get_status, median (ms)",
        "2026-07-28: sequential get_status, median (ms)",
        "2026-07-28: CPU per call, gateway (us)",
    ):
        assert row in stdout, stdout
    assert "ratio plain/ws" in stdout and "ratio mcp/ws" in stdout
