"""`python -m bench.device_heap --quick` runs the heap benchmark end to end and prints its table
(no figure is asserted; a missing `micropython` or a gateway that refuses the fast calls fails it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_heap_bench_prints_every_stage_for_every_column() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.device_heap", "--quick"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hang takes the gateway and the board down too
    )
    try:
        stdout, stderr = process.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"the benchmark hung:\n{stderr[-3000:]}") from None
    assert process.returncode == 0, stderr[-3000:]
    lines = stdout.splitlines()
    assert lines[1].split() == ["stage", ".py", ".mpy", "gateway"], stdout
    rows = {line.rsplit(None, 3)[0]: line.rsplit(None, 3)[1:] for line in lines[2:] if "(1.000" not in line}
    for stage in ("config read", "booted (imported)", "after 20 calls", "after 200 calls"):
        assert stage in rows, stdout
    # The gateway column is filled: the 200 calls through the gateway all succeeded.
    assert float(rows["after 200 calls"][2]) > 0, stdout
    assert any(line.startswith("200/20 ") for line in lines), stdout
