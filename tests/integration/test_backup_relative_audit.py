"""`mcp-gateway backup` of a governed gateway whose [audit] path is relative: run from the gateway's working
directory it holds the trail; run from elsewhere (cron starts in $HOME) it refuses with exit 2 and says
where it looked, in the words `mcp-gateway audit` uses, instead of leaving the trail out."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
import pytest

from tests.integration.test_backup_restore import POLICY
from tests.support.gateway_process import REPO, GatewayProcess, clean_environment, run_cli

HINT = "a relative [audit] path is read from the working directory, as mcp-gateway run reads it: here "


@pytest.mark.timeout(120)
async def test_a_backup_from_another_directory_refuses_a_relative_audit_path(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    config = tmp_path / "gateway.toml"
    config.write_text(f'port = 0\n[policy]\nfile = "{policy}"\n[audit]\npath = "audit/trail.db"\n', encoding="utf-8")
    workdir, home = tmp_path / "run", tmp_path / "home"
    workdir.mkdir()
    home.mkdir()
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "HOME": str(home)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        "--config",
        str(config),
        cwd=workdir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**clean_environment(env), "PYTHONPATH": str(REPO)},
    )
    gateway = GatewayProcess(process)
    try:
        await gateway.started()
        assert (workdir / "audit" / "trail.db").is_file()  # the gateway opens its trail at start

        code, out, err = await run_cli("backup", "--config", str(config), str(tmp_path / "bk-cron"), env=env, cwd=home)
        assert code == 2, (out, err)
        assert f"no audit trail at audit/trail.db ({HINT}{home / 'audit' / 'trail.db'}; " in err
        assert "no backup was left" in err
        assert not (tmp_path / "bk-cron").exists()
        # `audit` from the same place says it in the same words.
        code, _, audit_err = await run_cli("audit", "--config", str(config), env=env, cwd=home)
        assert code == 2
        assert f"{HINT}{home / 'audit' / 'trail.db'}; " in audit_err

        code, out, err = await run_cli(
            "backup", "--config", str(config), str(tmp_path / "bk-here"), "--json", env=env, cwd=workdir
        )
        assert code == 0, err
        files = orjson.loads(out)["files"]
        assert [entry["original"] for entry in files if entry["kind"] == "audit"] == [
            str(workdir / "audit" / "trail.db")
        ]
    finally:
        await gateway.stop()
