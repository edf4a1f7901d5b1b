"""`sim --serial-pty --serial-link PATH` (docs/simulator.md, "Over a serial line"): the simulator takes
PATH only when nothing is there or a link whose target is gone, and at exit removes only its own link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sim.pump import PumpSettings
from sim.serial_line import SerialTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.sim.test_sim_process import spawn, stop
from tests.support.gateway_process import run_to_exit


@pytest.mark.timeout(60)
async def test_a_file_or_a_directory_at_the_link_path_is_a_usage_error_and_stays(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("important data\n")
    code, out, err = await run_to_exit(
        "sim", "--serial-pty", "--serial-link", str(precious), "--control-port", "0", timeout=20
    )
    assert (code, out) == (2, "")
    assert err == (
        f"mcp-gateway sim: --serial-link {precious} exists and is not a symbolic link; the simulator replaces "
        "only a link whose target is gone: remove the file or choose another path\n"
    )
    assert precious.read_text() == "important data\n"
    folder = tmp_path / "adir"
    folder.mkdir()
    code, out, err = await run_to_exit("sim", "--serial-pty", "--serial-link", str(folder), "--control-port", "0")
    assert (code, out) == (2, "")
    assert (
        err == f"mcp-gateway sim: --serial-link {folder} is a directory; name the link itself, e.g. {folder}/ttyPUMP\n"
    )
    assert folder.is_dir()


@pytest.mark.timeout(60)
async def test_a_second_simulator_leaves_the_first_ones_link_alone(tmp_path: Path) -> None:
    link = tmp_path / "ttySHARED"
    first = await spawn("sim", "--serial-pty", "--serial-link", str(link), "--control-port", "0")
    try:
        assert first.stdout is not None
        assert b"serve it with" in await first.stdout.readline()  # the link is made before this line
        held = os.readlink(link)
        assert held.startswith("/dev/pts/")
        code, out, err = await run_to_exit("sim", "--serial-pty", "--serial-link", str(link), "--control-port", "0")
        assert (code, out) == (2, "")
        assert err == (
            f"mcp-gateway sim: --serial-link {link} is a link to {held}, which exists (another simulator's "
            "pseudo-terminal?); stop that simulator or choose another path\n"
        )
        assert os.readlink(link) == held
    finally:
        assert await stop(first) == 0
    assert not link.is_symlink()  # its own link, removed at exit


async def test_a_dangling_link_is_taken_and_a_link_taken_over_is_not_removed_at_exit(tmp_path: Path) -> None:
    link = tmp_path / "ttyPUMP"
    link.symlink_to(tmp_path / "gone")  # a killed simulator's link: its pseudo-terminal is gone
    settings = SimulatorSettings(pumps=1, pump=PumpSettings(telemetry=False))
    simulator = Simulator(None, settings, serial=SerialTarget(pty=True, link=str(link)))
    await simulator.start_control(0)
    simulator.start()
    try:
        line = simulator.serial_line
        assert line is not None and line.gateway_path is not None
        assert os.readlink(link) == line.gateway_path
        # Someone else's link at the name since (by hand, or a simulator started after a crash).
        link.unlink()
        link.symlink_to(tmp_path / "someone-elses")
    finally:
        await simulator.stop()
    assert os.readlink(link) == str(tmp_path / "someone-elses")


async def test_a_link_taken_between_the_check_and_the_start_is_refused_by_name(tmp_path: Path) -> None:
    link = tmp_path / "ttyPUMP"
    link.write_text("")
    simulator = Simulator(None, SimulatorSettings(pumps=1), serial=SerialTarget(pty=True, link=str(link)))
    await simulator.start_control(0)
    try:
        with pytest.raises(ValueError, match="exists and is not a symbolic link"):
            simulator.start()
    finally:
        await simulator.stop()
    assert link.read_text() == ""
