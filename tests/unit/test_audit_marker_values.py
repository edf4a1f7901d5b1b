"""The marker the audit trail stores for arguments past their bound (docs/governance-audit.md, "What is
recorded"): it keeps the small top-level values and never passes the bound; a refused call's bound is
[audit] max_refused_arguments_bytes; pruning steps left out of the log are said within
logging.repeat_interval_s, without a next step ("Retention")."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from gateway.config import AuditConfig
from gateway.core.secret_keys import MASK
from gateway.policy.audit import AuditTrail
from gateway.policy.audit.records import EFFECTS, FORWARDED_EFFECTS, TRUNCATED_KEY, decision_row, stored_arguments
from tests.conftest import wait_for
from tests.unit.test_audit_trail import record

MIB = 1024 * 1024
ARGUMENTS_COLUMN = 8
"""decision_row's index of the arguments column."""


def marker(arguments: Any, max_bytes: int) -> dict[str, Any]:
    stored = stored_arguments(arguments, max_bytes)
    assert stored is not None and len(stored.encode()) <= max_bytes, stored
    found = orjson.loads(stored)
    assert isinstance(found, dict) and found[TRUNCATED_KEY] is True
    return found


def test_the_marker_keeps_the_small_top_level_values() -> None:
    arguments = {
        "speed_rpm": 1400,
        "note": "n" * 17_000,
        "ratio": 0.5,
        "enabled": False,
        "mode": None,
        "label": "x" * 64,
        "longer": "y" * 65,
        "api_token": "s3cr3t",
        "options": {"a": 1},
        "steps": [1, 2],
        "db_password": {"nested": "hidden"},
    }
    sent = orjson.dumps(arguments)
    found = marker(arguments, 16_384)
    assert found == {
        TRUNCATED_KEY: True,
        "bytes": len(sent),
        "sha256": hashlib.sha256(sent).hexdigest(),
        "keys": list(arguments),
        "values": {
            "speed_rpm": 1400,
            "ratio": 0.5,
            "enabled": False,
            "mode": None,
            "label": "x" * 64,
            "api_token": MASK,
        },
    }
    assert "s3cr3t" not in str(stored_arguments(arguments, 16_384))


def test_a_marker_without_small_values_has_no_values_key() -> None:
    assert "values" not in marker({"blob": "b" * 2000, "list": [1] * 10}, 1024)
    assert marker(["x"] * 1000, 256).keys() == {TRUNCATED_KEY, "bytes", "sha256"}


@pytest.mark.parametrize("bound", [256, 300, 512, 1024, 4096, 16_384])
def test_the_marker_never_passes_its_bound_and_keeps_numbers_before_padded_strings(bound: int) -> None:
    # 63 long keys holding 64-character strings, then the value that matters, listed last.
    arguments: dict[str, Any] = {f"{number:03d}" + "k" * 130: "v" * 64 for number in range(63)}
    arguments["speed_rpm"] = 2600
    arguments["pad"] = "p" * 20_000
    found = marker(arguments, bound)
    keys = found["keys"]
    # The first ones, in order, each cut to 128 characters.
    assert keys == [key if len(key) <= 128 else key[:127] + "…" for key in list(arguments)[: len(keys)]]
    values = found.get("values", {})
    assert list(values) == [key for key in keys if key in values]  # in the order sent
    if "speed_rpm" in keys:  # listed: its number is kept before any of the longer strings
        assert values["speed_rpm"] == 2600
    if bound == 16_384:  # every key fits (64 at most, "pad" beyond them), but not every string
        assert len(keys) == 64 and 0 < len(values) < 64


def test_the_marker_leaves_the_largest_values_out_first() -> None:
    arguments = {"pad": "p" * 2000, "label": "l" * 60, "speed_rpm": 1400, "mode": "auto"}
    tight = marker(arguments, 215)
    assert tight["keys"] == list(arguments)
    assert tight["values"] == {"speed_rpm": 1400, "mode": "auto"}
    assert marker(arguments, 400)["values"] == {"label": "l" * 60, "speed_rpm": 1400, "mode": "auto"}


def test_a_refused_decision_stores_its_arguments_only_up_to_the_smaller_bound() -> None:
    arguments = {"speed_rpm": 1200, "note": "n" * 2000}
    for effect in EFFECTS:
        stored = decision_row(record(effect=effect, arguments=arguments), 16_384, 1024)[ARGUMENTS_COLUMN]
        if effect in FORWARDED_EFFECTS:
            assert orjson.loads(stored) == arguments, effect
        else:
            assert len(stored) <= 1024 and orjson.loads(stored)["values"] == {"speed_rpm": 1200}, effect
    # Never more whole than a forwarded call's, whatever the two bounds.
    stored = decision_row(record(effect="deny", arguments=arguments), 1024, 4096)[ARGUMENTS_COLUMN]
    assert orjson.loads(stored)[TRUNCATED_KEY] is True


def test_max_refused_arguments_bytes_is_bounded() -> None:
    assert AuditConfig().refused_arguments_bytes == 1024
    assert AuditConfig(max_arguments_bytes=512).refused_arguments_bytes == 512
    assert AuditConfig(max_refused_arguments_bytes=300).refused_arguments_bytes == 300
    with pytest.raises(ValidationError, match=r"max_refused_arguments_bytes \(2048\) must be at most max_arguments"):
        AuditConfig(max_arguments_bytes=1024, max_refused_arguments_bytes=2048)
    with pytest.raises(ValidationError, match="greater than or equal to 256"):
        AuditConfig(max_refused_arguments_bytes=255)


@pytest.fixture
async def burst_trail(tmp_path: Path) -> AsyncIterator[Any]:
    opened: list[AuditTrail] = []

    async def make(repeat_interval_s: float) -> AuditTrail:
        config = AuditConfig(path=str(tmp_path / f"audit-{len(opened)}.db"), max_bytes=MIB)
        trail = AuditTrail.open(config, prune_interval_s=3600, repeat_interval_s=repeat_interval_s)
        opened.append(trail)
        await trail.start()
        await trail.prune()
        for _ in range(200):  # about 3 MiB of records: a pruning step every few
            await trail.decision(record(arguments={"pad": "z" * 15_000}))
        return trail

    yield make
    for trail in opened:
        await trail.close()


def pruning_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [line for line in caplog.records if line.name == "gateway.policy.audit" and ": pruned " in line.getMessage()]


def records_said(lines: list[logging.LogRecord]) -> int:
    return sum(
        int(getattr(line, "pruned_records", 0)) + int(getattr(line, "pruned_records_left_out", 0)) for line in lines
    )


async def test_steps_left_out_of_the_log_are_said_within_the_interval_without_a_next_step(
    burst_trail: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy.audit")
    trail = await burst_trail(1.0)
    status = trail.status()
    assert status["prunes"] > 3
    assert len(pruning_lines(caplog)) < status["prunes"]  # the burst's steps went into fewer lines
    # No more calls: the steps since the last line are said one interval after it, on their own.
    await wait_for(lambda: records_said(pruning_lines(caplog)) == trail.status()["pruned"], timeout=5, what="a summary")
    last = pruning_lines(caplog)[-1]
    assert last.getMessage().startswith(f"audit trail {trail.path}: pruned no records since the last step (")
    assert "more like it since the last line" in last.getMessage()
    assert last.levelno == logging.WARNING and last.repeats_left_out > 0  # type: ignore[attr-defined]
    await asyncio.sleep(1.5)  # said once: nothing more to say
    assert pruning_lines(caplog)[-1] is last


async def test_steps_left_out_of_the_log_are_said_when_the_trail_closes(
    burst_trail: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy.audit")
    trail = await burst_trail(3600.0)
    assert len(pruning_lines(caplog)) == 1
    await trail.close()
    lines = pruning_lines(caplog)
    assert len(lines) == 2 and records_said(lines) == trail.status()["pruned"]
