"""The SQLite file: connection settings, the schema and its migrations, the inserts and the pruning."""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.policy.audit.errors import AuditSchemaError

SCHEMA_VERSION = 1
WAL_LIMIT_BYTES = 4 * 1024 * 1024
"""The WAL file is cut back to this after a checkpoint (SQLite checkpoints every 1,000 pages, ~4 MiB)."""
PRUNE_TARGET = 0.9
"""Over max_bytes, the oldest records go until the file is at 90% of it: room for a minute of writes."""

# Two tables, both insert-only: a decision's row is never rewritten when its result arrives (an UPDATE
# would dirty an older page again and log it to the WAL a second time), and a result's key is its
# decision's id, so the join is a rowid lookup and needs no index of its own. One index, on time, for
# the queries' time windows and pruning by age; the filters on principal, slot and tool scan that window.
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

DECISION_COLUMNS = (
    "time_ms, principal, client_id, transport, slot, resource, tool, capability, arguments, effect, rules, "
    "constraints, reason, confirmed_by, confirmed_ms, trace_id"
)
INSERT_DECISION = f"INSERT INTO decisions ({DECISION_COLUMNS}) VALUES ({', '.join('?' * 16)})"
# The first result for a decision stands; a repeat (a bug in a caller) cannot rewrite it.
INSERT_RESULT = "INSERT OR IGNORE INTO results (decision_id, time_ms, status, latency_ms, error) VALUES (?, ?, ?, ?, ?)"


def create_file(path: Path) -> None:
    """Create an empty file readable by its owner only, or open the one there for writing, so that its
    OSError names the cause (a read-only file system, a permission, a dangling link); SQLite gives
    the -wal and -shm files its mode."""
    flags = os.O_WRONLY if os.path.lexists(path) else os.O_CREAT | os.O_WRONLY
    os.close(os.open(path, flags, 0o600))


def connect(path: Path, lock_timeout_s: float) -> sqlite3.Connection:
    """A writing connection: WAL, synchronous=FULL, incremental auto-vacuum, the schema up to date.

    Raises sqlite3.Error or OSError when the file cannot be opened or written, AuditSchemaError when
    it belongs to a newer gateway. The caller uses it from one thread at a time (its writer)."""
    create_file(path)
    # mode=rw: never SQLite's read-only fallback, which would create -wal and -shm files that stay
    # read-only once the file is writable again.
    uri = f"{Path(os.path.abspath(path)).as_uri()}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=lock_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        # Must precede the first table of a new file; pruning then hands freed pages back with
        # incremental_vacuum, without VACUUM's rewrite of the whole file.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot use the WAL journal here (journal_mode stays {mode})")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION, one version per transaction (PRAGMA user_version counts them)."""
    while True:
        conn.execute("BEGIN IMMEDIATE")  # read the version under the write lock: another process may migrate too
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise AuditSchemaError(
                    f"the audit database has schema version {version}, newer than this gateway's "
                    f"{SCHEMA_VERSION}: use a newer gateway or another [audit] path"
                )
            if version == SCHEMA_VERSION:
                conn.execute("COMMIT")
                return
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise


def insert_decision(conn: sqlite3.Connection, row: Sequence[Any]) -> int:
    cursor = conn.execute(INSERT_DECISION, row)
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def insert_results(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    conn.executemany(INSERT_RESULT, rows)


def used_bytes(conn: sqlite3.Connection) -> int:
    """The bytes of the file's pages in use (free pages excluded: they are reused or vacuumed away)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)


def prune_cut(conn: sqlite3.Connection, older_than_ms: int, max_bytes: int) -> int | None:
    """The highest decision id to delete so that nothing is older than `older_than_ms` and the file
    fits `max_bytes` (with PRUNE_TARGET's headroom); None: nothing to delete. Oldest first, by id."""
    first, last = conn.execute("SELECT min(id), max(id) FROM decisions").fetchone()
    if first is None:
        return None
    cut: int | None = conn.execute("SELECT max(id) FROM decisions WHERE time_ms < ?", (older_than_ms,)).fetchone()[0]
    used = used_bytes(conn)
    if used > max_bytes:
        # Ids are contiguous (only the oldest are ever deleted), so last - first + 1 is the row count.
        per_row = used / (last - first + 1)
        by_size = first + math.ceil((used - max_bytes * PRUNE_TARGET) / per_row) - 1
        cut = by_size if cut is None else max(cut, by_size)
    return cut


def prune(conn: sqlite3.Connection, older_than_ms: int, max_bytes: int, chunk: int) -> tuple[int, bool]:
    """Delete the oldest records past the age and size bounds, at most `chunk` decisions at a time,
    then hand the freed pages back to the file system. (decisions deleted, whether more are due)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        cut = prune_cut(conn, older_than_ms, max_bytes)
        if cut is None:
            conn.execute("COMMIT")
            return 0, False
        first = conn.execute("SELECT min(id) FROM decisions").fetchone()[0]
        more = cut - first + 1 > chunk
        cut = min(cut, first + chunk - 1)
        deleted = conn.execute("DELETE FROM decisions WHERE id <= ?", (cut,)).rowcount
        conn.execute("DELETE FROM results WHERE decision_id <= ?", (cut,))
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    # executescript steps the pragma to its end; execute() would stop after its first page (Python
    # sees no result columns and resets the statement).
    conn.executescript("PRAGMA incremental_vacuum")
    # PASSIVE: never waits for a reader (the CLI); the file shrinks now if none holds the old pages.
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return deleted, more
