"""Reconnect storm: N boards dialling a gateway at once, then all leaving at once.

    python -m bench.storm                       # 10, 100, 300 and 1,000 boards, a fresh gateway for each
    python -m bench.storm --boards 50 --quick   # one small run

What a plant sees when the gateway restarts: every board reconnects within the same second. For each
size, a gateway process on its defaults (but for the caps per peer address, see `storm_env`), and
one process holding N raw WebSocket boards (bench/devices.py: a register frame with a hello and
`_all`, and pump-1's own five tools as the reference board lists them) that dial all at once. It
prints how long until a client of `_all` lists every board's tools, the slowest `/healthz` answer
meanwhile (polled every 10 ms by a process of its own, bench/health_probe.py), the gateway's CPU,
the same three for all of them leaving at once, the gateway's resident memory per connected board
(after a warm-up board came and went: what the first board of any size warms up is printed apart),
and the tracebacks the gateway logged. See docs/performance.md ("A reconnect storm").
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench import health_probe
from bench.devices import PUMP1_TOOLS, Devices
from bench.ports import free_port
from bench.processes import Child, cpu_seconds, gateway_env, memory_kib, run_interruptible, wait_healthy, wait_idle

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Storm:
    boards: int
    serve_s: float = 0.0
    serve_health_ms: float | None = None
    """None: no /healthz poll was answered in the window (printed n/a)."""
    serve_cpu_s: float = 0.0
    leave_s: float = 0.0
    leave_health_ms: float | None = None
    leave_cpu_s: float = 0.0
    rss_per_board_kib: float = 0.0
    first_board_kib: float = 0.0
    """What the gateway kept after one board came and went before the storm: code and caches that
    the first board of any size warms up, left out of the figure per board."""
    tracebacks: int = 0
    health_failures: int = 0
    notes: list[str] = field(default_factory=list)


LIST_ALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/list",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench-storm", "version": "1"},
        }
    },
}
LIST_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/list",
}


async def tools_in_all(http: aiohttp.ClientSession, url: str) -> int:
    """How many tools a client of `_all` lists now (one stateless-era request)."""
    async with http.post(f"{url}/_all/mcp", json=LIST_ALL, headers=LIST_HEADERS) as response:
        answer = await response.json(content_type=None)
    return len(answer["result"]["tools"])


async def wait_for_all(url: str, done: Callable[[int], bool], timeout_s: float) -> bool:
    """Ask `_all` every 100 ms until `done(tools listed)`; False at the timeout. (Not /metrics: with a
    thousand slots its exposition is itself a load worth measuring apart.)"""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while not done(await tools_in_all(http, url)):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
    return True


def storm_env(settings: dict[str, str] | None = None) -> dict[str, str]:
    """Built-in defaults, except the caps per peer address: every simulated board dials from
    127.0.0.1, where a plant's boards each have an address of their own. `settings`: more
    MCP_GATEWAY_* variables (--set)."""
    env = gateway_env()
    env["MCP_GATEWAY_LIMITS__MAX_SLOTS_PER_PEER"] = "0"
    env.update(settings or {})
    return env


PROBE_READY_S = 30.0
"""Longest wait for the /healthz probe's first poll (its imports, on a loaded machine)."""


async def start_probe(url: str, samples: Path, ready_s: float = PROBE_READY_S) -> Child:
    """The /healthz probe writing to `samples`, once it printed that its first poll is in the file;
    RuntimeError with its log if it does not within `ready_s`."""
    probe = Child("health probe", ["-m", "bench.health_probe", url, str(samples)], REPO)
    try:
        line = await asyncio.to_thread(probe.read_line, ready_s)
        if line != health_probe.READY:
            raise RuntimeError(f"the /healthz probe was not ready within {ready_s:g} s:\n{probe.output()[-3000:]}")
    except BaseException:
        probe.stop()
        raise
    return probe


async def one_storm(boards: int, timeout_s: float, settings: dict[str, str] | None = None) -> Storm:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = Child(
        "gateway",
        ["-m", "gateway.cli", "run", "--port", str(port), "--log-level", "warning"],
        REPO,
        storm_env(settings),
    )
    result = Storm(boards)
    try:
        await wait_healthy(f"{url}/readyz", gateway)
        await wait_idle([gateway.pid])
        cold_rss = memory_kib(gateway.pid)["VmRSS"]
        await warm_up(url, timeout_s)
        await wait_idle([gateway.pid])
        idle_rss = memory_kib(gateway.pid)["VmRSS"]
        result.first_board_kib = idle_rss - cold_rss
        with tempfile.TemporaryDirectory(prefix="storm-") as directory:
            samples = Path(directory) / "healthz.txt"
            probe = await start_probe(url, samples)
            try:
                devices = Devices(url, boards, prefix="board", register=True, tools=PUMP1_TOOLS)
                cpu = cpu_seconds(gateway.pid)
                window = time.monotonic()
                started = time.perf_counter()
                await devices.start()
                # Served: the gateway listed every board's tools, and a client of `_all` lists them all.
                await devices.wait_listed(timeout_s)
                expected = boards * len(PUMP1_TOOLS)
                if not await wait_for_all(url, lambda tools: tools >= expected, timeout_s):
                    result.notes.append(f"not every board was served within {timeout_s:g} s")
                result.serve_s = time.perf_counter() - started
                result.serve_cpu_s = cpu_seconds(gateway.pid) - cpu
                slowest_s, failures = health_probe.slowest(str(samples), window, time.monotonic())
                result.serve_health_ms = None if slowest_s is None else slowest_s * 1000
                await wait_idle([gateway.pid])
                result.rss_per_board_kib = (memory_kib(gateway.pid)["VmRSS"] - idle_rss) / boards
                cpu = cpu_seconds(gateway.pid)
                window = time.monotonic()
                started = time.perf_counter()
                await devices.stop()
                if not await wait_for_all(url, lambda tools: tools == 0, timeout_s):
                    result.notes.append(f"boards still attached after {timeout_s:g} s")
                result.leave_s = time.perf_counter() - started
                result.leave_cpu_s = cpu_seconds(gateway.pid) - cpu
                slowest_s, more_failures = health_probe.slowest(str(samples), window, time.monotonic())
                result.leave_health_ms = None if slowest_s is None else slowest_s * 1000
                result.health_failures = failures + more_failures
            finally:
                probe.stop()
    finally:
        log = gateway.output()
        gateway.stop()
    result.tracebacks = log.count("Traceback")
    return result


async def warm_up(url: str, timeout_s: float) -> None:
    """One board that connects, is listed and leaves: the first use of every path a board takes."""
    board = Devices(url, 1, prefix="warm-up", register=True, tools=PUMP1_TOOLS)
    await board.start()
    await board.wait_listed(timeout_s)
    await board.stop()
    if not await wait_for_all(url, lambda tools: tools == 0, timeout_s):
        raise RuntimeError("the warm-up board did not leave")


def raise_fd_limit() -> None:
    """This process holds one socket per board: lift its own descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def milliseconds(value_ms: float | None) -> str:
    """A slowest /healthz figure, or n/a when no poll was answered in its window."""
    return "n/a" if value_ms is None else f"{value_ms:.0f}"


def render(results: list[Storm]) -> str:
    rows = [
        (
            "boards",
            "all served (s)",
            "slowest /healthz (ms)",
            "gateway CPU (s)",
            "all gone (s)",
            "slowest /healthz (ms)",
            "gateway CPU (s)",
            "RSS per board (KiB)",
            "tracebacks",
        )
    ]
    for storm in results:
        rows.append(
            (
                f"{storm.boards:,}",
                f"{storm.serve_s:.2f}",
                milliseconds(storm.serve_health_ms),
                f"{storm.serve_cpu_s:.2f}",
                f"{storm.leave_s:.2f}",
                milliseconds(storm.leave_health_ms),
                f"{storm.leave_cpu_s:.2f}",
                f"{storm.rss_per_board_kib:.0f}",
                str(storm.tracebacks),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) + " |" for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (width + 1) + ":" for width in widths) + "|")
    return "\n".join(lines)


async def main(sizes: list[int], timeout_s: float, settings: dict[str, str] | None = None) -> list[Storm]:
    raise_fd_limit()
    results = []
    for boards in sizes:
        storm = await one_storm(boards, timeout_s, settings)
        print(f"  {boards} boards: served in {storm.serve_s:.2f} s, gone in {storm.leave_s:.2f} s", flush=True)
        results.append(storm)
    return results


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__.split("\n")[0])
    parser.add_argument("--boards", default="10,100,300,1000", help="comma-separated sizes (default 10,100,300,1000)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="longest wait for a storm to settle")
    parser.add_argument("--quick", action="store_true", help="the first size only")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MCP_GATEWAY_KEY=VALUE",
        help="a gateway setting for every run, e.g. MCP_GATEWAY_PROVIDERS__UPGRADES_PER_TURN=8 (repeatable)",
    )
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    if any(not key.startswith("MCP_GATEWAY_") for key in settings):
        parser.error("--set takes MCP_GATEWAY_<SECTION>__<KEY>=VALUE")
    sizes = [int(size) for size in args.boards.split(",") if size.strip()]
    if args.quick:
        sizes = sizes[:1]
    extra = f", settings {settings}" if settings else ""
    print(f"bench.storm {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: boards {sizes}{extra}", flush=True)
    results = run_interruptible(main(sizes, args.timeout_s, settings), "bench.storm interrupted")
    if results is None:
        return 130
    print()
    print(render(results))
    print()
    first = ", ".join(f"{storm.first_board_kib:.0f}" for storm in results)
    print(f"RSS the first board leaves behind (a warm-up board before each storm, not counted per board): {first} KiB")
    for storm in results:
        for note in storm.notes:
            print(f"{storm.boards} boards: {note}")
        if storm.health_failures:
            print(f"{storm.boards} boards: /healthz failed {storm.health_failures} time(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
