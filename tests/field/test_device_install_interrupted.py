"""`mcp-gateway device install` stopped midway by a signal: Ctrl-C, SIGTERM, or SIGHUP (a dropped SSH session).

The install runs in its own process (`python -m gateway.cli device install`), as a technician runs it,
on a board that already serves its slot (the MicroPython Unix port behind a PTY,
tests/field/test_device_install.py's `Board`) through a real gateway. The signal arrives during the
copy; the board must be reset so that it serves its slot again with the code it holds, and the
command must say so in one line.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.devices.registry import DeviceRegistry, default_registry_path
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.field.test_device_install import identities_auth, run_cli, state_dir, status_of
from tests.field.test_device_install_faults import MAC_A, boards

__all__ = ["boards", "state_dir"]  # fixtures, used by name
REPO = Path(__file__).resolve().parents[2]
SLOT = "pump-16"


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
async def test_an_install_stopped_during_the_copy_resets_the_board(
    gateway_factory: GatewayFactory,
    boards: Any,
    state_dir: Path,
    capsys: pytest.CaptureFixture[str],
    signum: int,
    exit_code: int,
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    board = await boards("board", MAC_A)
    install = ("device", "install", board.port, "--slot", SLOT, "--gateway-url", f"ws://127.0.0.1:{gateway.port}")
    code, _, err = await run_cli(capsys, *install, "--pace-ms", "0")
    assert (code, err) == (0, ""), err
    await wait_ready_slot(gateway, SLOT, timeout=20)
    config = (board.root / "config.json").read_bytes()

    again = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *install, "--pace-ms", "30",
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for(lambda: any(board.root.rglob("*.new")), 30, "the copy to begin")
        events = len(board.events)
        again.send_signal(signum)
        _, err_bytes = await asyncio.wait_for(again.communicate(), 30)
    finally:
        if again.returncode is None:
            again.kill()
            await again.wait()
    err = err_bytes.decode()
    assert again.returncode == exit_code, err
    if signum == signal.SIGHUP:
        assert err == ""  # the terminal is gone: nothing is printed after the hang-up
    else:
        stopped_by = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
        assert err == (
            f"mcp-gateway: the install on {board.port} was stopped by {stopped_by} during the copy: the copy was cut "
            "short: the new files copied in part (*.new) stay on the board unused until the next install replaces "
            "them; the registry was not changed; the board was reset and runs its previous code again. Run the same "
            "install again: it starts over [interrupted]\n"
        )
    # Ctrl-C and a reset on the console: the board runs its application again and serves its slot.
    await wait_for(lambda: "reset" in board.events[events:], 15, "the board's reset")
    await wait_ready_slot(gateway, SLOT, timeout=20)
    assert (await status_of(gateway, SLOT))["hello"]["firmware"]["version"] == "0.1.0"
    assert (board.root / "config.json").read_bytes() == config
    registry = DeviceRegistry(default_registry_path())
    try:
        adopted = [(row.device_id, row.slot, row.revoked) for row in registry.devices() if row.adopted]
        assert adopted == [(MAC_A, SLOT, False)]
    finally:
        registry.close()
