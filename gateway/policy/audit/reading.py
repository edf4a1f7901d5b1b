"""Reading the trail: decisions joined with their results, filtered, on a read-only connection (WAL, or
a rollback journal's brief commits, let it read while the gateway writes)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.devices.sqlite_journal import connect_reader, full_disk_note
from gateway.policy.audit.store import SAME_AS_V1, SCHEMA_VERSION, missing_tables

DEFAULT_LIMIT = 1000
READ_TIMEOUT_S = 5.0
"""How long a reader waits for the writer's lock (with a rollback journal a commit holds it briefly)."""
STREAM_BATCH = 500
"""Decisions read at a time when every matching record is read (an export). With a rollback journal each
batch is one short read, so a commit of the gateway waits for one batch's query at most."""
GLOB_CHARACTERS = frozenset("*?[")
JSON_COLUMNS = ("principal", "arguments", "rules", "constraints")
DAMAGED = "damaged"
"""The key of a record whose stored JSON cannot be read: the columns shown as None for it."""

SELECT = """
SELECT d.id, d.time_ms, d.principal, d.client_id, d.transport, d.slot, d.resource, d.tool, d.capability,
       d.arguments, d.effect, d.rules, d.constraints, d.reason, d.confirmed_by, d.confirmed_ms, d.trace_id,
       r.status, r.latency_ms, r.error, r.time_ms AS result_ms,
       a.status AS after_cancel, a.error AS after_cancel_error, a.time_ms AS after_cancel_ms
FROM decisions AS d LEFT JOIN results AS r ON r.decision_id = d.id
     LEFT JOIN answers_after_cancel AS a ON a.decision_id = d.id
"""
SELECT_WITHOUT_AFTER_CANCEL = """
SELECT d.id, d.time_ms, d.principal, d.client_id, d.transport, d.slot, d.resource, d.tool, d.capability,
       d.arguments, d.effect, d.rules, d.constraints, d.reason, d.confirmed_by, d.confirmed_ms, d.trace_id,
       r.status, r.latency_ms, r.error, r.time_ms AS result_ms,
       NULL AS after_cancel, NULL AS after_cancel_error, NULL AS after_cancel_ms
FROM decisions AS d LEFT JOIN results AS r ON r.decision_id = d.id
"""
"""A file no gateway keeping answers after a cancel has written: the same record, nothing after a cancel."""


class AuditReadError(Exception):
    """The file is missing, unreadable or not an audit trail."""


def _match(column: str, value: str) -> tuple[str, str]:
    """`column = value`, or a GLOB when the value has a wildcard ("pump-*")."""
    operator = "GLOB" if GLOB_CHARACTERS & set(value) else "="
    return f"{column} {operator} ?", value


@dataclass(frozen=True, slots=True)
class Filters:
    """Which decisions a reader wants: `since_ms` inclusive, `until_ms` exclusive; `principal` matches any
    one of a decision's subjects; `principal`, `slot` and `tool` may hold the wildcards * ? [...]."""

    since_ms: int | None = None
    until_ms: int | None = None
    principal: str | None = None
    slot: str | None = None
    tool: str | None = None
    effect: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The WHERE clause (empty when nothing is filtered) and its values."""
        where: list[str] = []
        values: list[Any] = []
        if self.since_ms is not None:
            where.append("d.time_ms >= ?")
            values.append(self.since_ms)
        if self.until_ms is not None:
            where.append("d.time_ms < ?")
            values.append(self.until_ms)
        if self.principal is not None:
            clause, value = _match("subject.value", self.principal)
            where.append(f"EXISTS (SELECT 1 FROM json_each(d.principal) AS subject WHERE {clause})")
            values.append(value)
        for column, wanted in (("d.slot", self.slot), ("d.tool", self.tool)):
            if wanted is not None:
                clause, value = _match(column, wanted)
                where.append(clause)
                values.append(value)
        if self.effect is not None:
            where.append("d.effect = ?")
            values.append(self.effect)
        return (f"WHERE {' AND '.join(where)}\n" if where else ""), values


def _without_log(path: Path) -> str:
    """What to say of a trail file with no `-wal` beside it: a copy of a running gateway's database
    alone holds none of what is still in the log (the schema included, for a young trail)."""
    if Path(f"{path}-wal").exists():
        return ""
    return (
        f"; if it is a copy of a running gateway's trail, the records are in the {path.name}-wal file the copy "
        "left behind: copy a trail with mcp-gateway backup or with the gateway stopped (docs/operations.md, "
        '"Backup and restore")'
    )


def _on_read_only_media(path: Path) -> bool:
    """Whether `path` is a closed trail in a directory nobody can write (a copy on read-only media): no
    -wal or -journal beside it, so the file alone holds every record, and nothing can add one."""
    beside = (Path(f"{path}-wal"), Path(f"{path}-journal"))
    return not any(_holds_log(log) for log in beside) and not os.access(path.resolve().parent, os.W_OK)


def _holds_log(log: Path) -> bool:
    """Whether a -wal or -journal file lies at `log` with something in it (a rollback journal is truncated,
    not removed, after each commit: an empty one holds nothing)."""
    try:
        return log.stat().st_size > 0 or log.name.endswith("-wal")
    except OSError:
        return False


def _connect(path: Path) -> tuple[sqlite3.Connection, int]:
    """A read-only connection to `path` and its schema version (user_version)."""
    uri = path.resolve().as_uri()
    conn = connect_reader(path, READ_TIMEOUT_S)
    try:
        return conn, conn.execute("PRAGMA user_version").fetchone()[0]
    except BaseException as exc:
        conn.close()
        # A WAL reader must create the -shm file beside the trail, which a read-only directory refuses.
        cannot_open = isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode == sqlite3.SQLITE_CANTOPEN
        if not cannot_open or not _on_read_only_media(path):
            raise
    # immutable=1 reads without the -shm and without locks. Safe only because nothing can write a file
    # in that directory and no log beside it holds records the file lacks; a live trail (its -wal
    # exists, its directory is writable) is never read this way, as it would miss what the log holds.
    conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=READ_TIMEOUT_S)
    try:
        return conn, conn.execute("PRAGMA user_version").fetchone()[0]
    except BaseException:
        conn.close()
        raise


def _log_on_read_only_media(path: Path) -> str:
    """What to say when a trail cannot be opened in a directory nobody can write that has its -wal
    beside it: the -wal holds records, so the file is not read without it."""
    if not Path(f"{path}-wal").exists() or os.access(path.resolve().parent, os.W_OK):
        return ""
    return (
        f"; {path.resolve().parent} cannot be written and {path.name}-wal lies beside it: copy the trail "
        "with its -wal file to a writable directory to read it"
    )


AS_THE_GATEWAYS_USER = "run the command as the gateway's user (sudo -u mcp-gateway) or with sudo"


def _check_readable(path: Path) -> None:
    """AuditReadError for a trail that is not there or that this user may not read: the file itself, or a
    directory on its way it may not enter (the appliance's state directory is the service user's, 0700)."""
    try:
        found = path.is_file()
    except PermissionError as exc:
        raise AuditReadError(
            f"audit trail {path}: a directory on its way may not be entered by this user; {AS_THE_GATEWAYS_USER}"
        ) from exc
    if not found:
        raise AuditReadError(f"no audit trail at {path}")
    if not os.access(path, os.R_OK):
        raise AuditReadError(f"audit trail {path}: not readable by this user; {AS_THE_GATEWAYS_USER}")


def _open(path: Path) -> tuple[sqlite3.Connection, str]:
    """A read-only connection to an audit trail and the SELECT its schema takes (AuditReadError when
    `path` is none)."""
    _check_readable(path)
    without_log = _without_log(path)  # before connecting, which may make an empty -wal
    try:
        conn, version = _connect(path)
    except sqlite3.Error as exc:
        note = full_disk_note(exc, path) or _log_on_read_only_media(path)
        raise AuditReadError(f"audit trail {path}: {exc}{note}") from exc
    try:
        if version == 0:
            raise AuditReadError(f"{path} is not an audit trail (no schema){without_log}")
        if version > SCHEMA_VERSION and version != SAME_AS_V1:
            raise AuditReadError(f"{path} has schema version {version}, newer than this gateway's {SCHEMA_VERSION}")
        select = SELECT_WITHOUT_AFTER_CANCEL if "answers_after_cancel" in missing_tables(conn) else SELECT
    except sqlite3.Error as exc:
        conn.close()
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    conn.row_factory = sqlite3.Row
    return conn, select


def read_records(
    path: Path,
    since_ms: int | None = None,
    until_ms: int | None = None,
    principal: str | None = None,
    slot: str | None = None,
    tool: str | None = None,
    effect: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[dict[str, Any]]:
    """The newest `limit` decisions matching every filter given (see Filters), oldest first, each with its
    result (status, latency_ms, error, result_ms: None while the call runs or when it never ended) and, for
    a call whose result is "cancelled", what the device answered after the cancel (after_cancel: "ok",
    "tool-error", "error"; after_cancel_error, after_cancel_ms; None when nothing came). A record whose
    stored JSON cannot be read is listed too, those columns None and named under `damaged`."""
    where, values = Filters(since_ms, until_ms, principal, slot, tool, effect).where()
    conn, select = _open(path)
    try:
        rows = conn.execute(select + where + "ORDER BY d.id DESC LIMIT ?", [*values, limit]).fetchall()
    except sqlite3.Error as exc:
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    finally:
        conn.close()
    return [_record(row) for row in reversed(rows)]


def stream_records(path: Path, filters: Filters) -> Iterator[dict[str, Any]]:
    """Every decision matching `filters`, oldest first, one at a time (the whole trail is never held in
    memory). The file is checked when the iterator is made; AuditReadError when it is no audit trail.

    A WAL trail is read in one read transaction: the records as they were when the first batch was read
    (WAL lets the gateway commit beside it). Any other trail is read in batches of STREAM_BATCH decisions,
    keyed by id, each batch its own short read and nothing held while the caller writes what it got: with
    a rollback journal a reader's shared lock stops every commit, and an export into a slow pipe would hold
    it for as long as the pipe stalls. Those batches give the decisions written before the export began
    (ids up to the last one then), each with its result as it stood when its batch was read; what pruning
    deletes meanwhile before its batch is read is not given."""
    where, values = filters.where()
    conn, select = _open(path)
    try:
        if _reads_beside_the_writer(conn):
            cursor = conn.execute(select + where + "ORDER BY d.id", values)
            return _rows(path, conn, cursor)
        first, last = conn.execute("SELECT min(id), max(id) FROM decisions").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    query = select + (f"{where}AND " if where else "WHERE ") + "d.id BETWEEN ? AND ?\nORDER BY d.id"
    return _batches(path, conn, query, values, first, last)


def _reads_beside_the_writer(conn: sqlite3.Connection) -> bool:
    """Whether the file is in WAL mode: a read transaction there never stops a commit."""
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"


def _rows(path: Path, conn: sqlite3.Connection, cursor: sqlite3.Cursor) -> Iterator[dict[str, Any]]:
    try:
        while rows := cursor.fetchmany(STREAM_BATCH):
            for row in rows:
                yield _record(row)
    except sqlite3.Error as exc:
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    finally:
        conn.close()


def _batches(
    path: Path, conn: sqlite3.Connection, query: str, values: list[Any], first: int | None, last: int | None
) -> Iterator[dict[str, Any]]:
    """The matching decisions with ids `first` to `last`, STREAM_BATCH decisions of the table per query
    (however few of them match), each query read to its end (fetchall) before a record is handed on: the
    statement is then done and its shared lock released while the caller writes."""
    try:
        start = first
        while start is not None and last is not None and start <= last:
            # The batch's last id, from the rowid b-tree: the gateway's ids run without gaps, but a file
            # edited by hand may have any, and a gap must neither widen a batch nor cost a query per id.
            end = conn.execute(
                "SELECT max(id) FROM (SELECT id FROM decisions WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?)",
                (start, last, STREAM_BATCH),
            ).fetchone()[0]
            if end is None:
                return
            rows = conn.execute(query, [*values, start, end]).fetchall()
            for row in rows:
                yield _record(row)
            start = end + 1
    except sqlite3.Error as exc:
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    finally:
        conn.close()


def _record(row: sqlite3.Row) -> dict[str, Any]:
    """The row as a record, its JSON columns read. A column whose stored JSON cannot be read (a write cut
    short by a power loss leaves NUL bytes or nothing where SQLite finds no fault) is None, and the
    record names it under DAMAGED: one torn record never hides the others."""
    record = dict(row)
    damaged: list[str] = []
    for column in JSON_COLUMNS:
        stored = record[column]
        if stored is None:
            continue
        try:
            record[column] = orjson.loads(stored)
        except (ValueError, TypeError):  # orjson.JSONDecodeError is a ValueError
            record[column] = None
            damaged.append(column)
    if damaged:
        record[DAMAGED] = damaged
    return record
