"""What the gateway does per relayed call, counted instead of timed, against the bare relay.

    python -m bench.relay_calls            # 1,000 calls on each relay, under a minute
    python -m bench.relay_calls --quick    # 50 calls (the counts barely move)

Starts the stack of `bench.relay` with the gateway and the bare relay (bench/bare_relay.py) each
under cProfile (bench/profiled.py), switched on only while one SDK client makes sequential
2026-07-28 `tools/call` round trips through that relay, and prints per call: the Python functions
run (a coroutine counts once more each time it resumes), all function calls including built-ins,
and the event-loop turns, each with its ratio to the bare relay. Counts do not drift with the host
as times do; they say how much work the gateway adds to a hop, not what that work costs. With
`--top N` it also lists the gateway's own functions run most often per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.load import SequentialClient
from bench.processes import run_interruptible
from bench.relay import REPO, Stack
from bench.report import markdown_table

MODE = "2026-07-28"
RELAYS = ("bare", "gateway")
OWN_CODE = {"gateway": str(REPO / "gateway") + os.sep, "bare": str(REPO / "bench" / "bare_relay.py")}
"""Where each relay's own code lives: the rest is aiohttp, asyncio and the other libraries."""
LOOP_TURN = "_run_once"  # asyncio's BaseEventLoop._run_once: one pass over the ready callbacks
SIGNAL_WAIT_S = 10.0


@dataclass
class Counts:
    python_calls: float
    all_calls: float
    loop_turns: float
    own_calls: float
    top: list[tuple[float, str]]


def per_call(stats_path: Path, calls: int, own_code: str) -> Counts:
    """Per-call counts from one profile window of `calls` calls."""
    stats = pstats.Stats(str(stats_path)).stats  # type: ignore[attr-defined]
    python = every = turns = own = 0
    top: list[tuple[float, str]] = []
    for (filename, line, function), (_primitive, count, *_rest) in stats.items():
        every += count
        if filename == "~":  # a built-in (len, dict.get, a C method)
            continue
        python += count
        if function == LOOP_TURN and filename.endswith("asyncio/base_events.py"):
            turns += count
        if filename.startswith(own_code):
            own += count
            top.append((count / calls, f"{Path(filename).relative_to(REPO)}:{line} {function}"))
    top.sort(reverse=True)
    return Counts(python / calls, every / calls, turns / calls, own / calls, top)


async def _wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + SIGNAL_WAIT_S
    while not await asyncio.to_thread(path.exists):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {path} did not appear within {SIGNAL_WAIT_S:.0f} s")
        await asyncio.sleep(0.02)


async def count_relay(stack: Stack, relay: str, calls: int, warmup: int) -> Counts:
    assert stack.profile_dir is not None
    out = stack.profile_dir / f"{relay}.prof"
    child = stack.children[relay]
    async with SequentialClient(stack.urls[relay], MODE) as client:
        await client.warm_up(warmup)
        await stack.settle()
        os.kill(child.pid, signal.SIGUSR1)
        await _wait_for(Path(f"{out}.on"), f"the {child.name} did not start counting")
        await client.timed_calls(calls)
        os.kill(child.pid, signal.SIGUSR2)
        await _wait_for(out, f"the {child.name} did not write its counts")
    return per_call(out, calls, OWN_CODE[relay])


async def run(calls: int, warmup: int) -> dict[str, Counts]:
    with tempfile.TemporaryDirectory(prefix="relay-calls-") as folder:
        # Both relays on asyncio's loop: its Python is counted alike for both, and the counts stay
        # comparable with those from before uvloop (under uvloop the loop's ~90 calls run in C).
        stack = Stack(profile_dir=Path(folder), event_loop="asyncio")
        try:
            await stack.start()
            return {relay: await count_relay(stack, relay, calls, warmup) for relay in RELAYS}
        finally:
            stack.stop()


def table(counts: dict[str, Counts]) -> str:
    bare, gateway = counts["bare"], counts["gateway"]
    rows = [
        ("Python functions run (ones defined in Python)", bare.python_calls, gateway.python_calls),
        ("  of which the relay's own code", bare.own_calls, gateway.own_calls),
        ("function calls, built-ins included", bare.all_calls, gateway.all_calls),
        ("event-loop turns", bare.loop_turns, gateway.loop_turns),
    ]
    lines = [
        [f"{MODE}: per sequential call, {name}", f"{b:.1f}", f"{g:.1f}", f"{g / b:.2f}x" if b else "-"]
        for name, b, g in rows
    ]
    return markdown_table(["metric", "bare relay", "gateway", "ratio"], lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.relay_calls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="counted calls on each relay (default 1000)")
    parser.add_argument("--warmup", type=int, default=50, help="uncounted calls before them (default 50)")
    parser.add_argument("--top", type=int, default=0, help="also list the gateway's N most-run functions")
    parser.add_argument("--quick", action="store_true", help="50 calls after 10 warm-up calls")
    args = parser.parse_args(argv)
    calls, warmup = (50, 10) if args.quick else (args.calls, args.warmup)
    if calls < 1 or warmup < 0 or args.top < 0:
        parser.error("--calls must be positive, --warmup and --top not negative")
    print(f"bench.relay_calls: {calls} counted calls per relay after {warmup} warm-up calls", flush=True)
    counts = run_interruptible(
        run(calls, warmup), "bench.relay_calls: interrupted; gateway, bare relay and server stopped"
    )
    if counts is None:
        return 130
    print()
    print(table(counts))
    if args.top:
        print()
        print(f"The gateway's own functions run most often per call (top {args.top}):")
        for count, where in counts["gateway"].top[: args.top]:
            print(f"  {count:5.1f}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
