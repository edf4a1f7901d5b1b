"""pump-1 through the gateway over MQTT (each profile) against the same pump over WebSocket, in one run.

    python -m bench.mqtt            # 5 rounds of 400 calls per path and era, well under a minute
    python -m bench.mqtt --quick    # smoke run, a few seconds (figures not meaningful)

Processes on free loopback ports: mosquitto (the Debian package, persistence off), the gateway
(`python -m gateway.cli run --mqtt mqtt://127.0.0.1:<port>`), and three simulators running the same
pump code: pump-1 over WebSocket (`sim --gateway`), pump-2 over the plain profile (`sim --mqtt
--profile plain`, MQTT 3.1.1) and pump-3 over MCP over MQTT (`sim --mqtt --profile mcp`, MQTT 5). The
benchmark holds one SDK client per path. The call is `get_status` (no side effects), timed from
`call_tool` to its parsed result; an MQTT call crosses the broker twice (request and answer) where
the WebSocket call goes straight to the pump. Rounds rotate which path goes first; each figure is
the median over rounds, each ratio path ÷ WebSocket the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from mcp import Client

from bench.processes import UNLIMITED_RATE_ENV, Child, cpu_seconds, free_port
from bench.report import median, percentile, ratio

REPO = Path(__file__).resolve().parent.parent
PATHS = {"websocket": "pump-1", "mqtt plain": "pump-2", "mqtt mcp": "pump-3"}
SIM_ARGS = {
    "websocket": ["--first", "1"],
    "mqtt plain": ["--first", "2", "--profile", "plain"],
    "mqtt mcp": ["--first", "3", "--profile", "mcp"],
}
MODES = ("legacy", "2026-07-28")
MODE_LABELS = {"legacy": "session era", "2026-07-28": "2026-07-28"}
TOOL = "get_status"


@dataclass
class Options:
    rounds: int
    calls: int
    warmup: int
    modes: Sequence[str]


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.mqtt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds, each path once per era (default 5; quick 1)")
    parser.add_argument("--calls", type=int, help="timed calls per round, path and era (default 400; quick 20)")
    parser.add_argument("--warmup", type=int, help="untimed calls before each timed run (default 30; quick 3)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"protocol eras, comma-separated (default {MODES})")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 20 calls")
    args = parser.parse_args(argv)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes takes {', '.join(MODES)}")
    return Options(
        rounds=args.rounds or (1 if args.quick else 5),
        calls=args.calls or (20 if args.quick else 400),
        warmup=args.warmup or (3 if args.quick else 30),
        modes=modes,
    )


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or next(
        (path for path in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(path, os.X_OK)), None
    )
    if found is None:
        raise SystemExit("bench.mqtt: mosquitto is not installed (scripts/bootstrap test installs it)")
    return found


class Stack:
    """mosquitto, the gateway and one simulator per path, each its own process."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.broker_port = free_port()
        self.broker_url = f"mqtt://127.0.0.1:{self.broker_port}"
        self.broker: subprocess.Popen[bytes] | None = None
        self.children: dict[str, Child] = {}

    async def start(self) -> None:
        config = self.work / "mosquitto.conf"
        lines = [f"listener {self.broker_port} 127.0.0.1", "allow_anonymous true", "persistence false"]
        lines.append("set_tcp_nodelay true")
        if os.geteuid() == 0:
            lines.append("user root")
        config.write_text("\n".join(lines) + "\n")
        with (self.work / "mosquitto.log").open("wb") as log:
            self.broker = subprocess.Popen(  # noqa: ASYNC220 (starting it does not block)
                [mosquitto_binary(), "-c", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_GATEWAY_")}
        env.update(UNLIMITED_RATE_ENV)
        run = ["-m", "gateway.cli", "run", "--port", str(self.port), "--mqtt", self.broker_url]
        self.children["gateway"] = Child("gateway", run, REPO, env=env)
        await self._wait_healthy()
        for path, extra in SIM_ARGS.items():
            target = ["--gateway", self.url] if path == "websocket" else ["--mqtt", self.broker_url]
            args = ["-m", "gateway.cli", "sim", *target, "--pumps", "1", *extra, "--control-port", "0"]
            child = Child(path, [*args, "--log-level", "warning"], REPO)
            self.children[path] = child
            line = await asyncio.to_thread(child.read_line, 30.0)
            if not line.startswith("simulator:"):
                raise RuntimeError(f"the {path} simulator did not start:\n{child.output()[-3000:]}")
        for slot in PATHS.values():
            await self._wait_slot_ready(slot)

    async def _wait_healthy(self) -> None:
        gateway = self.children["gateway"]
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline and gateway.alive():
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/readyz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"the gateway did not come up:\n{gateway.output()[-3000:]}")

    async def _wait_slot_ready(self, slot: str) -> None:
        deadline = time.monotonic() + 30
        last_error = ""
        while time.monotonic() < deadline:
            try:
                async with Client(f"{self.url}/{slot}/mcp", mode="legacy") as client:
                    if any(tool.name == TOOL for tool in (await client.list_tools()).tools):
                        return
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{slot} never became ready through the gateway: {last_error}")

    def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            child.stop()
        if self.broker is not None and self.broker.poll() is None:
            self.broker.terminate()
            try:
                self.broker.wait(5)
            except subprocess.TimeoutExpired:
                self.broker.kill()
                self.broker.wait()


# figures[mode][path][name] -> one value per round
Figures = dict[str, dict[str, dict[str, list[float]]]]


async def call(client: Client) -> None:
    result = await client.call_tool(TOOL, {})
    structured = result.structured_content
    if result.is_error or not isinstance(structured, dict) or "state" not in structured:
        raise RuntimeError(f"unexpected answer to {TOOL}: {result!r}"[:300])


async def timed_round(stack: Stack, options: Options, mode: str, path: str, figures: Figures) -> None:
    async with Client(f"{stack.url}/{PATHS[path]}/mcp", mode=mode) as client:
        for _ in range(options.warmup):
            await call(client)
        latencies: list[float] = []
        gateway = stack.children["gateway"].pid
        before = cpu_seconds(gateway)
        for _ in range(options.calls):
            started = time.perf_counter()
            await call(client)
            latencies.append(time.perf_counter() - started)
        after = cpu_seconds(gateway)
    into = figures[mode][path]
    into["median"].append(median(latencies) * 1000)
    into["p95"].append(percentile(latencies, 0.95) * 1000)
    into["cpu_gateway"].append((after - before) / options.calls * 1e6)


ROWS = (
    ("median", "sequential get_status, median", "ms"),
    ("p95", "sequential get_status, p95", "ms"),
    ("cpu_gateway", "CPU per call, gateway", "us"),
)


def render(figures: Figures, modes: Sequence[str]) -> str:
    paths = list(PATHS)
    header = ["metric", *paths, "ratio plain/ws", "ratio mcp/ws", "ranges"]
    lines: list[list[str]] = []
    for mode in modes:
        for key, label, unit in ROWS:
            values = {path: figures[mode][path][key] for path in paths}
            fmt = "{:.2f}" if unit == "ms" else "{:,.0f}"
            cells = [f"{MODE_LABELS[mode]}: {label} ({unit})", *(fmt.format(median(values[p])) for p in paths)]
            spreads = []
            for path in paths[1:]:
                per_round = [ratio(value, base) for value, base in zip(values[path], values[paths[0]], strict=True)]
                cells.append(f"{median(per_round):.2f}x")
                spreads.append(f"{min(per_round):.2f}-{max(per_round):.2f}" if len(per_round) > 1 else "")
            cells.append(" / ".join(spreads).strip(" /"))
            lines.append(cells)
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) for i in range(len(header))]

    def row(cells: Sequence[str]) -> str:
        return (
            "| " + " | ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)) + " |"
        )

    separator = (
        "|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([row(header), separator, *(row(line) for line in lines)])


async def run(options: Options) -> Figures:
    figures: Figures = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    paths = list(PATHS)
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            await stack.start()
            for index in range(options.rounds):
                order = paths[index % len(paths) :] + paths[: index % len(paths)]
                for mode in options.modes:
                    for path in order:
                        await timed_round(stack, options, mode, path, figures)
                print(f"round {index + 1}/{options.rounds} done", file=sys.stderr, flush=True)
        finally:
            stack.stop()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    figures = asyncio.run(run(options))
    today = datetime.date.today().isoformat()
    print(
        f"pump-1 over MQTT vs WebSocket: {options.rounds} rounds x {options.calls} calls of {TOOL} per path and era, "
        f"{today}, Python {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(render(figures, options.modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
