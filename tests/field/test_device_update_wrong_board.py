"""`mcp-gateway device update SLOT` onto the board on another port than SLOT's: the update probes the
board first and stops, board untouched, when its device id is not that of the board serving SLOT (the
registry's adoption, else the gateway's hello), instead of copying SLOT's new code onto another slot's
board and resetting it.

The boards: the MicroPython Unix port behind a PTY, each with a MAC of its own
(tests/field/test_device_install_faults.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GatewayFactory, wait_for
from tests.field.test_device_install import bumped_source, run_cli, state_dir
from tests.field.test_device_install_faults import MAC_A, MAC_B, boards, install

__all__ = ["boards", "state_dir"]  # fixtures, used by name


async def test_an_update_stops_before_writing_to_a_board_that_is_not_the_slots(
    gateway_factory: GatewayFactory, boards: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory()
    board_a = await boards("a", MAC_A)
    board_b = await boards("b", MAC_B)
    code, out, err = await run_cli(capsys, *install(board_a, "pump-14", "--no-reset"))
    assert (code, err) == (0, ""), err
    # Board B serves pump-15 and runs its application.
    code, out, err = await run_cli(capsys, *install(board_b, "pump-15"))
    assert (code, err) == (0, ""), err
    await wait_for(lambda: board_b.app is not None, 10, "board B's application")
    running = board_b.app
    files_b = {path: path.read_bytes() for path in board_b.root.rglob("*") if path.is_file()}

    # pump-14's update, given the port of board B (pump-15's): a slip of the technician's.
    source = bumped_source(tmp_path, "0.2.0")
    code, out, err = await run_cli(
        capsys, "device", "update", "pump-14", "--port", board_b.port, "--url", gateway.url,
        "--source", str(source), "--pace-ms", "0", "--wait-s", "1",
    )  # fmt: skip
    assert code == 1
    assert err == (
        f"mcp-gateway: the board on {board_b.port} is {MAC_B}, not pump-14's board {MAC_A} (its adoption in the "
        f"registry {state_dir / 'devices.db'}): nothing was written to the board; the board was reset and runs its "
        "previous code again. Give the --port of pump-14's board [wrong-board]\n"
    ), err
    assert "copied" not in out
    assert {path: path.read_bytes() for path in board_b.root.rglob("*") if path.is_file()} == files_b
    # Stopped for the probe, then reset: it runs its own code again.
    await wait_for(lambda: board_b.events[-2:] == ["interrupt", "reset"], 10, "board B's reset")
    await wait_for(lambda: board_b.app not in (None, running), 10, "board B's application again")

    # The right port: the update goes on (the board dials no gateway here, so it is not seen back).
    code, out, err = await run_cli(
        capsys, "device", "update", "pump-14", "--port", board_a.port, "--url", gateway.url,
        "--source", str(source), "--pace-ms", "0", "--wait-s", "1",
    )  # fmt: skip
    assert code == 1 and "copied" in out, (out, err)
    assert "pump-14 did not come back with 0.2.0 within 1 s" in err, err
