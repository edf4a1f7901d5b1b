"""Every `mcp-gateway flash` that identified its board is recorded in the device registry
(gateway/devices/flashes.py): when, which board (its MAC, spelt as the board's hello spells its
device_id), the image, the outcome, who ran it; `mcp-gateway devices` shows each board's last flash and
`mcp-gateway devices flashes` the history. A registry that cannot be written costs a note, not the flash.

The flashes run the command's own code against the fake ESP32-C3 ROM loader on a pseudo-terminal
(tests/support/fake_rom.py), in this process or, stopped by a signal or run as another user, in one
of their own.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import io
import os
import pwd
import shutil
import signal
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli import build_parser
from gateway.devices.flashes import MAX_FLASHES, FlashRecord, flash_history, record_flash
from gateway.devices.registry import DeviceRegistry, default_registry_path
from gateway.flash.errors import EXIT_CODES
from tests.field.images import build_image
from tests.field.test_flash_interrupted import SlowRom, start_flash, wait_for_write
from tests.support.fake_rom import FakeRom
from tests.support.serial_ports import PtyPair
from tests.support.unprivileged import as_nobody

BOARD_MAC = bytes.fromhex("3485180a0b0c")  # the fake ROM's eFuse MAC
BOARD = ":".join("%02x" % byte for byte in BOARD_MAC)  # noqa: UP031  the board's own spelling (pump1/build.py)
OTHER = "24:0a:c4:00:00:08"


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "pump1-c3.bin"
    path.write_bytes(build_image("esp32c3"))
    return path


def command(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """One `mcp-gateway` command in this process's main thread (flash's signal handlers need it): its exit
    code, stdout and stderr."""
    capsys.readouterr()
    args = build_parser().parse_args(list(argv))
    code: int = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def flash_command(capsys: pytest.CaptureFixture[str], port: str, image: Path, *options: str) -> tuple[int, str, str]:
    argv = ["flash", port, "--firmware", str(image), "--offset", "0x10000", "--connect-attempts", "1"]
    return command(capsys, *argv, "--no-handover", *options)


def history(device_id: str | None = None) -> list[FlashRecord]:
    registry = DeviceRegistry(default_registry_path())
    try:
        return flash_history(registry, device_id)
    finally:
        registry.close()


def a_record(device_id: str, outcome: str = "ok", image: str = "old.bin") -> FlashRecord:
    return FlashRecord("2026-01-02T03:04:05Z", device_id, "ESP32-C3", "v0.4", "/dev/ttyUSB0", image, 1024,
                       "ab" * 32, 0x10000, outcome, "tech", None)  # fmt: skip


def test_a_flash_is_recorded_with_the_image_s_sha256_and_the_board_s_mac(
    rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUDO_USER", "alice")
    before = time.time()

    code, out, err = flash_command(capsys, rom.pair.path, image, "--json")

    assert (code, err) == (0, ""), out
    assert orjson.loads(out.splitlines()[-1]) == {"step": "reset"}  # nothing after a record that worked
    (flash,) = history()
    data = image.read_bytes()
    assert flash == FlashRecord(
        flashed_at=flash.flashed_at,
        device_id=BOARD,
        chip="ESP32-C3",
        revision="v0.4",
        port=rom.pair.path,
        image="pump1-c3.bin",
        image_size=len(data),
        image_sha256=hashlib.sha256(data).hexdigest(),
        image_offset=0x10000,
        outcome="ok",
        user=pwd.getpwuid(os.getuid()).pw_name,
        sudo_user="alice",
    )
    at = calendar.timegm(time.strptime(flash.flashed_at, "%Y-%m-%dT%H:%M:%SZ"))
    assert flash.flashed_at.endswith("Z") and before - 1 <= at <= time.time() + 1  # UTC


def test_a_failed_verify_is_recorded_and_the_error_stays_the_last_line(
    rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rom.corrupt_after_write = True

    code, out, _ = flash_command(capsys, rom.pair.path, image, "--json")

    assert code == EXIT_CODES["verify-failed"]
    assert orjson.loads(out.splitlines()[-1])["error"] == "verify-failed"
    assert [(flash.device_id, flash.image, flash.outcome) for flash in history()] == [
        (BOARD, "pump1-c3.bin", "verify-failed")
    ]


def test_a_flash_refused_before_the_board_is_known_records_nothing(
    rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rom.answer_sync = False

    code, _, _ = flash_command(capsys, rom.pair.path, image, "--json")

    assert code == EXIT_CODES["not-in-download-mode"]
    assert not default_registry_path().exists()


def test_an_interrupted_flash_is_recorded(image: Path) -> None:
    rom = SlowRom(PtyPair())
    flash = start_flash(rom.pair.path, image, "--json")
    try:
        assert flash.stdout is not None
        wait_for_write(flash.stdout)
        flash.send_signal(signal.SIGTERM)
        out, err = flash.communicate(timeout=30)
    finally:
        if flash.poll() is None:
            flash.kill()
            flash.wait()
        rom.close()
    assert flash.returncode == 143, err
    assert orjson.loads(out.splitlines()[-1])["error"] == "interrupted"
    assert [(flash.device_id, flash.outcome) for flash in history()] == [(BOARD, "interrupted")]


def test_a_damaged_registry_is_a_note_and_the_flash_stands(
    rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = image.parent / "devices.db"
    damaged.write_bytes(b"not a database, " * 64)

    code, out, err = flash_command(capsys, rom.pair.path, image, "--json", "--registry", str(damaged))

    assert (code, err) == (0, "")
    steps = [orjson.loads(line) for line in out.splitlines()]
    assert [step["step"] for step in steps[-2:]] == ["reset", "note"]
    assert steps[-1]["message"] == (
        f"the flash is not recorded: the device registry {damaged} cannot be written (file is not a database). "
        "Name one this user may write with --registry, or mend this one"
    )


def test_a_read_only_registry_is_a_note_on_stderr_and_exit_0(rom: FakeRom) -> None:
    """The command runs as nobody (tests/support/unprivileged.py); the registry is root's, readable by
    all, writable by root alone."""
    public = Path(tempfile.mkdtemp())
    try:
        public.chmod(0o755)
        image = public / "pump1-c3.bin"
        image.write_bytes(build_image("esp32c3"))
        image.chmod(0o644)
        registry_path = public / "state" / "devices.db"
        registry = DeviceRegistry(registry_path)
        record_flash(registry, a_record(OTHER))
        registry.close()
        registry_path.parent.chmod(0o755)
        registry_path.chmod(0o644)
        os.chmod(rom.pair.path, 0o666)
        argv = ["flash", rom.pair.path, "--firmware", str(image), "--connect-attempts", "1", "--no-handover"]
        args = build_parser().parse_args([*argv, "--registry", str(registry_path)])

        def flash_it() -> dict[str, Any]:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = args.func(args)
            return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

        done = as_nobody(flash_it)
        assert done["code"] == 0, done
        assert done["out"].splitlines()[-1] == "Reset: the board starts the new firmware."
        (note,) = done["err"].splitlines()
        assert note.startswith(
            f"mcp-gateway flash: note: the flash is not recorded: the device registry {registry_path} cannot be "
            "written (attempt to write a readonly database). Name one this user may write with --registry"
        ), note
        assert [flash.device_id for flash in flash_history(DeviceRegistry(registry_path))] == [OTHER]
    finally:
        shutil.rmtree(public)


def test_the_history_keeps_the_newest_rows(rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = DeviceRegistry(default_registry_path())
    for outcome in ("first", "second", "third"):
        record_flash(registry, a_record(OTHER, outcome))
    registry.close()

    code, _, _ = flash_command(capsys, rom.pair.path, image, "--json", "--keep-flashes", "2")

    assert code == 0
    assert [(flash.device_id, flash.outcome) for flash in history()] == [(BOARD, "ok"), (OTHER, "third")]


def test_the_default_bound_deletes_the_oldest(rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = DeviceRegistry(default_registry_path())
    record_flash(registry, a_record(OTHER, "oldest"))
    db = sqlite3.connect(registry.path)
    with db:
        db.executemany(
            "INSERT INTO flashes (flashed_at, device_id, outcome) VALUES ('2026-01-02T03:04:05Z', ?, 'ok')",
            [(OTHER,)] * (MAX_FLASHES - 1),
        )
    db.close()
    registry.close()
    assert len(history()) == MAX_FLASHES

    code, _, _ = flash_command(capsys, rom.pair.path, image, "--json")

    assert code == 0
    flashes = history()
    assert len(flashes) == MAX_FLASHES and flashes[0].device_id == BOARD
    assert "oldest" not in {flash.outcome for flash in flashes}


def test_devices_shows_each_board_s_last_flash_and_devices_flashes_the_history(
    rom: FakeRom, image: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = image.read_bytes()
    code, out, err = command(capsys, "devices", "flashes", "--json")
    assert (code, out) == (0, "") and err.startswith("no device registry at ")

    # A registry from before flashes were recorded (a devices table alone): read, and written to, as it is.
    registry = DeviceRegistry(default_registry_path())
    registry.record(BOARD, slot="pump-7", transport="websocket", firmware="pump-1", version="1.0.0", schema="s")
    registry.close()
    code, out, _ = command(capsys, "devices", "flashes")
    assert (code, out) == (0, f"no flash recorded in {default_registry_path()}\n")

    rom.corrupt_after_write = True
    assert flash_command(capsys, rom.pair.path, image, "--json")[0] == EXIT_CODES["verify-failed"]
    rom.corrupt_after_write = False
    assert flash_command(capsys, rom.pair.path, image, "--json")[0] == 0
    registry = DeviceRegistry(default_registry_path())
    record_flash(registry, a_record(OTHER))  # a board flashed elsewhere, never heard by this gateway
    registry.close()

    code, out, err = command(capsys, "devices", "flashes", "--json")
    assert (code, err) == (0, "")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [(row["device_id"], row["outcome"]) for row in rows] == [
        (OTHER, "ok"), (BOARD, "ok"), (BOARD, "verify-failed")
    ]  # fmt: skip
    assert rows[1]["image_sha256"] == hashlib.sha256(data).hexdigest()
    assert set(rows[1]) == {"flashed_at", "device_id", "chip", "revision", "port", "image", "image_size",
                            "image_sha256", "image_offset", "outcome", "user", "sudo_user"}  # fmt: skip
    code, out, _ = command(capsys, "devices", "flashes", "--device", BOARD.upper(), "--json")
    assert [orjson.loads(line)["outcome"] for line in out.splitlines()] == ["ok", "verify-failed"]
    code, out, _ = command(capsys, "devices", "flashes", "--device", BOARD)
    table = out.splitlines()
    assert code == 0 and table[0].split()[:4] == ["flashed", "(UTC)", "device", "chip"]
    assert table[1].split()[1:6] == [BOARD, "ESP32-C3", "v0.4", "pump1-c3.bin", f"{len(data):,}"]

    code, out, _ = command(capsys, "devices", "--json")
    boards = {row["device_id"]: row for row in map(orjson.loads, out.splitlines())}
    assert boards[BOARD]["seen"] == 1 and boards[BOARD]["last_flash"]["outcome"] == "ok"  # the flash joins the hello
    assert boards[OTHER]["seen"] == 0 and boards[OTHER]["last_flash"]["image"] == "old.bin"
    code, out, _ = command(capsys, "devices")
    assert code == 0
    header, *lines = out.splitlines()
    assert "last flash" in header
    board_line = next(line for line in lines if line.startswith(BOARD))
    assert f"pump1-c3.bin {rows[1]['flashed_at']}" in board_line
    assert next(line for line in lines if line.startswith(OTHER)).split()[:3] == [OTHER, "no", "0"]


def test_devices_flashes_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    damaged = tmp_path / "devices.db"
    damaged.write_bytes(b"not a database, " * 64)
    code, out, err = command(capsys, "devices", "flashes", "--registry", str(damaged))
    assert (code, out) == (1, "")
    assert err == (
        f"mcp-gateway devices flashes: the device registry ({damaged}) cannot be used: file is not a database\n"
    )
    with pytest.raises(SystemExit) as usage:
        build_parser().parse_args(["devices", "flashes", "--devise", BOARD])
    assert usage.value.code == 2
