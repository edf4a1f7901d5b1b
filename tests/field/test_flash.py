"""`mcp-gateway flash` against a fake ESP32-C3 ROM loader on a pseudo-terminal (tests/support/fake_rom.py).

What is real here: esptool's own code (connect, sync, chip detection, SPI flash ID, compressed write,
MD5), the ROM's serial protocol on a real tty, the port lock (flock) and the permission check (the
kernel refusing a user without access). What is not: the chip (the fake ROM answers for it) and the
DTR/RTS reset pulses (a pseudo-terminal has no modem lines; esptool ignores the ENOTTY), so the reset
is seen as esptool's hard-reset call, not on a pin.
"""

from __future__ import annotations

import argparse
import fcntl
import grp
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli.flash import add_flash
from gateway.flash import board as board_module
from gateway.flash.errors import EXIT_CODES
from gateway.flash.handover import Release
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines, Lines
from tests.field.images import build_image
from tests.support.fake_rom import FakeRom
from tests.support.unprivileged import as_nobody

OFFSET = 0x10000


@pytest.fixture
def c3_image(tmp_path: Path) -> Path:
    path = tmp_path / "pump1-c3.bin"
    path.write_bytes(build_image("esp32c3"))
    return path


def run(rom: FakeRom, firmware: str | None, firmware_dir: Path, **options) -> tuple[int, list[dict[str, Any]]]:
    out = io.StringIO()
    handover = options.pop("handover", None)
    request = FlashRequest(
        port=rom.pair.path, firmware=firmware, firmware_dir=firmware_dir, connect_attempts=1, **options
    )
    code = flash(request, JsonLines(out), handover)
    return code, [orjson.loads(line) for line in out.getvalue().splitlines()]


def write_sums(directory: Path) -> None:
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(directory.glob("*.bin"))]
    (directory / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def test_detect_write_verify_reset(rom: FakeRom, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    firmware_dir = tmp_path / "firmware"
    firmware_dir.mkdir()
    image = build_image("esp32c3")
    (firmware_dir / "pump1-c3.bin").write_bytes(image)
    write_sums(firmware_dir)
    resets: list[str] = []
    real_reset = board_module.reset_chip  # type: ignore[attr-defined]

    def reset_chip(esp: Any, mode: str) -> None:
        resets.append(mode)
        real_reset(esp, mode)

    monkeypatch.setattr(board_module, "reset_chip", reset_chip)

    code, events = run(rom, "pump1-c3", firmware_dir, offset=OFFSET)  # a name, looked up in the directory

    assert code == 0, events
    steps = [event["step"] for event in events]
    assert steps[0] == "image" and steps[1] == "detect" and steps[-2:] == ["verify", "reset"]
    assert events[0]["chip"] == "ESP32-C3" and events[0]["sha256"] == hashlib.sha256(image).hexdigest()
    assert events[1] == {"step": "detect", "chip": "ESP32-C3", "mac": "34:85:18:0a:0b:0c", "flash_size": "4MB",
                         "revision": "v0.4"}  # fmt: skip
    assert events[-2] == {"step": "verify", "ok": True, "md5": hashlib.md5(image).hexdigest()}
    assert bytes(rom.flash[OFFSET : OFFSET + len(image)]) == image
    assert rom.flash[:OFFSET] == b"\xff" * OFFSET and rom.flash[OFFSET + len(image) :].count(0xFF) == len(
        rom.flash
    ) - OFFSET - len(image)
    assert resets == ["hard-reset"]
    assert rom.baud == 460800  # CHANGE_BAUDRATE before the transfer
    assert rom.spi_params is not None and rom.spi_params[1] == 4 * 1024 * 1024  # SPI_SET_PARAMS: the detected size
    assert 0x10 in rom.commands and 0x02 not in rom.commands  # compressed (FLASH_DEFL_*), not FLASH_BEGIN


def test_wrong_chip_writes_nothing(rom: FakeRom, tmp_path: Path) -> None:
    path = tmp_path / "pump1-s3.bin"
    path.write_bytes(build_image("esp32s3"))

    code, events = run(rom, str(path), tmp_path)

    assert code == EXIT_CODES["wrong-chip"] == 13
    assert events[0]["chip"] == "ESP32-S3"
    assert events[-1] == {
        "step": "error",
        "error": "wrong-chip",
        "message": "pump1-s3.bin is an image for ESP32-S3, the board is an ESP32-C3: nothing was written",
    }
    assert not rom.wrote_flash() and rom.flash.count(0xFF) == len(rom.flash)


def test_corrupted_transfer_fails_verify(rom: FakeRom, c3_image: Path) -> None:
    rom.corrupt_after_write = True

    code, events = run(rom, str(c3_image), c3_image.parent)

    assert code == EXIT_CODES["verify-failed"] == 31
    assert events[-1]["error"] == "verify-failed"
    assert "does not hold the image" in events[-1]["message"]
    assert "reset" not in [event["step"] for event in events]


def test_progress_json_lines(rom: FakeRom, c3_image: Path) -> None:
    code, events = run(rom, str(c3_image), c3_image.parent, offset=OFFSET)

    assert code == 0
    writes = [event for event in events if event["step"] == "write"]
    total = len(c3_image.read_bytes())
    assert len(writes) > 10  # the image compresses to many 1 KB blocks
    assert writes[0] == {"step": "write", "written": 0, "total": total, "offset": OFFSET}
    assert writes[-1] == {"step": "write", "written": total, "total": total, "offset": OFFSET}
    assert [w["written"] for w in writes] == sorted(w["written"] for w in writes)


def test_progress_bar_and_lines(rom: FakeRom, c3_image: Path) -> None:
    out, bar = io.StringIO(), io.StringIO()
    request = FlashRequest(port=rom.pair.path, firmware=str(c3_image), firmware_dir=c3_image.parent, offset=OFFSET)

    assert flash(request, Lines(out, bar)) == 0

    total = len(c3_image.read_bytes())
    frames = bar.getvalue().split("\r")
    assert frames[1] == f"Writing [{'.' * 30}]   0% 0/{total:,} bytes"
    assert frames[-1] == f"Writing [{'#' * 30}] 100% {total:,}/{total:,} bytes\n"
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"Image: {c3_image} (ESP32-C3, {total:,} bytes, SHA-256 ")
    assert lines[1:] == [
        "Board: ESP32-C3 (revision v0.4), MAC 34:85:18:0a:0b:0c, flash 4MB",
        f"Wrote {total:,} bytes at 0x10000.",
        f"Verified: the flash holds the image (MD5 {hashlib.md5(c3_image.read_bytes()).hexdigest()}).",
        "Reset: the board starts the new firmware.",
    ]


def test_board_not_in_download_mode(rom: FakeRom, c3_image: Path) -> None:
    rom.answer_sync = False

    code, events = run(rom, str(c3_image), c3_image.parent)

    assert code == EXIT_CODES["not-in-download-mode"] == 23
    message = events[-1]["message"]
    assert events[-1]["error"] == "not-in-download-mode"
    assert message.startswith(f"no ROM loader answers on {rom.pair.path} (Failed to connect to ")
    assert message.endswith(
        "). Put the board in download mode: hold BOOT (GPIO9 on an ESP32-C3, GPIO0 on others), tap EN/RESET, "
        "release BOOT, then run the command again"
    )
    assert rom.commands and set(rom.commands) == {0x08}  # esptool tried to sync, nothing else


def test_port_in_use(rom: FakeRom, c3_image: Path) -> None:
    holder = os.open(rom.pair.path, os.O_RDWR | os.O_NOCTTY)  # another program, with the port locked
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        code, events = run(rom, str(c3_image), c3_image.parent)
    finally:
        os.close(holder)

    assert code == EXIT_CODES["port-in-use"] == 22
    assert events[-1]["error"] == "port-in-use"
    assert events[-1]["message"].startswith(f"{rom.pair.path} is in use by another program")
    assert rom.commands == []


class LockHolder:
    """A gateway holding the port, that lets go when asked (the handover's other side)."""

    def __init__(self, path: str) -> None:
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_NOCTTY)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.calls: list[str] = []

    def let_go(self, port: str) -> Release | None:
        self.calls.append(f"release {port}")
        assert self.fd is not None
        os.close(self.fd)
        self.fd = None
        return Release(already_held=False)

    def resume(self, port: str) -> None:
        self.calls.append(f"resume {port}")


def test_port_held_by_gateway_is_handed_over_and_back(rom: FakeRom, c3_image: Path) -> None:
    gateway = LockHolder(rom.pair.path)

    code, events = run(rom, str(c3_image), c3_image.parent, handover=gateway)

    assert code == 0, events
    steps = [event["step"] for event in events]
    assert steps[:3] == ["image", "release", "detect"] and steps[-2:] == ["reset", "resume"]
    assert gateway.calls == [f"release {rom.pair.path}", f"resume {rom.pair.path}"]


def test_permission_denied_says_dialout(rom: FakeRom) -> None:
    """Real EACCES: a child process drops root for `nobody`, the port is root:dialout 0660."""
    public = Path(tempfile.mkdtemp())
    public.chmod(0o755)
    image = public / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    image.chmod(0o644)
    os.chown(rom.pair.path, 0, grp.getgrnam("dialout").gr_gid)
    os.chmod(rom.pair.path, 0o660)

    def flash_it() -> dict[str, Any]:
        out = io.StringIO()
        request = FlashRequest(port=rom.pair.path, firmware=str(image), firmware_dir=public)
        code = flash(request, JsonLines(out))
        return {"code": code, "out": out.getvalue()}

    result = as_nobody(flash_it)
    events = [orjson.loads(line) for line in result["out"].splitlines()]
    assert result["code"] == EXIT_CODES["permission-denied"] == 21
    assert events[-1] == {
        "step": "error",
        "error": "permission-denied",
        "message": f"permission denied opening {rom.pair.path}: your user is not in the 'dialout' group that "
        "owns it. Run `sudo usermod -aG dialout $USER`, then log out and in again (or reboot)",
    }
    assert rom.commands == []
    image.unlink()
    public.rmdir()


def test_image_too_big_for_the_flash(rom: FakeRom, c3_image: Path) -> None:
    code, events = run(rom, str(c3_image), c3_image.parent, offset=0x3FF000)

    assert code == EXIT_CODES["image-too-big"]
    assert events[-1]["message"].endswith("does not fit the board's 4MB flash: nothing was written")
    assert not rom.wrote_flash()


def test_file_problems_stop_before_the_port(tmp_path: Path) -> None:
    never = "/dev/null/not-a-port"  # never opened: the image is checked first
    not_image = tmp_path / "notes.bin"
    not_image.write_bytes(b"hello, this is text")
    damaged = tmp_path / "damaged.bin"
    data = bytearray(build_image("esp32c3"))
    data[200] ^= 0xFF
    damaged.write_bytes(bytes(data))
    data[200] ^= 0xFF
    data[-1] ^= 0xFF  # the appended SHA-256 itself
    bad_digest = tmp_path / "bad-digest.bin"
    bad_digest.write_bytes(bytes(data))
    cases = {
        str(tmp_path / "missing.bin"): "firmware-not-found",
        str(not_image): "not-an-image",
        str(damaged): "not-an-image",
        str(bad_digest): "not-an-image",
    }
    for firmware, error in cases.items():
        out = io.StringIO()
        code = flash(FlashRequest(port=never, firmware=firmware, firmware_dir=tmp_path), JsonLines(out))
        last = orjson.loads(out.getvalue().splitlines()[-1])
        assert (code, last["error"]) == (EXIT_CODES[error], error), last
    assert "it starts with 0x68, an image starts with 0xE9" in _error(never, str(not_image), tmp_path)
    assert "its checksum byte does not match its segments" in _error(never, str(damaged), tmp_path)
    assert "the SHA-256 at its end does not match its contents" in _error(never, str(bad_digest), tmp_path)


def _error(port: str, firmware: str, firmware_dir: Path) -> str:
    out = io.StringIO()
    flash(FlashRequest(port=port, firmware=firmware, firmware_dir=firmware_dir), JsonLines(out))
    message: str = orjson.loads(out.getvalue().splitlines()[-1])["message"]
    return message


def test_firmware_directory_checksums(tmp_path: Path) -> None:
    firmware_dir = tmp_path / "firmware"
    firmware_dir.mkdir()
    (firmware_dir / "pump1-c3.bin").write_bytes(build_image("esp32c3"))
    write_sums(firmware_dir)
    (firmware_dir / "pump1-c3.bin").write_bytes(build_image("esp32c3", seed=2))  # replaced after the sums
    (firmware_dir / "extra.bin").write_bytes(build_image("esp32c3"))  # never recorded

    message = _error("/dev/null/x", "pump1-c3", firmware_dir)
    assert message.startswith(f"{firmware_dir / 'pump1-c3.bin'} does not match SHA256SUMS: SHA-256 ")
    assert _error("/dev/null/x", "extra", firmware_dir) == (
        f"extra.bin is not listed in {firmware_dir / 'SHA256SUMS'}: refusing an image nobody recorded"
    )
    assert _error("/dev/null/x", "other", firmware_dir) == (
        f"no file 'other' here, and no image of that name in the firmware directory {firmware_dir}; "
        "the directory lists: pump1-c3.bin"
    )


def test_without_firmware_the_image_for_the_chip_is_chosen(rom: FakeRom, tmp_path: Path) -> None:
    firmware_dir = tmp_path / "firmware"
    firmware_dir.mkdir()
    (firmware_dir / "pump1-s3.bin").write_bytes(build_image("esp32s3"))
    (firmware_dir / "pump1-c3.bin").write_bytes(build_image("esp32c3"))
    write_sums(firmware_dir)

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == 0, events
    assert [event["step"] for event in events][:3] == ["detect", "image", "write"]
    assert events[1]["file"] == str(firmware_dir / "pump1-c3.bin")


def test_command_line(rom: FakeRom, c3_image: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="mcp-gateway")
    add_flash(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["flash", rom.pair.path, "--firmware", str(c3_image), "--offset", "0x10000", "--json", "--no-handover"]
    )

    assert args.func(args) == 0

    steps = [orjson.loads(line)["step"] for line in capsys.readouterr().out.splitlines()]
    assert steps[0] == "image" and steps[-1] == "reset"
    with pytest.raises(SystemExit):
        parser.parse_args(["flash", rom.pair.path, "--offset", "0x10001"])


def test_chip_option_naming_another_chip(rom: FakeRom, c3_image: Path) -> None:
    code, events = run(rom, str(c3_image), c3_image.parent, chip="esp32s3")

    assert code == EXIT_CODES["wrong-chip"]
    assert events[-1]["message"] == "This chip is ESP32-C3, not ESP32-S3. Wrong chip argument?"
    assert not rom.wrote_flash()
