"""`mcp-gateway token create | revoke | list` with a configuration check the token file they write
against everything the gateway loads ([[auth.tokens]] and every token file): a name or token used twice
is refused before anything is written, naming both places and how to undo it, so an operator never
believes a revocation applied that a running gateway cannot use (docs/security-auth.md)."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import pytest

from gateway.policy.token_files import create_token, read_token_file
from tests.unit.test_token_revoke import clean_environment, token

__all__ = ["clean_environment"]  # the autouse fixture, used by name


@pytest.fixture
def hist_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "hist.token"
    secret.write_text(secrets.token_urlsafe(32) + "\n")
    secret.chmod(0o600)
    return secret


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "tokens.toml"


@pytest.fixture
def config(tmp_path: Path, path: Path, hist_secret: Path) -> Path:
    """The reviewer's configuration: [[auth.tokens]] "hist" (its token in a file) and one token file."""
    config = tmp_path / "gw.toml"
    config.write_text(
        f'[auth]\ntoken_files = ["{path}"]\n'
        f'tokens = [{{ name = "hist", scopes = ["pump-2"], file = "{hist_secret}" }}]\n'
    )
    return config


@pytest.mark.parametrize("replace", [False, True])
def test_create_refuses_a_name_of_the_configuration_and_writes_nothing(
    config: Path, path: Path, capsys: pytest.CaptureFixture[str], replace: bool
) -> None:
    assert token(capsys, "create", "low", "--scope", "pump-1", "--config", str(config))[0] == 0
    before = path.read_bytes()
    code, out, err = token(
        capsys, "create", "hist", "--scope", "pump-1", "--config", str(config), *(["--replace"] * replace)
    )
    assert (code, out) == (2, "")
    assert f"the token name 'hist' is used in both [[auth.tokens]] of {config} and {path}" in err
    assert "nothing written" in err and "choose another name" in err
    assert ("--replace replaces a token of" in err) == replace
    assert path.read_bytes() == before


def test_create_refuses_a_name_of_another_token_file_and_checks_the_file_alone_without_a_configuration(
    tmp_path: Path, path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.toml"
    create_token(other, "scada", [])
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{path}", "{other}"]\n')
    code, _, err = token(capsys, "create", "scada", "--config", str(config))
    assert code == 2
    assert f"the token name 'scada' is used in both {path} and {other}" in err
    assert not path.exists()
    # Without a configuration only the file itself is known: its names alone are checked.
    assert token(capsys, "create", "scada", "--file", str(path))[0] == 0


def test_create_refuses_when_a_token_of_the_configuration_sits_under_another_name(
    config: Path, path: Path, hist_secret: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The [[auth.tokens]] "hist" token copied into the file as "copy": the gateway loads neither.
    digest = hashlib.sha256(hist_secret.read_text().strip().encode()).hexdigest()
    path.write_text(f'[[tokens]]\nname = "copy"\nscopes = []\nsha256 = "{digest}"\n')
    path.chmod(0o600)
    code, _, err = token(capsys, "create", "low", "--config", str(config))
    assert code == 2
    assert f"tokens 'hist' ([[auth.tokens]] of {config}) and 'copy' ({path}) are the same token" in err
    assert f"`mcp-gateway token revoke copy --file {path}`" in err
    assert [entry.name for entry in read_token_file(path)] == ["copy"]


def test_a_revocation_the_gateway_cannot_apply_yet_is_written_and_says_the_way_out(
    config: Path, path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token(capsys, "create", "low", "--scope", "pump-1", "--config", str(config))
    create_token(path, "hist", ["pump-1"])  # a clash made without --config (the file alone is checked then)

    # A revocation is never held back (a leaked token must go), but exit 1 says it does not apply yet.
    code, out, err = token(capsys, "revoke", "low", "--config", str(config))
    assert (code, out) == (1, "")
    assert f"revoked 'low' in {path}, but the token name 'hist' is used in both [[auth.tokens]] of {config}" in err
    assert "'low' is still accepted until that is mended" in err
    assert f"remove the [[auth.tokens]] entry 'hist' from {config} and run `mcp-gateway reload`" in err
    assert f"`mcp-gateway token revoke hist --file {path}`" in err
    assert [entry.name for entry in read_token_file(path)] == ["hist"]

    code, out, err = token(capsys, "list", "--config", str(config))
    assert code == 1 and "hist" in out and "low" not in out
    assert "the gateway cannot use these tokens" in err

    # Mended as the message says, the file is usable again, the revocation with it.
    assert token(capsys, "revoke", "hist", "--file", str(path), "--config", str(config))[0] == 0
    assert read_token_file(path) == []
    assert token(capsys, "list", "--config", str(config))[0] == 0


def test_the_configuration_from_the_environment_is_checked_too(
    config: Path, path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_CONFIG", str(config))
    code, _, err = token(capsys, "create", "hist")
    assert code == 2 and "is used in both [[auth.tokens]]" in err
    assert not path.exists()


def test_an_unusable_other_token_file_is_named_before_writing(
    tmp_path: Path, path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.toml"
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{path}", "{missing}"]\n')
    code, _, err = token(capsys, "create", "low", "--config", str(config))
    assert code == 2
    assert f"token file {missing}: not found" in err
    assert not path.exists()
