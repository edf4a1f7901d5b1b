"""The client commands' shared flags and usage errors: --url and $MCP_GATEWAY_URL, --control and
$MCP_GATEWAY_SIM_CONTROL, `call`'s key=value arguments, schema-hash's FILE, the help of call and config."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.ports import free_port
from gateway.cli import build_parser, main
from gateway.cli.calls import _client_token
from gateway.client import _OBSERVE_TOOLS, _POLICY_ONLY_TOOLS, broker_tool_hint, parse_arguments
from gateway.core.broker import governed_tools, recheck_tool, reload_tool, serial_tools, server

# Every command that talks to a running gateway, with the rest of a valid command line.
CLIENT_COMMANDS = [
    ["call", "pump-3", "get_status"],
    ["slots"],
    ["tools", "pump-3"],
    ["schema-hash", "--slot", "pump-3"],
    ["reload"],
    ["approve", "3f9a01c2"],
    ["policy", "reload"],
    ["flash", "/dev/ttyUSB0"],
    ["device", "update", "pump-7"],
    ["devices", "revoke", "ID"],
]
BAD_URLS = [
    ("127.0.0.1:3170", "must start with http:// or https://, e.g. http://HOST:PORT; got '127.0.0.1:3170'"),
    ("http://127.0.0.1:99999", "has no valid port (1-65535), e.g. http://HOST:PORT; got 'http://127.0.0.1:99999'"),
    ("http://127.0.0.1:0", "has no valid port (1-65535)"),
    ("http://127.0.0.1:port", "has no valid port (1-65535)"),
    ("http://:3170", "has no host, e.g. http://HOST:PORT; got 'http://:3170'"),
    (
        "http://127.0.0.1:3170/pump-3/mcp",
        "is the gateway's base URL, e.g. http://HOST:PORT, with no path; got 'http://127.0.0.1:3170/pump-3/mcp'",
    ),
    ("http://127.0.0.1:3170?x=1", "is the gateway's base URL, e.g. http://HOST:PORT, with no query (?...)"),
    (
        "http://agent:s3cret@127.0.0.1:3170",  # the message does not repeat it: it may be a secret
        "carries a user or password (user@ before the host); give the gateway's base URL as http://HOST:PORT, "
        "and a token with --token-file",
    ),
]


pytestmark = pytest.mark.usefixtures("cli_environment")


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The last line argparse prints for `argv`, which must be a usage error (exit 2, no traceback)."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
@pytest.mark.parametrize(("url", "reason"), BAD_URLS, ids=[url for url, _ in BAD_URLS])
def test_every_client_command_refuses_a_url_that_is_no_base_url(
    capsys: pytest.CaptureFixture[str], command: list[str], url: str, reason: str
) -> None:
    line = usage_error(capsys, [*command, "--url", url])
    assert f"error: argument --url: {reason}" in line
    assert "s3cret" not in line


@pytest.mark.parametrize("url", ["http://127.0.0.1:3170", "https://gw.plant.lan", "http://[::1]:3170/"])
def test_a_base_url_is_taken_as_given(url: str) -> None:
    assert build_parser().parse_args(["slots", "--url", url]).url == url


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_mcp_gateway_url_is_the_default_of_every_client_command(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    assert build_parser().parse_args(command).url == "http://127.0.0.1:3000"
    monkeypatch.setenv("MCP_GATEWAY_URL", "http://10.0.0.5:3170")
    assert build_parser().parse_args(command).url == "http://10.0.0.5:3170"
    assert build_parser().parse_args([*command, "--url", "http://127.0.0.1:4000"]).url == "http://127.0.0.1:4000"


def test_a_bad_mcp_gateway_url_is_a_usage_error_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_URL", "127.0.0.1:3170")
    assert usage_error(capsys, ["call", "pump-3", "get_status"]) == (
        "mcp-gateway call: error: argument --url: (from $MCP_GATEWAY_URL) must start with http:// or https://, "
        "e.g. http://HOST:PORT; got '127.0.0.1:3170'"
    )


def test_an_explicit_url_wins_over_a_bad_mcp_gateway_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_GATEWAY_URL", "127.0.0.1:3170")
    port = free_port()  # nobody listens there: the command gets as far as connecting
    assert main(["call", "pump-1", "get_status", "--url", f"http://127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err.startswith(f"mcp-gateway: cannot reach the gateway at http://127.0.0.1:{port}/")


def test_call_connects_to_the_gateway_mcp_gateway_url_names(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("MCP_GATEWAY_URL", f"http://127.0.0.1:{port}")
    assert main(["call", "pump-1", "get_status"]) == 1
    assert capsys.readouterr().err.startswith(
        f"mcp-gateway: cannot reach the gateway at http://127.0.0.1:{port}/pump-1/mcp"
    )


def test_the_client_side_variables_are_not_gateway_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell that sets them for the client commands can still check and run the gateway."""
    monkeypatch.setenv("MCP_GATEWAY_URL", "http://127.0.0.1:3170")
    monkeypatch.setenv("MCP_GATEWAY_SIM_CONTROL", "http://127.0.0.1:3971")
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out == "configuration OK\n"


@pytest.mark.parametrize("command", [["sim-status"], ["sim-fault", "pump-1", "dry_run"]], ids=lambda a: a[0])
def test_sim_control_is_checked_as_url_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    assert usage_error(capsys, [*command, "--control", "127.0.0.1:3971"]).endswith(
        "error: argument --control: must start with http:// or https://, e.g. http://127.0.0.1:3901; "
        "got '127.0.0.1:3971'"
    )
    assert build_parser().parse_args(command).control == "http://127.0.0.1:3901"
    monkeypatch.setenv("MCP_GATEWAY_SIM_CONTROL", "http://127.0.0.1:3971")
    assert build_parser().parse_args(command).control == "http://127.0.0.1:3971"
    monkeypatch.setenv("MCP_GATEWAY_SIM_CONTROL", "127.0.0.1:3971")
    assert "argument --control: (from $MCP_GATEWAY_SIM_CONTROL) must start with" in usage_error(capsys, command)


@pytest.mark.parametrize("command", [["sim-status"], ["sim-fault", "pump-1", "dry_run"]], ids=lambda a: a[0])
def test_sim_control_with_a_user_names_no_token_flag(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    # The control endpoint takes no credentials, and these commands have no --token-file to point at.
    assert usage_error(capsys, [*command, "--control", "http://u:s3cret@127.0.0.1:3971"]).endswith(
        "error: argument --control: carries a user or password (user@ before the host); give the simulator's "
        "control endpoint as http://127.0.0.1:3901, without credentials"
    )


def test_call_refuses_an_argument_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "pump-1", "set_speed", "speed_rpm=1800", "speed_rpm=1900"]) == 2
    assert capsys.readouterr().err == "mcp-gateway call: argument 'speed_rpm' is given twice; give each argument once\n"


def test_a_value_that_is_not_json_stays_text() -> None:
    assert parse_arguments(["speed_rpm=01200", "mode=auto", "speed=1200"]) == {
        "speed_rpm": "01200",
        "mode": "auto",
        "speed": 1200,
    }


def test_schema_hash_of_a_missing_file_points_at_slot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema-hash", "--url", "http://127.0.0.1:3170", "pump-1"]) == 2
    assert capsys.readouterr().err == (
        "mcp-gateway schema-hash: no such file: pump-1 (to hash the tools a live slot lists, use --slot pump-1)\n"
    )
    # A path is no slot's name: no hint to hash it as one.
    assert main(["schema-hash", "/nonexistent/pump-1.json"]) == 2
    assert capsys.readouterr().err == "mcp-gateway schema-hash: no such file: /nonexistent/pump-1.json\n"


@pytest.mark.parametrize("command", ["call", "config"])
def test_every_argument_of_call_and_config_has_help(command: str) -> None:
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    sub = commands.choices[command]
    undocumented = [action.dest for action in sub._actions if not action.help]
    assert undocumented == []


def test_broker_tool_hint_names_the_grant() -> None:
    assert broker_tool_hint("providers_list") == (
        "providers_list is hidden from a caller the policy does not grant it: this token may lack "
        "tool:providers_list or tool.observe on /_system/broker (docs/governance.md), or the gateway is older than "
        "this mcp-gateway"
    )
    assert "broker_approve exists only on a gateway with a [policy]" in broker_tool_hint("broker_approve")
    assert "tool:broker_approve or tool.control on /_system/broker" in broker_tool_hint("broker_approve")
    assert "may lack broker.audit.read on /_system/broker" in broker_tool_hint("broker_audit_recent")


def test_the_hints_tool_classes_are_the_brokers() -> None:
    """The hint's read-only set is the _broker tools annotated readOnlyHint (the audit has a grant of its own)."""
    tools = [*server.TOOLS, *governed_tools.TOOLS, *serial_tools.TOOLS, reload_tool.TOOL, recheck_tool.TOOL]
    read_only = {t["name"] for t in tools if t["annotations"]["readOnlyHint"]} - {"broker_audit_recent"}
    assert read_only == _OBSERVE_TOOLS
    assert {t["name"] for t in governed_tools.TOOLS} == _POLICY_ONLY_TOOLS


def test_approve_deny_without_an_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Without the check it listed the pending calls and exited 0, as if the denial had been made.
    assert main(["approve", "--deny", "--url", "http://127.0.0.1:9"]) == 2
    assert "--deny needs the ID of the call to deny" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["call", "pump-3", "get_status"], ["slots"], ["stdio"]])
def test_a_client_token_of_two_lines_is_a_usage_error_not_a_header_injection(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    # A token goes into an HTTP header: a second line would be refused there with a traceback, or the
    # stdio bridge would leave its host unanswered. It is read as the gateway reads its secret files.
    url = f"http://127.0.0.1:{free_port()}"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-of-some-length\nsecond\n")
    assert main([*command, "--url", url, "--token-file", str(token_file)]) == 2
    assert f"--token-file {token_file} holds 2 non-empty lines; put the secret alone on one line" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("MCP_GATEWAY_TOKEN", "s3cret-token-of-some-length\nsecond")
    assert main([*command, "--url", url]) == 2
    assert "$MCP_GATEWAY_TOKEN holds 2 non-empty lines" in capsys.readouterr().err


def test_a_client_token_file_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("\ufeffs3cret-token-of-some-length\r\n", encoding="utf-8")
    args = argparse.Namespace(token_file=str(token_file))
    assert _client_token(args) == "s3cret-token-of-some-length"
