"""`mcp-gateway token revoke` and `token list`: the token file edited as `create` writes it, no hash shown."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.policy import token_files
from gateway.policy.token_files import create_token, read_token_file


@pytest.fixture(autouse=True)
def clean_environment(cli_environment: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(token_files, "APPLIANCE_DIR", tmp_path / "no-etc")


def token(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["token", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A token file with two tokens, as `token create` wrote it."""
    path = tmp_path / "tokens.toml"
    create_token(path, "scada", ["pump-1", "metrics"])
    create_token(path, "hmi", [])
    return path


def test_revoke_removes_the_entry_atomically_with_mode_0600(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inode = path.stat().st_ino
    kept = read_token_file(path)[1]
    code, out, err = token(capsys, "revoke", "scada", "--file", str(path))
    assert (code, err) == (0, "")
    assert read_token_file(path) == [kept]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.toml"]  # no temporary file left
    assert f'Revoked token "scada" in {path}.' in out
    # Token files are re-read by a running gateway: no reload is asked for, and none is needed.
    assert "no reload or restart is needed" in out
    assert f"[auth] token_files lists {path}" in out  # this file is not the configured one
    assert "mcp-gateway reload`" not in out


def test_revoke_of_the_configured_file_says_the_running_gateway_picks_it_up(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[auth]\ntoken_files = ["{path}"]\n')
    code, out, _ = token(capsys, "revoke", "hmi", "--config", str(config))
    assert code == 0
    assert [entry.name for entry in read_token_file(path)] == ["scada"]
    assert "A running gateway re-reads the file within a second" in out


def test_revoking_an_unknown_name_exits_1_and_changes_nothing(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = path.read_bytes()
    code, out, err = token(capsys, "revoke", "ops", "--file", str(path))
    assert (code, out) == (1, "")
    assert err == f"mcp-gateway token revoke: no token named 'ops' in {path} (its tokens: scada, hmi)\n"
    assert path.read_bytes() == before


def test_a_name_in_the_configuration_itself_is_pointed_there_with_a_reload(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    # [[auth.tokens]] is applied by a reload (docs/reload.md), unlike a token file.
    config.write_text(f'[auth]\ntoken_files = ["{path}"]\ntokens = [{{ name = "svc", env = "ONLY_IN_THE_SERVICE" }}]\n')
    code, _, err = token(capsys, "revoke", "svc", "--config", str(config))
    assert code == 1
    assert "'svc' is an [[auth.tokens]] entry of the configuration" in err
    assert "`mcp-gateway reload`" in err


def test_revoking_the_last_token_leaves_a_valid_empty_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert token(capsys, "revoke", "scada", "--file", str(path))[0] == 0
    assert token(capsys, "revoke", "hmi", "--file", str(path))[0] == 0
    assert read_token_file(path) == []
    code, out, err = token(capsys, "list", "--file", str(path))
    assert (code, out, err) == (0, "", f"no tokens in {path}\n")


def test_list_shows_names_scopes_and_creation_never_a_hash(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = read_token_file(path)
    code, out, err = token(capsys, "list", "--file", str(path))
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()] == [
        ["NAME", "SCOPES", "CREATED"],
        ["scada", "pump-1", "metrics", str(entries[0].created)],
        ["hmi", "-", str(entries[1].created)],
    ]
    for entry in entries:
        assert entry.sha256 not in out
        assert entry.sha256[:8] not in out


@pytest.mark.parametrize("command", [["revoke", "scada"], ["list"]])
def test_a_file_others_can_write_or_a_missing_file_is_refused(
    path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    os.chmod(path, 0o660)
    before = path.read_bytes()
    code, out, err = token(capsys, *command, "--file", str(path))
    assert (code, out) == (2, "")
    assert "writable by users other than its owner" in err and "chmod 600" in err
    assert path.read_bytes() == before
    missing = path.parent / "missing.toml"
    code, out, err = token(capsys, *command, "--file", str(missing))
    assert (code, out) == (2, "")
    assert f"token file {missing}: not found" in err
    assert not missing.exists()


def test_a_failed_write_leaves_the_old_file_whole(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = path.read_bytes()

    def disk_full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    code, out, err = token(capsys, "revoke", "scada", "--file", str(path))
    assert (code, out) == (2, "")
    assert "No space left on device" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.toml"]
