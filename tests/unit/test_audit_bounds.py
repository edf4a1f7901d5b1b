"""The audit trail's bounds against a caller that floods it: arguments stored up to [audit]
max_arguments_bytes (a larger one as its size and hash), a result's error cut to max_error_chars, the file
(and its WAL) kept under max_bytes as it grows, every pruning said at WARNING (docs/governance-audit.md)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.policy.audit.records import TRUNCATED_KEY, ResultRecord, result_row
from tests.conftest import wait_for
from tests.unit import test_audit_trail
from tests.unit.test_audit_trail import TrailFactory, record

MIB = 1024 * 1024
trails = test_audit_trail.trails  # the fixture that opens and closes trails


def file_bytes(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0])


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_a_flood_of_huge_refused_calls_neither_bloats_the_file_nor_prunes_others(
    trails: TrailFactory, caplog: pytest.LogCaptureFixture
) -> None:
    trail = await trails(max_bytes=MIB, prune_interval_s=3600)
    legit = await trail.decision(record(principal={"token:operator"}))
    flood: dict[str, Any] = {"blob": "A" * 900_000, "note": "x"}
    sent = orjson.dumps(flood)
    for _ in range(30):
        await trail.decision(record(principal={"token:visitor"}, effect="deny", tool="nope", arguments=flood))
    assert [entry["id"] for entry in trail.query(limit=1, principal="token:operator")] == [legit]
    stored = trail.query(limit=1)[0]["arguments"]
    assert stored == {
        TRUNCATED_KEY: True,
        "bytes": len(sent),
        "sha256": hashlib.sha256(sent).hexdigest(),
        "keys": ["blob", "note"],
        "values": {"note": "x"},
    }
    assert trail.status()["pruned"] == 0
    assert "pruned" not in caplog.text
    assert file_bytes(trail.path) <= MIB


async def test_arguments_up_to_the_bound_are_stored_whole(trails: TrailFactory) -> None:
    trail = await trails(max_arguments_bytes=1024)
    whole = {"text": "y" * 990}
    assert len(orjson.dumps(whole)) <= 1024
    await trail.decision(record(arguments=whole))
    await trail.decision(record(arguments={"text": "y" * 1020}))
    first, second = trail.query()
    assert first["arguments"] == whole
    assert second["arguments"][TRUNCATED_KEY] is True
    assert second["arguments"]["bytes"] == len(orjson.dumps({"text": "y" * 1020}))


async def test_the_file_and_its_wal_stay_under_max_bytes_between_prunings(
    trails: TrailFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy.audit")
    trail = await trails(max_bytes=MIB, prune_interval_s=3600)
    await trail.prune()  # the pruning due at start: none comes from the clock after it
    pad = {"pad": "z" * 15_000}
    for _ in range(200):  # about 3 MiB of records, one fsync each
        await trail.decision(record(arguments=pad))
        # Checkpointed at a quarter of max_bytes; it holds the commits since, a pruning's among them.
        assert wal_bytes(trail.path) <= MIB // 2
    assert file_bytes(trail.path) <= MIB
    await trail.close()
    assert os.stat(trail.path).st_size <= MIB
    status = trail.status()
    assert status["pruned_by_size"] == status["pruned"] > 0 and status["pruned_by_age"] == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "pruned" in r.getMessage()]
    assert len(warnings) == status["prunes"]
    assert "pruned " in warnings[0].getMessage() and "(ids 1 to " in warnings[0].getMessage()
    assert warnings[0].getMessage().endswith(f"by size: the file passed max_bytes ({MIB})")


def test_a_results_error_is_stored_cut_to_its_bound() -> None:
    row = result_row(ResultRecord(7, "tool-error", 1.0, "e" * 5000), max_error_chars=1024)
    assert len(row[4]) == 1024 and row[4].endswith("…")
    assert result_row(ResultRecord(7, "ok", 1.0))[4] is None


async def test_a_call_cancelled_while_its_decision_is_written_gets_a_cancelled_result(trails: TrailFactory) -> None:
    trail = await trails(lock_timeout_s=5.0)
    await trail.prune()  # the pruning due at start is done: the writer now waits for records only
    other = sqlite3.connect(trail.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the writer waits for this lock with the decision
    try:
        deciding = asyncio.ensure_future(trail.decision(record(), forwarding=True))
        await asyncio.sleep(0)
        await wait_for(lambda: trail.status()["queued"] == 0, what="the writer to take the decision")
        deciding.cancel()  # the client cancels the call before it was sent
        with pytest.raises(asyncio.CancelledError):
            await deciding
    finally:
        other.execute("ROLLBACK")
        other.close()
    await wait_for(lambda: trail.status()["results_written"] == 1, what="the result", timeout=5)
    (entry,) = trail.query()
    assert (entry["effect"], entry["status"], entry["error"]) == (
        "allow",
        "cancelled",
        "cancelled by the client before it was sent",
    )


async def test_every_secret_looking_key_is_masked_by_its_words(trails: TrailFactory) -> None:
    trail = await trails()
    secret_keys = ["passphrase", "private_key", "pwd", "pin_code", "user_pin", "userPIN", "session_key", "cookie"]
    secret_keys += ["bearer", "credential", "secret", "token", "X-Api-Key", "privateKey", "Authorization"]
    plain_keys = ["spin_rate", "pinned", "speed_rpm", "key", "pin", "gpio_pin"]
    arguments = {key: "v4lue" for key in (*secret_keys, *plain_keys)}
    await trail.decision(record(arguments={"nested": [arguments]}))
    (stored,) = trail.query()[0]["arguments"]["nested"]
    assert stored == {**{key: "***" for key in secret_keys}, **{key: "v4lue" for key in plain_keys}}
