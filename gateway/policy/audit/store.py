"""The SQLite file: connection settings, the schema and its migrations, the inserts and the pruning."""

from __future__ import annotations

import logging
import math
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.devices.sqlite_journal import exclusive_first, journal_for, set_journal
from gateway.policy.audit.errors import AuditSchemaError

log = logging.getLogger("gateway.audit")

SCHEMA_VERSION = 1
"""Raised only by a change a gateway of the version before could not use correctly; an addition it can
ignore (ADDITIONS) keeps it, so that gateway still reads and writes the file: a downgrade keeps the trail."""
WAL_LIMIT_BYTES = 4 * 1024 * 1024
"""The WAL file is checkpointed and cut back at this size at most (less for a small max_bytes: wal_limit)."""
PRUNE_TARGET = 0.9
"""Over max_bytes, the oldest records go until the file is at 90% of it: room for a minute of writes."""

# Every table is insert-only: a decision's row is never rewritten when its result arrives (an UPDATE
# would dirty an older page again and log it to the WAL a second time), and a result's key (and that of
# an answer after a cancel, ADDITIONS) is its decision's id, so the join is a rowid lookup and needs no
# index of its own. One index, on time, for the queries' time windows and pruning by age; the filters
# on principal, slot and tool scan that window.
SCHEMA_V1 = (
    """
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after pruning empties the table
        time_ms INTEGER NOT NULL,              -- unix ms
        principal TEXT NOT NULL,               -- JSON array of subject strings, sorted
        client_id TEXT,
        transport TEXT NOT NULL,
        slot TEXT NOT NULL,
        resource TEXT NOT NULL,
        tool TEXT,
        capability TEXT NOT NULL,
        arguments TEXT,                        -- JSON, secret-looking keys masked
        effect TEXT NOT NULL,
        rules TEXT NOT NULL,                   -- JSON array of rule ids
        constraints TEXT,                      -- JSON: constraints applied, values clamped
        reason TEXT,
        confirmed_by TEXT,
        confirmed_ms INTEGER,
        trace_id TEXT
    )
    """,
    "CREATE INDEX decisions_time ON decisions(time_ms)",
    """
    CREATE TABLE results (
        decision_id INTEGER PRIMARY KEY,       -- decisions.id
        time_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        latency_ms REAL NOT NULL,
        error TEXT
    )
    """,
)
MIGRATIONS: tuple[tuple[str, ...], ...] = (SCHEMA_V1,)
"""MIGRATIONS[n] brings a file from user_version n to n + 1."""
# A call the gateway cancelled while it was forwarded (its result is "cancelled") may still be answered
# by the device, its answer crossing the cancel: what it answered is kept beside the result, insert-only.
# An older gateway ignores the table (and its pruning leaves rows of pruned decisions, which the next
# pruning here removes with theirs).
ADDITIONS = {
    "answers_after_cancel": """
    CREATE TABLE answers_after_cancel (
        decision_id INTEGER PRIMARY KEY,       -- decisions.id; its result is "cancelled"
        time_ms INTEGER NOT NULL,
        status TEXT NOT NULL,                  -- ok, tool-error, error
        error TEXT
    )
    """,
}
"""Tables added without a version change, each created by a writer that finds it missing."""
SAME_AS_V1 = 2
"""A user_version that marks schema 1 with its ADDITIONS: read as 1,
and stamped 1 by a writer, so every gateway of schema 1 reads the file."""

DECISION_COLUMNS = (
    "time_ms, principal, client_id, transport, slot, resource, tool, capability, arguments, effect, rules, "
    "constraints, reason, confirmed_by, confirmed_ms, trace_id"
)
INSERT_DECISION = f"INSERT INTO decisions ({DECISION_COLUMNS}) VALUES ({', '.join('?' * 16)})"
# The first result for a decision stands; a repeat (a bug in a caller) cannot rewrite it.
INSERT_RESULT = "INSERT OR IGNORE INTO results (decision_id, time_ms, status, latency_ms, error) VALUES (?, ?, ?, ?, ?)"
INSERT_ANSWER_AFTER_CANCEL = (
    "INSERT OR IGNORE INTO answers_after_cancel (decision_id, time_ms, status, error) VALUES (?, ?, ?, ?)"
)


def create_file(path: Path) -> None:
    """Create an empty file readable by its owner only, or open the one there for writing, so that its
    OSError names the cause (a read-only file system, a permission, a dangling link); SQLite gives
    the -wal and -shm files its mode."""
    flags = os.O_WRONLY if os.path.lexists(path) else os.O_CREAT | os.O_WRONLY
    os.close(os.open(path, flags, 0o600))


def wal_limit(max_bytes: int) -> int:
    """The WAL's bound for a file bounded by `max_bytes`: a quarter of it, at most WAL_LIMIT_BYTES."""
    return min(WAL_LIMIT_BYTES, max_bytes // 4)


def connect(path: Path, lock_timeout_s: float, wal_limit_bytes: int = WAL_LIMIT_BYTES) -> sqlite3.Connection:
    """A writing connection: WAL (a rollback journal on a file system with blocks under 4 KiB, see
    gateway.devices.sqlite_journal), synchronous=FULL, incremental auto-vacuum, the schema up to date.

    Raises sqlite3.Error or OSError when the file cannot be opened or written, AuditSchemaError when
    it belongs to a newer gateway. The caller uses it from one thread at a time (its writer)."""
    create_file(path)
    # mode=rw: never SQLite's read-only fallback, which would create -wal and -shm files that stay
    # read-only once the file is writable again.
    uri = f"{Path(os.path.abspath(path)).as_uri()}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=lock_timeout_s, isolation_level=None, check_same_thread=False)
    # WAL, or a rollback journal where WAL's memory-mapped index could die of SIGBUS on a full disk.
    journal = journal_for(Path(os.path.abspath(path)).parent)
    try:
        exclusive_first(conn, journal)  # before the first read, which auto_vacuum is
        # Must precede the first table of a new file; pruning then hands freed pages back with
        # incremental_vacuum, without VACUUM's rewrite of the whole file.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = set_journal(conn, journal)
        if mode != journal.lower():
            raise sqlite3.OperationalError(f"cannot use the {journal} journal here (journal_mode stays {mode})")
        conn.execute("PRAGMA synchronous = FULL")
        # Checkpointed each `wal_limit_bytes` of pages and cut back to that after: the WAL beside the file
        # stays within a quarter of max_bytes (a single larger transaction grows it while it lasts). The
        # size limit bounds what a rollback journal keeps too; the checkpoint applies to WAL only.
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint = {max(1, wal_limit_bytes // page_size)}")
        conn.execute(f"PRAGMA journal_size_limit = {wal_limit_bytes}")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION, one version per transaction (PRAGMA user_version counts them).

    A new file gets the ADDITIONS with its schema; one written by a gateway without them gets them too,
    each logged."""
    new_file: bool | None = None
    while True:
        conn.execute("BEGIN IMMEDIATE")  # read the version under the write lock: another process may migrate too
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if new_file is None:
                new_file = version == 0
            if version == SAME_AS_V1:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                version = SCHEMA_VERSION
            if version > SCHEMA_VERSION:
                raise AuditSchemaError(
                    f"the audit database has schema version {version}, newer than this gateway's "
                    f"{SCHEMA_VERSION}: use a newer gateway or another [audit] path"
                )
            if version == SCHEMA_VERSION:
                _add_missing_tables(conn, logged=not new_file)
                conn.execute("COMMIT")
                return
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise


def missing_tables(conn: sqlite3.Connection) -> list[str]:
    """The ADDITIONS a file does not have yet."""
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [name for name in ADDITIONS if name not in present]


def _add_missing_tables(conn: sqlite3.Connection, *, logged: bool) -> None:
    """`logged`: the file was written by a gateway without these tables (a new file gets them unannounced)."""
    for name in missing_tables(conn):
        conn.execute(ADDITIONS[name])
        if logged:
            log.info("audit trail: added the %s table to the file (a gateway without it ignores it)", name)


def insert_decision(conn: sqlite3.Connection, row: Sequence[Any]) -> int:
    cursor = conn.execute(INSERT_DECISION, row)
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def insert_results(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    conn.executemany(INSERT_RESULT, rows)


def insert_answers_after_cancel(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    conn.executemany(INSERT_ANSWER_AFTER_CANCEL, rows)


def used_bytes(conn: sqlite3.Connection) -> int:
    """The bytes of the file's pages in use (free pages excluded: they are reused or vacuumed away)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)


@dataclass(frozen=True, slots=True)
class Pruned:
    """One pruning step: decisions `first_id`..`last_id` deleted (`deleted` of them) because of `reason`
    ("age", "size", or "age and size"); `more`: further decisions are due (a step deletes a chunk at most)."""

    deleted: int = 0
    first_id: int = 0
    last_id: int = 0
    reason: str = ""
    more: bool = False


def next_decision_id(conn: sqlite3.Connection) -> int:
    """The id the next decision written to the file gets (AUTOINCREMENT: never one used before)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'decisions'").fetchone()
    return 1 if row is None else int(row[0]) + 1


def prune_cut(
    conn: sqlite3.Connection,
    older_than_ms: int,
    max_bytes: int,
    protected_from: int | None = None,
    within: int | None = None,
) -> tuple[int, str] | None:
    """The highest decision id to delete so that nothing is older than `older_than_ms` and the file
    fits `max_bytes` (with PRUNE_TARGET's headroom), and why ("age", "size", "age and size"); None:
    nothing to delete. Oldest first, by id.

    By age, only the run of oldest decisions that are all older goes: one stamped by a wall clock that
    was behind (a board without a real-time clock, before NTP set it) never takes the ones before it,
    and one stamped recent keeps the ones after it until it is old itself. `protected_from`: decisions
    from this id on are never deleted by age (the size bound still applies). `within`: look at that
    many of the oldest decisions at most (a pruning step deletes fewer)."""
    first, last = conn.execute("SELECT min(id), max(id) FROM decisions").fetchone()
    if first is None:
        return None
    stop = last + 1 if protected_from is None else min(last + 1, protected_from)
    if within is not None:
        stop = min(stop, first + within)
    # By rowid from the oldest, up to the first young one: reads the decisions to delete and one more.
    young = conn.execute(
        "SELECT id FROM decisions NOT INDEXED WHERE id < ? AND time_ms >= ? ORDER BY id LIMIT 1",
        (stop, older_than_ms),
    ).fetchone()
    if young is not None:
        stop = young[0]
    cut: int | None = stop - 1 if stop > first else None
    reason = "age"
    used = used_bytes(conn)
    if used > max_bytes:
        # Ids are contiguous (only the oldest are ever deleted), so last - first + 1 is the row count.
        per_row = used / (last - first + 1)
        by_size = first + math.ceil((used - max_bytes * PRUNE_TARGET) / per_row) - 1
        if cut is None or by_size > cut:
            reason = "size" if cut is None else "age and size"
            cut = by_size
    return None if cut is None else (min(cut, last), reason)


def prune(
    conn: sqlite3.Connection, older_than_ms: int, max_bytes: int, chunk: int, protected_from: int | None = None
) -> Pruned:
    """Delete the oldest records past the age and size bounds (see prune_cut), at most `chunk` decisions
    at a time, then hand the freed pages back to the file system."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = prune_cut(conn, older_than_ms, max_bytes, protected_from, chunk + 1)
        if found is None:
            conn.execute("COMMIT")
            return Pruned()
        cut, reason = found
        first = conn.execute("SELECT min(id) FROM decisions").fetchone()[0]
        more = cut - first + 1 > chunk
        cut = min(cut, first + chunk - 1)
        deleted = conn.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
        conn.execute("DELETE FROM results WHERE decision_id <= ?", (cut,))
        conn.execute("DELETE FROM answers_after_cancel WHERE decision_id <= ?", (cut,))
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    # executescript steps the pragma to its end; execute() would stop after its first page (Python
    # sees no result columns and resets the statement).
    conn.executescript("PRAGMA incremental_vacuum")
    # PASSIVE: never waits for a reader (the CLI); the file shrinks now if none holds the old pages.
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    # An average row size misjudges a window of unequal rows: the next step goes on while the file is over.
    more = more or used_bytes(conn) > max_bytes
    return Pruned(deleted, first, cut, reason, more)
