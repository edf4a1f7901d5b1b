"""Numbers on the command line are finite and ports are ports, refused as usage errors (exit 2) naming
the option; `discover --json` answers a bad --timeout with its JSON object; `devices --json` keeps
stdout free of prose when there is no registry.

Unchecked, `sim --telemetry-period-s nan` died with a traceback (inf: OverflowError), `sim-fault
pump-2 link_drop --seconds inf` exited 0 with the pump dialling back at once (the JSON body held
null), `tls self-signed --port 99999` printed URLs with that port, `discover --json --timeout abc`
printed argparse's usage and no JSON, and `devices --json` printed a sentence on stdout.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.cli import main
from tests.unit.test_cli_client_flags import usage_error

pytestmark = pytest.mark.usefixtures("cli_environment")

FINITE = "expected a finite number, e.g. 2.5, got"
REFUSED = [
    (["sim"], "--telemetry-period-s", "nan", f"{FINITE} 'nan'"),
    (["sim"], "--telemetry-period-s", "inf", f"{FINITE} 'inf'"),
    (["sim"], "--deadman-s", "inf", f"{FINITE} 'inf'"),
    (["sim"], "--dry-run-s", "-nan", f"{FINITE} '-nan'"),
    (["sim-fault", "pump-2", "link_drop"], "--seconds", "inf", "expected a number from 0 to 86400, got 'inf'"),
    (["sim-fault", "pump-2", "link_drop"], "--seconds", "nan", "expected a number from 0 to 86400, got 'nan'"),
    (["sim-fault", "pump-2", "link_drop"], "--seconds", "-5", "expected a number from 0 to 86400, got '-5'"),
    (["tls", "self-signed"], "--port", "99999", "expected a whole number from 1 to 65535, got '99999'"),
    (["tls", "self-signed"], "--port", "0", "expected a whole number from 1 to 65535, got '0'"),
    (["run"], "--port", "70000", "expected a whole number from 0 to 65535 (0: any free port), got '70000'"),
    (["config", "check"], "--port", "-1", "expected a whole number from 0 to 65535 (0: any free port), got '-1'"),
]


@pytest.mark.parametrize(
    ("command", "flag", "value", "reason"), REFUSED, ids=[f"{' '.join(c)} {f} {v}" for c, f, v, _ in REFUSED]
)
def test_a_number_that_is_not_finite_or_a_port_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: list[str], flag: str, value: str, reason: str
) -> None:
    line = usage_error(capsys, [*command, f"{flag}={value}"])
    assert line.endswith(f": error: argument {flag}: {reason}")


def test_sim_fault_refuses_a_fault_it_does_not_know_before_asking_the_simulator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No simulator listens at --control: a refusal that needed it would exit 1 with "did not answer"."""
    control = ["--control", "http://127.0.0.1:9"]
    line = usage_error(capsys, ["sim-fault", *control, "pump-1", "nosuchfault"])
    assert line.endswith(
        "argument FAULT: invalid choice: 'nosuchfault' "
        "(choose from 'dry_run', 'sensor_failure', 'overtemp', 'reboot', 'link_drop')"
    )
    assert main(["sim-fault", *control, "pump-1", "dry_run", "--seconds", "3"]) == 2
    assert capsys.readouterr() == (
        "",
        "mcp-gateway sim-fault: --seconds applies to link_drop only (how long the pump stays offline)\n",
    )
    assert main(["sim-fault", *control, "pump-1", "reboot", "--clear"]) == 2
    assert capsys.readouterr() == ("", "mcp-gateway sim-fault: reboot is an event, there is nothing to --clear\n")


def test_the_cli_knows_the_faults_and_the_bound_the_simulator_takes() -> None:
    from sim import FAULT_NAMES, MAX_OFFLINE_S
    from sim.simulator import FAULTS, BadFault, Simulator, SimulatorSettings

    assert FAULT_NAMES == FAULTS
    simulator = Simulator(None, SimulatorSettings(pumps=1))
    with pytest.raises(BadFault, match=r"^seconds must be between 0 and 86400$"):
        simulator.apply("pump-1", "link_drop", seconds=MAX_OFFLINE_S + 1)


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "0", "-1", "61"])
def test_discover_json_answers_a_bad_timeout_with_its_json_object(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    said = f"--timeout must be a number of seconds, more than 0 and at most 60, got {value!r}"
    assert main(["discover", "--json", "--timeout", value]) == 2
    out, err = capsys.readouterr()
    assert orjson.loads(out) == {"error": "bad_timeout", "message": said}
    assert err == f"mcp-gateway discover: {said}\n"
    assert main(["discover", "--timeout", value]) == 2
    assert capsys.readouterr() == ("", f"mcp-gateway discover: {said}\n")


def test_devices_json_prints_no_prose_on_stdout_without_a_registry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    registry = tmp_path / "devices.db"
    note = f"no device registry at {registry} yet: the gateway records the boards it hears there\n"
    assert main(["devices", "--json", "--registry", str(registry)]) == 0
    assert capsys.readouterr() == ("", note)
    assert main(["devices", "--registry", str(registry)]) == 0
    assert capsys.readouterr() == (note, "")
    assert not registry.exists()
