"""pump-1 through the gateway: the C board (libmcpb-idf's pump1-host) against the MicroPython board
(Unix port) and the simulator, same call, same run.

    python -m bench.c_board            # 3 rounds of 500 calls per path and era, about half a minute
    python -m bench.c_board --quick    # smoke run, a few seconds (figures not meaningful)

Five processes on free loopback ports: the gateway (`python -m gateway.cli run`); pump-c1 from
`pump1-host`, pump-1 in C through the same core a board runs, built NON-sanitized and optimized into
build/c-bench/ (`cmake -DMCPB_SANITIZE=OFF -DCMAKE_BUILD_TYPE=Release`: the ASan build of build/c/
would distort memory and CPU); pump-1 as the MicroPython provider on the Unix port (`micropython -X
heapsize=96K device/micropython/main.py`, simulated hardware); pump-2 from the simulator (`python -m
gateway.cli sim --first 2`). All three list the same tools and run the same pump logic; every one
dials the gateway's dedicated WebSocket `/provider/<slot>`. The benchmark holds one SDK client per
path; the call is `get_status` (no side effects), timed from `call_tool` to the parsed result.
Rounds rotate which path goes first; each figure is the median over rounds, each ratio the median of
the per-round ratios.

Besides the round trip: each pump process's resident memory after the rounds (VmRSS, and VmHWM,
its peak, from /proc/<pid>/status), and the C board's CPU per call twice over: from schedstat
(nanoseconds, the table's "CPU per call, pump process" row, as every pump bench measures it), and
from utime+stime of /proc/<pid>/stat read before and after each of its timed runs (10 ms ticks,
summed over all its runs).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.ports import free_port
from bench.processes import (
    PUMP_TOOL,
    Child,
    gateway_env,
    memory_kib,
    rotating_rounds,
    run_interruptible,
    start_simulator,
    stop_process,
    wait_healthy,
    wait_slot_ready,
)
from bench.pump_paths import DEVICE_DIR, SCHEMA_FILE, micropython
from bench.pump_rounds import LATENCY_ROWS, Figures, RoundOptions, new_figures, round_options, timed_round
from bench.pump_rounds import render as render_rounds
from bench.report import MODES, markdown_table

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "device" / "libmcpb-idf"
BUILD_DIR = REPO / "build" / "c-bench"
CMAKE_OPTIONS = (
    "-DMCPB_SANITIZE=OFF",
    "-DMCPB_TESTS=OFF",
    "-DMCPB_FUZZ=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
)
PATHS = {"c": "pump-c1", "board": "pump-1", "simulator": "pump-2"}
IDLE_LAUNCHER = "idle MicroPython launcher (no program)"
COLUMNS = {"c": "C board (pump1-host)", "board": "MicroPython board", "simulator": "simulator (CPython)"}
RATIOS = (("c", "board", "ratio C/MicroPython"), ("c", "simulator", "ratio C/sim"))
ROWS = (
    *LATENCY_ROWS,
    ("cpu_device", "CPU per call, pump process", "us"),
    ("cpu_gateway", "CPU per call, gateway", "us"),
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
IDLE_PROGRAM = "import time\nfor _ in range(86400):\n    time.sleep(1)\n"
"""What the idle launcher runs: nothing, for at most a day. The `micropython` of the venv
(micropython_unix) runs MicroPython inside a CPython process, so most of the board's resident memory
is that host interpreter's: the same launcher with the same heap, idle, is the baseline taken off."""


def parse_options(argv: Sequence[str] | None) -> tuple[RoundOptions, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m bench.c_board", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds, each path once per era (default 3; quick 1)")
    parser.add_argument("--calls", type=int, help="timed calls per round, path and era (default 500; quick 20)")
    parser.add_argument("--warmup", type=int, help="untimed calls before each timed run (default 30; quick 3)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"protocol eras, comma-separated (default {MODES})")
    parser.add_argument(
        "--binary", type=Path, help=f"a pump1-host to run instead of building one into {BUILD_DIR.relative_to(REPO)}"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 20 calls")
    args = parser.parse_args(argv)
    return round_options(parser, args, full=(3, 500, 30)), args.binary


def build_release_binary() -> Path:
    """pump1-host without sanitizers, optimized (-O3 of CMake's Release), in build/c-bench/."""
    if shutil.which("cmake") is None:
        raise RuntimeError(
            "cmake not found: the C board bench builds pump1-host (apt-get install cmake build-essential)"
        )
    steps = []
    if not (BUILD_DIR / "CMakeCache.txt").exists():
        steps.append(["cmake", "-S", str(SOURCE_DIR), "-B", str(BUILD_DIR), *CMAKE_OPTIONS])
    jobs = str(os.cpu_count() or 2)
    steps.append(["cmake", "--build", str(BUILD_DIR), "--target", "pump1-host", "--parallel", jobs])
    for step in steps:
        done = subprocess.run(step, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(step)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return BUILD_DIR / "pump1-host"


def stat_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[11]) + int(fields[12])


class Stack:
    """The gateway, the C board, the MicroPython board and the simulator, each its own process."""

    def __init__(self, work: Path, binary: Path) -> None:
        self.work = work
        self.binary = binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.gateway: Child | None = None
        self.simulator: Child | None = None
        self.boards: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = {"c": work / "c-board.log", "board": work / "board.log", "idle": work / "idle.log"}

    def pid(self, path: str) -> int:
        if path == "simulator":
            assert self.simulator is not None
            return self.simulator.pid
        return self.boards[path].pid

    async def start(self) -> None:
        run = ["-m", "gateway.cli", "run", "--port", str(self.port)]
        self.gateway = Child("gateway", run, REPO, env=gateway_env())
        await wait_healthy(f"{self.url}/readyz", self.gateway)
        self._launch("c", [str(self.binary), "--url", f"ws://127.0.0.1:{self.port}", "--slot", PATHS["c"]], None)
        config = self.work / "board.json"
        config.write_text(
            f'{{"gateway_url": "{self.url}", "schema_path": "{SCHEMA_FILE}", "slot": "{PATHS["board"]}"}}'
        )
        board = [micropython(), "-X", "heapsize=96K", str(DEVICE_DIR / "main.py"), "--config", str(config)]
        self._launch("board", board, {**os.environ, "MICROPYPATH": f".frozen:{DEVICE_DIR}"})
        self._launch("idle", [micropython(), "-X", "heapsize=96K", "-c", IDLE_PROGRAM], None)
        self.simulator, _ = await start_simulator("simulator", ["--gateway", self.url, "--first", "2"], REPO)
        for path, slot in PATHS.items():
            try:
                await wait_slot_ready(self.url, slot)
            except RuntimeError as exc:
                log = self.logs.get(path)
                said = log.read_text(errors="replace")[-2000:] if log is not None else ""
                raise RuntimeError(f"{exc}\n{said}") from None

    def _launch(self, path: str, command: list[str], env: dict[str, str] | None) -> None:
        with self.logs[path].open("wb") as log:
            self.boards[path] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def stop(self) -> None:
        for board in self.boards.values():
            stop_process(board)
        for child in (self.simulator, self.gateway):
            if child is not None:
                child.stop()


class Measured:
    """What one run measured: the round figures, memory per pump, the C board's /proc/stat CPU."""

    def __init__(self) -> None:
        self.figures: Figures = new_figures()
        self.memory: dict[str, dict[str, int]] = {}
        self.idle_memory: dict[str, int] = {}
        """The idle launcher's (IDLE_PROGRAM), read when the pumps' are."""
        self.c_ticks = 0
        self.c_calls = 0


async def run(options: RoundOptions, binary: Path) -> Measured:
    measured = Measured()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp), binary)
        try:
            await stack.start()
            assert stack.gateway is not None
            gateway_pid = stack.gateway.pid

            async def timed(mode: str, path: str) -> None:
                pid = stack.pid(path)
                before = stat_ticks(pid) if path == "c" else 0
                cpu_of = {"cpu_gateway": gateway_pid, "cpu_device": pid}
                await timed_round(measured.figures, options, mode, path, f"{stack.url}/{PATHS[path]}/mcp", cpu_of)
                if path == "c":
                    measured.c_ticks += stat_ticks(pid) - before
                    measured.c_calls += options.calls + options.warmup

            await rotating_rounds(options.rounds, options.modes, list(PATHS), timed)
            measured.memory = {path: memory_kib(stack.pid(path)) for path in PATHS}
            measured.idle_memory = memory_kib(stack.pid("idle"))
            return measured
        finally:
            stack.stop()


def render_memory(measured: Measured, binary: Path) -> str:
    """Each pump's VmRSS and VmHWM; for the MicroPython board also its VmRSS beyond the idle launcher,
    the part its program and heap add to the host interpreter."""
    idle_rss = measured.idle_memory["VmRSS"]
    lines = [
        [
            COLUMNS[path],
            f"{memory['VmRSS']:,}",
            f"{memory['VmHWM']:,}",
            f"{memory['VmRSS'] - idle_rss:,}" if path == "board" else "",
        ]
        for path, memory in measured.memory.items()
    ]
    lines.append([IDLE_LAUNCHER, f"{idle_rss:,}", f"{measured.idle_memory['VmHWM']:,}", ""])
    table = markdown_table(
        ["pump process", "VmRSS (KiB)", "VmHWM (KiB)", "VmRSS beyond the idle launcher (KiB)"], lines
    )
    per_call = measured.c_ticks / CLOCK_TICKS / measured.c_calls * 1e6 if measured.c_calls else float("nan")
    return "\n".join(
        [
            table,
            "",
            f"C board CPU per call from /proc/<pid>/stat: {per_call:.1f} us (utime+stime {measured.c_ticks} ticks of "
            f"{1000 / CLOCK_TICKS:.0f} ms over {measured.c_calls} calls, warm-up included; its 100 ms pump tick too)",
            f"pump1-host: {binary} ({binary.stat().st_size:,} bytes, not stripped; {' '.join(CMAKE_OPTIONS)})",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    options, binary = parse_options(argv)
    binary = binary or build_release_binary()
    measured = run_interruptible(run(options, binary), "bench.c_board interrupted")
    if measured is None:
        return 130
    today = datetime.date.today().isoformat()
    print(
        f"pump-1 through the gateway, C board vs MicroPython board vs simulator: {options.rounds} rounds x "
        f"{options.calls} calls of {PUMP_TOOL} per path and era, {today}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores"
    )
    print(render_rounds(measured.figures, options.modes, ROWS, COLUMNS, RATIOS))
    print()
    print(render_memory(measured, binary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
