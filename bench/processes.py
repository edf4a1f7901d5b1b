"""The benchmark's OS processes: free loopback ports, start/stop with captured logs, /proc readings,
waiting until a gateway serves a slot, and the timed get_status calls of the pump benchmarks."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import aiohttp
from mcp import Client

UNLIMITED_RATE_ENV = {
    "MCP_GATEWAY_LIMITS__RATE__PER_PRINCIPAL__RATE_PER_S": "0",
    "MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S": "0",
}
"""The one change from the built-in defaults a bench makes: rate limits off. A bench drives far more
than one caller's default 50 requests/s on purpose, and measures the relay, not the limiter."""

T = TypeVar("T")

PUMP_TOOL = "get_status"
"""What the pump benchmarks call: no side effects, a structured answer of a few hundred bytes."""


def gateway_env() -> dict[str, str]:
    """The environment of a gateway under test: this one without MCP_GATEWAY_* (no config file or
    setting of the calling shell leaks in, so it runs its built-in defaults), rate limits off, and a
    fresh state directory of its own, removed when the bench ends: a bench runs two gateways side by
    side, and a state directory belongs to one gateway (docs/operations.md, "The state directory")."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_GATEWAY_")}
    env.update(UNLIMITED_RATE_ENV)
    state = tempfile.mkdtemp(prefix="mcp-gateway-bench-state-")
    atexit.register(shutil.rmtree, state, ignore_errors=True)
    env["STATE_DIRECTORY"] = state
    return env


_thread_ns: dict[int, dict[int, int]] = {}
"""Per process, the last nanoseconds read for each thread it has had (ended threads included)."""


def cpu_seconds(pid: int) -> float:
    """CPU time the process's threads have run so far, in nanosecond resolution, never going back.

    /proc/<pid>/task/*/schedstat counts nanoseconds on the CPU per thread; /proc/<pid>/stat would
    count 10 ms clock ticks, too coarse for a few hundred calls of a few hundred microseconds. A
    thread that ends (anyio's idle worker threads do, in the SDK server) leaves the task list, so a
    sum over the live threads alone could fall between two readings: a thread keeps its last reading
    here. What it ran between that reading and its end is not counted (an idle worker: nothing)."""
    threads = _thread_ns.setdefault(pid, {})
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that just ended
            threads[int(task.name)] = int((task / "schedstat").read_text().split()[0])
    return sum(threads.values()) / 1e9


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


async def open_fds(pid: int, samples: int = 5) -> int:
    """A process's open file descriptors, the fewest over a few readings 50 ms apart: a client
    connection that is still closing is not counted."""
    counts = []
    for _ in range(samples):
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
        await asyncio.sleep(0.05)
    return min(counts)


async def wait_idle(pids: Sequence[int], max_wait_s: float = 3.0) -> None:
    """Until the processes are idle (under 5 ms of CPU together in 100 ms), at most `max_wait_s`: work
    a previous step left running (sessions closing, links reconnecting) is not charged to the next."""
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        before = sum(cpu_seconds(pid) for pid in pids)
        await asyncio.sleep(0.1)
        if sum(cpu_seconds(pid) for pid in pids) - before < 0.005:
            return


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """SIGTERM, and SIGKILL if it is still there after `timeout_s`; nothing if it already ended."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
        stop_process(self.process, timeout_s)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


async def start_simulator(name: str, args: list[str], cwd: Path) -> tuple[Child, str]:
    """`mcp-gateway sim ARGS --pumps 1` as its own process (warnings only, control port chosen by
    the OS), once it printed its first line ("simulator: ..."): the child and that line."""
    sim = ["-m", "gateway.cli", "sim", *args, "--pumps", "1", "--control-port", "0", "--log-level", "warning"]
    child = Child(name, sim, cwd)
    line = await asyncio.to_thread(child.read_line, 30.0)
    if not line.startswith("simulator:"):
        child.stop()
        raise RuntimeError(f"the {name} simulator did not start:\n{child.output()[-3000:]}")
    return child, line


async def wait_healthy(url: str, child: Child, timeout_s: float = 30.0) -> None:
    """Poll `url` (a gateway's /readyz, say) until it answers 200; RuntimeError with the child's log
    when the child exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline and child.alive():
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the {child.name} did not come up:\n{child.output()[-3000:]}")


async def wait_slot_ready(gateway_url: str, slot: str, tool: str = PUMP_TOOL, timeout_s: float = 30.0) -> None:
    """Wait until a session-era client of `slot` through the gateway lists `tool` (the gateway has
    initialized the provider and cached its tools)."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        try:
            async with Client(f"{gateway_url}/{slot}/mcp", mode="legacy") as client:
                if any(listed.name == tool for listed in (await client.list_tools()).tools):
                    return
        except Exception as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{slot} never became ready through the gateway: {last_error}")


async def call_get_status(client: Client) -> None:
    """One get_status; RuntimeError unless the answer is the pump's status object."""
    result = await client.call_tool(PUMP_TOOL, {})
    structured = result.structured_content
    if result.is_error or not isinstance(structured, dict) or "state" not in structured:
        raise RuntimeError(f"unexpected answer to {PUMP_TOOL}: {result!r}"[:300])


async def timed_get_status(
    url: str, mode: str, calls: int, warmup: int, pids: Sequence[int]
) -> tuple[list[float], list[float]]:
    """Sequential get_status calls on one new SDK client of `url` in protocol era `mode`.

    After `warmup` untimed calls, `calls` timed ones, each from `call_tool` to its parsed result.
    Returns their latencies in seconds and the CPU seconds each of `pids` used over the timed calls."""
    async with Client(url, mode=mode) as client:
        for _ in range(warmup):
            await call_get_status(client)
        latencies: list[float] = []
        before = [cpu_seconds(pid) for pid in pids]
        for _ in range(calls):
            started = time.perf_counter()
            await call_get_status(client)
            latencies.append(time.perf_counter() - started)
        after = [cpu_seconds(pid) for pid in pids]
    return latencies, [end - start for start, end in zip(before, after, strict=True)]


async def rotating_rounds(
    rounds: int, modes: Sequence[str], paths: Sequence[str], timed: Callable[[str, str], Awaitable[None]]
) -> None:
    """Run `timed(mode, path)` for every era and path, `rounds` times; each round starts one path later,
    so drift on the machine (another process waking, a warm cache) hits every path alike."""
    for index in range(rounds):
        first = index % len(paths)
        order = [*paths[first:], *paths[:first]]
        for mode in modes:
            for path in order:
                await timed(mode, path)
        print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)


def run_interruptible(main: Coroutine[Any, Any, T], interrupted: str) -> T | None:
    """`asyncio.run(main)`, with SIGTERM unwinding like Ctrl-C so every child process (and temporary
    tree) the run started is stopped on the way out; None, after printing `interrupted` on stderr,
    when it was interrupted (the bench then exits 130)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return None
