"""`device install --replace` of a slot whose board was adopted over MQTT by a board on WebSocket or serial:
the replaced board's broker credential is its user in mosquitto's password file, which no new MQTT line
overwrites here, so the install removes it, as `devices revoke` does; else the revoked board still logs in
to the broker with its old password and publishes the slot's topics.

Against a real mosquitto with the appliance's settings (tests/field/test_device_mqtt_adoption.py) and
two raw-REPL shim boards, each with a MAC of its own (tests/field/test_device_install_faults.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.devices.mosquitto_passwd import read
from tests.conftest import MosquittoFactory
from tests.field.test_device_install import run_cli, state_dir
from tests.field.test_device_install_faults import MAC_A, MAC_B, NO_GATEWAY, boards, install
from tests.field.test_device_mqtt_adoption import (
    ACCEPTED,
    GATEWAY_PASSWORD,
    GATEWAY_USER,
    REFUSED,
    appliance_broker,
    appliance_password_file,
    connack,
    reload,
    until_connack,
)

__all__ = ["boards", "state_dir"]  # fixtures, used by name
SLOT = "pump-21"


@pytest.mark.parametrize("transport", ["ws", "serial"])
async def test_replacing_an_mqtt_board_by_another_transport_removes_its_broker_user(
    transport: str,
    mosquitto_factory: MosquittoFactory,
    boards: Any,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    board_a = await boards("a", MAC_A)
    board_b = await boards("b", MAC_B)
    mqtt = ("--transport", "mqtt", "--mqtt-broker", "127.0.0.1", "--mqtt-port", str(broker.port))
    code, out, err = await run_cli(
        capsys, *install(board_a, SLOT, *mqtt, "--mosquitto-passwd", str(passwd), "--no-reset")
    )
    assert (code, err) == (0, ""), err
    password_a = orjson.loads((board_a.root / "config.json").read_bytes())["mqtt"]["password"]
    reload(broker)
    await until_connack(broker, SLOT, password_a, ACCEPTED)

    # Board B takes the slot over WebSocket (or serial): A is revoked, and so is its broker credential.
    other = ("--transport", "serial", "--serial-uart", "1") if transport == "serial" else ("--transport", "ws")
    code, out, err = await run_cli(
        capsys,
        *install(
            board_b, SLOT, *other, "--replace", "--mosquitto-passwd", str(passwd), "--url", NO_GATEWAY, "--no-reset"
        ),
    )
    assert (code, err) == (0, ""), err
    # mosquitto, reloaded, refuses A's old password: its user is gone, the gateway's stays.
    reload(broker)
    await until_connack(broker, SLOT, password_a, REFUSED)
    assert set(read(passwd)) == {GATEWAY_USER}
    assert await connack(broker, GATEWAY_USER, GATEWAY_PASSWORD) == ACCEPTED
    assert f"revoked {MAC_A} for slot {SLOT} (--replace)" in out
    assert (
        f"removed user {SLOT} (the MQTT credential of {MAC_A}, which this install replaced) from the mosquitto "
        f"password file {passwd}"
    ) in out, out
    assert "reload mosquitto so that it reads the password file again: sudo systemctl reload mosquitto" in out
