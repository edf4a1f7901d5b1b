"""`mcp-gateway flash` without `--firmware`: what the firmware directory holds besides what its
SHA256SUMS lists (gateway/flash/firmware.py survey, gateway/flash/procedure.py select).

Real files in tmp_path, recorded as `sha256sum` records them, and the fake ESP32-C3 ROM loader of
tests/support/fake_rom.py on a pseudo-terminal (an ESP32-C3 board).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.flash.errors import EXIT_CODES
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines, Lines
from tests.field.images import build_image
from tests.field.test_flash import run, write_sums
from tests.support.fake_rom import FakeRom

OFFSET = 0x10000


@pytest.fixture
def firmware_dir(tmp_path: Path) -> Path:
    """v1 for the ESP32-C3 and an ESP32-S3 image, both recorded."""
    directory = tmp_path / "firmware"
    directory.mkdir()
    (directory / "pump1-c3-v1.bin").write_bytes(build_image("esp32c3", seed=1))
    (directory / "pump1-s3.bin").write_bytes(build_image("esp32s3", seed=3))
    write_sums(directory)
    return directory


def before_the_port(directory: Path) -> tuple[int, list[dict[str, Any]]]:
    """A flash whose port is never opened (nothing in the directory can be written): no ROM needed."""
    out = io.StringIO()
    code = flash(FlashRequest(port="/dev/null/not-a-port", firmware=None, firmware_dir=directory), JsonLines(out))
    return code, [orjson.loads(line) for line in out.getvalue().splitlines()]


def record_command(directory: Path) -> str:
    return f"cd {directory} && sha256sum *.bin > SHA256SUMS"


def test_an_unrecorded_image_for_the_chip_stops_the_flash(rom: FakeRom, firmware_dir: Path) -> None:
    """A v2 copied in, SHA256SUMS not written again: the listed v1 is not written in its place."""
    (firmware_dir / "pump1-c3-v2.bin").write_bytes(build_image("esp32c3", seed=2))

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == EXIT_CODES["checksum-mismatch"] == 12, events
    assert [event["step"] for event in events] == ["detect", "error"]
    assert events[-1]["message"] == (
        f"not listed in {firmware_dir / 'SHA256SUMS'}, and may be for this ESP32-C3: pump1-c3-v2.bin (ESP32-C3). "
        f"If the image to write is there, record the images ({record_command(firmware_dir)}) and run the "
        "command again, or name the listed image to write with --firmware (pump1-c3-v1); nothing was written"
    )
    assert not rom.wrote_flash()


def test_a_deleted_image_and_an_unrecorded_one_are_both_named(rom: FakeRom, firmware_dir: Path) -> None:
    """v1 deleted (SHA256SUMS still lists it), v2 copied in unrecorded: not "no image for ESP32-C3"."""
    (firmware_dir / "pump1-c3-v1.bin").unlink()
    (firmware_dir / "pump1-c3-v2.bin").write_bytes(build_image("esp32c3", seed=2))

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == EXIT_CODES["checksum-mismatch"], events
    assert events[-1]["message"] == (
        f"not listed in {firmware_dir / 'SHA256SUMS'}, and may be for this ESP32-C3: pump1-c3-v2.bin (ESP32-C3); "
        "SHA256SUMS lists pump1-c3-v1.bin, not in the directory (deleted or renamed since it was written). "
        f"If the image to write is there, record the images ({record_command(firmware_dir)}) and run the "
        "command again; nothing was written"
    )
    assert not rom.wrote_flash()


def test_a_deleted_image_for_the_chip_is_named_instead_of_wrong_chip(rom: FakeRom, firmware_dir: Path) -> None:
    (firmware_dir / "pump1-c3-v1.bin").unlink()

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == EXIT_CODES["firmware-not-found"] == 10, events
    assert events[-1]["message"] == (
        "no image in the firmware directory is for ESP32-C3 (pump1-s3.bin is for ESP32-S3); SHA256SUMS lists "
        "pump1-c3-v1.bin, not in the directory (deleted or renamed since it was written): copy the image in "
        f"again, or record the images anew ({record_command(firmware_dir)}); nothing was written"
    )
    assert not rom.wrote_flash()


def test_an_unreadable_unrecorded_file_may_be_the_image_meant(rom: FakeRom, firmware_dir: Path) -> None:
    (firmware_dir / "pump1-c3-v2.bin").write_bytes(b"<html>502 Bad Gateway</html>")  # a download gone wrong
    (firmware_dir / "README.txt").write_text("not a *.bin: never an image\n")

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == EXIT_CODES["checksum-mismatch"], events
    assert ": pump1-c3-v2.bin (not a readable image)." in events[-1]["message"]
    assert "README" not in events[-1]["message"]


def test_files_for_other_chips_and_stale_entries_are_noted_and_the_flash_goes_on(
    rom: FakeRom, firmware_dir: Path
) -> None:
    shutil.copy(firmware_dir / "pump1-s3.bin", firmware_dir / "pump1-s3-v2.bin")  # unrecorded, another chip
    (firmware_dir / "SHA256SUMS").write_text((firmware_dir / "SHA256SUMS").read_text() + f"{'0' * 64}  pump1-old.bin\n")

    code, events = run(rom, None, firmware_dir, offset=OFFSET)

    assert code == 0, events
    assert [event["step"] for event in events][:4] == ["detect", "image", "note", "note"]
    assert events[1]["file"] == str(firmware_dir / "pump1-c3-v1.bin")
    assert events[2:4] == [
        {
            "step": "note",
            "message": f"left out, not listed in {firmware_dir / 'SHA256SUMS'}: pump1-s3-v2.bin (ESP32-S3); to use "
            f"them, record the images ({record_command(firmware_dir)})",
        },
        {
            "step": "note",
            "message": "SHA256SUMS lists pump1-old.bin, not in the directory (deleted or renamed since it was "
            f"written); record the images anew ({record_command(firmware_dir)})",
        },
    ]
    image = (firmware_dir / "pump1-c3-v1.bin").read_bytes()
    assert bytes(rom.flash[OFFSET : OFFSET + len(image)]) == image


def test_a_directory_with_images_and_no_list_says_how_to_record_them(tmp_path: Path) -> None:
    directory = tmp_path / "firmware"
    directory.mkdir()
    (directory / "pump1-c3-v1.bin").write_bytes(build_image("esp32c3"))

    code, events = before_the_port(directory)

    assert code == EXIT_CODES["checksum-mismatch"], events
    assert events == [
        {
            "step": "error",
            "error": "checksum-mismatch",
            "message": f"no --firmware given and there is no {directory / 'SHA256SUMS'}; not recorded: "
            f"pump1-c3-v1.bin. If the image to write is there, record the images ({record_command(directory)}) "
            "and run the command again",
        }
    ]

    write_sums(directory)
    (directory / "pump1-c3-v1.bin").rename(directory / "pump1-c3-v2.bin")
    code, events = before_the_port(directory)
    assert code == EXIT_CODES["checksum-mismatch"], events
    assert events[-1]["message"].startswith(
        f"no --firmware given and {directory / 'SHA256SUMS'} lists pump1-c3-v1.bin, none of them in the directory; "
        "not recorded: pump1-c3-v2.bin."
    )

    (directory / "pump1-c3-v2.bin").unlink()
    code, events = before_the_port(directory)
    assert code == EXIT_CODES["firmware-not-found"], events
    assert events[-1]["message"] == (
        f"no --firmware given and {directory / 'SHA256SUMS'} lists pump1-c3-v1.bin, none of them in the directory"
    )


@pytest.mark.parametrize("listed", ["sub/pump1-c3.bin", "../pump1-c3.bin"])
def test_a_list_entry_naming_another_directory_vouches_for_nothing(tmp_path: Path, listed: str) -> None:
    """`sha256sum sub/*.bin > SHA256SUMS` records files of another directory: the digest it lists is
    never compared, so the file is not an image of this directory (a replaced one would be written)."""
    directory = tmp_path / "firmware"
    (directory / "sub").mkdir(parents=True)
    recorded = build_image("esp32c3", seed=1)
    (directory / listed).write_bytes(build_image("esp32c3", seed=2))  # not the image the list recorded
    (directory / "SHA256SUMS").write_text(f"{hashlib.sha256(recorded).hexdigest()}  {listed}\n")

    code, events = before_the_port(directory)

    assert code == EXIT_CODES["firmware-not-found"], events
    assert [event["step"] for event in events] == ["error"], events
    assert events[-1]["message"] == (
        f"no --firmware given and {directory / 'SHA256SUMS'} lists {listed} with a directory part: no image of "
        "this directory (give it with --firmware, or move it beside the list and record it there)"
    )


def test_a_file_named_with_firmware_is_checked_against_the_entry_that_names_it_from_above(
    tmp_path: Path,
) -> None:
    """`sha256sum sub/*.bin > SHA256SUMS`, then `--firmware sub/pump1-c3.bin`: sub/ has no list of its
    own, so the entry above that names the file is its record, and a replaced file is refused."""
    directory = tmp_path / "firmware"
    (directory / "sub").mkdir(parents=True)
    recorded = build_image("esp32c3", seed=1)
    (directory / "sub" / "pump1-c3.bin").write_bytes(build_image("esp32c3", seed=2))
    (directory / "SHA256SUMS").write_text(f"{hashlib.sha256(recorded).hexdigest()}  sub/pump1-c3.bin\n")
    out = io.StringIO()
    request = FlashRequest(
        port="/dev/null/not-a-port", firmware=str(directory / "sub" / "pump1-c3.bin"), firmware_dir=directory
    )

    code = flash(request, JsonLines(out))

    events = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert code == EXIT_CODES["checksum-mismatch"], events
    assert "does not match SHA256SUMS" in events[-1]["message"], events


def test_a_list_entry_written_with_dot_slash_names_the_file_beside_it(tmp_path: Path) -> None:
    """`sha256sum ./*.bin` writes `./name`: the same file as `name`, checked against its digest."""
    directory = tmp_path / "firmware"
    directory.mkdir()
    image = directory / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3", seed=1))
    (directory / "SHA256SUMS").write_text(f"{hashlib.sha256(image.read_bytes()).hexdigest()}  ./pump1-c3.bin\n")
    image.write_bytes(build_image("esp32c3", seed=2))

    code, events = before_the_port(directory)

    assert code == EXIT_CODES["checksum-mismatch"], events
    assert "does not match SHA256SUMS" in events[-1]["message"], events


def test_a_note_goes_to_stderr_in_the_plain_output(capsys: pytest.CaptureFixture[str]) -> None:
    Lines(sys.stdout, None).step({"step": "note", "message": "left out, not listed: pump1-s3-v2.bin (ESP32-S3)"})

    out, err = capsys.readouterr()
    assert out == ""
    assert err == "mcp-gateway flash: note: left out, not listed: pump1-s3-v2.bin (ESP32-S3)\n"
