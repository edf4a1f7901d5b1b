"""What `flash` and `device install` say about a file that is no image and a port that is no port.

Real files and paths only: images cut short or damaged in tmp_path, a /dev path that does not exist,
/dev/null (a character device that is no tty), a regular file, a directory, a pseudo-terminal held
by another open file description, and a 0660 root:dialout tty opened as `nobody`.
"""

from __future__ import annotations

import argparse
import fcntl
import grp
import io
import os
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from esptool.util import FatalError  # type: ignore[import-untyped]

from gateway.cli.device_install import add_device
from gateway.flash.errors import EXIT_CODES, esptool_text
from gateway.flash.port import diagnose
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines
from gateway.provision.raw_repl import PortError, open_port
from tests.field.images import build_image
from tests.support.serial_ports import PtyPair
from tests.support.unprivileged import as_nobody

MISSING = "/dev/ttyUSB-mcp-gateway-test-missing"
RAW = re.compile(r"%0?\d*[xds]|\('|',|\[Errno|Traceback")
"""What a message must not show: a printf format, a tuple's repr, an errno prefix, a traceback."""


def flash_error(port: str, firmware: Path) -> tuple[int, str, str]:
    out = io.StringIO()
    code = flash(FlashRequest(port=port, firmware=str(firmware), firmware_dir=firmware.parent), JsonLines(out))
    last = orjson.loads(out.getvalue().splitlines()[-1])
    return code, last["error"], last["message"]


def bad_images(tmp_path: Path) -> dict[str, bytes]:
    good = build_image("esp32c3")
    digest_byte = bytearray(good)
    digest_byte[23] = 0x90  # the extended header's append_digest: esptool's "(0x%02x)" RuntimeError
    rng = random.Random(7)
    return {
        "empty": b"",
        "random": rng.randbytes(4096),
        "random-after-magic": b"\xe9" + rng.randbytes(4095),
        "bad-append-digest": bytes(digest_byte),
        "header-only": good[:24],
        "header-and-part-of-a-segment-header": good[:28],
        "cut-in-a-segment": good[:1000],
        "cut-before-the-checksum": good[: len(good) - 33],  # esptool: ord(b"") -> TypeError
    }


def test_bad_images_are_named_in_a_sentence(tmp_path: Path) -> None:
    for name, data in bad_images(tmp_path).items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)

        code, error, message = flash_error(MISSING, path)  # the image is checked before the port

        assert (code, error) == (EXIT_CODES["not-an-image"], "not-an-image"), (name, message)
        assert message.startswith(f"{path} is not "), (name, message)
        assert not RAW.search(message), (name, message)
    _, _, message = flash_error(MISSING, tmp_path / "bad-append-digest.bin")
    assert message.endswith("Invalid value for append_digest field (0x90). Should be 0 or 1")
    _, _, message = flash_error(MISSING, tmp_path / "cut-before-the-checksum.bin")
    assert "it ends after 49199 bytes, before the end its header describes" in message
    _, _, message = flash_error(MISSING, tmp_path / "header-only.bin")
    assert message.endswith(
        "it ends after 24 bytes, before the end its header describes (a file cut short, or not an image)"
    )


def test_a_file_cut_anywhere_is_named_cut_short(tmp_path: Path) -> None:
    """Cut inside a segment (esptool: "End of file reading segment ...") or inside the SHA-256 at the end:
    the same sentence as a file cut inside its header."""
    good = build_image("esp32c3")
    for size in (1000, 30000, len(good) - 40, len(good) - 32, len(good) - 1):
        path = tmp_path / f"cut-{size}.bin"
        path.write_bytes(good[:size])

        code, error, message = flash_error(MISSING, path)

        assert (code, error) == (EXIT_CODES["not-an-image"], "not-an-image"), message
        assert message == (
            f"{path} is not a valid ESP firmware image: it ends after {size} bytes, before the end its header "
            "describes (a file cut short, or not an image)"
        )


def test_random_images_never_show_esptool_internals(tmp_path: Path) -> None:
    rng = random.Random(11)
    path = tmp_path / "noise.bin"
    for _ in range(60):
        head = bytes([0xE9, rng.randrange(1, 4)]) + rng.randbytes(rng.randrange(0, 200))
        path.write_bytes(head + bytes(rng.randrange(0, 64)))

        code, error, message = flash_error(MISSING, path)

        assert error == "not-an-image" and code == EXIT_CODES["not-an-image"], message
        assert not RAW.search(message), message


def test_esptool_text_applies_printf_style_arguments() -> None:
    assert esptool_text(RuntimeError("Invalid value (0x%02x). Should be 0 or 1.", 144)) == (
        "Invalid value (0x90). Should be 0 or 1."
    )
    assert esptool_text(FatalError("Failed to connect to ESP32-C3: No serial data received.")) == (
        "Failed to connect to ESP32-C3: No serial data received."
    )
    assert esptool_text(RuntimeError("%d of %d", 3)) == "%d of %d"  # not enough values: the message as is
    assert esptool_text(RuntimeError()) == "RuntimeError"
    assert esptool_text(OSError(5, "Input/output error")) == "[Errno 5] Input/output error"


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "pump1-c3.bin"
    path.write_bytes(build_image("esp32c3"))
    return path


def test_flash_names_ports_that_are_no_serial_port(image: Path, tmp_path: Path) -> None:
    code, error, message = flash_error(MISSING, image)
    assert (code, error) == (20, "no-port")
    assert message == f"{MISSING}: no such port; is the board plugged in? (ls /dev/serial/by-id/)"

    regular = tmp_path / "notes.txt"
    regular.write_text("not a port\n")
    expected = {
        "/dev/null": "/dev/null is not a serial port (a mem device, not a tty)",
        str(regular): f"{regular} is not a serial port (a regular file, not a tty)",
        str(tmp_path): f"{tmp_path} is not a serial port (a directory, not a tty)",
    }
    for port, start in expected.items():
        code, error, message = flash_error(port, image)
        assert (code, error) == (20, "no-port"), message
        assert message.startswith(start), message
        assert "ioctl" not in message and not RAW.search(message), message


def device_install(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="mcp-gateway")
    add_device(parser.add_subparsers(dest="command", required=True))
    registry = str(tmp_path / "devices.db")
    options = ["--slot", "pump-7", "--gateway-url", "ws://192.0.2.1:3000", "--registry", registry, "--no-compile"]
    args = parser.parse_args(["device", "install", *argv, *options])
    capsys.readouterr()
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_device_install_says_what_is_wrong_with_the_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = device_install(capsys, tmp_path, MISSING)
    assert (code, out) == (1, "")
    assert err == f"mcp-gateway: {MISSING}: no such port; is the board plugged in? (ls /dev/serial/by-id/) [no-port]\n"

    code, out, err = device_install(capsys, tmp_path, "/dev/null")
    assert (code, out) == (1, "")
    assert err.startswith("mcp-gateway: /dev/null is not a serial port (a mem device, not a tty): ")
    assert err.endswith(" [no-port]\n") and not RAW.search(err)


def test_device_install_on_a_port_another_program_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pair = PtyPair()
    holder = os.open(pair.path, os.O_RDWR | os.O_NOCTTY)  # locked, as the gateway's serial way in does
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        code, _, err = device_install(capsys, tmp_path, pair.path)
    finally:
        os.close(holder)
        pair.close()
    assert code == 1
    assert err.startswith(f"mcp-gateway: {pair.path} is in use by another program")
    assert err.endswith("[port-in-use]\n")


def test_dry_run_checks_the_port_without_opening_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = device_install(capsys, tmp_path, MISSING, "--dry-run")
    assert code == 1
    assert out.startswith(f"dry run: nothing is written to {MISSING} or to the registry\n")
    assert err == (
        f"mcp-gateway: the install would stop: {MISSING}: no such port; is the board plugged in? "
        "(ls /dev/serial/by-id/) [no-port]\n"
    )

    code, out, err = device_install(capsys, tmp_path, "/dev/null", "--dry-run")
    assert code == 1
    assert err.startswith("mcp-gateway: the install would stop: /dev/null is not a serial port (a mem device")

    pair = PtyPair()
    try:
        code, out, err = device_install(capsys, tmp_path, pair.path, "--dry-run")
    finally:
        pair.close()
    assert (code, err) == (0, ""), err
    assert f"would open {pair.path}: it is there, free, and this user may read and write it\n" in out
    assert not (tmp_path / "devices.db").exists()


def test_transport_help_states_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="mcp-gateway")
    add_device(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit):
        parser.parse_args(["device", "install", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "how the board reaches the gateway: ws (WebSocket, the default), mqtt or serial" in help_text


def test_permission_denied_hints_at_dialout_for_install_and_dry_run() -> None:
    """Real EACCES: a child drops root for `nobody`; the port is root:dialout 0660."""
    pair = PtyPair()
    os.chown(pair.path, 0, grp.getgrnam("dialout").gr_gid)
    os.chmod(pair.path, 0o660)

    def checks() -> dict[str, Any]:
        found = diagnose(pair.path)
        result: dict[str, Any] = {"dry_run": [found.code, found.message] if found else None}
        try:
            open_port(pair.path).close()
        except PortError as exc:
            result["install"] = [exc.code, str(exc)]
        return result

    result = as_nobody(checks)
    pair.close()
    hint = (
        f"permission denied opening {pair.path}: your user is not in the 'dialout' group that owns it. "
        "Run `sudo usermod -aG dialout $USER`, then log out and in again (or reboot)"
    )
    assert result == {
        "dry_run": ["permission-denied", hint],
        "install": ["permission-denied", f"{hint} [permission-denied]"],
    }
