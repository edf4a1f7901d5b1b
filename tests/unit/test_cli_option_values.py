"""The numbers, ports and files of flash, device install and update, sim, run's simulator flags and stdio,
refused when the command line is parsed or before anything starts, each naming its option.

Unchecked, `flash --connect-attempts 0` hangs for ever (esptool retries without end), `sim
--control-port 70001` dies with an OverflowError traceback, `run --sim-control-port 70000` binds port
4464 (70000 mod 65536), `device install --watchdog-s -5` writes it to the board, and `--ca-file` of a
missing file says only `[Errno 2] No such file or directory`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import build_parser, main
from sim import MAX_PUMPS
from tests.unit.test_cli_client_flags import usage_error

pytestmark = pytest.mark.usefixtures("cli_environment")

INSTALL = ["device", "install", "/dev/ttyUSB0", "--slot", "pump-7", "--gateway-url", "ws://192.168.1.10:3000"]
UPDATE = ["device", "update", "pump-7"]
FLASH = ["flash", "/dev/ttyUSB0"]


REFUSED = [
    (FLASH, "--connect-attempts", "0", "expected a whole number of 1 or more, got '0'"),
    (FLASH, "--connect-attempts", "-1", "expected a whole number of 1 or more, got '-1'"),
    (FLASH, "--baud", "0", "expected a whole number of 1 or more, got '0'"),
    (FLASH, "--baud", "fast", "expected a whole number of 1 or more, got 'fast'"),
    (INSTALL, "--baud", "-9600", "expected a whole number of 1 or more, got '-9600'"),
    (INSTALL, "--watchdog-s", "-5", "expected a whole number of 0 or more (0: off), got '-5'"),
    (INSTALL, "--pace-ms", "-1", "expected a number from 0 to 1000, got '-1'"),
    (INSTALL, "--pace-ms", "nan", "expected a number from 0 to 1000, got 'nan'"),
    (INSTALL, "--pace-ms", "inf", "expected a number from 0 to 1000, got 'inf'"),
    (INSTALL, "--mqtt-port", "0", "expected a whole number from 1 to 65535, got '0'"),
    (INSTALL, "--mqtt-port", "70000", "expected a whole number from 1 to 65535, got '70000'"),
    (INSTALL, "--serial-uart", "3", "invalid choice: '3' (choose from '1', '2', 'console')"),
    (UPDATE, "--wait-s", "0", "expected a number above 0, got '0'"),
    (UPDATE, "--pace-ms", "-1", "expected a number from 0 to 1000, got '-1'"),
    (UPDATE, "--baud", "0", "expected a whole number of 1 or more, got '0'"),
    (["sim"], "--control-port", "70001", "expected a whole number from 0 to 65535 (0: any free port), got '70001'"),
    (["sim"], "--control-port", "-1", "expected a whole number from 0 to 65535 (0: any free port), got '-1'"),
    (["run"], "--sim-control-port", "70000", "expected a whole number from 0 to 65535 (0: any free port), got '70000'"),
    (["run"], "--sim-control-port", "-5", "expected a whole number from 0 to 65535 (0: any free port), got '-5'"),
    (["run"], "--sim-pumps", str(MAX_PUMPS + 1), f"expected a whole number from 0 to {MAX_PUMPS}, got '1001'"),
    (["run"], "--sim-pumps", "-1", f"expected a whole number from 0 to {MAX_PUMPS}, got '-1'"),
]


@pytest.mark.parametrize(
    ("command", "flag", "value", "reason"), REFUSED, ids=[f"{c[0]} {f} {v}" for c, f, v, _ in REFUSED]
)
def test_a_value_out_of_range_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], command: list[str], flag: str, value: str, reason: str
) -> None:
    line = usage_error(capsys, [*command, f"{flag}={value}"])
    assert line.endswith(f": error: argument {flag}: {reason}")


@pytest.mark.parametrize(
    ("command", "flag", "value", "parsed"),
    [
        (FLASH, "--connect-attempts", "1", 1),
        (FLASH, "--baud", "115200", 115200),
        (INSTALL, "--watchdog-s", "0", 0),
        (INSTALL, "--pace-ms", "0", 0.0),
        (INSTALL, "--pace-ms", "2.5", 2.5),
        (INSTALL, "--mqtt-port", "65535", 65535),
        (INSTALL, "--serial-uart", "console", "console"),
        (UPDATE, "--wait-s", "0.5", 0.5),
        (["sim"], "--control-port", "0", 0),
        (["sim"], "--control-port", "65535", 65535),
        (["run"], "--sim-control-port", "0", 0),
        (["run"], "--sim-pumps", str(MAX_PUMPS), MAX_PUMPS),
    ],
)
def test_the_edges_of_each_range_are_taken(command: list[str], flag: str, value: str, parsed: object) -> None:
    args = build_parser().parse_args([*command, flag, value])
    assert getattr(args, flag.lstrip("-").replace("-", "_")) == parsed


def test_sim_and_run_cap_the_pumps_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """One cap, sim.MAX_PUMPS: `run --sim-pumps` took 1001 while `sim --pumps` stopped at 1000."""
    assert main(["sim", "--pumps", str(MAX_PUMPS + 1)]) == 2
    assert capsys.readouterr().err == f"mcp-gateway sim: --pumps must be between 1 and {MAX_PUMPS}, got 1001\n"
    line = usage_error(capsys, ["run", "--sim-pumps", str(MAX_PUMPS + 1)])
    assert line.endswith(f"argument --sim-pumps: expected a whole number from 0 to {MAX_PUMPS}, got '1001'")
    assert build_parser().parse_args(["sim", "--pumps", str(MAX_PUMPS)]).pumps == MAX_PUMPS


def ca_files(tmp_path: Path) -> list[tuple[str, str]]:
    """A CA file that is missing, one that holds no certificate, and a directory, with what each is told."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = tmp_path / "missing.pem"
    return [
        (str(missing), f"--ca-file {missing} cannot be read: No such file or directory"),
        (
            str(junk),
            f"--ca-file {junk} holds no CA certificate in PEM form (NO_CERTIFICATE_OR_CRL_FOUND): give the CA's "
            "PEM file, e.g. the ca.pem of `mcp-gateway tls self-signed`",
        ),
        (str(tmp_path), f"--ca-file {tmp_path} cannot be read: Is a directory"),
    ]


@pytest.mark.parametrize("command", [["stdio"], ["sim"], ["sim", "--mqtt", "mqtt://127.0.0.1:1883"]])
def test_a_ca_file_that_cannot_be_used_is_named_with_its_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    name = command[0]
    for path, said in ca_files(tmp_path):
        assert main([*command, "--ca-file", path]) == 2
        assert capsys.readouterr() == ("", f"mcp-gateway {name}: {said}\n")


def test_sim_names_a_provider_token_file_that_cannot_be_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "token"
    assert main(["sim", "--provider-token-file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mcp-gateway sim: --provider-token-file {missing}: cannot be read (")
    missing.write_text("\n")
    assert main(["sim", "--provider-token-file", str(missing)]) == 2
    assert capsys.readouterr().err == f"mcp-gateway sim: --provider-token-file {missing} is empty\n"


def test_a_flash_request_that_would_retry_for_ever_is_refused() -> None:
    """esptool takes 0 attempts as "for ever": a caller of gateway.flash other than the CLI is refused too."""
    from gateway.flash.procedure import FlashRequest

    with pytest.raises(ValueError, match=r"^connect_attempts must be 1 or more, got 0$"):
        FlashRequest(port="/dev/ttyUSB0", firmware=None, firmware_dir=Path("."), connect_attempts=0)
    with pytest.raises(ValueError, match=r"^baud must be 1 or more, got -1$"):
        FlashRequest(port="/dev/ttyUSB0", firmware=None, firmware_dir=Path("."), baud=-1)
