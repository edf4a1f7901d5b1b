"""What another user chooses reaches a (root) terminal escaped: the name of the process that holds the
port (its command line, its comm) and the names of the files in the firmware directory
(gateway/flash/shown.py, used by gateway/flash/port.py, firmware.py, procedure.py and progress.py).

The holders are real processes locking a pseudo-terminal; the board is the fake ROM loader of
tests/support/fake_rom.py.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.flash.errors import EXIT_CODES
from gateway.flash.port import NAME_LIMIT, diagnose
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import Lines
from gateway.flash.shown import printable
from tests.field.images import build_image
from tests.field.test_flash import run, write_sums
from tests.support.fake_rom import FakeRom

PAYLOAD = "\x1b]0;owned\x07\x1b[2J\x1b[H\x1b[32mflash OK: Verified\x1b[0m\n" + "x" * 100
ESCAPED_START = "\\u001b]0;owned\\u0007\\u001b[2J\\u001b[H\\u001b[32mflash OK: Verified\\u001b[0m\\n"


def hold(port: str, argv: list[str], comm: str | None = None) -> subprocess.Popen[str]:
    """A process that holds the port's lock, with the command line `argv` (after the interpreter) and,
    when given, the kernel name `comm`."""
    code = (
        "import fcntl, os, sys, time\n"
        + (f"open('/proc/self/comm', 'w').write({comm!r})\n" if comm is not None else "")
        + f"fd = os.open({port!r}, os.O_RDWR | os.O_NOCTTY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('open', flush=True)\ntime.sleep(60)\n"
    )
    holder = subprocess.Popen([*argv[:1], "-c", code, *argv[1:]], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"
    return holder


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for holder in started:
        holder.kill()
        holder.wait()


def test_a_holder_named_with_escape_sequences_is_shown_escaped_and_cut(
    rom: FakeRom, tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    # The command line of an `mcp-gateway` process: its second word is shown (`mcp-gateway <command>`).
    script = tmp_path / "mcp-gateway"
    script.write_text(f"#!{sys.executable}\nimport runpy, sys\nrunpy.run_path(sys.argv[2])\n")
    code = tmp_path / "hold.py"
    code.write_text(
        "import fcntl, os, time\n"
        f"fd = os.open({rom.pair.path!r}, os.O_RDWR | os.O_NOCTTY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('open', flush=True)\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    holder = subprocess.Popen([str(script), PAYLOAD, str(code)], stdout=subprocess.PIPE, text=True)
    holders.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"

    found = diagnose(rom.pair.path)  # as `device install` finds it, and the flash's port-in-use
    assert found is not None and found.code == "port-in-use"
    name = f"mcp-gateway {ESCAPED_START}"
    shown = (name + "x" * NAME_LIMIT)[: NAME_LIMIT - 1] + "…"
    assert f"(held by {shown} (pid {holder.pid}))" in found.message, found.message
    assert "\x1b" not in found.message and "\n" not in found.message

    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    status, events = run(rom, str(image), tmp_path)
    assert status == EXIT_CODES["port-in-use"]
    assert f"(held by {shown} (pid {holder.pid}))" in str(events[-1]["message"])


def test_a_holder_whose_comm_holds_escape_sequences_is_shown_escaped(
    rom: FakeRom, holders: list[subprocess.Popen[str]]
) -> None:
    holders.append(hold(rom.pair.path, [sys.executable], comm="\x1b[2J\x1b[H\x1b]0;x\x07"))

    found = diagnose(rom.pair.path)

    assert found is not None
    assert f"(held by \\u001b[2J\\u001b[H\\u001b]0;x\\u0007 (pid {holders[-1].pid}))" in found.message
    assert "\x1b" not in found.message


EVIL = "x\x1b]0;pwned\x07\x1b[2J\x1b[H"
EVIL_SHOWN = "x\\u001b]0;pwned\\u0007\\u001b[2J\\u001b[H"


def test_an_unlisted_file_named_with_escape_sequences_is_named_escaped(rom: FakeRom, tmp_path: Path) -> None:
    firmware_dir = tmp_path / "firmware"
    firmware_dir.mkdir()
    (firmware_dir / "pump1-c3.bin").write_bytes(build_image("esp32c3"))
    write_sums(firmware_dir)
    (firmware_dir / f"{EVIL}.bin").write_bytes(b"not an image at all")

    code, events = run(rom, None, firmware_dir)

    assert code == EXIT_CODES["checksum-mismatch"], events
    message = str(events[-1]["message"])
    assert f": {EVIL_SHOWN}.bin (not a readable image). If the image" in message
    assert "\x1b" not in message and "\x07" not in message


def test_files_of_the_firmware_directory_are_named_escaped_in_notes_and_the_image_line(
    rom: FakeRom, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    firmware_dir = tmp_path / "firmware"
    firmware_dir.mkdir()
    (firmware_dir / f"c3{EVIL}.bin").write_bytes(build_image("esp32c3"))
    write_sums(firmware_dir)  # listed: the image to write
    (firmware_dir / f"s3{EVIL}.bin").write_bytes(build_image("esp32s3"))  # unlisted, for another chip

    out = io.StringIO()
    request = FlashRequest(port=rom.pair.path, firmware=None, firmware_dir=firmware_dir, connect_attempts=1)
    code = flash(request, Lines(out, None))

    text = out.getvalue() + capsys.readouterr().err  # the notes go to stderr
    assert code == 0, text
    assert f"Image: {firmware_dir}/c3{EVIL_SHOWN}.bin (ESP32-C3," in text
    assert f"left out, not listed in {firmware_dir}/SHA256SUMS: s3{EVIL_SHOWN}.bin (ESP32-S3)" in text
    assert "\x1b" not in text and "\x07" not in text


def test_printable_escapes_what_does_not_print_and_cuts_at_the_limit() -> None:
    assert printable("pump 1 à eau") == "pump 1 à eau"
    assert printable("a\u202eb\nc\x00") == "a\\u202eb\\nc\\u0000"
    assert printable("abcdef", 4) == "abc…"
    assert printable("abcd", 4) == "abcd"
