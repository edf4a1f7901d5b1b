"""The lock of a token file: `token create` and `revoke` wait for another process's lock at most
LOCK_WAIT_S, then give up naming the lock file and write nothing; a lock file a killed command left
behind stops nobody."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.policy import token_files
from gateway.policy.token_files import create_token, lock_file_of, read_token_file

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def clean_environment(cli_environment: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(token_files, "APPLIANCE_DIR", tmp_path / "no-etc")
    monkeypatch.setattr(token_files, "LOCK_WAIT_S", 1.0)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.toml"
    create_token(path, "hmi", [])
    return path


def holding(lock: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `lock` for `seconds` (as a command between its read and its rename)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def held(path: Path) -> Iterator[subprocess.Popen[str]]:
    yield from holding(lock_file_of(path), 60)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["token", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.usefixtures("held")
@pytest.mark.parametrize("command", [("create", "scada"), ("revoke", "hmi")])
def test_a_lock_held_too_long_is_named_and_nothing_is_written(
    path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, str]
) -> None:
    before = path.read_bytes()
    code, out, err = run(capsys, *command, "--file", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"mcp-gateway token {command[0]}: token file {path}: another command has held its lock file "
        f"{lock_file_of(path)} for over 1 s; wait for it to finish, then try again (nothing written)\n"
    )
    assert path.read_bytes() == before


def test_a_lock_released_within_the_wait_is_taken(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in holding(lock_file_of(path), 0.4):
        start = time.monotonic()
        code, _, err = run(capsys, "create", "scada", "--file", str(path))
        assert code == 0, err
        assert time.monotonic() - start >= 0.3  # it wrote only once the holder let go
    assert [entry.name for entry in read_token_file(path)] == ["hmi", "scada"]


def test_a_lock_file_left_behind_stops_nobody(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock_file_of(path).write_text("")  # a command killed while holding it: the lock went with it
    assert run(capsys, "revoke", "hmi", "--file", str(path))[0] == 0
    assert run(capsys, "create", "scada", "--file", str(path))[0] == 0
    assert [entry.name for entry in read_token_file(path)] == ["scada"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.toml"]
