"""The `mcp-gateway` command (gateway/cli.py) through `main([...])`, and `call`'s argument parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import gateway.app
from bench.ports import free_port
from gateway import __version__
from gateway.cli import main
from gateway.client import parse_arguments


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MCP_GATEWAY_* from the machine running the tests, and no config file by accident."""
    import os

    for name in list(os.environ):
        if name.startswith("MCP_GATEWAY"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` must refuse before it serves anything; serving here would be a failure, not a hang."""

    async def refuse_to_serve(config: Any) -> None:
        raise AssertionError("the gateway started serving")

    monkeypatch.setattr(gateway.app, "serve", refuse_to_serve)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"mcp-gateway {__version__}\n"


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "usage: mcp-gateway" in capsys.readouterr().err


def test_config_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out == "configuration OK\n"


def test_config_show_prints_the_effective_values_as_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text('host = "127.0.0.2"\n[limits]\nmax_body_bytes = 1000\n', encoding="utf-8")
    monkeypatch.setenv("MCP_GATEWAY_LIMITS__MAX_SLOTS", "12")
    assert main(["config", "show", "--config", str(config_file), "--port", "4000"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown["host"] == "127.0.0.2"  # file
    assert shown["limits"]["max_body_bytes"] == 1000  # file
    assert shown["limits"]["max_slots"] == 12  # environment
    assert shown["port"] == 4000  # flag
    assert shown["providers"]["takeover"] == "liveness"  # default


def test_config_show_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert (shown["host"], shown["port"], shown["insecure_lan"]) == ("127.0.0.1", 3000, False)


def test_config_check_with_a_missing_file_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", "missing.toml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "mcp-gateway: config file missing.toml: not found\n"


def test_config_check_with_an_unknown_key_names_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text("prot = 3000\n", encoding="utf-8")
    assert main(["config", "check", "--config", str(config_file)]) == 2
    assert f"config file {config_file}: unknown setting 'prot'" in capsys.readouterr().err


def test_config_check_with_a_bad_environment_variable_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_PROT", "3000")
    assert main(["config", "check"]) == 2
    assert "environment variable MCP_GATEWAY_PROT: no such setting" in capsys.readouterr().err


def test_config_check_warns_that_run_would_refuse_a_lan_bind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--host", "0.0.0.0"]) == 2
    assert "`run` would refuse it" in capsys.readouterr().err
    assert main(["config", "check", "--host", "0.0.0.0", "--insecure-lan"]) == 0


@pytest.mark.usefixtures("no_serving")
def test_run_refuses_a_lan_bind_without_insecure_lan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "mcp-gateway: refusing to listen on 0.0.0.0 without client authentication or provider authentication"
    )
    # The message says what to do instead: both keys, loopback, or the flag.
    assert "[auth]" in err and "[providers.auth]" in err
    assert "bind to 127.0.0.1" in err
    assert "--insecure-lan" in err


@pytest.mark.usefixtures("no_serving")
def test_run_refuses_a_lan_bind_from_the_environment_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_HOST", "192.168.1.20")
    assert main(["run"]) == 2
    assert "refusing to listen on 192.168.1.20" in capsys.readouterr().err


@pytest.mark.usefixtures("no_serving")
def test_run_with_a_missing_config_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", "missing.toml"]) == 2
    assert "config file missing.toml: not found" in capsys.readouterr().err


def test_call_against_a_closed_port_says_the_gateway_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nobody listens there
    assert main(["call", "pump-1", "add", "a=1", "b=2", "--url", f"http://127.0.0.1:{port}"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"mcp-gateway: cannot reach the gateway at http://127.0.0.1:{port}/pump-1/mcp")


def test_call_with_an_argument_without_equals_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "pump-1", "add", "a=1", "b"]) == 2
    assert capsys.readouterr().err == "mcp-gateway call: argument 'b' is not key=value\n"


# -- parse_arguments ----------------------------------------------------------------------------


def test_json_values_are_taken_as_json() -> None:
    assert parse_arguments(["a=1", "b=2.5", "on=true", "off=false", "nothing=null"]) == {
        "a": 1,
        "b": 2.5,
        "on": True,
        "off": False,
        "nothing": None,
    }
    assert parse_arguments(['point={"x": 1, "y": [2, 3]}', "list=[1,2]", 'quoted="42"']) == {
        "point": {"x": 1, "y": [2, 3]},
        "list": [1, 2],
        "quoted": "42",
    }


def test_other_values_are_text() -> None:
    assert parse_arguments(["name=pump one", "serial=007", "empty=", "tag={not json"]) == {
        "name": "pump one",
        "serial": "007",  # leading zeros are not JSON, so a serial number stays text
        "empty": "",
        "tag": "{not json",
    }


def test_only_the_first_equals_splits() -> None:
    assert parse_arguments(["expr=a=b", "url=http://x/?q=1"]) == {"expr": "a=b", "url": "http://x/?q=1"}


def test_no_arguments() -> None:
    assert parse_arguments([]) == {}


@pytest.mark.parametrize("pair", ["a", "=1", ""])
def test_missing_equals_or_key_is_refused(pair: str) -> None:
    with pytest.raises(ValueError, match="is not key=value"):
        parse_arguments([pair])
