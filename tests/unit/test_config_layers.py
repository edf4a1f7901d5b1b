"""Every layer's own values are valid (docs/configuration.md, loading): a value in the file that the
environment or a flag overrides is still checked, and so is an environment value a flag overrides; an
error names the layer, the key and what overrides it. A layer incomplete on its own still loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gateway.app
from gateway.cli import main
from gateway.config import ConfigError, load_config

pytestmark = pytest.mark.usefixtures("cli_environment")

FILE_PORT_TEXT = "setting 'port': Input should be a valid integer, not text: write the number without quotes"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path | None, environ: dict[str, str], flags: dict[str, Any] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ, flags=flags)
    return str(caught.value)


def test_a_bad_file_value_overridden_by_a_flag_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = "3000"\n')
    assert refused(path, {}, {"port": 43310}) == (
        f"config file {path}: {FILE_PORT_TEXT} (the command-line flag for port overrides it, but this value "
        "must be valid too)"
    )


def test_a_bad_file_value_overridden_by_the_environment_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = "3000"\n[logging]\nlevel = "loud"\n')
    message = refused(path, {"MCP_GATEWAY_PORT": "43311", "MCP_GATEWAY_LOGGING__LEVEL": "debug"})
    assert message.startswith(f"config file {path}: setting ")
    assert "(the environment variable MCP_GATEWAY_" in message and "overrides it" in message


def test_a_bad_environment_value_overridden_by_a_flag_is_an_error_naming_the_variable() -> None:
    assert refused(None, {"MCP_GATEWAY_PORT": "true"}, {"port": 43312}) == (
        "environment variable MCP_GATEWAY_PORT: setting 'port': Input should be a valid integer, not the boolean "
        "true (the command-line flag for port overrides it, but this value must be valid too)"
    )


def test_a_file_value_that_is_not_a_table_where_a_flag_sets_a_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, 'logging = "debug"\n')
    message = refused(path, {}, {"logging.level": "info"})
    assert message.startswith(f"config file {path}: setting 'logging': ")
    assert "command-line flag for logging.level overrides it" in message


def test_valid_layers_and_layers_completed_by_later_ones_still_load(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("x")
    key.write_text("x")
    # Alone the file names a certificate without its key (invalid); the environment gives the key and
    # another certificate: the merged configuration is complete, and the file's own values are valid.
    path = write(tmp_path, f'port = 43313\n[tls]\ncert_file = "{tmp_path / "old.pem"}"\n')
    (tmp_path / "old.pem").write_text("x")
    config = load_config(
        path,
        environ={"MCP_GATEWAY_TLS__CERT_FILE": str(cert), "MCP_GATEWAY_TLS__KEY_FILE": str(key)},
        flags={"port": 43314},
    )
    assert (config.port, config.tls.cert_file, config.tls.key_file) == (43314, str(cert), str(key))
    # A repeatable flag adds to the file's entries: nothing is overridden, nothing checked twice.
    path = write(tmp_path, '[[upstreams.remote]]\nname = "far"\nurl = "https://far.plant.lan/mcp"\n')
    config = load_config(
        path, environ={}, flags={"upstreams.remote": [{"name": "near", "url": "https://near.plant.lan/mcp"}]}
    )
    assert [upstream.name for upstream in config.upstreams.remote] == ["far", "near"]


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse_to_serve(config: Any, **_: Any) -> None:
        raise AssertionError("the gateway started serving")

    monkeypatch.setattr(gateway.app, "serve", refuse_to_serve)


@pytest.mark.usefixtures("no_serving")
def test_config_check_and_run_refuse_a_bad_file_that_a_flag_masks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, 'port = "3000"\n')
    for command in ("config check", "run"):
        assert main([*command.split(), "--config", str(path), "--port", "43315"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith(f"mcp-gateway: config file {path}: {FILE_PORT_TEXT} (the command-line flag")
    monkeypatch.setenv("MCP_GATEWAY_PORT", "true")
    assert main(["config", "check", "--port", "43316"]) == 2
    assert capsys.readouterr().err.startswith("mcp-gateway: environment variable MCP_GATEWAY_PORT: setting 'port'")


def test_a_repeatable_flag_is_blamed_only_for_its_own_entries(tmp_path: Path) -> None:
    # --remote adds to the file's upstreams: the file's bad entry is the file's, the flag's the flag's.
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text('[[upstreams.remote]]\nname = "r"\nurl = "ftp://x"\n')
    good_flag = {"upstreams.remote": [{"name": "near", "url": "https://near.plant.lan/mcp"}]}
    with pytest.raises(ConfigError) as caught:
        load_config(bad_file, environ={}, flags=good_flag)
    assert str(caught.value).startswith(f"config file {bad_file}: setting 'upstreams.remote.0'")
    good_file = tmp_path / "good.toml"
    good_file.write_text('[[upstreams.remote]]\nname = "r"\nurl = "https://r.plant.lan/mcp"\n')
    bad_flag = {"upstreams.remote": [{"name": "y", "url": "ftp://y"}]}
    with pytest.raises(ConfigError) as caught:
        load_config(good_file, environ={}, flags=bad_flag)
    assert str(caught.value).startswith("command-line flag for upstreams.remote: setting 'upstreams.remote.1'")
