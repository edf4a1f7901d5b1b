"""Usage errors are the subcommand's own, and the same kind of failure exits with the same code in every
command (docs/cli.md, "Exit codes": 2 for a command line that cannot be used, 1 for an operation that
failed).

Before, `slots --jsn` printed the top-level usage listing every command, `token` alone said "the
following arguments are required: token_command", `device install … --slot pump-7` without
--gateway-url exited 1 and `policy check missing.toml` exited 1, where the same mistakes elsewhere
exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from tests.unit.test_cli_client_flags import usage_error

pytestmark = pytest.mark.usefixtures("cli_environment")


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["slots", "--jsn"], "slots"),
        (["token", "create", "agent", "--scopez", "x"], "token create"),
        (["devices", "--jsn"], "devices"),
        (["sim-status", "--jsn"], "sim-status"),
    ],
)
def test_an_unknown_option_is_refused_with_the_subcommands_own_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: mcp-gateway {prog} [-h]")
    assert "sim-fault" not in err  # not the top-level usage, which lists every command
    unknown = next(word for word in argv if word.startswith("--"))
    assert err.splitlines()[-1] == f"mcp-gateway {prog}: error: unrecognized arguments: {unknown}" + (
        " x" if prog == "token create" else ""
    )


@pytest.mark.parametrize(
    ("command", "choices"),
    [
        ("token", "create, revoke, list"),
        ("policy", "check, explain, reload"),
        ("device", "install, update"),
        ("tls", "self-signed"),
    ],
)
def test_a_missing_subcommand_is_named_with_its_choices(
    capsys: pytest.CaptureFixture[str], command: str, choices: str
) -> None:
    line = usage_error(capsys, [command])
    assert line == f"mcp-gateway {command}: error: the following arguments are required: COMMAND ({choices})"


def test_a_missing_required_option_of_device_install_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "install", "/dev/null", "--slot", "pump-7"]) == 2
    assert capsys.readouterr() == (
        "",
        "mcp-gateway: --gateway-url is needed for --transport ws, e.g. --gateway-url ws://192.168.1.10:3000\n",
    )
    assert main(["device", "install", "/dev/null", "--slot", "pump-7", "--transport", "mqtt"]) == 2
    assert capsys.readouterr().err.startswith("mcp-gateway: --mqtt-broker is needed for --transport mqtt")


def test_an_input_file_that_is_missing_is_a_usage_error_in_every_command_here(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.toml"
    for argv in (
        ["policy", "check", str(missing)],
        ["config", "check", "--config", str(missing)],
        ["token", "list", "--file", str(missing)],
        ["sim", "--provider-token-file", str(missing)],
    ):
        assert main(argv) == 2, argv
        assert str(missing) in capsys.readouterr().err
    # A policy file that is read and found wrong is the check's finding: exit 1.
    missing.write_text("roles = 3\n")
    assert main(["policy", "check", str(missing)]) == 1
