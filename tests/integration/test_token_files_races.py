"""`mcp-gateway token create` and `revoke` run side by side on one token file, as real processes: each
holds the file's lock from its read to its rename, so none loses another's change, and a revoked token
never comes back; a token whose printing fails is taken out of the file again; a token file that is a
symlink stays one (docs/security-auth.md, "Creating one")."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

import pytest

from gateway.policy.token_files import create_token, read_token_file
from tests.support.gateway_process import REPO, clean_environment, run_cli

pytestmark = pytest.mark.timeout(180)

PARALLEL = 12


def names_in(path: Path) -> list[str]:
    return [entry.name for entry in read_token_file(path)]


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_parallel_creates_keep_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    results = await asyncio.gather(*(run_cli("token", "create", f"u{i}", "--file", str(path)) for i in range(PARALLEL)))
    assert [code for code, _, _ in results] == [0] * PARALLEL, [err for _, _, err in results]
    entries = {entry.name: entry.sha256 for entry in read_token_file(path)}
    assert sorted(entries) == sorted(f"u{i}" for i in range(PARALLEL))
    for i, (_, out, _) in enumerate(results):
        assert entries[f"u{i}"] == hashlib.sha256(out.strip().encode()).hexdigest()  # the printed token is live
    assert files_in(tmp_path) == ["tokens.toml"]  # no lock or temporary file left


async def test_parallel_revokes_and_creates_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    for i in range(PARALLEL):
        create_token(path, f"old{i}", [])
    commands = [("revoke", f"old{i}") for i in range(PARALLEL)] + [("create", f"new{i}") for i in range(PARALLEL)]
    results = await asyncio.gather(*(run_cli("token", verb, name, "--file", str(path)) for verb, name in commands))
    assert [code for code, _, _ in results] == [0] * len(commands), [err for _, _, err in results]
    assert sorted(names_in(path)) == sorted(f"new{i}" for i in range(PARALLEL))


async def test_a_revoke_racing_creates_never_brings_the_token_back(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    others = [f"other{k}" for k in range(6)]
    for attempt in range(5):
        path.unlink(missing_ok=True)
        create_token(path, "leaked", [])
        revoke, *creates = await asyncio.gather(
            run_cli("token", "revoke", "leaked", "--file", str(path)),
            *(run_cli("token", "create", name, "--file", str(path)) for name in others),
        )
        assert [revoke[0]] + [code for code, _, _ in creates] == [0] * 7, (revoke, creates)
        assert sorted(names_in(path)) == others, f"attempt {attempt}: the revoked token is back, or a token lost"


async def create_with_stdout(redirect: str, path: Path, *extra: str) -> tuple[int, str]:
    """`token create scada` with its stdout redirected by the shell (`>&-`, `>/dev/full`): exit code, stderr."""
    process = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        f'exec "$@" {redirect}',
        "sh",
        sys.executable,
        *("-m", "gateway.cli", "token", "create", "scada", "--file", str(path), *extra),
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(),
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


@pytest.mark.parametrize(
    ("redirect", "reason"), [(">&-", "standard output is closed"), (">/dev/full", "No space left on device")]
)
async def test_a_token_nobody_received_is_removed_again(tmp_path: Path, redirect: str, reason: str) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "hmi", [])
    code, err = await create_with_stdout(redirect, path)
    assert code == 1, err
    assert f"the token could not be printed ({reason}), so nobody received it" in err
    assert f"its entry 'scada' is removed from {path} again" in err
    assert "Traceback" not in err and "Created token" not in err
    assert names_in(path) == ["hmi"]
    assert files_in(tmp_path) == ["tokens.toml"]


async def test_a_replacing_token_nobody_received_leaves_the_old_one_withdrawn(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", [])
    create_token(path, "hmi", [])
    code, err = await create_with_stdout(">/dev/full", path, "--replace")
    assert code == 1, err
    assert "(the token it replaced stays withdrawn)" in err
    assert names_in(path) == ["hmi"]


async def test_a_symlinked_token_file_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    data, etc = tmp_path / "data", tmp_path / "etc"
    data.mkdir()
    etc.mkdir()
    target = data / "tokens.toml"
    create_token(target, "hmi", [])
    link = etc / "tokens.toml"
    link.symlink_to(target)
    code, out, err = await run_cli("token", "create", "scada", "--file", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert names_in(target) == ["hmi", "scada"]
    assert read_token_file(target)[1].sha256 == hashlib.sha256(out.strip().encode()).hexdigest()
    code, _, err = await run_cli("token", "revoke", "hmi", "--file", str(link))
    assert code == 0, err
    assert link.is_symlink() and names_in(target) == ["scada"]
    assert files_in(etc) == files_in(data) == ["tokens.toml"]
