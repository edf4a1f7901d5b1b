"""What `mcp-gateway config check` and `run` refuse before the gateway binds, on the real command: an
[audit] path that can never hold the trail, OTEL_* variables the exporters could not use, telemetry
durations beyond 30 days, a token file others can write. Each is refused by both with exit 2, the key
or variable named, no traceback and no listener; what is only doubtful (a token file others can read)
starts, with a warning."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import aiohttp
import pytest

from gateway.config import TelemetryConfig, resolve_telemetry
from gateway.policy.token_files import create_token
from tests.support.gateway_process import gateway_process, run_to_exit

POLICY = '[policy.roles.viewer]\ncapabilities = ["tool:read"]\n'


def write_config(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "gateway.toml"
    config.write_text(f'port = 0\n[logging]\nlevel = "info"\n{body}')
    return config


def state_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    state = tmp_path / "state"
    return {"STATE_DIRECTORY": str(state), **extra}


async def assert_refused(config: Path, env: dict[str, str], *named: str) -> None:
    """config check and run both exit 2 with one message naming `named`; run never listens."""
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=env)
    assert code == 2, (out, err)
    assert "configuration OK" not in out
    assert "Traceback" not in err
    assert all(text in err for text in named), err
    code, out, err = await run_to_exit("run", "--config", str(config), env=env)
    assert code == 2, err
    assert err.startswith("mcp-gateway: "), err
    assert "Traceback" not in err and "listening on" not in err
    assert all(text in err for text in named), err


def audit_config(tmp_path: Path, path: Path | str) -> Path:
    return write_config(tmp_path, f'[audit]\npath = "{path}"\n{POLICY}')


async def test_an_audit_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "trail"
    directory.mkdir()
    await assert_refused(
        audit_config(tmp_path, directory),
        state_env(tmp_path),
        "setting 'audit.path'",
        str(directory),
        f"it is a directory; name a file in it, e.g. {directory / 'audit.db'}",
    )


async def test_an_audit_path_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "hostname"
    blocker.write_text("plant-gw\n")
    await assert_refused(
        audit_config(tmp_path, blocker / "deeper" / "audit.db"),
        state_env(tmp_path),
        "setting 'audit.path'",
        f"{blocker} is a file, not a directory",
    )


async def test_an_audit_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("these are the shift notes, not an audit trail\n")
    await assert_refused(
        audit_config(tmp_path, other),
        state_env(tmp_path),
        "setting 'audit.path'",
        str(other),
        "is not an SQLite database",
    )
    assert other.read_text().startswith("these are the shift notes")  # left as it was


async def test_an_unusable_default_audit_path_is_refused_naming_the_key(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "audit.db").mkdir()
    config = write_config(tmp_path, POLICY)
    await assert_refused(config, state_env(tmp_path), "default audit file", "set [audit] path")


@pytest.mark.parametrize("kind", ["missing directories", "empty file", "trail of an earlier run"])
async def test_a_usable_audit_path_starts(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "new" / "sub" / "audit.db"
    if kind != "missing directories":
        path = tmp_path / "audit.db"
        path.touch()
    if kind == "trail of an earlier run":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE kept (id INTEGER)")  # an SQLite file: the trail migrates it
    config = audit_config(tmp_path, path)
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=state_env(tmp_path))
    assert (code, out) == (0, "configuration OK\n"), err
    async with (
        gateway_process("--config", str(config), env=state_env(tmp_path)) as gateway,
        aiohttp.ClientSession() as http,
        http.get(f"{gateway.url}/readyz") as ready,
    ):
        assert ready.status == 200, await ready.text()  # the trail is healthy: governed calls are recorded
    assert path.read_bytes().startswith(b"SQLite format 3\x00")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "notaurl",
            "OTEL_EXPORTER_OTLP_ENDPOINT='notaurl': give an http:// or https://",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "garbage", "OTEL_EXPORTER_OTLP_HEADERS: item 1 is not name=value"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=1,secret", "OTEL_EXPORTER_OTLP_TRACES_HEADERS: item 2 is"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc", "OTEL_EXPORTER_OTLP_TIMEOUT='abc': give the export timeout in milli"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1e30", "OTEL_EXPORTER_OTLP_TIMEOUT='1e30'"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "collector:4318", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="),
    ],
)
async def test_otel_variables_that_cannot_be_used_are_refused(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    env = state_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    env[variable] = value
    await assert_refused(write_config(tmp_path, ""), env, message)


async def test_a_header_item_is_named_by_its_number_never_quoted(tmp_path: Path) -> None:
    env = state_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_HEADERS="s3cr3t")
    code, _, err = await run_to_exit("config", "check", "--config", str(write_config(tmp_path, "")), env=env)
    assert code == 2 and "item 1" in err and "s3cr3t" not in err, err


@pytest.mark.parametrize("key", ["schedule_delay_ms", "export_timeout_ms", "metric_interval_ms"])
async def test_telemetry_durations_beyond_30_days_are_refused(tmp_path: Path, key: str) -> None:
    # 10**13 ms took the export threads down with OverflowError while the gateway ran.
    config = write_config(tmp_path, f"[telemetry]\n{key} = 10000000000000\n")
    await assert_refused(config, state_env(tmp_path), f"setting 'telemetry.{key}'", "2592000000 (30 days")


async def test_the_start_line_names_the_endpoint_from_the_environment(tmp_path: Path) -> None:
    endpoint = "http://127.0.0.1:9"  # the discard port: nothing answers, the exports fail quietly
    env = state_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_HEADERS="api-key=a%20b")
    config = write_config(tmp_path, "")
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=env)
    assert (code, out) == (0, "configuration OK\n"), err
    async with gateway_process("--config", str(config), env=env) as gateway:
        line = await gateway.wait_line("telemetry: exporting OTLP to")
    assert f"exporting OTLP to {endpoint} from OTEL_EXPORTER_OTLP_ENDPOINT (sampler" in line, line


def test_otel_exporter_otlp_timeout_fills_an_unset_export_timeout() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    assert resolve_telemetry(TelemetryConfig(), environ).config.export_timeout_ms == 2500
    configured = TelemetryConfig(export_timeout_ms=7000)
    assert resolve_telemetry(configured, environ).config.export_timeout_ms == 7000  # the key wins


def token_config(tmp_path: Path, tokens: Path) -> Path:
    return write_config(tmp_path, f'[auth]\ntoken_files = ["{tokens}"]\n')


async def test_a_token_file_others_can_write_is_refused_everywhere(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    create_token(tokens, "scada", ["pump-1"])
    tokens.chmod(0o664)
    named = f"token file {tokens}: writable by users other than its owner (mode 0664); run `chmod 600 {tokens}`"
    await assert_refused(token_config(tmp_path, tokens), state_env(tmp_path), "auth.token_files", named)
    for command in (["list"], ["create", "hmi"]):
        code, _, err = await run_to_exit("token", *command, "--file", str(tokens))
        assert code == 2 and named in err and "Traceback" not in err, err
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o664  # refused: left as it was


async def test_a_token_file_others_can_read_is_used_everywhere_with_a_warning(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    create_token(tokens, "scada", ["pump-1"])
    tokens.chmod(0o644)
    warning = f"token file {tokens} is readable by users other than its owner (mode 0644)"
    config = token_config(tmp_path, tokens)
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=state_env(tmp_path))
    assert (code, out) == (0, "configuration OK\n") and warning in err, err
    async with gateway_process("--config", str(config), env=state_env(tmp_path)) as gateway:
        assert warning in gateway.log
    code, out, err = await run_to_exit("token", "list", "--file", str(tokens))
    assert code == 0 and "scada" in out and warning in err, err
    code, out, err = await run_to_exit("token", "create", "hmi", "--file", str(tokens))
    assert code == 0 and out.strip() and warning in err and "this command writes it mode 0600" in err, err
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    code, out, err = await run_to_exit("token", "list", "--file", str(tokens))
    assert code == 0 and "hmi" in out and "warning" not in err, err


async def test_a_stdio_upstream_whose_program_is_missing_starts_with_a_warning(tmp_path: Path) -> None:
    """config check and run name the program this machine lacks (the slot would only retry it); a
    program found on the PATH the child gets, or given by a path, is not warned of."""
    found = tmp_path / "server"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    config = write_config(
        tmp_path,
        '[[upstreams.stdio]]\nname = "historian"\ncommand = ["no-such-mcp-server", "--site", "2"]\n'
        '[[upstreams.stdio]]\nname = "units"\ncommand = ["server"]\n'
        f'env = {{ PATH = "{tmp_path}" }}\n'
        f'[[upstreams.stdio]]\nname = "local"\ncommand = ["{found}"]\n'
        f'[[upstreams.stdio]]\nname = "gone"\ncommand = ["{tmp_path}/no-such-server"]\n',
    )
    warning = "upstream 'historian': command 'no-such-mcp-server' is not found on the PATH it gets ("
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=state_env(tmp_path))
    assert (code, out) == (0, "configuration OK\n") and warning in err, err
    assert "'units'" not in err and "'local'" not in err, err
    assert f"upstream 'gone': command '{tmp_path}/no-such-server' does not exist;" in err, err
    async with gateway_process("--config", str(config), env=state_env(tmp_path)) as gateway:
        assert warning in gateway.log
