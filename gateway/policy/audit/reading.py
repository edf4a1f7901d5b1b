"""Reading the trail: decisions joined with their results, filtered, on a read-only connection (WAL lets
it read while the gateway writes)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

from gateway.policy.audit.store import SCHEMA_VERSION

DEFAULT_LIMIT = 1000
GLOB_CHARACTERS = frozenset("*?[")
JSON_COLUMNS = ("principal", "arguments", "rules", "constraints")

SELECT = """
SELECT d.id, d.time_ms, d.principal, d.client_id, d.transport, d.slot, d.resource, d.tool, d.capability,
       d.arguments, d.effect, d.rules, d.constraints, d.reason, d.confirmed_by, d.confirmed_ms, d.trace_id,
       r.status, r.latency_ms, r.error, r.time_ms AS result_ms
FROM decisions AS d LEFT JOIN results AS r ON r.decision_id = d.id
"""


class AuditReadError(Exception):
    """The file is missing, unreadable or not an audit trail."""


def _match(column: str, value: str) -> tuple[str, str]:
    """`column = value`, or a GLOB when the value has a wildcard ("pump-*")."""
    operator = "GLOB" if GLOB_CHARACTERS & set(value) else "="
    return f"{column} {operator} ?", value


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
    """The newest `limit` decisions matching every filter given, oldest first, each with its result
    (status, latency_ms, error, result_ms: None while the call runs or when it never ended).

    `since_ms` is inclusive, `until_ms` exclusive. `principal` matches any one of a decision's subjects;
    `principal`, `slot` and `tool` may hold the wildcards * ? [...]."""
    if not path.is_file():
        raise AuditReadError(f"no audit trail at {path}")
    where: list[str] = []
    values: list[Any] = []
    if since_ms is not None:
        where.append("d.time_ms >= ?")
        values.append(since_ms)
    if until_ms is not None:
        where.append("d.time_ms < ?")
        values.append(until_ms)
    if principal is not None:
        clause, value = _match("subject.value", principal)
        where.append(f"EXISTS (SELECT 1 FROM json_each(d.principal) AS subject WHERE {clause})")
        values.append(value)
    for column, wanted in (("d.slot", slot), ("d.tool", tool)):
        if wanted is not None:
            clause, value = _match(column, wanted)
            where.append(clause)
            values.append(value)
    if effect is not None:
        where.append("d.effect = ?")
        values.append(effect)
    sql = SELECT + (f"WHERE {' AND '.join(where)}\n" if where else "") + "ORDER BY d.id DESC LIMIT ?"
    values.append(limit)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            raise AuditReadError(f"{path} is not an audit trail (no schema)")
        if version > SCHEMA_VERSION:
            raise AuditReadError(f"{path} has schema version {version}, newer than this gateway's {SCHEMA_VERSION}")
        conn.row_factory = sqlite3.Row
        rows = conn.execute(sql, values).fetchall()
    except sqlite3.Error as exc:
        raise AuditReadError(f"audit trail {path}: {exc}") from exc
    finally:
        conn.close()
    return [_record(row) for row in reversed(rows)]


def _record(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(row)
    for column in JSON_COLUMNS:
        if record[column] is not None:
            record[column] = orjson.loads(record[column])
    return record
