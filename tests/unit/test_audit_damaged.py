"""A trail with a torn record (a power cut on an SD card: SQLite's integrity check finds no fault, but
the record's JSON columns hold NUL bytes or nothing) is still read: `mcp-gateway audit` lists every
record in every format, the torn one with its unreadable columns null and named under `damaged`, and
says once on stderr which records are damaged and what to do."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli import main
from gateway.config import AuditConfig
from gateway.policy.audit import read_records
from gateway.policy.audit.reading import Filters, stream_records
from gateway.policy.audit.trail import AuditTrail
from tests.unit.test_audit_cli import fill


def damage(path: Path, decision_id: int) -> None:
    """What a torn tail leaves: the JSON columns of one record hold bytes that are no JSON."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE decisions SET arguments = '', rules = CAST(zeroblob(24) AS TEXT), principal = X'00000000'"
            " WHERE id = ?",
            (decision_id,),
        )
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.fixture
def torn_trail(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    fill(path)
    damage(path, 2)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_readers_list_a_torn_record_with_its_damaged_columns_named(torn_trail: Path) -> None:
    records = read_records(torn_trail)
    assert [record["id"] for record in records] == [1, 2, 3]
    torn = records[1]
    assert torn["damaged"] == ["principal", "arguments", "rules"]
    assert (torn["principal"], torn["arguments"], torn["rules"]) == (None, None, None)
    assert torn["effect"] == "deny" and torn["reason"] == "user:ann may not call set_speed"
    assert "damaged" not in records[0] and records[0]["arguments"] == {"speed_rpm": 900, "token": "***"}
    assert [record.get("damaged") for record in stream_records(torn_trail, Filters())] == [
        None,
        ["principal", "arguments", "rules"],
        None,
    ]


@pytest.mark.parametrize("format_", ["table", "jsonl", "csv"])
def test_the_cli_lists_every_record_and_names_the_damaged_ones_once(
    torn_trail: Path, capsys: pytest.CaptureFixture[str], format_: str
) -> None:
    code, out, err = run(capsys, "--path", str(torn_trail), "--format", format_)
    assert code == 0, err
    assert "Traceback" not in err
    assert err.count("\n") == 1
    assert f"mcp-gateway audit: 1 record of {torn_trail} (id 2) holds JSON that cannot be read" in err
    assert 'shown as null and named under "damaged"' in err
    assert "move the file aside with its -wal and -shm files" in err
    if format_ == "table":
        lines = out.splitlines()[1:]
        assert [line.split()[2] for line in lines] == ["1", "2", "3"]
        assert lines[1].split()[3] == "(damaged)" and lines[1].split()[-1] == "(damaged)"
    elif format_ == "jsonl":
        records = [orjson.loads(line) for line in out.splitlines()]
        assert [record.get("damaged") for record in records] == [None, ["principal", "arguments", "rules"], None]
        assert records[1]["arguments"] is None and records[1]["effect"] == "deny"
    else:
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [row["id"] for row in rows] == ["1", "2", "3"]
        assert [row["damaged"] for row in rows] == ["", '["principal","arguments","rules"]', ""]
        assert rows[1]["arguments"] == "" and rows[0]["arguments"] == '{"speed_rpm":900,"token":"***"}'


def test_many_damaged_records_are_named_up_to_a_bound_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.db"
    for _ in range(8):
        fill(path)
    for decision_id in range(1, 25):
        damage(path, decision_id)
    code, out, err = run(capsys, "--path", str(path), "--format", "jsonl", "--limit", "23")
    assert code == 0 and len(out.splitlines()) == 23
    ids = ", ".join(str(number) for number in range(2, 22))
    assert f"mcp-gateway audit: 23 records of {path} (ids {ids} and 3 more) hold JSON" in err
    assert "only the newest 23 matching records are shown" in err


def test_a_whole_trail_gets_no_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.db"
    fill(path)
    code, out, err = run(capsys, "--path", str(path), "--format", "csv")
    assert (code, err) == (0, "")
    assert [row["damaged"] for row in csv.DictReader(io.StringIO(out))] == ["", "", ""]


def test_a_trail_copied_without_its_log_says_where_its_records_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A young trail's schema and records are all in audit.db-wal: a copy of audit.db alone is empty.
    copy = tmp_path / "audit.db"
    with contextlib.closing(sqlite3.connect(copy)) as db:
        db.execute("PRAGMA journal_mode=wal")
    code, out, err = run(capsys, "--path", str(copy))
    assert (code, out) == (2, "")
    assert f"{copy} is not an audit trail (no schema); if it is a copy of a running gateway's trail" in err
    assert "copy a trail with mcp-gateway backup or with the gateway stopped" in err
    Path(f"{copy}-wal").write_bytes(b"")  # the log is there: nothing to say of it
    code, _, err = run(capsys, "--path", str(copy))
    assert code == 2 and err.rstrip().endswith("is not an audit trail (no schema)"), err


def test_a_trail_found_damaged_while_pruning_is_unhealthy_at_once(tmp_path: Path) -> None:
    # A backup copied while SQLite folded its log: the start reads the file, the first prune finds the damage.
    path = tmp_path / "audit.db"
    fill(path)
    data = bytearray(path.read_bytes())
    data[4 * 4096 + 100 :] = b"\xab" * (len(data) - 4 * 4096 - 100)
    path.write_bytes(bytes(data))

    async def go() -> dict[str, Any]:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        try:
            for _ in range(100):
                status = trail.status()
                if status["last_error"]:
                    return status
                await asyncio.sleep(0.02)
            return trail.status()
        finally:
            await trail.close()

    status = asyncio.run(go())
    assert status["healthy"] is False  # /readyz answers audit_unavailable before a call is refused
    assert status["last_error"] == f"audit trail {path}: database disk image is malformed"
