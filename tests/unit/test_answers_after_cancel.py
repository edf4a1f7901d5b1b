"""What a device answered after the gateway cancelled its request: remembered per provider session within
bounds (gateway/core/cancelled_requests.py), and kept by the audit trail beside a `cancelled` result, in a
table an older trail gains when it is opened (docs/governance-audit.md, "Answers after a cancel")."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.audit import render_table
from gateway.config import AuditConfig
from gateway.core.cancelled_requests import MAX_CANCELLED_REMEMBERED, CancelledRequests
from gateway.core.provider_state import NO_DEADLINE, Pending
from gateway.policy.audit import AuditTrail
from gateway.policy.audit.reading import read_records
from gateway.policy.audit.records import DecisionRecord, decision_row, now_ms
from gateway.policy.audit.store import ADDITIONS, INSERT_DECISION, SCHEMA_V1, SCHEMA_VERSION

DAY_MS = 86_400_000


def pending(request_id: str, timeout_ms: int = 60_000, started: float | None = None, late: Any = None) -> Pending:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    return Pending(
        request_id=request_id,
        future=future,
        method="tools/call",
        started=time.monotonic() if started is None else started,
        timeout_ms=timeout_ms,
        late=late,
    )


async def test_a_cancelled_request_is_remembered_once_and_handed_to_its_listener() -> None:
    heard: list[dict[str, Any]] = []
    cancelled = CancelledRequests("pump-1")
    cancelled.remember(pending("brk-1", late=heard.append), 60_000)
    answer = {"jsonrpc": "2.0", "id": "brk-1", "result": {"content": []}}
    assert cancelled.answered("brk-1", answer) is True
    assert heard == [answer]
    assert cancelled.answered("brk-1", answer) is False  # a second answer is a duplicate
    assert cancelled.answered("brk-2", answer) is False  # never cancelled


async def test_a_cancelled_request_is_forgotten_when_its_deadline_would_have_passed() -> None:
    cancelled = CancelledRequests("pump-1")
    cancelled.remember(pending("brk-1", timeout_ms=1000, started=time.monotonic() - 2), 60_000)
    assert cancelled.answered("brk-1", {"id": "brk-1", "result": {}}) is False
    # A request without a deadline of its own (a listen stream) is remembered for request_timeout_ms.
    cancelled.remember(pending("brk-2", timeout_ms=NO_DEADLINE, started=time.monotonic() - 3600), 60_000)
    assert cancelled.answered("brk-2", {"id": "brk-2", "result": {}}) is True


async def test_at_most_max_cancelled_remembered_and_the_oldest_goes_first() -> None:
    cancelled = CancelledRequests("pump-1")
    for number in range(MAX_CANCELLED_REMEMBERED + 5):
        cancelled.remember(pending(f"brk-{number}"), 60_000)
    assert len(cancelled) == MAX_CANCELLED_REMEMBERED == 1024
    assert not any(cancelled.answered(f"brk-{number}", {}) for number in range(5))
    assert cancelled.answered("brk-5", {}) and cancelled.answered(f"brk-{MAX_CANCELLED_REMEMBERED + 4}", {})


def record(**overrides: Any) -> DecisionRecord:
    fields: dict[str, Any] = {
        "principal": {"token:agent"},
        "transport": "streamable-http",
        "slot": "pump-1",
        "resource": "/pump-1",
        "capability": "tool.control",
        "effect": "allow",
        "tool": "set_speed",
        "arguments": {"speed_rpm": 1200},
        "rules": ("assign[0]",),
        **overrides,
    }
    return DecisionRecord(**fields)


def version_1_file(path: Path) -> int:
    """An audit file as a gateway without answers after a cancel wrote it: one decision, its result `cancelled`."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in SCHEMA_V1:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        cursor = conn.execute(INSERT_DECISION, decision_row(record()))
        assert cursor.lastrowid is not None
        conn.execute(
            "INSERT INTO results (decision_id, time_ms, status, latency_ms, error) VALUES (?, ?, ?, ?, ?)",
            (cursor.lastrowid, now_ms(), "cancelled", 3.0, "cancelled before the answer came: client disconnected"),
        )
        return cursor.lastrowid
    finally:
        conn.close()


@pytest.fixture
async def trails() -> AsyncIterator[list[AuditTrail]]:
    opened: list[AuditTrail] = []
    yield opened
    for trail in opened:
        await trail.close()


async def test_an_older_trail_is_read_as_it_is_and_gains_the_table_when_written(
    tmp_path: Path, trails: list[AuditTrail]
) -> None:
    path = tmp_path / "audit.db"
    old = version_1_file(path)
    # Read before any gateway of this version wrote it (the reader never migrates).
    [before] = read_records(path)
    assert (before["status"], before["after_cancel"], before["after_cancel_error"]) == ("cancelled", None, None)
    trail = AuditTrail.open(AuditConfig(path=str(path)))
    trails.append(trail)
    assert trail.healthy, trail.last_error
    await trail.start()
    new = await trail.decision(record(tool="start"))
    trail.result(new, "cancelled", 1.0, "cancelled before the answer came: cancelled by the client")
    trail.answered_after_cancel(old, "tool-error", "motor stalled " * 200)
    trail.answered_after_cancel(new, "ok")
    trail.answered_after_cancel(new, "error", "a second answer is ignored")
    await trail.close()
    conn = sqlite3.connect(path)
    try:
        # The version stays, so a gateway without the table still reads and writes the file.
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 1
    finally:
        conn.close()
    by_id = {entry["id"]: entry for entry in read_records(path)}
    assert by_id[old]["after_cancel"] == "tool-error"
    assert len(by_id[old]["after_cancel_error"]) == 1024 and by_id[old]["after_cancel_error"].endswith("…")
    assert (by_id[new]["status"], by_id[new]["after_cancel"], by_id[new]["after_cancel_error"]) == (
        "cancelled",
        "ok",
        None,
    )
    assert by_id[new]["after_cancel_ms"] >= by_id[new]["time_ms"]
    table = render_table([by_id[old], by_id[new]])
    assert "cancelled, then tool-error: motor sta" in table and "cancelled, then ok" in table


async def test_pruning_takes_the_answers_after_a_cancel_with_their_decisions(
    tmp_path: Path, trails: list[AuditTrail]
) -> None:
    path = tmp_path / "audit.db"
    earlier = AuditTrail(path, max_age_days=30)  # an earlier run: this run's records age from its start
    trails.append(earlier)
    await earlier.start()
    old = await earlier.decision(record(time_ms=now_ms() - 31 * DAY_MS))
    earlier.result(old, "cancelled", 1.0)
    earlier.answered_after_cancel(old, "ok")
    await earlier.close()
    trail = AuditTrail(path, max_age_days=30, prune_interval_s=3600)
    trails.append(trail)
    await trail.start()
    recent = await trail.decision(record())
    trail.result(recent, "cancelled", 1.0)
    trail.answered_after_cancel(recent, "ok")
    await trail.prune()
    assert trail.status()["pruned_by_age"] == 1
    await trail.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT decision_id FROM answers_after_cancel").fetchall() == [(recent,)]
    finally:
        conn.close()


async def test_a_file_stamped_2_is_schema_1_with_its_additions(tmp_path: Path, trails: list[AuditTrail]) -> None:
    path = tmp_path / "audit.db"
    old = version_1_file(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(ADDITIONS["answers_after_cancel"])
        conn.execute("PRAGMA user_version = 2")
    finally:
        conn.close()
    assert [entry["id"] for entry in read_records(path)] == [old]
    trail = AuditTrail.open(AuditConfig(path=str(path)))
    trails.append(trail)
    assert trail.healthy, trail.last_error
    await trail.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        conn.close()
