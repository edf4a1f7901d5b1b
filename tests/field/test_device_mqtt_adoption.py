"""An MQTT board's own broker credential: `device install --transport mqtt` and `devices revoke`.

Against a real mosquitto configured as the appliance's (no anonymous clients, a password file, the ACL
of image/mosquitto/acl): a line gateway/devices/mosquitto_passwd.py writes admits a real MQTT client,
a line `mosquitto_passwd -b` wrote is read and checked here, and a removed user is refused after
SIGHUP (mosquitto 2.0 also ends the connection that user holds). Then the whole way: the raw-REPL
shim board (tests/field/test_device_install.py) gets the application and a config.json with its
credential, the password file gets its user, the board publishes pump-7 through mosquitto into a real
gateway with [[mqtt.brokers]], an SDK client calls it; revoked, the board is refused.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client

from gateway.devices import mosquitto_passwd
from gateway.devices.mosquitto_passwd import PasswordFileError, read, remove_user, set_user, verify
from gateway.devices.registry import DeviceRegistry, default_registry_path, issue_secret
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.device.umqtt_package import umqtt_library
from tests.field.test_device_install import SLOT, Board, board, print_for_docs, run_cli, state_dir
from tests.support.mosquitto import Mosquitto, binary, write_password_file
from tests.support.mqtt_peer import RawPeer

__all__ = ["board", "state_dir"]  # fixtures, used by name

ACL = Path(__file__).resolve().parents[2] / "image" / "mosquitto" / "acl"
GATEWAY_USER = "mcp-gateway"
GATEWAY_PASSWORD = "the-gateway-s-own-broker-password"
ACCEPTED = "Success"
REFUSED = "Not authorized"


def appliance_password_file(directory: Path) -> Path:
    """The appliance's file as its operator makes it before the first start: the gateway's credential,
    by `mosquitto_passwd -b`, mode 0640 (root:mosquitto there)."""
    directory.mkdir(parents=True, exist_ok=True)
    passwd = write_password_file(directory / "passwd", {GATEWAY_USER: GATEWAY_PASSWORD})
    passwd.chmod(0o640)
    return passwd


async def appliance_broker(mosquitto_factory: MosquittoFactory, passwd: Path) -> Mosquitto:
    """mosquitto with image/mosquitto/mcp-gateway.conf's security settings on one loopback listener."""
    acl = passwd.parent / "acl"
    shutil.copy(ACL, acl)
    config = [
        "per_listener_settings false",
        "allow_anonymous false",
        f"password_file {passwd}",
        f"acl_file {acl}",
        "persistence false",
        "listener {port} 127.0.0.1",
        "use_username_as_clientid true",
    ]
    return await mosquitto_factory(config_text="\n".join(config) + "\n")


def reload(broker: Mosquitto) -> None:
    """What `systemctl reload mosquitto` does: SIGHUP, and mosquitto reads the password file again."""
    assert broker.process is not None
    broker.process.send_signal(signal.SIGHUP)


async def connack(broker: Mosquitto, username: str, password: str) -> str:
    """Connect once with this credential (MQTT 3.1.1, as a board) and say what the broker answered."""
    peer = RawPeer(broker.port, f"probe-{username}", v5=False, username=username, password=password)
    try:
        return await peer.connect()
    finally:
        await peer.disconnect()


async def until_connack(broker: Mosquitto, username: str, password: str, expected: str) -> None:
    """After a SIGHUP: wait until the broker answers this credential with `expected`."""
    answers: list[str] = []

    async def answered() -> bool:
        answers.append(await connack(broker, username, password))
        return answers[-1] == expected

    async with asyncio.timeout(5):
        while not await answered():  # noqa: ASYNC110 (each turn asks the broker)
            await asyncio.sleep(0.05)


# --- the password file against mosquitto and mosquitto_passwd -------------------------------------------


async def test_lines_written_here_admit_a_real_client_and_removing_one_refuses_it(
    mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    first_line = passwd.read_text().splitlines()[0]
    before = passwd.stat()

    # A line written by mosquitto_passwd -b is read and checked here.
    users = read(passwd)
    assert list(users) == [GATEWAY_USER]
    assert users[GATEWAY_USER].startswith("$7$101$")
    assert verify(users[GATEWAY_USER], GATEWAY_PASSWORD)
    assert not verify(users[GATEWAY_USER], GATEWAY_PASSWORD + "x")

    # A user added here: one new line, the other left byte for byte, the file's mode and owner kept.
    password = issue_secret()
    assert set_user(passwd, SLOT, password) is False
    lines = passwd.read_text().splitlines()
    assert lines[0] == first_line and lines[1].startswith(f"{SLOT}:$7$101$") and len(lines) == 2
    after = passwd.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert after.st_ino != before.st_ino  # renamed into place, not rewritten in place
    assert [p.name for p in passwd.parent.iterdir() if p.name.endswith(".new")] == []

    # mosquitto_passwd reads a file written here: it adds a user and keeps ours as it was.
    tool = binary("mosquitto_passwd")
    add = [tool, "-b", str(passwd), "pump-8", "pump-8-password"]
    await asyncio.to_thread(subprocess.run, add, check=True, capture_output=True, timeout=10)
    assert read(passwd)[SLOT] == lines[1].split(":", 1)[1]
    assert verify(read(passwd)["pump-8"], "pump-8-password")

    # mosquitto admits the credential written here, refuses a wrong password, and the ACL keeps the
    # board to its own topics (the gateway's credential sees its status, not a write to pump-8's).
    broker = await appliance_broker(mosquitto_factory, passwd)
    assert await connack(broker, SLOT, password) == ACCEPTED
    assert await connack(broker, SLOT, "not-" + password) == REFUSED
    spy = RawPeer(broker.port, "spy", username=GATEWAY_USER, password=GATEWAY_PASSWORD)
    assert await spy.connect() == ACCEPTED
    await spy.subscribe("mcpb/#")
    board_peer = RawPeer(broker.port, "any-id", v5=False, username=SLOT, password=password)
    assert await board_peer.connect() == ACCEPTED
    board_peer.publish("mcpb/pump-8/up", b"not mine")
    board_peer.publish(f"mcpb/{SLOT}/status", b"mine")
    seen = await spy.next()
    assert (seen.topic, seen.payload) == (f"mcpb/{SLOT}/status", b"mine")

    # A new password for the same user replaces its line; after the reload only the new one is let in.
    renewed = issue_secret()
    assert set_user(passwd, SLOT, renewed) is True
    assert len(passwd.read_text().splitlines()) == 3
    reload(broker)
    await until_connack(broker, SLOT, password, REFUSED)
    assert await connack(broker, SLOT, renewed) == ACCEPTED

    # Removed and reloaded: refused, and mosquitto ends the connection the user held.
    assert remove_user(passwd, SLOT) is True
    assert remove_user(passwd, SLOT) is False
    assert list(read(passwd)) == [GATEWAY_USER, "pump-8"]
    reload(broker)
    await until_connack(broker, SLOT, renewed, REFUSED)
    await wait_for(lambda: not board_peer.client.is_connected(), 5, "mosquitto to end the removed user's link")
    assert await connack(broker, GATEWAY_USER, GATEWAY_PASSWORD) == ACCEPTED
    await board_peer.disconnect()
    await spy.disconnect()


def test_hashes_match_mosquitto_passwd_and_the_old_sha512_format() -> None:
    # mosquitto_passwd -b of "secret" (mosquitto 2.0.11): salt and hash are standard base64, padded.
    line = (
        "$7$101$6mv3Ztc8v79aulVp$enecsTMNylmYNFIoCZzOBvhT0UKC9wRE/KUTH2JNxoBOP5bnfcK2017kaAvQGM/MlGg9Axb8oLT3"
        "oTbJ9qhWUA=="
    )
    assert verify(line, "secret") and not verify(line, "Secret")
    import base64

    salt = base64.b64decode("6mv3Ztc8v79aulVp")
    assert mosquitto_passwd.hash_password("secret", salt) == line
    # $6$: mosquitto 1.x, SHA-512 of password then salt.
    import hashlib

    old = f"$6${base64.b64encode(salt).decode()}${base64.b64encode(hashlib.sha512(b'secret' + salt).digest()).decode()}"
    assert verify(old, "secret") and not verify(old, "other")
    for broken in ("", "$7$", "$7$x$AA==$AA==", "$7$101$!!$AA==", "$8$argon", "plain"):
        assert not verify(broken, "secret")


def test_errors_name_the_file_the_option_and_the_permissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere" / "passwd"
    with pytest.raises(PasswordFileError) as raised:
        set_user(missing, SLOT, "x", "--mosquitto-passwd")
    assert str(raised.value) == (
        f"the mosquitto password file {missing} does not exist (--mosquitto-passwd names it; the appliance's "
        "operator makes it once, before the first start: see docs/mqtt-broker.md)"
    )
    passwd = tmp_path / "passwd"
    passwd.write_text("# a comment\nmcp-gateway:$7$101$AA==$AA==\n")
    with pytest.raises(PasswordFileError, match="cannot be a mosquitto username"):
        set_user(passwd, "pump:7", "x")
    # Root may write anywhere: a directory the user may not write is simulated.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == tmp_path else real_access(path, mode))
    with pytest.raises(PasswordFileError) as raised:
        set_user(passwd, SLOT, "x")
    mode = stat.S_IMODE(tmp_path.stat().st_mode)
    assert str(raised.value).startswith(
        f"cannot write the mosquitto password file {passwd}: the new file is renamed over it, and its directory "
        f"{tmp_path} (mode {mode:04o}, owner "
    )
    assert str(raised.value).endswith("run the command as root (sudo)")
    assert passwd.read_text() == "# a comment\nmcp-gateway:$7$101$AA==$AA==\n"  # untouched, comment and all


# --- device install --transport mqtt and devices revoke, end to end ------------------------------------


def gateway_mqtt(broker: Mosquitto, secret_file: Path) -> dict[str, Any]:
    """[[mqtt.brokers]] as image/mcp-gateway.toml has it: the gateway's own credential from a file."""
    secret_file.write_text(GATEWAY_PASSWORD + "\n")
    secret_file.chmod(0o600)
    entry = {"url": broker.url, "profiles": ["plain"], "username": GATEWAY_USER, "password": {"file": str(secret_file)}}
    return {"mqtt": {"brokers": [entry]}}


@pytest.fixture
def umqtt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("umqtt-simple") if cache is not None else tmp_path_factory.mktemp("umqtt-simple")
    return umqtt_library(folder)


async def test_install_over_mqtt_issues_a_broker_credential_and_revoke_withdraws_it(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    board: Board,
    state_dir: Path,
    umqtt: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    passwd = appliance_password_file(tmp_path / "etc")
    broker = await appliance_broker(mosquitto_factory, passwd)
    gateway = await gateway_factory(**gateway_mqtt(broker, tmp_path / "mqtt-password"))
    # umqtt.simple is on the board already (`mpremote mip install umqtt.simple`); the Unix port's path: its root.
    shutil.copytree(umqtt / "umqtt", board.root / "umqtt")
    install = (
        "device", "install", board.port, "--slot", SLOT, "--transport", "mqtt", "--mqtt-broker", "127.0.0.1",
        "--mqtt-port", str(broker.port), "--mosquitto-passwd", str(passwd), "--pace-ms", "0",
    )  # fmt: skip
    untouched = passwd.read_bytes()

    # --dry-run: the password masked; neither the board, the password file nor the registry touched.
    code, out, err = await run_cli(capsys, *install, "--dry-run")
    assert (code, err) == (0, ""), err
    print_for_docs("mqtt install --dry-run", out)
    assert f"would set user {SLOT} in the mosquitto password file {passwd}" in out
    mqtt_shown = f'"mqtt":{{"broker":"127.0.0.1","port":{broker.port},"user":"{SLOT}","password":"***"}}'
    assert mqtt_shown in out
    assert passwd.read_bytes() == untouched and not default_registry_path().exists()
    assert sorted(p.name for p in board.root.iterdir()) == ["umqtt"]

    code, out, err = await run_cli(capsys, *install)
    assert (code, err) == (0, ""), err
    print_for_docs("mqtt install", out)
    config = orjson.loads((board.root / "config.json").read_bytes())
    password = config["mqtt"].pop("password")
    assert config == {
        "transport": "mqtt",
        "slot": SLOT,
        "mqtt": {"broker": "127.0.0.1", "port": broker.port, "user": SLOT},
        "watchdog_s": 10,
    }
    assert len(password) >= 43 and password not in out
    wrote = '{"transport":"mqtt","slot":"' + SLOT + '",' + mqtt_shown + ',"watchdog_s":10}'
    assert f"wrote config.json: {wrote}" in out
    assert f"set user {SLOT} in the mosquitto password file {passwd} (a new user)" in out
    assert f"adopted unix-{SLOT}: MQTT username {SLOT}, slot {SLOT}" in out
    assert "reload mosquitto so that it reads the password file again: sudo systemctl reload mosquitto" in out
    assert out.splitlines()[-1] == (
        f"reset: the board starts pump-1-micropython 0.1.0 and publishes {SLOT} through the MQTT broker 127.0.0.1"
    )
    users = read(passwd)
    assert list(users) == [GATEWAY_USER, SLOT] and verify(users[SLOT], password)
    assert stat.S_IMODE(passwd.stat().st_mode) == 0o640
    registry = DeviceRegistry(default_registry_path())
    (row,) = registry.devices()
    assert (row.device_id, row.slot, row.transport, row.adopted, row.revoked) == (
        f"unix-{SLOT}",
        SLOT,
        "mqtt",
        True,
        False,
    )
    assert registry.adopted(row.device_id) is None  # no provider token admits an MQTT board over WebSocket
    registry.close()

    # The operator reloads mosquitto; the board (retrying meanwhile) publishes pump-7 into the gateway.
    reload(broker)
    await wait_ready_slot(gateway, SLOT, timeout=30)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        result = await client.call_tool("get_status", {})
        assert result.structured_content is not None and result.structured_content["state"] == "stopped"
    code, out, err = await run_cli(capsys, "devices")
    assert code == 0, err
    print_for_docs("mqtt devices", out)
    cells = out.splitlines()[1].split()
    assert cells[:3] == [f"unix-{SLOT}", "yes", "1"] and cells[-3:] == ["mqtt", SLOT, "-"]

    # Revoked: the user leaves the password file, and the gateway (asked by the command) empties the
    # board's retained status and detaches pump-7 at once; at the reload mosquitto ends the board's
    # connection and refuses it from then on.
    code, out, err = await run_cli(
        capsys, "devices", "revoke", f"unix-{SLOT}", "--mosquitto-passwd", str(passwd), "--url", gateway.url
    )  # fmt: skip
    assert (code, err) == (0, ""), err
    print_for_docs("mqtt devices revoke", out)
    label = gateway.gateway.config.mqtt.brokers[0].label
    assert out == (
        f"revoked unix-{SLOT} (slot {SLOT}, MQTT): removed user {SLOT} from the mosquitto password file {passwd}\n"
        f"the gateway at {gateway.url} ended {SLOT} (mqtt, unix-{SLOT}): emptied the retained status "
        f"mcpb/{SLOT}/status on {label}; detached the slot\n"
        "reload mosquitto (it ends the board's connection and refuses it from then on): "
        "sudo systemctl reload mosquitto\n"
    )
    entry = gateway.gateway.registry.slots[SLOT]
    assert entry.live is None
    assert list(read(passwd)) == [GATEWAY_USER]
    assert board.app is not None
    app = board.app

    def refusals() -> list[dict[str, Any]]:
        return [event for event in app.named("link_down") if "refused" in str(event.get("reason"))]

    earlier = len(refusals())  # a board reset before the first reload is refused until it
    reload(broker)
    await wait_for(lambda: len(refusals()) > earlier, 15, "the board to be refused")
    refused = refusals()[-1]
    print_for_docs("the mqtt board's log", orjson.dumps(refused).decode())
    assert "the broker refused the connection" in refused["reason"]

    # mosquitto (2.0.11) publishes no will for a connection its reload ends; the gateway emptied the
    # board's retained status already, so nothing brings pump-7 back (after a gateway restart neither).
    spy = RawPeer(broker.port, "operator", v5=False, username=GATEWAY_USER, password=GATEWAY_PASSWORD)
    assert await spy.connect() == ACCEPTED
    await spy.subscribe(f"mcpb/{SLOT}/status")
    with pytest.raises(TimeoutError):
        await spy.next(timeout=1.0)
    await spy.disconnect()
    assert entry.live is None
    code, out, err = await run_cli(capsys, "devices")
    assert out.splitlines()[1].split()[:2] == [f"unix-{SLOT}", "revoked"]

    # Again: already removed from the file, still revoked; a wrong file is named and nothing changes.
    code, out, err = await run_cli(
        capsys, "devices", "revoke", f"unix-{SLOT}", "--mosquitto-passwd", str(passwd), "--url", gateway.url
    )  # fmt: skip
    assert code == 0 and "was not in the mosquitto password file" in out
    assert f"the gateway at {gateway.url} holds no link of it now: nothing to end" in out
    code, out, err = await run_cli(
        capsys, "devices", "revoke", f"unix-{SLOT}", "--mosquitto-passwd", str(tmp_path / "other")
    )  # fmt: skip
    assert code == 1
    assert err == (
        f"mcp-gateway: unix-{SLOT} is not revoked: the mosquitto password file {tmp_path / 'other'} does not exist "
        "(--mosquitto-passwd names it; the appliance's operator makes it once, before the first start: "
        "see docs/mqtt-broker.md)\n"
    )


async def test_install_over_mqtt_stops_before_the_board_when_the_password_file_is_missing(
    board: Board, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "passwd"
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", SLOT, "--transport", "mqtt",
        "--mqtt-broker", "127.0.0.1", "--mosquitto-passwd", str(missing), "--pace-ms", "0",
    )  # fmt: skip
    assert (code, out) == (2, "")  # a usage error: a file the command needs, missing (docs/cli.md)
    assert err == (
        f"mcp-gateway: the mosquitto password file {missing} does not exist (--mosquitto-passwd names it; "
        "the appliance's operator makes it once, before the first start: see docs/mqtt-broker.md)\n"
    )
    assert list(board.root.iterdir()) == [] and not default_registry_path().exists()
    # A dry run shows what it would do, and says where the install would stop.
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", SLOT, "--transport", "mqtt",
        "--mqtt-broker", "127.0.0.1", "--mosquitto-passwd", str(missing), "--dry-run",
    )  # fmt: skip
    assert code == 1 and f"would set user {SLOT} in the mosquitto password file {missing}" in out
    assert err.startswith(f"mcp-gateway: the install would stop: the mosquitto password file {missing} does not")
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", "plant/pump-7", "--transport", "mqtt",
        "--mqtt-broker", "127.0.0.1", "--mosquitto-passwd", str(missing),
    )  # fmt: skip
    assert code == 2 and "cannot be an MQTT board's username (it holds /)" in err
