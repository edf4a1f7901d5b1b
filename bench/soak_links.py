"""Does the gateway hold its memory, descriptors and threads while its device links come and go?

    python -m bench.soak_links            # 24 rounds, about 3.5 minutes on a 2-core machine
    python -m bench.soak_links --quick    # 3 short rounds (a smoke run)

`bench.soak` covers the HTTP ways in and WebSocket providers; this covers the other device links
over what an appliance lives through in months: boards that reboot, a broker that restarts (an
upgrade of the mosquitto package), a USB cable pulled and plugged back. Processes on free loopback
ports: mosquitto (the Debian package, persistence off), one gateway (`run --mqtt ... --serial
<link>`, built-in defaults otherwise, rate limits off) and four simulators running the same pump
code: pump-1 over WebSocket, pump-2 over MQTT's plain profile, pump-3 over MCP over MQTT and pump-4
on a pseudo-terminal, which the gateway reaches through a symbolic link, as it would a
`/dev/serial/by-id/` name.

Each round: one SDK client per slot and era makes `get_status` calls, all eight at once, and every
call must succeed; then one link event, in turn: both MQTT simulators restart (the boards reboot),
mosquitto restarts on the same port (the gateway and the boards reconnect), or the serial pump is
unplugged and plugged back (its simulator stops, a new one opens a new pseudo-terminal, the link is
pointed at it). The round ends when every slot serves again. After each round the gateway's resident
memory, open file descriptors, threads, connected slots and metric series are read. No target: a
leak shows as growth that goes on through the second half of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from mcp import Client

from bench.mqtt import Broker
from bench.ports import free_port
from bench.processes import (
    PUMP_TOOL,
    Child,
    gateway_env,
    memory_kib,
    open_fds,
    run_interruptible,
    start_simulator,
    wait_healthy,
    wait_idle,
)
from bench.processes import wait_slot_ready as slot_serves
from bench.report import markdown_table
from bench.serial import PTY_LINE

REPO = Path(__file__).resolve().parent.parent
SLOTS = {"websocket": "pump-1", "mqtt plain": "pump-2", "mqtt mcp": "pump-3", "serial": "pump-4"}
MODES = ("legacy", "2026-07-28")
EVENTS = ("boards reboot", "broker restarts", "serial replugged")
BACK_WITHIN_S = 60.0
"""How long a slot may take to serve again after an event (reconnect back-offs included)."""


@dataclass
class Workload:
    rounds: int
    warmup_rounds: int
    calls: int
    """Calls per slot and era in each round."""


FULL = Workload(24, 3, 100)
QUICK = Workload(3, 1, 10)


@dataclass
class Reading:
    rss_mib: float
    fds: int
    threads: int
    slots_connected: int
    series: int


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


class Links:
    """mosquitto, the gateway and the four simulators; the events restart parts of it."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.broker = Broker(work_dir)
        self.serial_link = work_dir / "ttyPUMP4"
        """What the gateway opens: a symbolic link to the serial simulator's pseudo-terminal."""
        self.children: dict[str, Child] = {}

    @property
    def gateway(self) -> Child:
        return self.children["gateway"]

    async def start(self) -> None:
        self.broker.start()
        await self.plug_serial()  # the link exists before the gateway opens it
        run = ["-m", "gateway.cli", "run", "--port", str(self.port), "--mqtt", self.broker.url]
        run += ["--serial", str(self.serial_link)]
        self.children["gateway"] = Child("gateway", run, REPO, env=gateway_env())
        await wait_healthy(f"{self.url}/readyz", self.gateway)
        await self.start_simulator("websocket")
        for path in ("mqtt plain", "mqtt mcp"):
            await self.start_simulator(path)
        await self.all_serve()

    async def start_simulator(self, path: str) -> str:
        first = ["--first", SLOTS[path].removeprefix("pump-")]
        target = {
            "websocket": ["--gateway", self.url],
            "mqtt plain": ["--mqtt", self.broker.url, "--profile", "plain"],
            "mqtt mcp": ["--mqtt", self.broker.url, "--profile", "mcp"],
            "serial": ["--serial-pty"],
        }[path]
        self.children[path], line = await start_simulator(path, [*target, *first], REPO)
        return line

    async def plug_serial(self) -> None:
        """A new serial simulator on a new pseudo-terminal, the link pointed at it."""
        line = await self.start_simulator("serial")
        found = PTY_LINE.search(line)
        if found is None:
            raise RuntimeError(f"the serial simulator printed no pseudo-terminal: {line!r}")
        staged = self.serial_link.with_suffix(".new")
        staged.unlink(missing_ok=True)
        staged.symlink_to(found.group(1))
        staged.replace(self.serial_link)  # atomic: the gateway never finds the link half made

    async def event(self, index: int) -> str:
        name = EVENTS[index % len(EVENTS)]
        if name == "boards reboot":
            for path in ("mqtt plain", "mqtt mcp"):
                self.children[path].stop()
                await self.start_simulator(path)
        elif name == "broker restarts":
            self.broker.stop()
            self.broker.start()
        else:
            self.children["serial"].stop()
            await self.plug_serial()
        await self.all_serve()
        return name

    async def all_serve(self) -> None:
        for slot in SLOTS.values():
            await slot_serves(self.url, slot, timeout_s=BACK_WITHIN_S)

    def stop(self) -> None:
        # The gateway goes first: it closes its end of the pseudo-terminal before its owner goes.
        if "gateway" in self.children:
            self.gateway.stop()
        for name, child in reversed(list(self.children.items())):
            if name != "gateway":
                child.stop()
        self.broker.stop()


async def calls(url: str, mode: str, count: int) -> int:
    """`count` get_status calls by one client; the number that failed."""
    failures = 0
    async with Client(url, mode=mode) as client:
        for _ in range(count):
            result = await client.call_tool(PUMP_TOOL, {})
            failures += bool(result.is_error)
    return failures


async def reading(links: Links) -> Reading:
    pid = links.gateway.pid
    await wait_idle([pid])  # a reconnecting link's last work is not read as held memory
    async with aiohttp.ClientSession() as http, http.get(f"{links.url}/metrics") as r:
        text = await r.text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    connected = sum(1 for line in lines if line.startswith("mcpgw_slot_connected{") and line.endswith(" 1.0"))
    return Reading(memory_kib(pid)["VmRSS"] / 1024, await open_fds(pid), threads_of(pid), connected, len(lines))


def summary(readings: Sequence[Reading], work: Workload, failures: int) -> str:
    middle_round = (work.warmup_rounds + len(readings)) // 2
    picked = (readings[work.warmup_rounds - 1], readings[middle_round - 1], readings[-1])

    def row(name: str, values: list[float], shown: str, growth: str) -> list[str]:
        return [name, *(shown.format(value) for value in values), growth.format(values[2] - values[1])]

    rows = [
        row("resident memory (MiB)", [r.rss_mib for r in picked], "{:.1f}", "{:+.1f}"),
        row("open file descriptors", [r.fds for r in picked], "{}", "{:+d}"),
        row("threads", [r.threads for r in picked], "{}", "{:+d}"),
        row("slots connected", [r.slots_connected for r in picked], "{}", "{:+d}"),
        row("metric series", [r.series for r in picked], "{}", "{:+d}"),
    ]
    rounds = (work.warmup_rounds, middle_round, len(readings))
    header = ["gateway", *(f"after round {n}" for n in rounds), "second half"]
    total = len(readings) * work.calls * len(SLOTS) * len(MODES)
    counts = [sum(1 for n in range(len(readings)) if n % len(EVENTS) == i) for i in range(len(EVENTS))]
    events = ", ".join(f"{name} {count}x" for name, count in zip(EVENTS, counts, strict=True))
    return f"{markdown_table(header, rows)}\n\n{total:,} calls, {failures} failed. Link events: {events}."


async def run(work: Workload) -> tuple[list[Reading], int]:
    readings: list[Reading] = []
    failures = 0
    with tempfile.TemporaryDirectory(prefix="soak-links-") as folder:
        links = Links(Path(folder))
        try:
            await links.start()
            for index in range(work.rounds):
                jobs = [calls(f"{links.url}/{slot}/mcp", mode, work.calls) for slot in SLOTS.values() for mode in MODES]
                failures += sum(await asyncio.gather(*jobs))
                name = await links.event(index)
                readings.append(await reading(links))
                r = readings[-1]
                print(
                    f"  round {index + 1}/{work.rounds} ({name}): RSS {r.rss_mib:.1f} MiB, {r.fds} fds, "
                    f"{r.threads} threads, {r.slots_connected} slots connected, {r.series} metric series",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            links.stop()
    return readings, failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.soak_links", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help=f"rounds (default {FULL.rounds})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.rounds} short rounds")
    args = parser.parse_args(argv)
    work = QUICK if args.quick else FULL
    if args.rounds is not None:
        if args.rounds <= work.warmup_rounds:
            parser.error(f"--rounds must be more than the {work.warmup_rounds} warm-up round(s)")
        work = Workload(args.rounds, work.warmup_rounds, work.calls)
    per_round = work.calls * len(SLOTS) * len(MODES)
    print(
        f"bench.soak_links: {work.rounds} rounds of {per_round:,} calls and one link event each, "
        f"{work.warmup_rounds} to warm up"
    )
    result = run_interruptible(run(work), "bench.soak_links: interrupted; gateway, broker and simulators stopped")
    if result is None:
        return 130
    readings, failures = result
    print()
    print(summary(readings, work, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
