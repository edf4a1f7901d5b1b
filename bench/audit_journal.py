"""The audit trail's per-record write cost under each journal, side by side on one directory.

    .venv/bin/python -m bench.audit_journal                      # 3 rounds of 300 decisions per journal, in a temp dir
    .venv/bin/python -m bench.audit_journal --dir /var/lib/mcp-gateway --records 500

Each journal writes the same decisions with the trail's own settings (gateway/policy/audit/store.py:
synchronous=FULL, one transaction per decision, as a lone caller's calls commit) to a new file in the
same directory, rotating which goes first each round. WAL is what the gateway uses where the file
system's blocks are 4 KiB or more; TRUNCATE is its rollback journal where they are smaller
(gateway/devices/sqlite_journal.py); DELETE and PERSIST are the other rollback journals, for
comparison. A figure is the median over rounds of the time per committed decision; the ratio is to WAL
measured in the same round.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from bench.report import median
from gateway.policy.audit import store

JOURNALS = ("WAL", "TRUNCATE", "DELETE", "PERSIST")


def one_round(directory: Path, journal: str, records: int) -> float:
    """Seconds per committed decision."""
    path = directory / f"bench-{journal.lower()}.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute(f"PRAGMA journal_mode = {journal}")
        conn.execute("PRAGMA synchronous = FULL")
        store.migrate(conn)
        row = [0, '["alice"]', None, "ws", "pump-1", "/pump-1", "set_speed", "c", '{"speed_rpm": 900}', "allow"]
        row += ['["r1"]', None, None, None, None, None]
        started = time.perf_counter()
        for index in range(records):
            row[0] = index
            conn.execute("BEGIN IMMEDIATE")
            store.insert_decision(conn, row)
            conn.execute("COMMIT")
        return (time.perf_counter() - started) / records
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="measure on this directory's file system (default: a temp dir)")
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        directory = Path(scratch)
        times: dict[str, list[float]] = {journal: [] for journal in JOURNALS}
        ratios: dict[str, list[float]] = {journal: [] for journal in JOURNALS}
        for round_index in range(args.rounds):
            order = JOURNALS[round_index % len(JOURNALS) :] + JOURNALS[: round_index % len(JOURNALS)]
            this_round = {journal: one_round(directory, journal, args.records) for journal in order}
            for journal in JOURNALS:
                times[journal].append(this_round[journal])
                ratios[journal].append(this_round[journal] / this_round["WAL"])
    print(f"{args.records} decisions per journal, {args.rounds} rounds, synchronous=FULL, one commit each")
    print("| journal | ms per decision (median) | ratio to WAL |\n|---|---|---|")
    for journal in JOURNALS:
        print(f"| {journal} | {median(times[journal]) * 1000:.3f} | {median(ratios[journal]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
