"""Two trees of the gateway side by side in one run: did a change make a relayed call faster?

    python -m bench.relay_ab HEAD~3              # that revision against the working tree, a few minutes
    python -m bench.relay_ab 507f0b1 1bd7671     # two revisions
    python -m bench.relay_ab /path/to/tree       # a checked-out tree against the working tree
    python -m bench.relay_ab HEAD --quick        # a smoke run of a few seconds (figures not meaningful)

On a shared host one `bench.relay` run moves by several hundredths against the next, which hides any
change smaller than that. Here each tree runs its own gateway and its own SDK server (publishing with
that tree's `gateway.publish`), and one SDK client per path makes sequential 2026-07-28 calls in
short blocks that take turns in a cycle, none after itself (the method of `bench.relay`; the cycle
starts one path later each round, so each path takes every seat), on four paths: each tree's server
on its own Streamable HTTP (the SDK's code, the same in both trees) and through that tree's gateway.
Both trees see the same drift, so their difference survives it. Prints each tree's gateway path
against its own direct path, the candidate's gateway path against the baseline's round by round (and
in how many rounds it was faster), and the CPU per call of each tree's gateway and server. A revision
is checked out into a temporary git worktree that is removed afterwards. Exit code 0 whatever the
outcome: it is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.load import SequentialClient
from bench.ports import free_port
from bench.processes import Child, cpu_seconds, gateway_env, run_interruptible, wait_healthy, wait_idle, wait_slot_ready
from bench.relay import REPO, REWARM_CALLS, SLOT, SequentialOptions, block_plan
from bench.report import markdown_table, median

MODE = "2026-07-28"
TREES = ("baseline", "candidate")
DIRECT = {tree: f"{tree} direct" for tree in TREES}
PATHS = (DIRECT["baseline"], "baseline", DIRECT["candidate"], "candidate")
"""Each tree's SDK server on its own Streamable HTTP, and through that tree's gateway. A direct path
per tree keeps the two alike: with one direct path, the server behind it would run twice as often
as the other and stay warmer (tried: a tree against itself then came out 3% faster in that seat)."""


@dataclass
class TreeStack:
    """One tree's gateway and SDK server, each its own process run from that tree."""

    tree: Path
    env: dict[str, str] = field(default_factory=dict)
    """Settings of this stack's gateway on top of the built-in defaults (MCP_GATEWAY_* variables)."""
    gateway_port: int = field(default_factory=free_port)
    server_port: int = field(default_factory=free_port)
    children: list[Child] = field(default_factory=list)

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    async def start(self) -> None:
        # `python -m` from the tree: its own gateway package comes first on sys.path.
        run = ["-m", "gateway.cli", "run", "--port", str(self.gateway_port)]
        gateway = Child(f"gateway ({self.tree})", run, self.tree, env={**gateway_env(), **self.env})
        self.children.append(gateway)
        await wait_healthy(f"{self.gateway_url}/healthz", gateway)
        serve = ["-m", "bench.relay_server", "--port", str(self.server_port), "--gateway", self.gateway_url]
        server = Child(f"SDK server ({self.tree})", [*serve, "--slot", SLOT], self.tree)
        self.children.append(server)
        if await asyncio.to_thread(server.read_line, 30.0) != "ready":
            raise RuntimeError(f"the SDK server of {self.tree} did not start:\n{server.output()[-3000:]}")
        await wait_slot_ready(self.gateway_url, SLOT, "add")

    def cpu(self) -> tuple[float, float]:
        """(gateway, server) CPU seconds so far."""
        return cpu_seconds(self.children[0].pid), cpu_seconds(self.children[1].pid)

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()


@contextlib.contextmanager
def checked_out(spec: str) -> Iterator[Path]:
    """A directory holding the tree `spec` names: itself when it is one, else a temporary git
    worktree of that revision, removed on the way out."""
    path = Path(spec)
    if path.is_dir():
        yield path.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="relay-ab-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), spec], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def round_plan(round_index: int, calls: int, block: int) -> list[tuple[str, int]]:
    """The blocks of round `round_index`: the cycle of PATHS rotated by one path a round, so every
    path takes every seat in turn and no block follows one of its own path, within a round or across
    its boundary (the previous round ends on the path before this round's first)."""
    first = round_index % len(PATHS)
    return block_plan((*PATHS[first:], *PATHS[:first]), calls, block)


def run_plan(rounds: int, calls: int, block: int) -> list[tuple[str, int]]:
    """Every block of a run, in order."""
    return [step for round_index in range(rounds) for step in round_plan(round_index, calls, block)]


@dataclass
class Results:
    medians: dict[str, list[float]] = field(default_factory=lambda: {path: [] for path in PATHS})
    """Per path, the median of each round (seconds)."""
    cpu: dict[str, list[float]] = field(default_factory=lambda: {tree: [0.0, 0.0] for tree in TREES})
    """Per tree, (gateway, server) CPU seconds over its path's calls."""
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TREES, 0))


async def measure(stacks: dict[str, TreeStack], options: SequentialOptions, progress: bool) -> Results:
    urls = {tree: f"{stacks[tree].gateway_url}/{SLOT}/mcp" for tree in TREES}
    urls |= {DIRECT[tree]: f"http://127.0.0.1:{stacks[tree].server_port}/mcp" for tree in TREES}
    results = Results()
    pids = [child.pid for stack in stacks.values() for child in stack.children]
    async with contextlib.AsyncExitStack() as exits:
        clients = {path: await exits.enter_async_context(SequentialClient(urls[path], MODE)) for path in PATHS}
        for client in clients.values():
            await client.warm_up(options.warmup)
        await wait_idle(pids)
        for round_index in range(options.rounds):
            latencies: dict[str, list[float]] = {path: [] for path in PATHS}
            plan = round_plan(round_index, options.calls, options.block)
            for path, count in plan:
                before = stacks[path].cpu() if path in TREES else None
                timed = await clients[path].timed_calls(REWARM_CALLS + count)
                latencies[path].extend(timed[REWARM_CALLS:])
                if before is not None:
                    after = stacks[path].cpu()
                    for index in (0, 1):
                        results.cpu[path][index] += after[index] - before[index]
                    results.calls[path] += len(timed)
            for path in PATHS:
                results.medians[path].append(median(latencies[path]))
            if progress:
                last = {path: values[-1] for path, values in results.medians.items()}
                shown = "  ".join(f"{tree} {last[tree] / last[DIRECT[tree]]:.3f}x" for tree in TREES)
                direct = last[DIRECT["candidate"]] * 1e3
                print(f"  round {round_index + 1}/{options.rounds}: direct {direct:.2f} ms  {shown}", flush=True)
    return results


def report(results: Results, names: dict[str, str]) -> str:
    rows: list[list[str]] = []
    for tree in TREES:
        direct = results.medians[DIRECT[tree]]
        ratios = [value / base for value, base in zip(results.medians[tree], direct, strict=True)]
        gateway_cpu, server_cpu = (seconds / max(results.calls[tree], 1) * 1e6 for seconds in results.cpu[tree])
        rows.append(
            [
                f"{tree}: {names[tree]}",
                f"{median(results.medians[tree]) * 1e3:.2f}",
                f"{median(ratios):.3f}x",
                f"{min(ratios):.2f}-{max(ratios):.2f}",
                f"{gateway_cpu:,.0f}",
                f"{server_cpu:,.0f}",
            ]
        )
    header = ["through the gateway of", "median (ms)", "vs its direct", "round range"]
    header += ["gateway CPU/call (us)", "server CPU/call (us)"]
    pairs = [c / b for c, b in zip(results.medians["candidate"], results.medians["baseline"], strict=True)]
    faster = sum(1 for value in pairs if value < 1)
    directs = " and ".join(f"{median(results.medians[DIRECT[tree]]) * 1e3:.2f}" for tree in TREES)
    summary = (
        f"direct medians {directs} ms. Candidate against baseline, round by round: median "
        f"{median(pairs):.3f}x ({min(pairs):.2f}-{max(pairs):.2f}); the candidate was faster in {faster} of "
        f"{len(pairs)} rounds."
    )
    return markdown_table(header, rows) + "\n\n" + summary


def parse_options(argv: Sequence[str] | None) -> tuple[argparse.Namespace, SequentialOptions]:
    parser = argparse.ArgumentParser(prog="bench.relay_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="a git revision or a directory holding a tree")
    parser.add_argument("candidate", nargs="?", default=str(REPO), help="the same (default: the working tree)")
    parser.add_argument("--rounds", type=int, help="rounds (default 30; quick 1)")
    parser.add_argument("--calls", type=int, help="timed calls per path and round (default 200; quick 10)")
    parser.add_argument("--block", type=int, help="timed calls per path before the paths swap (default 25; quick 5)")
    parser.add_argument("--warmup", type=int, help="untimed calls per path first (default 50; quick 5)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    quick = args.quick
    options = SequentialOptions(
        rounds=args.rounds if args.rounds is not None else (1 if quick else 30),
        calls=args.calls if args.calls is not None else (10 if quick else 200),
        block=args.block if args.block is not None else (5 if quick else 25),
        warmup=args.warmup if args.warmup is not None else (5 if quick else 50),
    )
    if min(options.rounds, options.calls, options.block) < 1 or options.warmup < 0:
        parser.error("--rounds, --calls and --block must be positive, --warmup not negative")
    return args, options


async def run(specs: dict[str, str], options: SequentialOptions) -> str:
    with contextlib.ExitStack() as trees:
        stacks = {tree: TreeStack(trees.enter_context(checked_out(specs[tree]))) for tree in TREES}
        try:
            for stack in stacks.values():
                await stack.start()
            results = await measure(stacks, options, progress=True)
        finally:
            for stack in stacks.values():
                stack.stop()
    return report(results, specs)


def main(argv: Sequence[str] | None = None) -> int:
    args, options = parse_options(argv)
    specs = {"baseline": args.baseline, "candidate": args.candidate}
    print(
        f"bench.relay_ab: {options.rounds} rounds x {options.calls} sequential {MODE} calls per path "
        f"(blocks of {options.block}); baseline {specs['baseline']}, candidate {specs['candidate']}",
        flush=True,
    )
    table = run_interruptible(run(specs, options), "bench.relay_ab: interrupted; gateways, servers and worktrees gone")
    if table is None:
        return 130
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
