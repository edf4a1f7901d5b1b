"""`--serial-link` after a killed simulator: its link points at a pseudo-terminal number the new one
reuses (openpty hands out the lowest free one), and is taken; a link path in a missing directory is
a usage error before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.serial_line import SerialLinkError, check_link_path, take_link


def test_a_link_to_the_new_pseudo_terminal_itself_is_taken(tmp_path: Path) -> None:
    master, slave = os.openpty()
    try:
        own = os.ttyname(slave)
        link = tmp_path / "ttyPUMP"
        link.symlink_to(own)  # as a killed simulator left it, its number now this run's
        take_link(str(link), own)
        assert os.readlink(link) == own
        # A link to another live pseudo-terminal is still refused.
        other_master, other_slave = os.openpty()
        try:
            with pytest.raises(SerialLinkError, match="which exists"):
                take_link(str(link), os.ttyname(other_slave))
        finally:
            os.close(other_master)
            os.close(other_slave)
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize(
    ("path", "said"),
    [("", "give the path of the link"), ("{tmp}/nodir/tty", "the directory {tmp}/nodir does not exist")],
)
def test_an_empty_path_or_a_missing_directory_is_refused(tmp_path: Path, path: str, said: str) -> None:
    with pytest.raises(SerialLinkError, match=said.format(tmp=tmp_path)):
        check_link_path(path.format(tmp=tmp_path))


@pytest.mark.timeout(60)
def test_the_cli_refuses_a_link_in_a_missing_directory_without_saying_it_stopped(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "sim",
            "--serial-pty",
            "--serial-link",
            str(tmp_path / "no" / "tty"),
            "--control-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "does not exist; create it first" in done.stderr
    assert "simulator stopped" not in done.stderr
