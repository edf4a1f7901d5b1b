"""What `device install` and `device update` do when the field goes wrong: a slot another board holds,
a device registry that cannot be used, a --source folder that lacks a part, a board unplugged midway,
and a port that another program has open without its lock.

The boards: the MicroPython Unix port behind a PTY (tests/field/test_device_install.py's `Board`).
A board gets a MAC of its own by a program run on its console before the install (the shim keeps
`sys.modules` from one program to the next), as `machine.unique_id()` gives an ESP32's.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.devices.registry import DeviceRegistry, SlotTaken, default_registry_path, secret_digest
from gateway.provision.raw_repl import BoardError, BoardGone, RawRepl, open_port
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.harness import DEVICE_DIR, find_tool
from tests.field.test_device_install import Board, bumped_source, identities_auth, run_cli, state_dir, status_of
from tests.support.serial_ports import PtyPair

__all__ = ["state_dir"]  # a fixture, used by name
UNREACHABLE = "ws://127.0.0.1:1"
NO_GATEWAY = "http://127.0.0.1:1"
MAC_A = "24:0a:c4:00:00:10"
MAC_B = "24:0a:c4:00:00:11"


async def started_board(tmp_path: Path, name: str, mac: str | None = None) -> Board:
    made = Board(find_tool("micropython"), tmp_path / name)
    await made.start()
    if mac is not None:
        await asyncio.to_thread(give_mac, made.port, mac)
    return made


def give_mac(port: str, mac: str) -> None:
    unique_id = bytes(int(part, 16) for part in mac.split(":"))
    with RawRepl(open_port(port), pace_s=0) as repl:
        repl.exec(
            f"import sys\nclass Machine:\n    pass\nm = Machine()\nm.unique_id = lambda: {unique_id!r}\n"
            "sys.modules['machine'] = m\n"
        )


@pytest.fixture
async def boards(tmp_path: Path) -> Any:
    made: list[Board] = []

    async def make(name: str, mac: str | None = None) -> Board:
        board = await started_board(tmp_path, name, mac)
        made.append(board)
        return board

    yield make
    for board in made:
        await board.stop()


def install(board: Board, slot: str, *options: str) -> tuple[str, ...]:
    return (
        "device", "install", board.port, "--slot", slot, "--gateway-url", UNREACHABLE, "--pace-ms", "0", *options
    )  # fmt: skip


def adopted_rows() -> list[tuple[str, str | None, bool, bool]]:
    registry = DeviceRegistry(default_registry_path())
    try:
        return [(row.device_id, row.slot, row.adopted, row.revoked) for row in registry.devices()]
    finally:
        registry.close()


# -- one board per slot -----------------------------------------------------------------------------


async def test_a_second_board_for_a_taken_slot_is_refused_before_it_is_written_to(
    boards: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    board_a = await boards("a", MAC_A)
    board_b = await boards("b", MAC_B)
    code, out, err = await run_cli(capsys, *install(board_a, "pump-14", "--no-reset"))
    assert (code, err) == (0, ""), err
    # Board B serves pump-15 and runs its application.
    code, out, err = await run_cli(capsys, *install(board_b, "pump-15"))
    assert (code, err) == (0, ""), err
    await wait_for(lambda: board_b.app is not None, 10, "board B's application")
    config_b = (board_b.root / "config.json").read_bytes()
    files_b = sorted(path.relative_to(board_b.root) for path in board_b.root.rglob("*"))

    code, out, err = await run_cli(capsys, *install(board_b, "pump-14"))
    assert code == 1
    assert err.startswith(f"mcp-gateway: slot pump-14 is adopted by {MAC_A} (since 20"), err
    assert err.endswith(
        f"), and the board on {board_b.port} is {MAC_B}: nothing was written to the board; the board was reset and "
        "runs its previous code again. To move pump-14 to this board, run the install again with --replace (it "
        f"revokes {MAC_A}'s identity for pump-14), or give this board another --slot [slot-taken]\n"
    ), err
    assert (board_b.root / "config.json").read_bytes() == config_b
    assert sorted(path.relative_to(board_b.root) for path in board_b.root.rglob("*")) == files_b
    # Stopped for the probe, then reset: its application runs again.
    await wait_for(lambda: board_b.events[-2:] == ["interrupt", "reset"], 10, "board B's reset")
    await wait_for(lambda: board_b.app is not None, 10, "board B's application again")
    assert sorted(adopted_rows()) == [(MAC_A, "pump-14", True, False), (MAC_B, "pump-15", True, False)]

    # An MQTT install of B for pump-14 is refused before mosquitto's password file is touched.
    passwd = tmp_path / "passwd"
    passwd.write_text("pump-14:$7$101$earlier\n")
    mqtt = ("--transport", "mqtt", "--mqtt-broker", "127.0.0.1", "--mosquitto-passwd", str(passwd), "--no-reset")
    code, out, err = await run_cli(capsys, *install(board_b, "pump-14", *mqtt))
    assert code == 1 and err.endswith("[slot-taken]\n"), err
    assert passwd.read_text() == "pump-14:$7$101$earlier\n"
    assert (board_b.root / "config.json").read_bytes() == config_b

    # The same board again on its own slot is no conflict.
    code, out, err = await run_cli(capsys, *install(board_a, "pump-14", "--no-reset"))
    assert (code, err) == (0, ""), err

    # --replace: A's identity for pump-14 revoked in the adoption's transaction, and said.
    code, out, err = await run_cli(capsys, *install(board_b, "pump-14", "--no-reset", "--replace", "--url", NO_GATEWAY))
    assert (code, err) == (0, ""), err
    assert f"\nrevoked {MAC_A} for slot pump-14 (--replace): the gateway refuses it from its next connection\n" in out
    assert f"\nthe gateway at {NO_GATEWAY} could not end the replaced board's link now (" in out
    assert sorted(adopted_rows()) == [(MAC_A, "pump-14", True, True), (MAC_B, "pump-14", True, False)]


async def test_replace_moves_a_served_slot_to_the_new_board(
    gateway_factory: GatewayFactory, boards: Any, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    url = f"ws://127.0.0.1:{gateway.port}"
    board_a = await boards("a", MAC_A)
    board_b = await boards("b", MAC_B)
    for board in (board_a, board_b):
        board_install: tuple[str, ...] = (
            "device", "install", board.port, "--slot", "pump-14", "--gateway-url", url, "--pace-ms", "0"
        )  # fmt: skip
        if board is board_b:
            code, out, err = await run_cli(capsys, *board_install)
            assert code == 1 and err.endswith("[slot-taken]\n"), err
            board_install = (*board_install, "--replace", "--url", gateway.url)
        code, out, err = await run_cli(capsys, *board_install)
        assert (code, err) == (0, ""), err
        await wait_ready_slot(gateway, "pump-14", timeout=20)
        if board is board_a:
            assert (await status_of(gateway, "pump-14"))["identity"] == f"device:{MAC_A}"
    assert out.splitlines()[-3:-1] == [
        f"revoked {MAC_A} for slot pump-14 (--replace): the gateway refuses it from its next connection",
        f"the gateway at {gateway.url} ended pump-14 (websocket, device:{MAC_A}): closed its WebSocket with 1008 "
        "(policy violation)",
    ]
    for _ in range(100):  # board B dials with its own secret and takes the slot
        status = await status_of(gateway, "pump-14")
        if status.get("identity") == f"device:{MAC_B}" and status.get("state") == "ready":
            break
        await asyncio.sleep(0.1)
    assert status["identity"] == f"device:{MAC_B}", status
    assert board_a.app is not None
    refused = await board_a.app.wait_event("link_down", count=2, timeout=10)
    assert "provider_identity_revoked" in refused["reason"], refused


def test_the_registry_adopts_one_board_per_slot(state_dir: Path) -> None:
    registry = DeviceRegistry(default_registry_path())
    try:
        registry.adopt(MAC_A, "pump-14", "websocket", None, secret_digest("a"))
        with pytest.raises(SlotTaken) as taken:
            registry.adopt(MAC_B, "pump-14", "websocket", None, secret_digest("b"))
        assert (taken.value.slot, taken.value.device_id) == ("pump-14", MAC_A)
        assert registry.by_digest(secret_digest("b")) is None  # nothing of the refused adoption stays
        assert registry.adopt(MAC_A, "pump-14", "websocket", None, secret_digest("a2")).replaced == ()
        adopted = registry.adopt(MAC_B, "pump-14", "mqtt", None, None, replace=True)
        assert adopted.replaced == (MAC_A,)
        assert registry.adopted(MAC_A) is not None and registry.adopted(MAC_A).revoked  # type: ignore[union-attr]
        assert registry.slot_holder("pump-14", MAC_A) is not None
        assert registry.slot_holder("pump-14", MAC_B) is None
    finally:
        registry.close()


# -- a registry that cannot be used -----------------------------------------------------------------


def bad_registry(kind: str, tmp_path: Path) -> Path:
    if kind == "directory":
        (tmp_path / "a-directory").mkdir()
        return tmp_path / "a-directory"
    if kind == "not-a-database":
        (tmp_path / "junk.db").write_bytes(b"not a database, " * 64)
        return tmp_path / "junk.db"
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "devices.db"


@pytest.mark.parametrize("kind", ["directory", "not-a-database", "below-a-file"])
async def test_a_registry_that_cannot_be_used_stops_the_install_before_the_board(
    boards: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    board = await boards("board", MAC_A)
    code, out, err = await run_cli(capsys, *install(board, "pump-11", "--no-reset"))
    assert (code, err) == (0, ""), err
    config = (board.root / "config.json").read_bytes()
    bad = bad_registry(kind, tmp_path)

    code, out, err = await run_cli(capsys, *install(board, "pump-11", "--registry", str(bad), "--dry-run"))
    assert code == 1
    assert err.startswith(f"mcp-gateway: the install would stop: the device registry {bad} cannot be used ("), err
    assert err.endswith(" [registry-unusable]\n"), err

    code, out, err = await run_cli(capsys, *install(board, "pump-11", "--registry", str(bad)))
    assert (code, out) == (1, "")
    assert err.startswith(f"mcp-gateway: the device registry {bad} cannot be used ("), err
    assert f"): nothing was written to the board on {board.port}. Name a database file" in err
    assert err.endswith(" [registry-unusable]\n") and "Errno" not in err, err
    assert (board.root / "config.json").read_bytes() == config  # the board keeps the secret the gateway knows
    assert adopted_rows() == [(MAC_A, "pump-11", True, False)]


# -- update: the source whole before the board ------------------------------------------------------


async def test_an_update_from_a_folder_without_its_schema_leaves_the_running_board_alone(
    gateway_factory: GatewayFactory, boards: Any, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    board = await boards("board")
    url = f"ws://127.0.0.1:{gateway.port}"
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", "pump-12", "--gateway-url", url, "--pace-ms", "0"
    )
    assert (code, err) == (0, ""), err
    await wait_ready_slot(gateway, "pump-12", timeout=20)
    events = list(board.events)

    # The docs' recipe without the schema: a copy of device/micropython alone.
    source = tmp_path / "src3"
    shutil.copytree(DEVICE_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    update = ("device", "update", "pump-12", "--url", gateway.url, "--pace-ms", "0", "--wait-s", "20")
    code, out, err = await run_cli(capsys, *update, "--source", str(source))
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway: --source {source} has no pump-1.json, in it or in {tmp_path / 'schemas'}: copy the schema "
        f"the application serves into the folder (from a checkout: cp device/schemas/pump-1.json {source}/); "
        "the board was not touched\n"
    )
    (source / "main.py").unlink()
    code, out, err = await run_cli(capsys, *update, "--source", str(source))
    assert code == 1 and err.startswith(f"mcp-gateway: --source {source} lacks main.py: "), err
    assert board.events == events  # no Ctrl-C reached it: the pump ran on
    assert gateway.gateway.registry.slots["pump-12"].live is not None

    # A folder that passes, but a board that fails the copy after it was interrupted (a file it cannot
    # write): it is reset and runs its code again.
    (board.root / "pump1" / "tools.mpy.new").mkdir()
    code, out, err = await run_cli(capsys, *update, "--source", str(bumped_source(tmp_path, "0.2.0")))
    assert code == 1
    assert err.startswith(f"mcp-gateway: the board on {board.port} failed: "), err
    assert err.endswith("; the board was reset and runs its previous code again\n"), err
    await wait_for(lambda: board.events[len(events) :] == ["interrupt", "reset"], 10, "the board's reset")
    await wait_ready_slot(gateway, "pump-12", timeout=20)
    assert (await status_of(gateway, "pump-12"))["hello"]["firmware"]["version"] == "0.1.0"


# -- a board unplugged midway -----------------------------------------------------------------------


async def test_a_board_unplugged_during_the_copy_is_named_board_gone(
    boards: Any, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    board = await boards("board", MAC_A)
    running = asyncio.create_task(run_cli(capsys, *install(board, "pump-9", "--no-reset", "--pace-ms", "30")))
    await wait_for(lambda: any(board.root.rglob("*.new")), 20, "the copy to begin")
    assert board._shim is not None
    board._shim.kill()  # the cable comes out: the console's end of the line is gone
    await board._shim.wait()
    code, _, err = await asyncio.wait_for(running, 30)
    assert code == 1
    assert err.startswith(f"mcp-gateway: the board on {board.port} went away during the copy ("), err
    assert err.endswith(
        "): its code is as it was (new files copied in part, *.new, stay unused); the registry was not changed. Plug "
        "it in again and run the same install again: it starts over [board-gone]\n"
    ), err
    assert "Errno" not in err.split("(", 1)[0]
    assert adopted_rows() == []


# -- the port check: the lock, in the dry run as in the install ------------------------------------


def holder(path: str, lock: bool) -> subprocess.Popen[str]:
    """Another program with the port open: with the lock (as a serial monitor, the gateway) or without (as
    socat holding its own PTY)."""
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({path!r}, os.O_RDWR | os.O_NOCTTY)\n"
        + ("fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n" if lock else "")
        + "print('open', flush=True)\ntime.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "open\n"
    return process


async def test_dry_run_and_install_judge_a_busy_port_by_its_lock(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = PtyPair()
    dry = ("device", "install", pair.path, "--slot", "pump-7", "--gateway-url", UNREACHABLE, "--dry-run")
    try:
        unlocked = holder(pair.path, lock=False)
        try:
            code, out, err = await run_cli(capsys, *dry)
        finally:
            unlocked.kill()
            unlocked.wait()
        assert (code, err) == (0, ""), err
        assert f"would open {pair.path}: it is there, free, and this user may read and write it\n" in out

        locked = holder(pair.path, lock=True)
        try:
            code, out, dry_err = await run_cli(capsys, *dry)
            assert code == 1
            code, out, err = await run_cli(capsys, *dry[:-1], "--pace-ms", "0")
            assert (code, out) == (1, "")
        finally:
            locked.kill()
            locked.wait()
    finally:
        pair.close()
    said = (
        f"{pair.path} is in use by another program (held by {Path(sys.executable).name[:15]} (pid {locked.pid})): "
        "close it (a serial monitor, another flash, the gateway's serial way in) and run the command again "
        "[port-in-use]"
    )
    assert dry_err == f"mcp-gateway: the install would stop: {said}\n"
    assert err == f"mcp-gateway: {said}\n"


def test_a_raw_repl_on_a_port_that_fails_says_board_gone() -> None:
    """pyserial's errors on a vanished port (EIO on write, no data on read) are BoardGone, not raw text."""
    pair = PtyPair()
    line = open_port(pair.path)
    pair.close()  # the other end closes, as a USB adapter unplugged
    repl = RawRepl(line, name="the board on X", pace_s=0)
    with pytest.raises(BoardError) as raised:
        repl.enter()
    repl.close()
    assert isinstance(raised.value, BoardGone), raised.value
    assert str(raised.value).startswith("the board on X went away (")
