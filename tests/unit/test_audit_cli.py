"""`mcp-gateway audit`: the trail as a table, JSON lines or CSV, filtered, from the default location or another."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli import main
from gateway.cli.audit import time_flag, trail_path
from gateway.config import AuditConfig
from gateway.policy.audit import AuditTrail, DecisionRecord
from gateway.policy.audit.records import now_ms

REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000


def fill(path: Path) -> list[int]:
    """Three decisions, one an hour ago, the others now; two with results."""

    async def go() -> list[int]:
        trail = AuditTrail.open(AuditConfig(path=str(path)))
        await trail.start()
        now = now_ms()
        common: dict[str, Any] = {"transport": "streamable-http", "capability": "tool.control", "tool": "set_speed"}
        ids = [
            await trail.decision(
                DecisionRecord(
                    {"token:agent-1"},
                    slot="pump-1",
                    resource="/l2/pump-1",
                    effect="allow",
                    rules=["assign[0]"],
                    arguments={"speed_rpm": 900, "token": "s3cret"},
                    time_ms=now - HOUR_MS,
                    **common,
                )
            ),
            await trail.decision(
                DecisionRecord(
                    {"user:ann", "group:operators"},
                    slot="pump-2",
                    resource="/l2/pump-2",
                    effect="deny",
                    rules=["deny[0]"],
                    reason="user:ann may not call set_speed",
                    **common,
                )
            ),
            await trail.decision(
                DecisionRecord(
                    {"token:agent-1"},
                    slot="pump-2",
                    resource="/l2/pump-2",
                    effect="clamp",
                    rules=["assign[0]"],
                    constraints=["speed_rpm 2500 -> 2000"],
                    arguments={"speed_rpm": 2500},
                    **common,
                )
            ),
        ]
        trail.result(ids[0], "ok", 12.5)
        trail.result(ids[2], "tool-error", 3.0, error="stalled")
        await trail.close()
        return ids

    return asyncio.run(go())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def trail_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    fill(path)
    return path


def test_table(trail_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--path", str(trail_file))
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["time", "id", "principal", "via", "slot", "tool", "effect", "status", "ms", "rules"]
    assert len(lines) == 3
    assert lines[0].split()[2:] == [
        "1",
        "token:agent-1",
        "streamable-http",
        "pump-1",
        "set_speed",
        "allow",
        "ok",
        "12.5",
        "assign[0]",
    ]
    assert "group:operators,user:ann" in lines[1] and " deny " in lines[1] and " - " in lines[1]  # no result
    assert "tool-error" in lines[2]


def test_jsonl(trail_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--path", str(trail_file), "--format", "jsonl")
    assert code == 0
    records = [orjson.loads(line) for line in out.splitlines()]
    assert [record["effect"] for record in records] == ["allow", "deny", "clamp"]
    assert records[0]["arguments"] == {"speed_rpm": 900, "token": "***"}
    assert records[0]["time"].endswith("Z") and records[0]["status"] == "ok"
    assert records[2]["constraints"] == ["speed_rpm 2500 -> 2000"] and records[2]["error"] == "stalled"
    assert records[1]["principal"] == ["group:operators", "user:ann"]


def test_csv(trail_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--path", str(trail_file), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["id"] for row in rows] == ["1", "2", "3"]
    assert orjson.loads(rows[0]["arguments"]) == {"speed_rpm": 900, "token": "***"}
    assert rows[1]["reason"] == "user:ann may not call set_speed" and rows[1]["status"] == ""
    assert list(rows[0])[:3] == ["time", "id", "time_ms"]


@pytest.mark.parametrize(
    ("flags", "ids"),
    [
        (["--principal", "token:agent-1"], [1, 3]),
        (["--principal", "group:*"], [2]),
        (["--slot", "pump-2"], [2, 3]),
        (["--tool", "set_*"], [1, 2, 3]),
        (["--effect", "deny"], [2]),
        (["--since", "30m"], [2, 3]),
        (["--until", "30m"], [1]),
        (["--limit", "1"], [3]),
        (["--slot", "pump-2", "--effect", "clamp"], [3]),
    ],
)
def test_filters(trail_file: Path, capsys: pytest.CaptureFixture[str], flags: list[str], ids: list[int]) -> None:
    code, out, _ = run(capsys, "--path", str(trail_file), "--format", "jsonl", *flags)
    assert code == 0
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids


def default_trail_under_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $STATE_DIRECTORY, config or audit path in the environment and $XDG_STATE_HOME in `tmp_path`:
    the default trail's path there (nothing is made)."""
    for name in ("STATE_DIRECTORY", "MCP_GATEWAY_CONFIG", "MCP_GATEWAY_AUDIT__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "mcp-gateway" / "audit.db"


def test_time_flags() -> None:
    now = 1_800_000_000_000
    assert time_flag("1h", now) == now - HOUR_MS
    assert time_flag("1h30m", now) == now - 90 * 60_000
    assert time_flag("2d", now) == now - 2 * 86_400_000
    assert time_flag("90s", now) == now - 90_000
    assert time_flag("2026-05-09T12:00:00Z") == 1_778_328_000_000
    assert time_flag("2026-05-09T14:00:00+02:00") == 1_778_328_000_000
    for bad in ("yesterday", "1y", "", "h"):
        with pytest.raises(argparse.ArgumentTypeError):
            time_flag(bad)


def test_the_default_location_follows_xdg_state_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    default = default_trail_under_xdg(monkeypatch, tmp_path)
    code, _, err = run(capsys)
    assert code == 2 and f"no audit trail at {default}" in err
    default.parent.mkdir(parents=True)
    fill(default)
    code, out, _ = run(capsys, "--format", "jsonl")
    assert code == 0 and len(out.splitlines()) == 3


def test_the_path_of_a_config_file(
    trail_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_GATEWAY_AUDIT__PATH", raising=False)
    config = tmp_path / "gateway.toml"
    # Read as plain TOML: a secret the gateway would read ([auth] token file) need not exist here.
    config.write_text(f'[audit]\npath = "{trail_file}"\n[auth]\ntoken_files = ["/nonexistent/tokens.toml"]\n')
    code, out, _ = run(capsys, "--config", str(config), "--effect", "deny", "--format", "jsonl")
    assert code == 0 and [orjson.loads(line)["id"] for line in out.splitlines()] == [2]
    monkeypatch.setenv("MCP_GATEWAY_CONFIG", str(config))
    code, out, _ = run(capsys, "--format", "jsonl")
    assert code == 0 and len(out.splitlines()) == 3
    config.write_text("[audit]\nmax_bytes = 5\n")
    code, _, err = run(capsys, "--config", str(config))
    assert code == 2 and "[audit]" in err


def test_an_unknown_effect_or_an_empty_window_is_a_usage_error(
    trail_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Either would otherwise print an empty table, as if nothing had happened.
    code, out, err = run(capsys, "--path", str(trail_file), "--effect", "bogus")
    assert (code, out) == (2, "")
    assert "--effect 'bogus' is none of allow, clamp, allow-with-constraints, deny, refuse-arguments" in err
    code, out, err = run(capsys, "--path", str(trail_file), "--since", "1h", "--until", "2h")
    assert (code, out) == (2, "")
    assert "--since must be earlier than --until" in err
    code, _, _ = run(capsys, "--path", str(trail_file), "--effect", "clamp")
    assert code == 0


def test_a_file_that_is_no_audit_trail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.db"
    other.write_bytes(b"")
    code, _, err = run(capsys, "--path", str(other))
    assert code == 2 and "not an audit trail" in err


def test_the_installed_command_reads_a_trail(trail_file: Path) -> None:
    command = Path(sys.executable).parent / "mcp-gateway"
    if not command.exists():
        command = REPO / ".venv" / "bin" / "mcp-gateway"
    done = subprocess.run(
        [str(command), "audit", "--path", str(trail_file), "--slot", "pump-2", "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [orjson.loads(line)["effect"] for line in done.stdout.splitlines()] == ["deny", "clamp"]


def test_a_missing_trail_with_no_audit_path_points_at_the_service_s_state_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A root shell on the appliance: no $STATE_DIRECTORY, so the default here is not the service's trail.
    default = default_trail_under_xdg(monkeypatch, tmp_path)
    service_trail = "under systemd the gateway writes $STATE_DIRECTORY/audit.db, /var/lib/mcp-gateway/audit.db"
    code, _, err = run(capsys)
    assert code == 2 and service_trail in err and "pass --path FILE" in err
    assert "--config FILE to read the gateway's own" not in err  # a config without [audit] path would not help
    config = tmp_path / "gateway.toml"
    config.write_text('host = "0.0.0.0"\n[policy]\nfile = "/etc/mcp-gateway/policy.toml"\n')
    code, _, err = run(capsys, "--config", str(config))
    assert code == 2 and f"no audit trail at {default}" in err
    assert f"(the configuration names no [audit] path; {service_trail}" in err and "another trail" not in err
    config.write_text(f'[audit]\npath = "{tmp_path / "elsewhere.db"}"\n')
    code, _, err = run(capsys, "--config", str(config))
    assert code == 2 and err.endswith("(pass --path FILE to read another trail)\n"), err


def test_the_appliance_config_names_the_services_trail() -> None:
    # `audit --config /etc/mcp-gateway/mcp-gateway.toml` from a root shell (no $STATE_DIRECTORY) reads
    # the file the service writes under its StateDirectory=.
    args = argparse.Namespace(path=None, config=str(REPO / "image" / "mcp-gateway.toml"))
    assert trail_path(args, {"HOME": "/root"}) == Path("/var/lib/mcp-gateway/audit.db")
