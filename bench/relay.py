"""Relay benchmark: SDK client -> gateway -> SDK server over WebSocket, against the same client calling
the same server directly over its own Streamable HTTP, in one run.

    python -m bench.relay            # full run, a few minutes on a 2-core machine
    python -m bench.relay --quick    # smoke run, a few seconds

Starts the gateway and one SDK server process (which serves `/mcp` itself and publishes itself into
the gateway), then runs rounds in which the paths take turns (sequential calls in short blocks, then
call by call, in a cycle in which no path follows itself; throughput windows one after the other,
the order reversed every round) so machine noise hits every path alike, and prints each figure as
its median over the rounds with its ratio to the direct path. See docs/performance.md for what the figures mean.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from bench.devices import Devices
from bench.load import SequentialClient, WorkerPool
from bench.ports import free_port
from bench.processes import (
    Child,
    cpu_seconds,
    gateway_env,
    machine_busy_seconds,
    memory_kib,
    run_interruptible,
    wait_healthy,
    wait_idle,
    wait_slot_ready,
)
from bench.report import MODE_LABELS, MODES, Row, median, missed, parse_modes, percentile, render, round_ratios
from gateway.event_loop import EVENT_LOOPS

REPO = Path(__file__).resolve().parent.parent
SLOT = "bench"
PATHS = ("direct", "gateway")
FLOOR_PATH = "bare"
"""bench.bare_relay: the same hop with none of the gateway's checks, timed sequentially in FLOOR_MODES."""
FLOOR_MODES = ("2026-07-28",)
PROCESSES = ("client", "server", "gateway", "bare")
ON_PATH = {
    "direct": ("client", "server"),
    "gateway": ("client", "server", "gateway"),
    "bare": ("client", "server", "bare"),
}
"""The processes a call on each path runs through: the others sit idle, and their few microseconds of
housekeeping stay out of the path's "all processes" figure."""
LATENCY_TARGET = 1.10
THROUGHPUT_TARGET = 0.90
REWARM_CALLS = 2
"""Calls at the start of each short block that are made but not timed: the first call after the other
paths ran finds this path's processes cold (about 0.5 ms slower through the gateway on this VM, the
second a little), which one client calling one path over and over does not see."""


@dataclass
class SequentialOptions:
    """How sequential calls are timed: rounds of blocks per path, after untimed warm-up calls (the
    knobs bench.relay_ab shares)."""

    rounds: int
    calls: int
    block: int
    warmup: int


@dataclass
class Options(SequentialOptions):
    concurrency: int
    duration: float
    workers: int
    devices: int
    modes: Sequence[str]
    json_response: bool
    event_loop: str


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="alternating direct/gateway rounds (default 5; quick 1)")
    parser.add_argument("--calls", type=int, help="timed sequential calls per round and path (default 400; quick 30)")
    parser.add_argument(
        "--block", type=int, help="timed sequential calls per path before the paths swap (default 25; quick 10)"
    )
    parser.add_argument("--warmup", type=int, help="untimed calls before each sequential run (default 50; quick 5)")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent client sessions (default 32)")
    parser.add_argument("--duration", type=float, help="seconds of each throughput window (default 4; quick 0.5)")
    parser.add_argument(
        "--workers", type=int, default=2, help="processes the concurrent clients are spread over (default 2)"
    )
    parser.add_argument("--devices", type=int, help="extra devices for the RSS-per-device figure (default 50; quick 5)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"protocol eras, comma-separated (default {MODES})")
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="both paths answer session-era calls as JSON (the SDK server's json_response, the gateway's "
        "session_answers = json) instead of their default SSE",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="the loop the gateway and the bare relay run on (default auto: uvloop, the gateway's default)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of a few seconds (figures are not meaningful)"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    modes = parse_modes(parser, args.modes)
    options = Options(
        rounds=args.rounds if args.rounds is not None else (1 if quick else 5),
        calls=args.calls if args.calls is not None else (30 if quick else 400),
        block=args.block if args.block is not None else (10 if quick else 25),
        warmup=args.warmup if args.warmup is not None else (5 if quick else 50),
        concurrency=args.concurrency,
        duration=args.duration if args.duration is not None else (0.5 if quick else 4.0),
        workers=max(1, min(args.workers, args.concurrency)),
        devices=args.devices if args.devices is not None else (5 if quick else 50),
        modes=modes,
        json_response=args.json_response,
        event_loop=args.event_loop,
    )
    if min(options.rounds, options.calls, options.block, options.concurrency) < 1 or options.duration <= 0:
        parser.error("--rounds, --calls, --block, --concurrency and --duration must be positive")
    if options.warmup < 0:
        parser.error("--warmup must not be negative")
    return options


# -- the processes under test -------------------------------------------------------------------


class Stack:
    """The gateway, the SDK server and the bare relay (the floor of a hop), each its own process on a
    free loopback port."""

    def __init__(
        self,
        json_response: bool = False,
        profile_dir: Path | None = None,
        settings: dict[str, str] | None = None,
        event_loop: str = "auto",
    ) -> None:
        self.json_response = json_response
        self.event_loop = event_loop
        """The gateway's `event_loop`, and the bare relay's, so the floor of a hop runs on the same loop."""
        self.profile_dir = profile_dir
        """With a folder, the gateway and the bare relay run under bench.profiled, counting into it."""
        self.settings = dict(settings or {})
        """MCP_GATEWAY_* variables the gateway gets on top of its built-in defaults."""
        self.gateway_port = free_port()
        self.server_port = free_port()
        self.bare_port = free_port()
        self.gateway_url = f"http://127.0.0.1:{self.gateway_port}"
        self.bare_url = f"http://127.0.0.1:{self.bare_port}"
        self.urls = {
            "direct": f"http://127.0.0.1:{self.server_port}/mcp",
            "gateway": f"{self.gateway_url}/{SLOT}/mcp",
            "bare": f"{self.bare_url}/{SLOT}/mcp",
        }
        self.children: dict[str, Child] = {}

    @property
    def gateway(self) -> Child:
        return self.children["gateway"]

    @property
    def server(self) -> Child:
        return self.children["server"]

    @property
    def bare(self) -> Child:
        return self.children["bare"]

    async def start(self) -> None:
        # The gateway's built-in defaults: no config file or MCP_GATEWAY_* setting of this shell leaks in.
        gateway_args = [*self._launch("gateway"), "gateway.cli", "run", "--port", str(self.gateway_port)]
        env = {**gateway_env(), "MCP_GATEWAY_EVENT_LOOP": self.event_loop, **self.settings}
        if self.json_response:  # like for like: both sides answer session-era calls as JSON
            env["MCP_GATEWAY_SESSION_ANSWERS"] = "json"
        self.children["gateway"] = Child("gateway", gateway_args, REPO, env=env)
        await wait_healthy(f"{self.gateway_url}/healthz", self.gateway)
        bare_args = [*self._launch("bare"), "bench.bare_relay", "--port", str(self.bare_port)]
        bare_args += ["--event-loop", self.event_loop]
        self.children["bare"] = Child("bare relay", bare_args, REPO)
        if await asyncio.to_thread(self.bare.read_line, 30.0) != "ready":
            raise RuntimeError(f"the bare relay did not start:\n{self.bare.output()[-3000:]}")
        server_args = ["-m", "bench.relay_server", "--port", str(self.server_port), "--gateway", self.gateway_url]
        server_args += ["--slot", SLOT, "--bare-relay", self.bare_url]
        server_args += ["--json-response"] if self.json_response else []
        self.children["server"] = Child("server", server_args, REPO)
        line = await asyncio.to_thread(self.server.read_line, 30.0)
        if line != "ready":
            raise RuntimeError(f"the SDK server did not start:\n{self.server.output()[-3000:]}")
        # The gateway has initialized the server and cached its tools once a listing shows `add`.
        await wait_slot_ready(self.gateway_url, SLOT, "add")
        await wait_healthy(f"{self.bare_url}/healthz", self.bare)  # 200 once the server answered initialize

    def _launch(self, name: str) -> list[str]:
        """How a child module is run: `python -m MODULE`, or under bench.profiled into NAME.prof."""
        if self.profile_dir is None:
            return ["-m"]
        return ["-m", "bench.profiled", str(self.profile_dir / f"{name}.prof")]

    def cpu(self) -> dict[str, float]:
        return {
            "client": time.process_time(),
            "server": cpu_seconds(self.server.pid),
            "gateway": cpu_seconds(self.gateway.pid),
            "bare": cpu_seconds(self.bare.pid),
        }

    def busy(self, worker_pids: Sequence[int]) -> dict[str, float]:
        return {
            "wall": time.monotonic(),
            "clients": sum(cpu_seconds(pid) for pid in worker_pids),
            "server": cpu_seconds(self.server.pid),
            "gateway": cpu_seconds(self.gateway.pid),
        }

    async def settle(self, max_wait_s: float = 3.0) -> None:
        """Wait until the gateway and the server are idle: closing the previous run's 32 sessions
        goes on after the clients leave and would otherwise be charged to the next measurement."""
        await wait_idle([self.server.pid, self.gateway.pid], max_wait_s)

    def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            child.stop()


# -- measuring ----------------------------------------------------------------------------------


def order_for(paths: Sequence[str], index: int) -> tuple[str, ...]:
    """The paths in the order of round `index`: reversed every other one, so none always goes first."""
    return tuple(paths) if index % 2 == 0 else tuple(reversed(paths))


# figures[mode][path][name] -> one value per round
Figures = dict[str, dict[str, dict[str, list[float]]]]


def new_figures() -> Figures:
    return defaultdict(lambda: defaultdict(lambda: defaultdict(list)))


def block_plan(paths: Sequence[str], calls: int, block: int) -> list[tuple[str, int]]:
    """The sequential blocks of one round, in order: (path, timed calls), `block` at a time and the
    rest in a last shorter block, each path `calls` in all, the paths always in the same cycle.

    Never a block after one of its own path: a path that follows itself finds its processes warm,
    and the first calls of a block on this VM are slower after another path ran (REWARM_CALLS does
    not take all of it away). An order reversed on every turn would put the first and last paths after
    themselves at every other turn boundary and the middle one never: the gateway, in the middle of
    direct, gateway, bare relay, then reads 3-9% slower than it is (a tree against itself in
    `bench.relay_ab`'s seats; docs/performance.md, "Why short blocks, in a cycle")."""
    plan: list[tuple[str, int]] = []
    for start in range(0, calls, block):
        plan.extend((path, min(block, calls - start)) for path in paths)
    return plan


async def sequential_round(stack: Stack, options: Options, mode: str, paths: Sequence[str], figures: Figures) -> None:
    """`--calls` sequential calls per path, one client per path, in short blocks that take turns.

    One long block per path compares stretches of time seconds apart, and on a shared host whose
    speed drifts between them a round's ratio swung from 0.44x to 1.49x. In blocks of `--block`
    calls, each block's neighbours on the other paths are a few tens of milliseconds away; the
    REWARM_CALLS at the start of each block warm the path up again and are not timed. Taking turns
    call by call (`interleaved_round`) cancels drift too, but keeps every path cold."""
    async with contextlib.AsyncExitStack() as clients:
        opened = {path: await clients.enter_async_context(SequentialClient(stack.urls[path], mode)) for path in paths}
        for client in opened.values():
            await client.warm_up(options.warmup)
        await stack.settle()
        latencies: dict[str, list[float]] = {path: [] for path in paths}
        cpu: dict[str, dict[str, float]] = {path: dict.fromkeys(PROCESSES, 0.0) for path in paths}
        made = dict.fromkeys(paths, 0)
        for path, count in block_plan(paths, options.calls, options.block):
            before = stack.cpu()
            timed = await opened[path].timed_calls(REWARM_CALLS + count)
            after = stack.cpu()
            latencies[path].extend(timed[REWARM_CALLS:])
            made[path] += len(timed)
            for process in PROCESSES:
                cpu[path][process] += after[process] - before[process]
    for path in paths:
        into = figures[mode][path]
        into["latency_median"].append(median(latencies[path]) * 1000)
        into["latency_p95"].append(percentile(latencies[path], 0.95) * 1000)
        # CPU over every call of the blocks, the re-warming ones included: each is a whole call.
        for process in PROCESSES:
            into[f"cpu_{process}"].append(cpu[path][process] / made[path] * 1e6)
        spent = sum(cpu[path][process] for process in ON_PATH[path])
        into["cpu_total"].append(spent / made[path] * 1e6)


async def interleaved_round(stack: Stack, options: Options, mode: str, paths: Sequence[str], figures: Figures) -> None:
    """Sequential calls taking turns call by call over `paths`, always in the same cycle (the round
    picks its order, `order_for`), so no call ever follows one of its own path.

    A round of one path after another compares stretches of time a few seconds apart, and a host
    whose speed drifts (other tenants) can favour either; here every call on one path has its
    neighbours on the others, so drift cancels out. What it cannot show is one client calling one
    path over and over: between two calls of a path the other paths' processes run too."""
    async with contextlib.AsyncExitStack() as clients:
        opened = {path: await clients.enter_async_context(SequentialClient(stack.urls[path], mode)) for path in paths}
        for client in opened.values():
            await client.warm_up(options.warmup)
        await stack.settle()
        latencies: dict[str, list[float]] = {path: [] for path in paths}
        for _turn in range(options.calls):
            for path in paths:  # the same cycle every turn: no path ever right after itself (see block_plan)
                latencies[path].extend(await opened[path].timed_calls(1))
    for path in paths:
        figures[mode][path]["interleaved_median"].append(median(latencies[path]) * 1000)


async def throughput_round(
    stack: Stack, pool: WorkerPool, options: Options, mode: str, path: str, figures: Figures
) -> None:
    await pool.open(stack.urls[path], mode, options.concurrency)
    await stack.settle()
    try:
        before: dict[str, float] = {}
        result = await pool.run(options.duration, at_start=lambda: before.update(stack.busy(pool.pids)))
        after = stack.busy(pool.pids)
    finally:
        await pool.close_clients()
    # How many cores each side kept busy shows which process limits the rate (2 cores in all here).
    elapsed = after["wall"] - before["wall"]
    for process in ("clients", "server", "gateway"):
        figures[mode][path][f"busy_{process}"].append((after[process] - before[process]) / elapsed)
    if result.errors:
        print(
            f"  warning: {result.errors} failed calls on the {path} path ({mode}): {result.first_error}",
            file=sys.stderr,
        )
    figures[mode][path]["throughput"].append(result.per_second)


async def memory_per_device(stack: Stack, count: int) -> tuple[float, float]:
    """(gateway RSS in KiB with only the bench slot, extra RSS in KiB per connected device)."""
    idle = memory_kib(stack.gateway.pid)["VmRSS"]
    if count == 0:
        return idle, float("nan")
    devices = Devices(stack.gateway_url, count)
    await devices.start()
    try:
        await devices.wait_listed(60)
        await asyncio.sleep(0.5)  # the gateway has read the last tools/list answer and is idle again
        loaded = memory_kib(stack.gateway.pid)["VmRSS"]
    finally:
        await devices.stop()
    return idle, (loaded - idle) / count


# -- the table ----------------------------------------------------------------------------------


def mode_rows(mode: str, figures: Figures, options: Options) -> list[Row]:
    label = MODE_LABELS[mode]
    direct, gateway = figures[mode]["direct"], figures[mode]["gateway"]

    def row(
        name: str, metric: str, unit: str, target: str = "", limit: float | None = None, higher: bool = False
    ) -> Row:
        ratios = round_ratios(gateway[name], direct[name])
        return Row(metric, unit, median(direct[name]), median(gateway[name]), ratios, target, limit, higher)

    return [
        row("latency_median", f"{label}: sequential call, median", "ms", target=f"<= {LATENCY_TARGET:.2f}x",
            limit=LATENCY_TARGET),
        row("latency_p95", f"{label}: sequential call, p95", "ms"),
        row("interleaved_median", f"{label}: sequential call, paths taking turns call by call, median", "ms"),
        row("throughput", f"{label}: throughput, {options.concurrency} clients", "calls/s",
            target=f">= {THROUGHPUT_TARGET:.2f}x", limit=THROUGHPUT_TARGET, higher=True),
        row("cpu_total", f"{label}: CPU per sequential call, all processes", "us"),
        row("cpu_client", f"{label}: CPU per sequential call, client", "us"),
        row("cpu_server", f"{label}: CPU per sequential call, SDK server", "us"),
        Row(f"{label}: CPU per sequential call, gateway", "us", None, median(gateway["cpu_gateway"])),
        row("busy_clients", f"{label}: throughput, cores busy in client workers", "cores"),
        row("busy_server", f"{label}: throughput, cores busy in SDK server", "cores"),
        Row(f"{label}: throughput, cores busy in gateway", "cores", None, median(gateway["busy_gateway"])),
    ]  # fmt: skip


def floor_rows(mode: str, figures: Figures) -> list[Row]:
    """The bare relay against the direct call: what the hop alone costs, to set the gateway's rows against."""
    label = MODE_LABELS[mode]
    direct, bare, gateway = figures[mode]["direct"], figures[mode][FLOOR_PATH], figures[mode]["gateway"]
    return [
        Row(f"{label}: sequential call via bare aiohttp relay (no checks), median", "ms",
            median(direct["latency_median"]), median(bare["latency_median"]),
            round_ratios(bare["latency_median"], direct["latency_median"])),
        Row(f"{label}: bare relay, paths taking turns call by call, median", "ms",
            median(direct["interleaved_median"]), median(bare["interleaved_median"]),
            round_ratios(bare["interleaved_median"], direct["interleaved_median"])),
        Row(f"{label}: CPU per sequential call, bare relay", "us", None, median(bare["cpu_bare"])),
        # The same hop with and without the gateway's work: what the gateway itself adds to a call.
        Row(f"{label}: sequential call, bare relay (1st column) against gateway, median", "ms",
            median(bare["latency_median"]), median(gateway["latency_median"]),
            round_ratios(gateway["latency_median"], bare["latency_median"])),
    ]  # fmt: skip


def memory_rows(idle_kib: float, per_device_kib: float, peak_kib: float, devices: int) -> list[Row]:
    return [
        Row("gateway RSS, idle with 1 slot", "MiB", None, idle_kib / 1024),
        Row(f"gateway RSS per connected device ({devices} devices)", "KiB", None, per_device_kib),
        Row("gateway peak RSS over the run (VmHWM)", "MiB", None, peak_kib / 1024),
    ]


class BackgroundLoad:
    """CPU the rest of the machine used while the benchmark ran (other tenants, other test runs)."""

    def __init__(self, own_pids: Callable[[], Sequence[int]]) -> None:
        self.own_pids = own_pids
        self.start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        own = time.process_time() + sum(cpu_seconds(pid) for pid in self.own_pids())
        return time.monotonic(), machine_busy_seconds(), own

    def cores(self) -> float:
        wall, busy, own = self._sample()
        elapsed = wall - self.start[0]
        if elapsed <= 0:
            return 0.0
        return max(0.0, ((busy - self.start[1]) - (own - self.start[2])) / elapsed)


def preamble(options: Options, workers: int) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"bench.relay {now}: {os.cpu_count()} CPUs, Python {platform.python_version()}, mcp {version('mcp')}, "
        f"aiohttp {version('aiohttp')}, uvicorn {version('uvicorn')}\n"
        f"rounds={options.rounds} calls={options.calls} block={options.block} warmup={options.warmup} "
        f"concurrency={options.concurrency} "
        f"duration={options.duration}s workers={workers} devices={options.devices} modes={','.join(options.modes)} "
        f"session-era answers={'json' if options.json_response else 'sse (both defaults)'} "
        f"event loop of the gateway and the bare relay={options.event_loop} (the SDK server: asyncio, as the SDK runs)"
    )


async def run(options: Options, progress: Callable[[str], None]) -> tuple[list[Row], float]:
    """The table's rows and the cores other processes on the machine kept busy meanwhile."""
    stack = Stack(options.json_response, event_loop=options.event_loop)
    pool = WorkerPool(options.workers)
    try:
        await stack.start()
        progress(
            f"gateway pid {stack.gateway.pid} on {stack.gateway_url}, SDK server pid {stack.server.pid}, "
            f"bare relay pid {stack.bare.pid} on {stack.bare_url}"
        )
        background = BackgroundLoad(lambda: [*(child.pid for child in stack.children.values()), *pool.pids])
        idle_kib, per_device_kib = await memory_per_device(stack, options.devices)
        figures = new_figures()
        for index in range(options.rounds):
            # Alternate which path goes first so drift (thermal, other tenants) hits both alike.
            order = order_for(PATHS, index)
            for mode in options.modes:
                paths = (*PATHS, FLOOR_PATH) if mode in FLOOR_MODES else PATHS
                await sequential_round(stack, options, mode, order_for(paths, index), figures)
                await interleaved_round(stack, options, mode, order_for(paths, index), figures)
            for mode in options.modes:
                for path in order:
                    await throughput_round(stack, pool, options, mode, path, figures)
            progress(f"round {index + 1}/{options.rounds} done")
        peak_kib = memory_kib(stack.gateway.pid)["VmHWM"]
        other_cores = background.cores()
    finally:
        pool.stop()
        stack.stop()
    rows: list[Row] = []
    for mode in options.modes:
        rows.extend(mode_rows(mode, figures, options))
    for mode in options.modes:
        if mode in FLOOR_MODES:
            rows.extend(floor_rows(mode, figures))
    rows.extend(memory_rows(idle_kib, per_device_kib, peak_kib, options.devices))
    return rows, other_cores


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    print(preamble(options, options.workers), flush=True)

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    result = run_interruptible(
        run(options, progress), "bench.relay: interrupted; gateway, server and client workers stopped"
    )
    if result is None:
        return 130
    rows, other_cores = result
    print()
    print(render(rows))
    print()
    print(f"Other processes on the machine kept {other_cores:.2f} of {os.cpu_count()} cores busy during the run.")
    misses = missed(rows)
    if misses:
        for row in misses:
            print(f"TARGET MISSED: {row.metric}: ratio {row.ratio:.2f}x, target {row.target}")
    else:
        print("All targets met.")
    # A measurement, not a test: missing a target is reported above, not through the exit code.
    return 0


if __name__ == "__main__":
    sys.exit(main())
