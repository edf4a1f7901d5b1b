"""The audit file's additions (docs/governance-audit.md, "Answers after a cancel"): a new file has them
from the start, unannounced; a file written by a gateway without them gains them, logged at INFO."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail
from gateway.policy.audit.store import ADDITIONS, SCHEMA_V1

ADDED = "added the answers_after_cancel table"


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


async def open_and_close(path: Path) -> None:
    trail = AuditTrail.open(AuditConfig(path=str(path)))
    try:
        assert trail.healthy, trail.last_error
    finally:
        await trail.close()


async def test_a_new_file_gets_every_table_without_the_line_for_an_older_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.db"
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        await open_and_close(path)
    assert set(ADDITIONS) <= tables(path)
    assert ADDED not in caplog.text


async def test_a_file_written_without_the_table_gains_it_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.db"
    conn = sqlite3.connect(path, isolation_level=None)  # as a gateway without answers after a cancel wrote it
    try:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in SCHEMA_V1:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
    finally:
        conn.close()
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        await open_and_close(path)
    assert set(ADDITIONS) <= tables(path)
    assert caplog.text.count(ADDED) == 1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        await open_and_close(path)  # it has the table now: nothing to add, nothing said
    assert ADDED not in caplog.text
