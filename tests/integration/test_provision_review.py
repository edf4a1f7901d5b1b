"""`device install` and `devices revoke` keep every MQTT board's broker user its own (docs/field-devices.md,
"MQTT boards"): a slot with blanks at its ends is no username (mosquitto trims them), revoking a board
another one replaced keeps the new board's user, an install that lost the slot meanwhile never writes
its password, a board moved to another slot or transport loses its earlier user, changes of the
password file wait for each other (`<file>.lock`), and a Wi-Fi passphrase keeps its blanks.

The boards: the raw-REPL shim on a PTY with a MAC of its own (tests/field/test_device_install_faults.py);
the broker a real mosquitto with the appliance's settings; concurrent installs are real processes.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.devices.mosquitto_passwd import PasswordFileError, hash_password, read, set_user, verify
from gateway.devices.registry import DeviceRegistry, default_registry_path
from tests.conftest import MosquittoFactory
from tests.field.test_device_install import run_cli, state_dir
from tests.field.test_device_install_faults import MAC_A, MAC_B, NO_GATEWAY, adopted_rows, boards
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
from tests.integration.test_device_install_gateway_user import install

__all__ = ["boards", "state_dir"]  # fixtures, used by name

ROOT = Path(__file__).resolve().parents[2]
SLOT = "pump-7"


@pytest.fixture(autouse=True)
def no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_GATEWAY_CONFIG", raising=False)


def board_password(board: Any) -> str:
    return str(orjson.loads((board.root / "config.json").read_bytes())["mqtt"]["password"])


async def test_a_slot_with_blanks_at_its_ends_is_no_mqtt_username(
    boards: Any,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mosquitto_factory: MosquittoFactory,
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    # mosquitto trims the blanks around a username of its file: `pump-7 :<hash>` is pump-7's line.
    with passwd.open("a") as handle:
        handle.write(f"{SLOT} :{hash_password('hand-made')}\n")
    reload(broker)
    await until_connack(broker, SLOT, "hand-made", ACCEPTED)
    before = passwd.read_bytes()
    board = await boards("a", MAC_A)

    for slot, becomes in ((f"{GATEWAY_USER} ", GATEWAY_USER), (f"{SLOT} ", SLOT), (f"\t{SLOT}", SLOT)):
        code, out, err = await run_cli(capsys, *install(board, passwd, slot))
        if slot.startswith("\t"):  # a tab is no printable slot character: the slot rule refuses it first
            assert code == 2 and "control characters" in err, err
            continue
        assert (code, out) == (2, ""), (out, err)
        assert err == (
            f"mcp-gateway: --slot {slot!r} cannot be an MQTT board's username: it starts or ends with a blank, which "
            f"mosquitto trims from the usernames of its password file, so the board would log in as {becomes!r}; "
            "give the slot without blanks at its ends\n"
        )
    assert passwd.read_bytes() == before
    assert not (board.root / "config.json").exists() and not default_registry_path().exists()
    with pytest.raises(PasswordFileError, match="starts or ends with a blank"):
        set_user(passwd, f"{SLOT} ", "x")
    # The user-exists check names users as mosquitto does: the hand-made `pump-7 ` line is pump-7's.
    assert read(passwd)[SLOT]
    code, out, err = await run_cli(capsys, *install(board, passwd, SLOT), "--url", NO_GATEWAY)
    assert code == 1 and err.endswith(f"[user-exists]; nothing was written to the board on {board.port}\n"), err
    assert passwd.read_bytes() == before
    reload(broker)
    await until_connack(broker, SLOT, "hand-made", ACCEPTED)
    assert await connack(broker, GATEWAY_USER, GATEWAY_PASSWORD) == ACCEPTED

    # A --config without [[mqtt.brokers]]: `mcp-gateway` is the appliance's default, not the config's.
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\n")
    code, _, err = await run_cli(capsys, *install(board, passwd, GATEWAY_USER), "--config", str(config))
    assert code == 2 and "is the gateway's own broker username (the appliance's default, mcp-gateway)" in err, err


async def test_revoking_a_replaced_board_keeps_the_new_boards_user(
    boards: Any,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mosquitto_factory: MosquittoFactory,
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    board_x, board_y = await boards("x", MAC_A), await boards("y", MAC_B)
    code, _, err = await run_cli(capsys, *install(board_x, passwd, SLOT), "--url", NO_GATEWAY)
    assert code == 0, err
    code, out, err = await run_cli(capsys, *install(board_y, passwd, SLOT), "--replace", "--url", NO_GATEWAY)
    assert code == 0, err
    password_y = board_password(board_y)
    assert verify(read(passwd)[SLOT], password_y)

    code, out, err = await run_cli(
        capsys, "devices", "revoke", MAC_A, "--mosquitto-passwd", str(passwd), "--url", NO_GATEWAY
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith(
        f"revoked {MAC_A} (slot {SLOT}, MQTT): user {SLOT} kept in the mosquitto password file {passwd}: it is the "
        f"credential of {MAC_B}, adopted for {SLOT} now\n"
    ), out
    assert verify(read(passwd)[SLOT], password_y)
    assert sorted(adopted_rows()) == [(MAC_A, SLOT, True, True), (MAC_B, SLOT, True, False)]
    reload(broker)
    await until_connack(broker, SLOT, password_y, ACCEPTED)

    # Revoking Y, the board that holds the slot, removes the user.
    code, out, err = await run_cli(
        capsys, "devices", "revoke", MAC_B, "--mosquitto-passwd", str(passwd), "--url", NO_GATEWAY
    )  # fmt: skip
    assert code == 0 and out.startswith(f"revoked {MAC_B} (slot {SLOT}, MQTT): removed user {SLOT}"), (out, err)
    assert SLOT not in read(passwd)
    reload(broker)
    await until_connack(broker, SLOT, password_y, REFUSED)


async def cli_process(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *argv, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_an_install_that_lost_the_slot_meanwhile_leaves_the_winners_password(
    boards: Any, state_dir: Path, tmp_path: Path
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    board_x, board_y = await boards("x", MAC_A), await boards("y", MAC_B)
    # Y starts first on a slow line; X is installed whole while Y copies.
    slow = await cli_process(*install(board_y, passwd, SLOT), "--pace-ms", "15", "--url", NO_GATEWAY)
    assert slow.stdout is not None
    try:
        async with asyncio.timeout(30):
            while b"compiled" not in await slow.stdout.readline():
                pass
        fast = await cli_process(*install(board_x, passwd, SLOT), "--url", NO_GATEWAY)
        _, err_x = await asyncio.wait_for(fast.communicate(), 60)
        assert fast.returncode == 0, err_x
        assert slow.returncode is None, "Y finished before X: the race was not run"
        rest, err_y = await asyncio.wait_for(slow.communicate(), 120)
        code_y = await slow.wait()
    finally:
        if slow.returncode is None:
            slow.kill()
            await slow.wait()
    err = err_y.decode()
    assert code_y == 1, err
    # The password file holds X's password, never Y's.
    assert verify(read(passwd)[SLOT], board_password(board_x)), "the refused install replaced the winner's password"
    assert not verify(read(passwd)[SLOT], board_password(board_y))
    assert b"set user" not in rest
    assert f"slot {SLOT} is adopted by {MAC_A}" in err and err.endswith("[slot-taken]\n"), err
    assert f"whose secret the registry does not know: slot taken by {MAC_A} while it was written" in err, err
    assert "once the registry is usable" not in err
    assert sorted(adopted_rows()) == [(MAC_A, SLOT, True, False)]


async def test_a_board_moved_to_another_slot_or_transport_loses_its_earlier_user(
    boards: Any,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mosquitto_factory: MosquittoFactory,
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    board = await boards("a", MAC_A)
    code, _, err = await run_cli(capsys, *install(board, passwd, SLOT), "--url", NO_GATEWAY)
    assert code == 0, err
    old = board_password(board)

    code, out, err = await run_cli(capsys, *install(board, passwd, "pump-8"), "--url", NO_GATEWAY)
    assert code == 0, err
    assert f"removed user {SLOT} (this board's earlier MQTT slot) from the mosquitto password file {passwd}\n" in out, (
        out
    )
    assert sorted(read(passwd)) == [GATEWAY_USER, "pump-8"]
    reload(broker)
    await until_connack(broker, SLOT, old, REFUSED)

    # To WebSocket: the pump-8 user goes too, and mosquitto's reload is asked for.
    ws = ("--transport", "ws", "--gateway-url", "ws://127.0.0.1:1", "--url", NO_GATEWAY)
    code, out, err = await run_cli(capsys, *install(board, passwd, "pump-8"), *ws)
    assert code == 0, err
    assert "removed user pump-8 (this board's earlier MQTT slot)" in out, out
    assert "reload mosquitto so that it reads the password file again" in out, out
    assert sorted(read(passwd)) == [GATEWAY_USER]
    assert sorted(adopted_rows()) == [(MAC_A, "pump-8", True, False)]


async def test_changes_of_the_password_file_wait_for_each_other(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text(f"pump-1:{hash_password('one')}\n")
    passwd.chmod(0o600)
    lock = os.open(f"{passwd}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another install, between its read and its rename
        code = (
            "from pathlib import Path; from gateway.devices.mosquitto_passwd import set_user; "
            f"set_user(Path({str(passwd)!r}), 'pump-8', 'eight')"
        )
        other = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT)
        await asyncio.sleep(1.0)
        assert other.returncode is None and sorted(read(passwd)) == ["pump-1"], "set_user did not wait for the lock"
        with passwd.open("a") as handle:  # the lock holder's own change lands
            handle.write(f"pump-7:{hash_password('seven')}\n")
    finally:
        os.close(lock)
    assert await asyncio.wait_for(other.wait(), 30) == 0
    users = read(passwd)
    assert sorted(users) == ["pump-1", "pump-7", "pump-8"]
    assert verify(users["pump-8"], "eight") and verify(users["pump-7"], "seven")


async def test_a_wifi_passphrase_keeps_its_blanks(
    boards: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    board = await boards("a", MAC_A)
    wifi = tmp_path / "wifi"
    ws = ("device", "install", board.port, "--slot", SLOT, "--gateway-url", "ws://127.0.0.1:1", "--pace-ms", "0")
    for written, meant in ((" plant pass 2024 ", " plant pass 2024 "), ("plant pass 2024 \r\n", "plant pass 2024 ")):
        wifi.write_text(written, newline="")
        wifi.chmod(0o600)
        code, _, err = await run_cli(
            capsys, *ws, "--no-reset", "--wifi-ssid", "plant", "--wifi-password-file", str(wifi)
        )
        assert code == 0, err
        assert orjson.loads((board.root / "config.json").read_bytes())["wifi"]["password"] == meant
    wifi.write_text("one\ntwo\n")
    code, _, err = await run_cli(capsys, *ws, "--wifi-ssid", "plant", "--wifi-password-file", str(wifi))
    assert code == 2 and f"--wifi-password-file {wifi} holds a line break" in err, err


async def test_a_negative_flash_offset_is_named_as_such() -> None:
    flash = await cli_process("flash", "/dev/null", "--offset=-0x1000")
    _, err = await asyncio.wait_for(flash.communicate(), 30)
    assert flash.returncode == 2
    assert "the offset must not be negative (an address in the flash), got -0x1000" in err.decode(), err


def test_registry_lists_one_standing_adoption(state_dir: Path) -> None:
    registry = DeviceRegistry(default_registry_path())
    try:
        registry.adopt(MAC_A, SLOT, "mqtt", None, None)
        assert registry.standing_adoption(MAC_A) == (SLOT, "mqtt")
        registry.revoke(MAC_A)
        assert registry.standing_adoption(MAC_A) is None
    finally:
        registry.close()
