"""The audit trail's write path: group commit against one commit per decision, measured side by side.

    python -m bench.audit            # 3 rounds of 2,000 decisions per path and writer count
    python -m bench.audit --quick    # smoke run, a few seconds (figures not meaningful)
    python -m bench.audit --dir /var/lib/mcp-gateway   # measure on the file system the trail uses

Two paths write the same records to the same schema (gateway/policy/audit/store.py), each decision
durable (synchronous=FULL) before the writer is answered, each followed by its result:
- "one commit per decision": one thread, one transaction and one fsync per decision (the result in a
  transaction of its own, not synced), what a writer without group commit does;
- "group commit": `AuditTrail` itself, whose thread writes everything queued in one transaction.
With 1 writer (one decision awaited at a time, as one caller's calls) and 32 writers (concurrent
callers) the run times decisions per second and the p50/p99 of each `decision()` await, rotating
which path goes first each round; a figure is the median over rounds, a ratio (group commit ÷ one
commit per decision) the median of the per-round ratios. Then the trail's file size per 10,000
calls (decision and result; closed, so the WAL is checkpointed into it).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.report import markdown_table, median, percentile, round_ratios, spread
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, DecisionRecord, store
from gateway.policy.audit.records import ResultRecord, decision_row, result_row

PATHS = {"single": "one commit per decision", "group": "group commit"}
WRITERS = (1, 32)
SIZE_CALLS = 10_000
WARMUP = 20

Record = Callable[[int], Awaitable[int]]
"""Record decision n durably and queue its result; returns its id."""
Figures = dict[str, dict[str, list[float]]]
"""figures[path][figure] -> one value per round."""


def sample_record(n: int) -> DecisionRecord:
    """A tools/call as the gateway records it: a token caller, one slot, two arguments, one rule."""
    return DecisionRecord(
        principal={"token:agent-1"},
        transport="streamable-http",
        slot="pump-1",
        resource="/site1/line2/pump-1",
        capability="tool.control",
        effect="allow",
        tool="set_speed",
        arguments={"speed_rpm": 1200 + n % 400, "ramp_s": 5},
        rules=("assign[0]",),
        client_id="claude-desktop",
        trace_id=f"{n:032x}",
    )


class SingleCommits:
    """The baseline: each decision its own FULL-synchronous transaction on one thread."""

    def __init__(self, path: Path) -> None:
        self.conn = store.connect(path, lock_timeout_s=5.0)
        self.thread = ThreadPoolExecutor(max_workers=1)
        self.commits = 0

    def _decision(self, n: int) -> int:
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("BEGIN IMMEDIATE")
        decision_id = store.insert_decision(self.conn, decision_row(sample_record(n)))
        self.conn.execute("COMMIT")
        self.commits += 1
        return decision_id

    def _result(self, decision_id: int) -> None:
        self.conn.execute("PRAGMA synchronous = NORMAL")  # a result need not be synced: fair to the baseline
        self.conn.execute("BEGIN IMMEDIATE")
        store.insert_results(self.conn, [result_row(ResultRecord(decision_id, "ok", 1.0))])
        self.conn.execute("COMMIT")
        self.commits += 1

    async def record(self, n: int) -> int:
        loop = asyncio.get_running_loop()
        decision_id = await loop.run_in_executor(self.thread, self._decision, n)
        loop.run_in_executor(self.thread, self._result, decision_id)  # queued, not awaited (as trail.result)
        return decision_id

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.thread, self.conn.close)
        self.thread.shutdown()


class GroupCommits:
    """The audit trail as the gateway uses it."""

    def __init__(self, path: Path) -> None:
        self.trail = AuditTrail.open(AuditConfig(path=str(path)))

    @property
    def commits(self) -> int:
        return self.trail.commits

    async def record(self, n: int) -> int:
        decision_id = await self.trail.decision(sample_record(n))
        self.trail.result(decision_id, "ok", 1.0)
        return decision_id

    async def close(self) -> None:
        await self.trail.close()


async def drive(record: Record, decisions: int, writers: int) -> tuple[float, list[float]]:
    """`decisions` records from `writers` concurrent tasks: (seconds in all, each decision's await in s)."""
    numbers = iter(range(decisions))
    latencies: list[float] = []

    async def writer() -> None:
        for n in numbers:
            started = time.perf_counter()
            await record(n)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    return time.perf_counter() - started, latencies


def remove(file: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{file}{suffix}").unlink(missing_ok=True)


async def one_run(directory: Path, path: str, writers: int, decisions: int, figures: Figures) -> None:
    file = directory / f"{path}-{writers}.db"
    writer: SingleCommits | GroupCommits = SingleCommits(file) if path == "single" else GroupCommits(file)
    if isinstance(writer, GroupCommits):
        await writer.trail.start()
    try:
        await drive(writer.record, WARMUP, writers)
        commits = writer.commits
        seconds, latencies = await drive(writer.record, decisions, writers)
        commits = writer.commits - commits
    finally:
        await writer.close()
    remove(file)
    into = figures[path]
    into[f"rate-{writers}"].append(decisions / seconds)
    into[f"p50-{writers}"].append(percentile(latencies, 0.50) * 1000)
    into[f"p99-{writers}"].append(percentile(latencies, 0.99) * 1000)
    into[f"commits-{writers}"].append(commits / decisions * 100)


async def size_per_calls(directory: Path, calls: int) -> float:
    """The trail's file after `calls` decisions and results, less an empty trail's, scaled to SIZE_CALLS calls
    (MiB). Closed first: the WAL is checkpointed into the file and removed."""
    sizes = []
    for name, count in (("empty.db", 0), ("size.db", calls)):
        file = directory / name
        writer = GroupCommits(file)
        await writer.trail.start()
        await drive(writer.record, count, 32)
        await writer.close()
        sizes.append(os.stat(file).st_size)
        remove(file)
    return (sizes[1] - sizes[0]) * SIZE_CALLS / calls / 2**20


async def run(directory: Path, rounds: int, decisions: int, size_calls: int) -> tuple[Figures, float]:
    figures: Figures = defaultdict(lambda: defaultdict(list))
    order = list(PATHS)
    for number in range(rounds):
        for writers in WRITERS:
            for path in order:
                await one_run(directory, path, writers, decisions, figures)
        order.reverse()  # the other path goes first next round
        print(f"round {number + 1}/{rounds}", file=sys.stderr)
    return figures, await size_per_calls(directory, size_calls)


ROWS = [
    ("rate-1", "decisions/s, 1 writer", "{:,.0f}"),
    ("rate-32", "decisions/s, 32 writers", "{:,.0f}"),
    ("p50-1", "decision() p50, 1 writer (ms)", "{:.2f}"),
    ("p99-1", "decision() p99, 1 writer (ms)", "{:.2f}"),
    ("p50-32", "decision() p50, 32 writers (ms)", "{:.2f}"),
    ("p99-32", "decision() p99, 32 writers (ms)", "{:.2f}"),
    ("commits-32", "commits per 100 decisions, 32 writers", "{:.1f}"),
]


def render(figures: Figures, size_mib: float) -> str:
    header = ["metric", PATHS["single"], PATHS["group"], "ratio", "ratio range"]
    lines = []
    for key, label, fmt in ROWS:
        single, group = figures["single"][key], figures["group"][key]
        ratios = round_ratios(group, single)
        lines.append(
            [label, fmt.format(median(single)), fmt.format(median(group)), f"{median(ratios):.2f}x", spread(ratios)]
        )
    lines.append([f"trail size per {SIZE_CALLS:,} calls (MiB)", "-", f"{size_mib:.2f}", "-", ""])
    return markdown_table(header, lines)


def file_system(directory: Path) -> str:
    """The type of the file system holding `directory` (tmpfs makes fsync free: figures would flatter)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and str(directory).startswith(fields[1]) and len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 200 decisions, size from 1,000 calls")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    parser.add_argument("--decisions", type=int, help="timed decisions per path and writer count (default 2000)")
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where the files go (default: here)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    decisions = args.decisions or (200 if args.quick else 2000)
    size_calls = 1000 if args.quick else SIZE_CALLS
    with tempfile.TemporaryDirectory(prefix="bench-audit-", dir=args.dir) as temporary:
        directory = Path(temporary).resolve()
        figures, size_mib = asyncio.run(run(directory, rounds, decisions, size_calls))
        kind = file_system(directory)
    today = datetime.date.today().isoformat()
    print(
        f"audit trail writes: {rounds} rounds x {decisions} decisions per path and writer count, {today}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} cores, "
        f"files on {kind}"
    )
    print(render(figures, size_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
