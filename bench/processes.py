"""The benchmark's OS processes: free loopback ports, start/stop with captured logs, /proc readings."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

UNLIMITED_RATE_ENV = {
    "MCP_GATEWAY_LIMITS__RATE__PER_PRINCIPAL__RATE_PER_S": "0",
    "MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S": "0",
}
"""The one change from the built-in defaults a bench makes: rate limits off. A bench drives far more
than one caller's default 50 requests/s on purpose, and measures the relay, not the limiter."""


def free_port() -> int:
    """A loopback port nobody listens on right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """CPU time the process's live threads have run so far, in nanosecond resolution.

    /proc/<pid>/task/*/schedstat counts nanoseconds on the CPU per thread; /proc/<pid>/stat would
    count 10 ms clock ticks, too coarse for a few hundred calls of a few hundred microseconds."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that just ended
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def machine_busy_seconds() -> float:
    """CPU time all processes on the machine have used since boot, summed over cores (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process, in KiB."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


class Child:
    """A Python module run as its own process, its output kept in a file (a pipe nobody reads could
    fill up and stall the child mid-benchmark)."""

    def __init__(self, name: str, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.process = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def read_line(self, timeout_s: float) -> str:
        """The child's next stdout line (used for its `ready`), or "" when it exits or stays silent."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        os.set_blocking(self.process.stdout.fileno(), False)
        buffered = b""
        while time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                chunk = self.process.stdout.read()
                if chunk:
                    buffered += chunk
            if b"\n" in buffered:
                return buffered.split(b"\n", 1)[0].decode(errors="replace")
            if not self.alive():
                return ""
            time.sleep(0.02)
        return ""

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()
