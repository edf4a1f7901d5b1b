"""`mcp-gateway audit` beyond its basics: every effect a record may hold is a filter, csv and jsonl export
every matching record (a cut is always said on stderr), the table names the UTC offset of its times."""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest

from gateway.cli import main
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, DecisionRecord
from gateway.policy.audit.records import EFFECTS, Effect
from gateway.policy.declarations import authorize


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def record(effect: Effect, number: int, **more: Any) -> DecisionRecord:
    return DecisionRecord(
        {"token:agent-1"},
        transport="streamable-http",
        slot="pump-1",
        resource="/l2/pump-1",
        capability="tool.control",
        tool="set_speed",
        effect=effect,
        arguments={"n": number},
        **more,
    )


def fill_many(path: Path, count: int) -> None:
    async def go() -> None:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        await asyncio.gather(*(trail.decision(record("allow", number)) for number in range(count)))
        await trail.close()

    asyncio.run(go())


def fill(path: Path, effects: list[Effect]) -> None:
    async def go() -> None:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        for number, effect in enumerate(effects):
            await trail.decision(record(effect, number))
        await trail.close()

    asyncio.run(go())


def test_every_effect_a_provider_decision_records_is_a_filter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # broker/authorize decisions (gateway/policy/declarations/authorize.py) are recorded with their own effects.
    assert set(get_args(authorize.Effect)) <= set(EFFECTS)
    path = tmp_path / "audit.db"
    fill(path, ["allow", "allow-with-constraints", "deny"])
    code, out, err = run(capsys, "--path", str(path), "--effect", "allow-with-constraints", "--format", "jsonl")
    assert code == 0, err
    assert [orjson.loads(line)["arguments"] for line in out.splitlines()] == [{"n": 1}]


@pytest.fixture(scope="module")
def big_trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "audit.db"
    fill_many(path, 1005)
    return path


def test_csv_and_jsonl_export_every_matching_record(big_trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--path", str(big_trail), "--format", "csv")
    assert (code, err) == (0, "")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1005 and [row["id"] for row in rows[:2]] == ["1", "2"]
    code, out, err = run(capsys, "--path", str(big_trail), "--format", "jsonl", "--since", "1h")
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 1005


@pytest.mark.parametrize("format_", ["table", "jsonl", "csv"])
def test_output_cut_by_a_limit_says_so_on_stderr(
    big_trail: Path, capsys: pytest.CaptureFixture[str], format_: str
) -> None:
    code, out, err = run(capsys, "--path", str(big_trail), "--format", format_, "--limit", "10")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == (11 if format_ != "jsonl" else 10)  # a header, then the newest ten, oldest first
    assert "only the newest 10 matching records are shown; a larger --limit for more" in err
    if format_ == "jsonl":
        assert [orjson.loads(line)["id"] for line in lines] == list(range(996, 1006))
    code, out, err = run(capsys, "--path", str(big_trail), "--format", format_, "--limit", "1005")
    assert (code, err) == (0, "")


def test_the_table_shows_the_newest_thousand_by_default(big_trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--path", str(big_trail))
    assert code == 0 and len(out.splitlines()) == 1001
    assert "only the newest 1000 matching records are shown; --limit N for more" in err


def test_a_cut_to_one_record_says_record(big_trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--path", str(big_trail), "--format", "jsonl", "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 1
    assert "only the newest matching record is shown; a larger --limit for more" in err


def test_the_table_names_the_utc_offset_of_its_local_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.db"

    async def go() -> None:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        # 2026-11-01 05:30 and 06:30 UTC: both 01:30 in New York, before and after the clocks went back.
        for number, at_ms in enumerate((1_793_511_000_000, 1_793_514_600_000)):
            await trail.decision(record("allow", number, time_ms=at_ms))
        await trail.close()

    asyncio.run(go())
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        code, out, _ = run(capsys, "--path", str(path))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert code == 0
    times = [" ".join(line.split()[:2]) for line in out.splitlines()[1:]]
    assert times == ["2026-11-01 01:30:00.000-04:00", "2026-11-01 01:30:00.000-05:00"]


@pytest.mark.parametrize("format_", ["jsonl", "csv"])
def test_a_reader_that_stops_early_ends_the_export_quietly(big_trail: Path, format_: str) -> None:
    # `mcp-gateway audit --format csv | head`: the pipe closes while records are still being written.
    export = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "audit", "--path", str(big_trail), "--format", format_],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert export.stdout is not None and export.stderr is not None
    assert export.stdout.readline()
    export.stdout.close()
    assert export.wait(timeout=60) == 0
    assert export.stderr.read() == b""
