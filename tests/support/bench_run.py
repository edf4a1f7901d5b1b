"""Running a benchmark command from a smoke test: `python -m bench.<name> ...` in its own process group,
so a hang takes its gateway, providers and broker down with it, and a test fails instead of stalling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout_s: float) -> tuple[str, str]:
    """stdout and stderr of `python -m bench.<module> args`; fails the test on a hang or a non-zero exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", f"bench.{module}", *args],
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
        command = " ".join((f"bench.{module}", *args))
        raise AssertionError(f"{command} did not finish within {timeout_s}s:\n{stderr[-3000:]}") from None
    assert process.returncode == 0, stderr[-3000:]
    return stdout, stderr
