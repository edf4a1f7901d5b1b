"""`device install --transport mqtt` never takes the gateway's own broker user, nor a user of mosquitto's
password file that no adopted board owns unless told to (docs/field-devices.md, "MQTT boards").

The board is the raw-REPL shim (the MicroPython Unix port on a PTY, tests/field/test_device_install.py);
the broker a real mosquitto with the appliance's password file and ACL: after a refused install and a
reload, the gateway's own credential is still accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.devices.mosquitto_passwd import read, set_user, verify
from gateway.devices.registry import default_registry_path
from tests.conftest import MosquittoFactory
from tests.field.test_device_install import board, run_cli, state_dir
from tests.field.test_device_mqtt_adoption import (
    ACCEPTED,
    GATEWAY_PASSWORD,
    GATEWAY_USER,
    appliance_broker,
    appliance_password_file,
    reload,
    until_connack,
)

__all__ = ["board", "state_dir"]  # fixtures, used by name

SLOT = "pump-7"


def install(board: Any, passwd: Path, slot: str, *more: str) -> tuple[str, ...]:
    return (
        "device", "install", board.port, "--slot", slot, "--transport", "mqtt", "--mqtt-broker", "127.0.0.1",
        "--mosquitto-passwd", str(passwd), "--pace-ms", "0", "--no-reset", *more,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_GATEWAY_CONFIG", raising=False)


async def test_the_gateways_own_username_is_refused_and_its_login_still_works(
    board: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mosquitto_factory: MosquittoFactory
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    before = passwd.read_bytes()

    code, out, err = await run_cli(capsys, *install(board, passwd, GATEWAY_USER))
    assert (code, out) == (2, ""), (out, err)
    assert err == (
        f"mcp-gateway: --slot 'mcp-gateway' is the gateway's own broker username (the appliance's default, "
        f"mcp-gateway): its password in {passwd} would be replaced, mosquitto would refuse the gateway after its "
        "reload, and the board would read every board's topics; give the board another --slot [gateway-user]\n"
    )
    assert passwd.read_bytes() == before
    assert list(board.root.iterdir()) == [] and not default_registry_path().exists()
    # The dry run says so too.
    code, _, err = await run_cli(capsys, *install(board, passwd, GATEWAY_USER), "--dry-run")
    assert code == 1 and "[gateway-user]" in err, err
    # mosquitto reloaded: the gateway still logs in with its own password.
    reload(broker)
    await until_connack(broker, GATEWAY_USER, GATEWAY_PASSWORD, ACCEPTED)

    # A gateway configured with another broker username: that one is refused too (--config).
    config = tmp_path / "gateway.toml"
    config.write_text('[[mqtt.brokers]]\nurl = "mqtt://127.0.0.1:1883"\nusername = "gw-east"\n')
    code, _, err = await run_cli(capsys, *install(board, passwd, "gw-east"), "--config", str(config))
    assert code == 2, err
    assert f"is the gateway's own broker username ([[mqtt.brokers]] username in {config})" in err, err
    assert passwd.read_bytes() == before
    # A configuration that cannot be read is said, not passed over.
    missing = tmp_path / "missing.toml"
    code, _, err = await run_cli(capsys, *install(board, passwd, SLOT), "--config", str(missing))
    assert code == 2 and str(missing) in err and "[gateway-user]" in err, err


async def test_a_user_no_adopted_board_owns_is_kept_unless_replace_user(
    board: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    set_user(passwd, SLOT, "a-password-made-by-hand")
    before = passwd.read_bytes()

    code, out, err = await run_cli(capsys, *install(board, passwd, SLOT))
    assert code == 1, (out, err)
    assert err == (
        f"mcp-gateway: the mosquitto password file {passwd} has a user {SLOT} that no board adopted for {SLOT} in "
        f"the registry {default_registry_path()} owns (made by hand, or another program's): the install would "
        "replace its password and lock out whoever logs in with it. Give the board another --slot, or pass "
        f"--replace-user when that user may go [user-exists]; nothing was written to the board on {board.port}\n"
    )
    assert passwd.read_bytes() == before
    assert list(board.root.iterdir()) == []
    code, _, err = await run_cli(capsys, *install(board, passwd, SLOT), "--dry-run")
    assert code == 1 and "[user-exists]" in err, err

    # --replace-user: the hand-made password goes, the board's user is adopted.
    code, out, err = await run_cli(capsys, *install(board, passwd, SLOT), "--replace-user")
    assert (code, err) == (0, ""), err
    assert f"set user {SLOT} in the mosquitto password file {passwd} (replaced its earlier password)" in out
    assert not verify(read(passwd)[SLOT], "a-password-made-by-hand")
    # Adopted now: installing the same board again replaces its own password without the flag.
    code, out, err = await run_cli(capsys, *install(board, passwd, SLOT))
    assert (code, err) == (0, ""), err
    assert f"set user {SLOT} in the mosquitto password file {passwd} (replaced its earlier password)" in out
    assert verify(read(passwd)[GATEWAY_USER], GATEWAY_PASSWORD)
