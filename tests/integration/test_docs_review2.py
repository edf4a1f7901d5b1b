"""Findings of a review of the docs against the code, each on the real `mcp-gateway` as a process.

mdns.refresh_s = 1e-9 passed `config check` and the idle gateway spun its loop (30-54 % of a core);
telemetry.schedule_delay_ms = 1 woke the export threads 1000 times a second. `schema-hash FILE` on a
directory exited 1 with a raw errno, and read /dev/zero or an endless pipe until memory ran out. The
LAN-bind refusal left out [auth.hmac]; `backup` said "1 files"; operations.md's diagnosis table left out
two problems the gateway reports, and gave systemd.status_interval_s a bound the code does not have."""

from __future__ import annotations

import ast
import asyncio
import re
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import SystemdConfig
from tests.support.gateway_process import clean_environment, run_to_exit
from tests.support.written_config import write_config

REPO = Path(__file__).resolve().parents[2]
PUMP_SCHEMA = REPO / "device" / "schemas" / "pump-1.json"
SCHEMA_FILE_MAX_BYTES = 8 << 20
"""What schema-hash reads at most (gateway/cli/calls.py SCHEMA_FILE_MAX_BYTES; docs/cli.md says 8 MiB)."""
MEMORY_CAP = 2 << 30
"""The address space a schema-hash process may take: one that reads without bound fails within it."""


def state_env(tmp_path: Path) -> dict[str, str]:
    return {"STATE_DIRECTORY": str(tmp_path / "state")}


async def config_check(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    config = write_config(tmp_path, text)
    return await run_to_exit("config", "check", "--config", str(config), *args, env=state_env(tmp_path))


# -- lower bounds of loop intervals -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "minimum", "lowest"),
    [
        ("[mdns]\nenabled = true\nrefresh_s = {}\n", "mdns.refresh_s", "0.05", "0.05"),
        ("[telemetry]\nschedule_delay_ms = {}\n", "telemetry.schedule_delay_ms", "10", "10"),
    ],
    ids=["mdns.refresh_s", "telemetry.schedule_delay_ms"],
)
async def test_a_loop_interval_below_its_minimum_is_refused_by_config_check(
    tmp_path: Path, text: str, key: str, minimum: str, lowest: str
) -> None:
    tiny = "1e-9" if key.endswith("_s") else "1"
    code, out, err = await config_check(tmp_path, "port = 0\n" + text.format(tiny))
    assert code == 2, (out, err)
    assert f"setting '{key}': Input should be greater than or equal to {minimum}" in err, err
    code, out, err = await config_check(tmp_path, "port = 0\n" + text.format(lowest))
    assert (code, out) == (0, "configuration OK\n"), err


# -- schema-hash FILE -------------------------------------------------------------------------------


def capped_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def schema_hash(path: str | Path, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """`mcp-gateway schema-hash PATH` in a process whose memory is capped, so a read without bound ends."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "schema-hash", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env=clean_environment(),
        stdin=stdin,
        preexec_fn=capped_memory,
    )


def one_line_refusal(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("mcp-gateway schema-hash: "), done.stderr
    return done.stderr


def test_schema_hash_of_a_directory_is_a_named_refusal(tmp_path: Path) -> None:
    err = one_line_refusal(schema_hash(tmp_path))
    assert f"{tmp_path} is a directory" in err and "Errno" not in err, err


def test_schema_hash_of_a_missing_file_is_named(tmp_path: Path) -> None:
    err = one_line_refusal(schema_hash(tmp_path / "gone.json"))
    assert f"no such file: {tmp_path / 'gone.json'}" in err, err


def test_schema_hash_refuses_a_file_over_its_bound_unread(tmp_path: Path) -> None:
    sparse = tmp_path / "big.json"
    with sparse.open("wb") as f:
        f.truncate(SCHEMA_FILE_MAX_BYTES + 1)  # sparse: no disk taken
    err = one_line_refusal(schema_hash(sparse))
    assert f"{sparse}: larger than {SCHEMA_FILE_MAX_BYTES} bytes, the bound for it" in err, err


def test_schema_hash_of_dev_zero_ends_at_the_bound() -> None:
    err = one_line_refusal(schema_hash("/dev/zero"))
    assert f"/dev/zero: larger than {SCHEMA_FILE_MAX_BYTES} bytes" in err, err


def test_schema_hash_reads_a_pipe_to_its_end_and_an_endless_one_to_the_bound(tmp_path: Path) -> None:
    with subprocess.Popen(["cat", str(PUMP_SCHEMA)], stdout=subprocess.PIPE) as writer:
        assert writer.stdout is not None
        done = schema_hash("/dev/stdin", stdin=writer.stdout.fileno())
    assert done.returncode == 0, done.stderr
    assert done.stdout == schema_hash(PUMP_SCHEMA).stdout != ""
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as endless:
        assert endless.stdout is not None
        try:
            done = schema_hash("/dev/stdin", stdin=endless.stdout.fileno())
        finally:
            endless.kill()
    err = one_line_refusal(done)
    assert f"/dev/stdin: larger than {SCHEMA_FILE_MAX_BYTES} bytes" in err, err


# -- wording of the LAN-bind refusal and of backup --------------------------------------------------


async def test_the_lan_bind_refusal_names_hmac_keys_among_client_authentication(tmp_path: Path) -> None:
    code, _, err = await config_check(tmp_path, "port = 0\n", "--host", "0.0.0.0")
    assert code == 2, err
    assert "client authentication ([auth] tokens, token_files or oauth, or [auth.hmac] keys)" in err, err


@pytest.mark.timeout(60)
async def test_backup_of_one_file_says_one_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "devices.db")
    db.execute("CREATE TABLE devices (device_id TEXT PRIMARY KEY)")
    db.commit()
    db.close()
    dest = tmp_path / "backup"
    code, out, err = await asyncio.wait_for(run_to_exit("backup", str(dest), env=state_env(tmp_path)), 60)
    assert code == 0, err
    assert out.startswith("backed up 1 file, "), out


# -- operations.md against the code ---------------------------------------------------------------


def diagnosis_ids() -> set[str]:
    """Every problem id the gateway's code names as a literal in a Problem(...)."""
    ids: set[str] = set()
    for path in (REPO / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            first = node.args[0]
            if name == "Problem" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                ids.add(first.value)
    return ids


def test_the_diagnosis_table_names_every_problem_the_gateway_reports() -> None:
    operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    table = operations[operations.index("## Diagnosis") :]
    rows = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", table, re.MULTILINE))
    ids = diagnosis_ids()
    assert {"limits.ledger_full", "declarations.result_overdue"} <= ids
    assert ids - rows == set()


def test_operations_md_gives_status_interval_s_the_bound_the_code_has() -> None:
    operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    row = next(line for line in operations.splitlines() if line.startswith("| `status_interval_s` |"))
    metadata = SystemdConfig.model_fields["status_interval_s"].metadata
    minimum = next(item.ge for item in metadata if getattr(item, "ge", None) is not None)
    maximum = next(item.le for item in metadata if getattr(item, "le", None) is not None)
    assert f"(at least {minimum:g}, at most {maximum:g})" in row, row
