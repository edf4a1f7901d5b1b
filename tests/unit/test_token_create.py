"""`mcp-gateway token create`: a random token printed once, only its hash stored, safely written."""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.policy import token_files
from gateway.policy.token_files import read_token_file


@pytest.fixture(autouse=True)
def clean_environment(cli_environment: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(token_files, "APPLIANCE_DIR", tmp_path / "no-etc")


def create(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["token", "create", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_token_is_printed_once_and_only_its_hash_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.toml"
    code, out, err = create(capsys, "scada", "--scope", "pump-1", "--scope", "metrics", "--file", str(path))
    assert code == 0, err
    token = out.strip()
    assert out == token + "\n"  # alone on stdout: TOKEN=$(mcp-gateway token create ...) works
    assert len(token) >= 43  # 256 random bits, URL-safe base64
    assert token not in err
    assert "cannot be shown again" in err
    assert "Authorization: Bearer <token>" in err
    assert f'token_files = ["{path}"]' in err
    text = path.read_text()
    assert token not in text
    data = tomllib.loads(text)
    assert data["tokens"] == [
        {
            "name": "scada",
            "scopes": ["pump-1", "metrics"],
            "sha256": hashlib.sha256(token.encode()).hexdigest(),
            "created": data["tokens"][0]["created"],
        }
    ]
    assert data["tokens"][0]["created"].endswith("Z")


def test_the_file_is_created_mode_0600_and_replaced_atomically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.toml"
    assert create(capsys, "scada", "--file", str(path))[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    inode = path.stat().st_ino
    assert create(capsys, "hmi", "--scope", "pump-2", "--file", str(path))[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert [entry.name for entry in read_token_file(path)] == ["scada", "hmi"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.toml"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.toml"
    assert create(capsys, "scada", "--file", str(path))[0] == 0
    before = path.read_bytes()

    def disk_full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    code, out, err = create(capsys, "hmi", "--file", str(path))
    assert code == 2 and out == ""  # no token printed for a token that was not stored
    assert "No space left on device" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.toml"]


def test_a_duplicate_name_is_refused_unless_replace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tokens.toml"
    create(capsys, "scada", "--file", str(path))
    first = read_token_file(path)[0].sha256
    code, out, err = create(capsys, "scada", "--file", str(path))
    assert code == 2 and out == ""
    assert "exists already" in err and "--replace" in err
    assert read_token_file(path)[0].sha256 == first
    code, out, _ = create(capsys, "scada", "--scope", "pump-9", "--file", str(path), "--replace")
    assert code == 0
    entries = read_token_file(path)
    assert [(entry.name, entry.scopes) for entry in entries] == [("scada", ["pump-9"])]
    assert entries[0].sha256 == hashlib.sha256(out.strip().encode()).hexdigest() != first


@pytest.mark.parametrize("mode", [0o620, 0o606, 0o664])
def test_a_file_others_can_write_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int) -> None:
    path = tmp_path / "tokens.toml"
    create(capsys, "scada", "--file", str(path))
    os.chmod(path, mode)
    before = path.read_bytes()
    code, out, err = create(capsys, "hmi", "--file", str(path))
    assert code == 2 and out == ""
    assert "writable by users other than its owner" in err and "chmod 600" in err
    assert path.read_bytes() == before


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_file_others_can_only_read_is_used_with_a_warning_and_written_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    path = tmp_path / "tokens.toml"
    create(capsys, "scada", "--file", str(path))
    os.chmod(path, mode)
    code, out, err = create(capsys, "hmi", "--file", str(path))
    assert code == 0 and out.strip()
    assert "warning: token file" in err and "readable by users other than its owner" in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bad name"], "a token name is"),
        (["_x"], "a token name is"),
        (["ok", "--scope", "two words"], "a scope is"),
        (["ok", "--scope", 'q"uote'], "a scope is"),
    ],
)
def test_invalid_names_and_scopes_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = create(capsys, *args, "--file", str(tmp_path / "tokens.toml"))
    assert code == 2 and out == ""
    assert message in err
    assert not (tmp_path / "tokens.toml").exists()


def test_the_default_file_is_the_configured_one_else_the_appliance_one_else_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert create(capsys, "a")[0] == 0
    assert (tmp_path / "tokens.toml").exists()

    etc = tmp_path / "etc-mcp-gateway"
    etc.mkdir()
    monkeypatch.setattr(token_files, "APPLIANCE_DIR", etc)
    code, _, err = create(capsys, "b")
    assert code == 0 and (etc / "tokens.toml").exists()
    assert str(etc / "tokens.toml") in err

    configured = tmp_path / "site-tokens.toml"
    config = tmp_path / "gateway.toml"
    # The config names a secret the operator's shell does not have: token create must not care.
    config.write_text(
        f'[auth]\ntoken_files = ["{configured}"]\ntokens = [{{ name = "svc", env = "ONLY_IN_THE_SERVICE" }}]\n'
    )
    code, _, err = create(capsys, "c", "--config", str(config))
    assert code == 0, err
    assert [entry.name for entry in read_token_file(configured)] == ["c"]
    assert "token_files = [" not in err  # already listed: nothing to add
