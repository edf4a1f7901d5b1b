"""Governed tool calls: pump-1's set_speed through a gateway with a [policy] against the same call
through one without, side by side in one run.

    python -m bench.governance            # full run, about two minutes on a 2-core machine
    python -m bench.governance --quick    # smoke run, a few seconds (figures not meaningful)
    python -m bench.governance --client http   # bare aiohttp POSTs instead of SDK clients
    python -m bench.governance --dir /var/lib/mcp-gateway   # the audit trail on the file system it uses

Two gateways, each its own process on a free loopback port (`python -m gateway.cli run --config
FILE`, built-in defaults but for rate limits, which are off): "ungoverned" has no [policy];
"governed" has an inline [policy] granting the anonymous caller (loopback, no [auth]) a role with
mcp.tools.list, mcp.tools.call, tool.control and tool.observe on "/**", one [[limits]] on
set_speed's speed_rpm (action refuse, bounds the calls stay within), one [[execution_limits]] rule
counting set_speed per caller (a rate and a concurrency the calls never reach) and [audit] in a
temporary directory. Each gateway has its own simulator process publishing pump-1 (`mcp-gateway sim --pumps 1`);
the pump is started once, then every call is `set_speed {"speed_rpm": 1200}`: a control tool with an
inputSchema, so a governed call is decided by the policy, checked against the schema and the limit,
counted by the execution limit, and its decision committed to the audit trail (fsynced) before it is forwarded.

Clients are the SDK's (`mcp.Client`, the 2026-07-28 stateless era), as in bench.relay; with
`--client http`, bare aiohttp POSTs of the same era (bench/storm.py's request shape), which cost a
fraction of the SDK client's CPU, so the gateway's share of a call weighs more. Each round:
- sequential calls, one client per gateway in this process, in short blocks that take turns (the
  first REWARM_CALLS of each block untimed); a round's figure is the median of its blocks' medians;
- a throughput window per gateway with 32 concurrent clients spread over worker processes, the order
  reversed every round. The governed window also reads the trail's highest decision id as it opens and
  closes: decisions committed per second.
A figure is the median over rounds, a ratio (governed / ungoverned) the median of the rounds' own
ratios. At the end the governed gateway is stopped (its trail checkpointed and closed) and the trail's
size per 10,000 calls is its file less an empty trail's, over the decisions it holds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import multiprocessing
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from mcp import Client

from bench.audit import file_system
from bench.load import Throughput, split
from bench.ports import free_port
from bench.processes import (
    Child,
    cpu_seconds,
    gateway_env,
    run_interruptible,
    start_simulator,
    wait_healthy,
    wait_idle,
    wait_slot_ready,
)
from bench.relay import REWARM_CALLS, BackgroundLoad, block_plan, order_for
from bench.report import Row, markdown_table, median, percentile, round_ratios, spread
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail

REPO = Path(__file__).resolve().parent.parent
PATHS = ("ungoverned", "governed")
SLOT = "pump-1"
TOOL = "set_speed"
SPEED_RPM = 1200
ARGUMENTS = {"speed_rpm": SPEED_RPM}
MODE = "2026-07-28"
LATENCY_TARGET = 1.15
THROUGHPUT_TARGET = 0.85
SIZE_CALLS = 10_000
MAX_ERRORS_PER_CLIENT = 100

POLICY = """\
# bench.governance: the anonymous (loopback) caller may list and call every tool anywhere,
# set_speed's speed_rpm stays within a limit the calls keep to, every call is counted by an
# execution limit it never reaches, and every call is audited.
[policy.roles.bench]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.control", "tool.observe"]

[[policy.assign]]
principal = "anonymous"
role = "bench"
resources = ["/**"]

[[policy.limits]]
resources = ["/**"]
tool = "set_speed"
argument = "speed_rpm"
min = 300
max = 2000
action = "refuse"

[[policy.execution_limits]]
id = "bench-set-speed"
match = { capability = "tool:set_speed" }
group_by = ["subject"]
rate = { max = 1000000, window_ms = 1000 }
concurrency = 1000

[audit]
path = "{audit}"
"""
CLIENT_LABELS = {"sdk": f"mcp.Client (mcp {version('mcp')})", "http": f"aiohttp POSTs (aiohttp {version('aiohttp')})"}
UNGOVERNED = "# bench.governance: no [policy]; nothing is decided or audited.\n"


@dataclass
class Options:
    rounds: int
    calls: int
    block: int
    warmup: int
    concurrency: int
    duration: float
    workers: int
    directory: Path | None
    client: str


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.governance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds (default 5; quick 1)")
    parser.add_argument(
        "--calls", type=int, help="timed sequential calls per round and gateway (default 400; quick 30)"
    )
    parser.add_argument(
        "--block", type=int, help="timed calls per block before the gateways swap (default 25; quick 10)"
    )
    parser.add_argument(
        "--warmup", type=int, help="untimed calls per client before the first round (default 50; quick 5)"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--duration", type=float, help="seconds of each throughput window (default 4; quick 0.5)")
    parser.add_argument("--workers", type=int, default=2, help="processes the concurrent clients run in (default 2)")
    parser.add_argument(
        "--dir", type=Path, help="where the audit trail goes (default: the system's temporary directory)"
    )
    parser.add_argument(
        "--client",
        choices=tuple(CALLERS),
        default="sdk",
        help="the clients: sdk, the SDK's mcp.Client as in bench.relay (default); http, bare aiohttp POSTs",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (figures not meaningful)")
    args = parser.parse_args(argv)
    quick = args.quick
    options = Options(
        rounds=args.rounds if args.rounds is not None else (1 if quick else 5),
        calls=args.calls if args.calls is not None else (30 if quick else 400),
        block=args.block if args.block is not None else (10 if quick else 25),
        warmup=args.warmup if args.warmup is not None else (5 if quick else 50),
        concurrency=args.concurrency,
        duration=args.duration if args.duration is not None else (0.5 if quick else 4.0),
        workers=max(1, min(args.workers, args.concurrency)),
        directory=args.dir,
        client=args.client,
    )
    if min(options.rounds, options.calls, options.block, options.concurrency) < 1 or options.duration <= 0:
        parser.error("--rounds, --calls, --block, --concurrency and --duration must be positive")
    if options.warmup < 0:
        parser.error("--warmup must not be negative")
    return options


# -- the call -----------------------------------------------------------------------------------


class CallFailed(RuntimeError):
    pass


class Caller:
    """One client of one gateway's pump-1, making the benchmark's call."""

    async def __aenter__(self) -> Caller:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def call(self) -> None:
        raise NotImplementedError


class SdkCaller(Caller):
    """The SDK's `mcp.Client` in the stateless era, as bench.relay's clients."""

    def __init__(self, url: str) -> None:
        self.client = Client(url, mode=MODE)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> SdkCaller:
        await self._stack.enter_async_context(self.client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def call(self) -> None:
        result = await self.client.call_tool(TOOL, ARGUMENTS)
        check_status(result.is_error, result.structured_content, repr(result))


class HttpCaller(Caller):
    """A bare stateless-era client: one aiohttp POST per call on a keep-alive connection of its own,
    with the request shape of bench/storm.py (routing headers repeating the body, `_meta` with the
    protocol version and client capabilities). Far less CPU per call than the SDK client, so the
    gateway's share of a call (and what governance adds to it) weighs more."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http: aiohttp.ClientSession | None = None
        self.next_id = 0

    async def __aenter__(self) -> HttpCaller:
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.http is not None:
            await self.http.close()

    async def call(self) -> None:
        assert self.http is not None
        self.next_id += 1
        body = orjson.dumps({**CALL_BODY, "id": self.next_id})
        async with self.http.post(self.url, data=body, headers=CALL_HEADERS) as response:
            raw = await response.read()
            streamed = response.content_type == "text/event-stream"
        if streamed:  # the last `data:` line of the stream carries the answer
            raw = [line for line in raw.splitlines() if line.startswith(b"data:")][-1][5:]
        answer = orjson.loads(raw)
        result = answer.get("result") if isinstance(answer, dict) else None
        if not isinstance(result, dict):
            raise CallFailed(f"unexpected answer to {TOOL}: {answer!r}"[:300])
        check_status(result.get("isError") is True, result.get("structuredContent"), repr(answer))


CALL_BODY: dict[str, Any] = {
    "jsonrpc": "2.0",
    "method": "tools/call",
    "params": {
        "name": TOOL,
        "arguments": ARGUMENTS,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODE,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench-governance", "version": "1"},
        },
    },
}
CALL_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": MODE,
    "Mcp-Method": "tools/call",
    "Mcp-Name": TOOL,
}
CALLERS: dict[str, type[SdkCaller] | type[HttpCaller]] = {"sdk": SdkCaller, "http": HttpCaller}


def check_status(is_error: bool, structured: object, answer: str) -> None:
    """CallFailed unless pump-1 answered with its status at the setpoint asked for."""
    if is_error or not isinstance(structured, dict) or structured.get("setpoint_rpm") != SPEED_RPM:
        raise CallFailed(f"unexpected answer to {TOOL}: {answer}"[:300])


async def timed_calls(caller: Caller, calls: int) -> list[float]:
    """Seconds per call, each from the request to its checked result."""
    latencies: list[float] = []
    clock = time.perf_counter
    for _ in range(calls):
        started = clock()
        await caller.call()
        latencies.append(clock() - started)
    return latencies


# -- the processes under test -------------------------------------------------------------------


class Side:
    """One gateway with its config file and the simulator publishing pump-1 into it."""

    def __init__(self, path: str, work: Path) -> None:
        self.path = path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.mcp_url = f"{self.url}/{SLOT}/mcp"
        self.audit = work / "audit.db" if path == "governed" else None
        self.config = work / f"{path}.toml"
        text = UNGOVERNED if self.audit is None else POLICY.replace("{audit}", str(self.audit))
        self.config.write_text(text)
        self.gateway: Child | None = None
        self.simulator: Child | None = None

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in (self.gateway, self.simulator) if child is not None]

    async def start(self) -> None:
        args = ["-m", "gateway.cli", "run", "--config", str(self.config), "--port", str(self.port)]
        self.gateway = Child(f"{self.path} gateway", [*args, "--log-level", "warning"], REPO, env=gateway_env())
        await wait_healthy(f"{self.url}/readyz", self.gateway)
        self.simulator, _line = await start_simulator(f"{self.path} pump-1", ["--gateway", self.url], REPO)
        await wait_slot_ready(self.url, SLOT, TOOL)
        # set_speed changes a starting or running pump only: start it once, at the speed every call sets.
        async with Client(self.mcp_url, mode=MODE) as client:
            result = await client.call_tool("start", ARGUMENTS)
            if result.is_error:
                raise RuntimeError(f"pump-1 behind the {self.path} gateway did not start: {result!r}"[:300])

    async def audit_counters(self) -> tuple[int, int]:
        """(commits, decisions written) of the gateway's audit trail, from broker_info: a governed
        call itself (the policy grants "/**", which holds the broker's /_system/broker)."""
        async with Client(f"{self.url}/_broker/mcp", mode=MODE) as client:
            result = await client.call_tool("broker_info", {})
        info = result.structured_content
        audit = info.get("governance", {}).get("audit") if isinstance(info, dict) else None
        if result.is_error or not isinstance(audit, dict):
            raise RuntimeError(f"broker_info of the {self.path} gateway names no audit trail: {result!r}"[:300])
        return int(audit["commits"]), int(audit["decisions_written"])

    def stop(self) -> None:
        for child in (self.simulator, self.gateway):
            if child is not None:
                child.stop()
        self.simulator = self.gateway = None


class Trail:
    """The governed gateway's audit file, read from this process (WAL: reading never blocks its writer)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path)

    def last_decision(self) -> int:
        row = self.conn.execute("SELECT coalesce(max(id), 0) FROM decisions").fetchone()
        return int(row[0])

    def close(self) -> None:
        self.conn.close()


def trail_bytes(path: Path) -> int:
    """The trail's database file and its write-ahead log, in bytes."""
    return sum(os.stat(file).st_size for file in (path, Path(f"{path}-wal")) if file.exists())


# -- concurrent clients in worker processes -----------------------------------------------------


async def _drive(caller: Caller, start_at: float, end_at: float) -> tuple[int, int, str]:
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    calls = errors = 0
    first_error = ""
    while errors < MAX_ERRORS_PER_CLIENT:
        try:
            await caller.call()
            succeeded = True
        except Exception as exc:
            succeeded = False
            first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]
        if time.monotonic() >= end_at:  # a call that ends after the window is not counted
            break
        if succeeded:
            calls += 1
        else:
            errors += 1
    return calls, errors, first_error


async def _worker_loop(conn: Connection) -> None:
    callers: list[Caller] = []
    stack = AsyncExitStack()
    while True:
        command, *args = await asyncio.to_thread(conn.recv)
        if command == "open":
            url, kind, count = args
            stack = AsyncExitStack()  # sessions are entered and left in this one task
            callers = [await stack.enter_async_context(CALLERS[kind](url)) for _ in range(count)]
            for caller in callers:
                await caller.call()
            conn.send(("opened",))
        elif command == "run":
            start_at, end_at = args
            bursts = await asyncio.gather(*(_drive(caller, start_at, end_at) for caller in callers))
            errors = [burst[2] for burst in bursts if burst[2]]
            conn.send(("done", sum(b[0] for b in bursts), sum(b[1] for b in bursts), errors[0] if errors else ""))
        elif command == "close":
            await stack.aclose()
            callers = []
            conn.send(("closed",))
        else:
            return


def _worker_main(conn: Connection) -> None:
    with contextlib.suppress(EOFError, KeyboardInterrupt):
        asyncio.run(_worker_loop(conn))


class WorkerPool:
    """Processes that each hold a share of the concurrent clients (one process driving 32 SDK
    clients would spend a core on them alone and cap both gateways alike); bench.load's, calling set_speed."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for _ in range(workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker_main, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self.pipes.append(ours)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    async def _replies(self, timeout_s: float) -> list[tuple[Any, ...]]:
        async def answer(pipe: Connection) -> tuple[Any, ...]:
            if not await asyncio.to_thread(pipe.poll, timeout_s):
                raise TimeoutError(f"a client worker did not answer within {timeout_s}s")
            reply: tuple[Any, ...] = pipe.recv()
            return reply

        return list(await asyncio.gather(*(answer(pipe) for pipe in self.pipes)))

    async def open(self, url: str, kind: str, clients: int) -> None:
        for pipe, count in zip(self.pipes, split(clients, len(self.pipes)), strict=True):
            pipe.send(("open", url, kind, count))
        await self._replies(60)

    async def run(self, duration_s: float, at_start: Callable[[], None], at_end: Callable[[], None]) -> Throughput:
        """Every client calls for `duration_s`; `at_start` and `at_end` run as the window opens and closes."""
        start_at = time.monotonic() + 0.2  # every worker starts at once (CLOCK_MONOTONIC is system-wide)
        end_at = start_at + duration_s
        for pipe in self.pipes:
            pipe.send(("run", start_at, end_at))
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        at_start()
        await asyncio.sleep(max(0.0, end_at - time.monotonic()))
        at_end()
        replies = await self._replies(duration_s + 60)
        errors = [reply[3] for reply in replies if reply[3]]
        return Throughput(
            calls=sum(reply[1] for reply in replies),
            errors=sum(reply[2] for reply in replies),
            seconds=duration_s,
            first_error=errors[0] if errors else "",
        )

    async def close_clients(self) -> None:
        for pipe in self.pipes:
            pipe.send(("close",))
        await self._replies(60)

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("exit",))
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)


# -- measuring ----------------------------------------------------------------------------------

Figures = dict[str, dict[str, list[float]]]
"""figures[path][name] -> one value per round."""


class Bench:
    def __init__(self, options: Options, work: Path) -> None:
        self.options = options
        self.sides = {path: Side(path, work) for path in PATHS}
        self.figures: Figures = defaultdict(lambda: defaultdict(list))
        self.trail: Trail | None = None

    @property
    def pids(self) -> list[int]:
        return [pid for side in self.sides.values() for pid in side.pids]

    async def settle(self) -> None:
        """Until both stacks are idle: closing the last window's sessions is not charged to the next."""
        await wait_idle(self.pids)

    async def sequential_round(self, clients: dict[str, Caller], order: Sequence[str]) -> None:
        """`--calls` timed calls per gateway in blocks of `--block` that take turns (bench.relay.block_plan)."""
        await self.settle()
        blocks: dict[str, list[float]] = {path: [] for path in order}
        latencies: dict[str, list[float]] = {path: [] for path in order}
        cpu = dict.fromkeys(order, 0.0)
        made = dict.fromkeys(order, 0)
        for path, count in block_plan(order, self.options.calls, self.options.block):
            gateway = self.sides[path].gateway
            assert gateway is not None
            before = cpu_seconds(gateway.pid)
            timed = await timed_calls(clients[path], REWARM_CALLS + count)
            cpu[path] += cpu_seconds(gateway.pid) - before
            made[path] += len(timed)
            blocks[path].append(median(timed[REWARM_CALLS:]))
            latencies[path].extend(timed[REWARM_CALLS:])
        for path in order:
            into = self.figures[path]
            into["latency"].append(median(blocks[path]) * 1000)
            into["p95"].append(percentile(latencies[path], 0.95) * 1000)
            into["cpu_gateway"].append(cpu[path] / made[path] * 1e6)

    async def throughput_round(self, pool: WorkerPool, path: str) -> None:
        side = self.sides[path]
        assert side.gateway is not None and side.simulator is not None
        processes = {"gateway": [side.gateway.pid], "simulator": [side.simulator.pid], "clients": pool.pids}
        await pool.open(side.mcp_url, self.options.client, self.options.concurrency)
        await self.settle()
        marks: dict[str, dict[str, float]] = {}

        def mark(name: str) -> Callable[[], None]:
            def take() -> None:
                reading = {"wall": time.monotonic()}
                reading.update({key: sum(cpu_seconds(pid) for pid in pids) for key, pids in processes.items()})
                if self.trail is not None and governed:
                    reading["decisions"] = self.trail.last_decision()
                marks[name] = reading

            return take

        governed = path == "governed"
        try:
            # The trail's own counters around the window (the calls of its edges included: a ratio).
            counters = await side.audit_counters() if governed else (0, 0)
            result = await pool.run(self.options.duration, at_start=mark("start"), at_end=mark("end"))
            if governed:
                commits_after, decisions_after = await side.audit_counters()
                commits, decisions = commits_after - counters[0], decisions_after - counters[1]
                self.figures[path]["commits"].append(commits / decisions * 100 if decisions else math.nan)
        finally:
            await pool.close_clients()
        start, end = marks["start"], marks["end"]
        elapsed = end["wall"] - start["wall"]
        into = self.figures[path]
        into["throughput"].append(result.per_second)
        for key in processes:
            into[f"busy_{key}"].append((end[key] - start[key]) / elapsed)
        if "decisions" in start:
            into["audit_rate"].append((end["decisions"] - start["decisions"]) / elapsed)
        if result.errors:
            print(
                f"  warning: {result.errors} failed calls on the {path} gateway: {result.first_error}", file=sys.stderr
            )

    async def trail_size(self, work: Path) -> tuple[float, int]:
        """(MiB per SIZE_CALLS calls, decisions in the trail): the governed gateway is stopped first, so
        its trail is checkpointed and closed; an empty trail's file, made here by the same code, is
        taken off."""
        side = self.sides["governed"]
        assert side.audit is not None
        if self.trail is not None:
            self.trail.close()
            self.trail = None
        side.stop()
        size = trail_bytes(side.audit)  # before this process opens it (and makes a -wal of its own)
        with contextlib.closing(sqlite3.connect(side.audit)) as conn:
            decisions = int(conn.execute("SELECT count(*) FROM decisions").fetchone()[0])
        empty = AuditTrail.open(AuditConfig(path=str(work / "empty.db")))
        await empty.start()
        await empty.close()
        empty_size = trail_bytes(work / "empty.db")
        if decisions == 0:
            return math.nan, 0
        return (size - empty_size) * SIZE_CALLS / decisions / 2**20, decisions

    async def run(self, work: Path, progress: Callable[[str], None]) -> tuple[float, int, float]:
        """Every round; (MiB per SIZE_CALLS calls, decisions recorded, cores other processes kept busy)."""
        pool = WorkerPool(self.options.workers)
        try:
            for side in self.sides.values():
                await side.start()
            governed = self.sides["governed"]
            assert governed.audit is not None
            self.trail = Trail(governed.audit)
            progress(
                ", ".join(
                    f"{side.path} gateway pid {side.gateway.pid} on {side.url}"
                    for side in self.sides.values()
                    if side.gateway is not None
                )
            )
            background = BackgroundLoad(lambda: [*self.pids, *pool.pids])
            async with AsyncExitStack() as stack:
                kind = CALLERS[self.options.client]
                clients: dict[str, Caller] = {
                    path: await stack.enter_async_context(kind(side.mcp_url)) for path, side in self.sides.items()
                }
                for client in clients.values():
                    await timed_calls(client, self.options.warmup)
                for index in range(self.options.rounds):
                    order = order_for(PATHS, index)  # who goes first alternates, so drift hits both alike
                    await self.sequential_round(clients, order)
                    for path in order:
                        await self.throughput_round(pool, path)
                    progress(f"round {index + 1}/{self.options.rounds} done")
            other_cores = background.cores()
            size_mib, decisions = await self.trail_size(work)
        finally:
            pool.stop()
            if self.trail is not None:
                self.trail.close()
            for side in self.sides.values():
                side.stop()
        return size_mib, decisions, other_cores


# -- the table ----------------------------------------------------------------------------------


def verdict(row: Row) -> str:
    return {"pass": "met", "MISS": "missed"}.get(row.verdict, row.verdict)


def number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "n/a"
    if unit in ("calls/s", "records/s", "us"):
        return f"{value:,.0f}"
    if unit == "commits":
        return f"{value:.1f}"
    return f"{value:.2f}"


def rows(figures: Figures, size_mib: float, concurrency: int) -> list[Row]:
    ungoverned, governed = figures["ungoverned"], figures["governed"]

    def row(
        name: str, metric: str, unit: str, target: str = "", limit: float | None = None, higher: bool = False
    ) -> Row:
        ratios = round_ratios(governed[name], ungoverned[name])
        return Row(metric, unit, median(ungoverned[name]), median(governed[name]), ratios, target, limit, higher)

    clients = f"{concurrency} clients"
    return [
        row("latency", "sequential call, median of block medians", "ms", f"<= {LATENCY_TARGET:.2f}x", LATENCY_TARGET),
        row("p95", "sequential call, p95", "ms"),
        row("cpu_gateway", "gateway CPU per sequential call", "us"),
        row("throughput", f"throughput, {clients}", "calls/s", f">= {THROUGHPUT_TARGET:.2f}x", THROUGHPUT_TARGET, True),
        row("busy_gateway", f"throughput, {clients}: cores busy in gateway", "cores"),
        row("busy_simulator", f"throughput, {clients}: cores busy in simulator", "cores"),
        row("busy_clients", f"throughput, {clients}: cores busy in client workers", "cores"),
        Row(f"audit decisions committed per second, {clients}", "records/s", None, median(governed["audit_rate"])),
        Row(f"audit commits per 100 decisions, {clients} (group commit)", "commits", None,
            median(governed["commits"])),
        Row(f"audit trail per {SIZE_CALLS:,} calls (decision + result)", "MiB", None, size_mib),
    ]  # fmt: skip


def render(table: Sequence[Row]) -> str:
    header = ["metric", "ungoverned", "governed", "ratio", "ratio range", "target", "result"]
    lines = []
    for row in table:
        ratio = row.ratio
        lines.append(
            [
                f"{row.metric} ({row.unit})",
                number(row.direct, row.unit),
                number(row.gateway, row.unit),
                "-" if ratio is None else ("n/a" if math.isnan(ratio) else f"{ratio:.2f}x"),
                spread(row.round_ratios),
                row.target,
                verdict(row),
            ]
        )
    return markdown_table(header, lines, left=(0, 5, 6))


def preamble(options: Options, directory: Path) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"bench.governance {now}: {os.cpu_count()} CPUs, Python {platform.python_version()}, mcp {version('mcp')}, "
        f"SQLite {sqlite3.sqlite_version}, audit trail on {file_system(directory)} ({directory})\n"
        f"rounds={options.rounds} calls={options.calls} block={options.block} warmup={options.warmup} "
        f"concurrency={options.concurrency} duration={options.duration}s workers={options.workers}; "
        f"call: {SLOT} {TOOL} {ARGUMENTS}, clients: {CLIENT_LABELS[options.client]}, era {MODE}"
    )


async def measure(options: Options, work: Path) -> tuple[list[Row], int, float]:
    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    bench = Bench(options, work)
    size_mib, decisions, other_cores = await bench.run(work, progress)
    return rows(bench.figures, size_mib, options.concurrency), decisions, other_cores


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    with tempfile.TemporaryDirectory(prefix="bench-governance-", dir=options.directory) as temporary:
        work = Path(temporary).resolve()
        print(preamble(options, work), flush=True)
        result = run_interruptible(
            measure(options, work), "bench.governance: interrupted; gateways, simulators and client workers stopped"
        )
    if result is None:
        return 130
    table, decisions, other_cores = result
    print()
    print(render(table))
    print()
    print(f"The trail held {decisions:,} decisions at the end of the run.")
    print(f"Other processes on the machine kept {other_cores:.2f} of {os.cpu_count()} cores busy during the run.")
    misses = [row for row in table if row.verdict in ("MISS", "n/a")]
    for row in misses:
        print(f"TARGET MISSED: {row.metric}: ratio {row.ratio:.2f}x, target {row.target}")
    if not misses:
        print("All targets met.")
    return 0  # a measurement, not a test: a missed target is reported above, not through the exit code


if __name__ == "__main__":
    sys.exit(main())
