"""A state directory the gateway's user cannot enter (made by root, mode 0700) and an MQTT plain-profile
board: the revocation check cannot read the device registry, which is said once (the path, the errno
and the fix) and the board is attached as with no registry at all, against a real mosquitto on a free
loopback port and a real gateway process run as nobody (root enters every directory).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_mqtt_gateway import Board, call
from tests.support.mosquitto import Mosquitto
from tests.support.southbound import SlotUnknown, provider_status
from tests.support.unprivileged import gateway_as_nobody

SLOT = "pump-1"


@pytest.fixture
def public() -> Iterator[Path]:
    """A folder nobody may reach (pytest's tmp_path is 0700) holding a state directory root made 0700."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "state").mkdir(mode=0o700)
        yield folder
    finally:
        shutil.rmtree(folder)


async def test_a_plain_board_attaches_when_the_state_directory_cannot_be_entered(
    root: None, public: Path, mosquitto: Mosquitto
) -> None:
    state = public / "state"
    registry = state / "devices.db"
    config = public / "gateway.toml"
    config.write_text(
        f'[[mqtt.brokers]]\nurl = "{mosquitto.url}"\nprofiles = ["plain"]\n'
        "reconnect_initial_s = 0.05\nreconnect_max_s = 0.3\n"
    )
    config.chmod(0o644)
    gateway = await gateway_as_nobody(config, state, "--port", "0")
    board = Board(mosquitto.port, SLOT)
    try:
        await gateway.started()
        await gateway.wait_line("connected to MQTT broker")
        await board.connect()

        for _ in range(75):  # 15 s
            try:
                status = await provider_status(gateway.url, SLOT)
            except SlotUnknown:
                status = {}
            if status.get("connected") and status.get("state") == "ready":
                break
            await asyncio.sleep(0.2)
        else:
            pytest.fail(f"the board was not attached within 15 s:\n{gateway.log[-3000:]}")
        assert (await call(gateway.url, SLOT, "get_status"))["state"] == "stopped"
        # A second status (the board again): the registry is asked again, the warning is not repeated.
        await board.disconnect()
        await board.connect()
        await asyncio.sleep(1.0)
    finally:
        await board.disconnect()
        await gateway.stop()
    log = gateway.log
    assert "_on_message" not in log and "Traceback" not in log, log
    assert "unregistered" not in log, log
    warnings = [line for line in gateway.lines if "cannot be read" in line and "device registry" in line]
    assert len(warnings) == 1, log
    assert str(registry) in warnings[0] and "[EACCES]" in warnings[0], warnings[0]
    assert "chown the state directory to the service user" in warnings[0], warnings[0]
