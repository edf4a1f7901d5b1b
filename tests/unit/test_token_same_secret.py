"""One secret under two names (a token entry copied by hand under another name): `token revoke` of one
name never reports the secret withdrawn while the other name still lets it in, and the clash advice of
`token list` never suggests removing one name alone as if that withdrew the secret
(docs/security-auth.md, "Listing and revoking")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy.token_files import create_token, read_token_file
from tests.unit.test_token_revoke import clean_environment, token

__all__ = ["clean_environment"]  # the autouse fixture, used by name


def copy_entry(source: Path, name: str, target: Path, new_name: str, scopes: str) -> str:
    """Append `name`'s hash from `source` to `target` as `new_name`, as a hand edit would; the hash."""
    (entry,) = [entry for entry in read_token_file(source) if entry.name == name]
    with target.open("a") as handle:
        handle.write(f'\n[[tokens]]\nname = "{new_name}"\nscopes = {scopes}\nsha256 = "{entry.sha256}"\n')
    target.chmod(0o600)
    return entry.sha256


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The tester's setup: tokens.toml holds alice (pump-1); tokens2.toml holds bob and, by hand, alice2
    with alice's secret and pump-2 too; the configuration lists both files."""
    first, second = tmp_path / "tokens.toml", tmp_path / "tokens2.toml"
    create_token(first, "alice", ["pump-1"])
    create_token(second, "bob", ["pump-1"])
    copy_entry(first, "alice", second, "alice2", '["pump-1", "pump-2"]')
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{first}", "{second}"]\n')
    return config, first, second


def test_revoking_one_name_of_a_shared_secret_exits_1_naming_the_other(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, first, second = files
    code, out, err = token(capsys, "revoke", "alice", "--config", str(config))
    # Written (a revocation is never held back), but not reported done: tokens2.toml now loads, alice2 with it.
    assert [entry.name for entry in read_token_file(first)] == []
    assert (code, out) == (1, "")
    assert f"revoked 'alice' in {first}, but the same token (the same secret) is still accepted as 'alice2' " in err
    assert f"({second})" in err
    assert f"`mcp-gateway token revoke alice2 --file {second}`" in err
    assert "Revoked token" not in err

    # Removed at the other place too, the secret is gone: done.
    code, out, err = token(capsys, "revoke", "alice2", "--file", str(second), "--config", str(config))
    assert (code, err) == (0, "")
    assert f'Revoked token "alice2" in {second}.' in out


def test_revoking_the_copy_exits_1_naming_the_original(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, first, second = files
    code, out, err = token(capsys, "revoke", "alice2", "--file", str(second), "--config", str(config))
    assert (code, out) == (1, "")
    assert [entry.name for entry in read_token_file(second)] == ["bob"]
    assert f"is still accepted as 'alice' ({first})" in err
    assert f"`mcp-gateway token revoke alice --file {first}`" in err


def test_a_secret_of_the_configuration_under_another_name_is_named_with_its_reload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "alice", ["pump-1"])
    (entry,) = read_token_file(path)
    config = tmp_path / "gw.toml"
    config.write_text(
        f'[auth]\ntoken_files = ["{path}"]\ntokens = [{{ name = "svc", scopes = [], sha256 = "{entry.sha256}" }}]\n'
    )
    code, _, err = token(capsys, "revoke", "alice", "--config", str(config))
    assert code == 1
    assert f"is still accepted as 'svc' ([[auth.tokens]] of {config})" in err
    assert f"remove the [[auth.tokens]] entry 'svc' from {config} and run `mcp-gateway reload`" in err


def test_without_a_configuration_the_file_itself_is_searched_and_the_rest_said_unseen(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, first, second = files
    # Only the file is seen: alice2 in the other file is not, and the output says so.
    code, out, err = token(capsys, "revoke", "alice", "--file", str(first))
    assert (code, err) == (0, "")
    assert f"Only {first} was searched for the same token under another name" in out
    assert "cannot see the other token files or [[auth.tokens]]" in out

    # The same secret twice in the file revoked from is seen.
    copy_entry(second, "alice2", second, "alice3", "[]")
    code, out, err = token(capsys, "revoke", "alice2", "--file", str(second))
    assert (code, out) == (1, "")
    assert f"is still accepted as 'alice3' ({second})" in err
    # A copy found does not mean every copy was found: the places not searched are said here too.
    assert f"Only {second} was searched for the same token under another name" in err
    assert "cannot see the other token files or [[auth.tokens]]" in err


def test_an_unreadable_configured_secret_is_said_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.toml"
    create_token(path, "alice", [])
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{path}"]\ntokens = [{{ name = "svc", env = "ONLY_IN_THE_SERVICE" }}]\n')
    code, out, _ = token(capsys, "revoke", "alice", "--config", str(config))
    assert code == 0
    assert "'svc' cannot be read from this shell" in out


def test_list_advises_removing_both_names_of_one_secret(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, first, second = files
    code, _, err = token(capsys, "list", "--config", str(config), "--file", str(second))
    assert code == 1
    assert f"tokens 'alice' ({first}) and 'alice2' ({second}) are the same token" in err
    assert "undo it at either place" not in err  # removing one name alone leaves the secret accepted
    assert "removing one name alone leaves the secret accepted under the other" in err
    assert (
        "remove both names to withdraw the secret (it may have leaked): "
        f"`mcp-gateway token revoke alice --file {first}`, and "
        f"`mcp-gateway token revoke alice2 --file {second}`" in err
    )
    assert "remove only the copy ('alice' or 'alice2', whichever was not meant to hold it)" in err


def test_list_advises_either_place_for_a_name_used_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    create_token(first, "scada", [])
    create_token(second, "scada", [])
    config = tmp_path / "gw.toml"
    config.write_text(f'[auth]\ntoken_files = ["{first}", "{second}"]\n')
    code, _, err = token(capsys, "list", "--config", str(config))
    assert code == 1
    assert f"undo it at either place: `mcp-gateway token revoke scada --file {first}`, or" in err
