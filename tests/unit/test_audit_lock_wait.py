"""The writer's wait for another process's lock: the lock timeout bounds a decision's wait as a whole,
counted from when it was queued (a batch waiting ahead of it shares it), and the refusal names a reader
as well as a second writer (docs/governance-audit.md, "The journal")."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, AuditUnavailable, DecisionRecord
from tests.conftest import wait_for
from tests.unit.test_audit_export import record
from tests.unit.test_sqlite_journal import blocks_of

pytestmark = pytest.mark.timeout(60)

LOCK_TIMEOUT_S = 3.0
READER_NAMED = "a second writer, or a reader such as `mcp-gateway audit` or sqlite3"


def allowed() -> DecisionRecord:
    return record("allow", 0, rules=("assign[0]",))


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Another process's read transaction on the trail, as sqlite3 in another shell holds it."""
    reader = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM decisions").fetchone()  # the shared lock, held until COMMIT
        yield
    finally:
        reader.execute("COMMIT")
        reader.close()


async def refused_after(trail: AuditTrail) -> float:
    """Seconds from queueing a decision to its refusal."""
    queued = time.monotonic()
    with pytest.raises(AuditUnavailable) as refused:
        await trail.decision(allowed())
    assert "database is locked" in str(refused.value)
    return time.monotonic() - queued


async def test_a_decision_queued_behind_a_waiting_batch_waits_the_lock_timeout_at_most(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocks_of(monkeypatch, 1024)  # a rollback journal: a reader's shared lock stops every commit
    trail = AuditTrail.open(AuditConfig(path=str(tmp_path / "audit.db")), lock_timeout_s=LOCK_TIMEOUT_S)
    await trail.start()
    try:
        assert await trail.decision(allowed()) == 1
        await trail.prune()  # the pruning due at start is done: the writer now waits for records only
        with reading(trail.path):
            first = asyncio.ensure_future(refused_after(trail))
            await asyncio.sleep(0)  # the first decision is queued
            await wait_for(lambda: trail.status()["queued"] == 0, what="the writer to take the first decision")
            # Queued while the first decision's commit waits for the reader: it is refused with it, not
            # a whole lock timeout after it (which was LOCK_TIMEOUT_S twice over from its queueing).
            second = await refused_after(trail)
            await first
        assert second < LOCK_TIMEOUT_S * 1.5, second
        assert READER_NAMED in trail.last_error
        assert await trail.decision(allowed()) == 2  # the reader gone: written again
    finally:
        await trail.close()


async def test_a_reader_alone_is_named_in_the_refusal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocks_of(monkeypatch, 1024)
    trail = AuditTrail.open(AuditConfig(path=str(tmp_path / "audit.db")), lock_timeout_s=0.2)
    await trail.start()
    try:
        assert await trail.decision(allowed()) == 1
        with reading(trail.path), pytest.raises(AuditUnavailable) as refused:
            await trail.decision(allowed())
        assert str(refused.value).endswith(f"database is locked (another process holds a lock on it: {READER_NAMED})")
        assert not trail.healthy
    finally:
        await trail.close()
