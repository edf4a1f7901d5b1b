"""What a flash record holds comes from files and the environment: the tables of `mcp-gateway devices`
and `devices flashes` escape what does not print, so an image named with an escape sequence does not
act on the terminal and a newline does not forge a row; --json gives the values as they are. A
SUDO_USER is recorded only from a command that runs as root (gateway/cli/flash.py, devices_flashes.py).

The flashes run the command's own code against the fake ESP32-C3 ROM loader on a pseudo-terminal
(tests/support/fake_rom.py), as root in this process or as nobody in a forked child.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli import build_parser
from gateway.devices.flashes import flash_history, record_flash
from gateway.devices.registry import DeviceRegistry
from tests.field.images import build_image
from tests.field.test_flash_records import BOARD, a_record, command, flash_command, history
from tests.support.fake_rom import FakeRom
from tests.support.unprivileged import as_nobody

IMAGE_NAME = "pump1\x1b[2K\x1b[1Gok.bin"
SUDO_USER = "alice\n2099-01-01T00:00:00Z  forged row"


def test_the_tables_escape_control_characters_and_json_keeps_them(
    rom: FakeRom, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert os.geteuid() == 0  # the command records SUDO_USER only as root
    image = tmp_path / IMAGE_NAME
    image.write_bytes(build_image("esp32c3"))
    monkeypatch.setenv("SUDO_USER", SUDO_USER)
    assert flash_command(capsys, rom.pair.path, image, "--json")[0] == 0
    (flash,) = history()
    assert (flash.image, flash.sudo_user) == (IMAGE_NAME, SUDO_USER)  # recorded as they are

    code, out, _ = command(capsys, "devices", "flashes")
    assert code == 0
    assert "\x1b" not in out
    header, *rows = out.splitlines()
    assert header.split()[-1] == "by"
    assert len(rows) == 1, out  # the newline in SUDO_USER starts no row of its own
    assert '"pump1\\u001b[2K\\u001b[1Gok.bin"' in rows[0].split()
    assert rows[0].endswith('"alice\\n2099-01-01T00:00:00Z  forged row" via sudo as root')

    code, out, _ = command(capsys, "devices")
    assert code == 0 and "\x1b" not in out
    (board_line,) = (line for line in out.splitlines() if line.startswith(BOARD))
    assert f'"pump1\\u001b[2K\\u001b[1Gok.bin" {flash.flashed_at}' in board_line

    code, out, _ = command(capsys, "devices", "flashes", "--json")
    (record,) = map(orjson.loads, out.splitlines())
    assert (record["image"], record["sudo_user"]) == (IMAGE_NAME, SUDO_USER)
    code, out, _ = command(capsys, "devices", "--json")
    (board,) = map(orjson.loads, out.splitlines())
    assert board["last_flash"]["image"] == IMAGE_NAME


def test_sudo_user_is_not_recorded_from_a_command_that_does_not_run_as_root(rom: FakeRom) -> None:
    public = Path(tempfile.mkdtemp())
    try:
        public.chmod(0o777)
        image = public / "pump1-c3.bin"
        image.write_bytes(build_image("esp32c3"))
        image.chmod(0o644)
        os.chmod(rom.pair.path, 0o666)
        registry_path = public / "devices.db"
        argv = ["flash", rom.pair.path, "--firmware", str(image), "--connect-attempts", "1", "--no-handover"]
        args = build_parser().parse_args([*argv, "--registry", str(registry_path)])

        def flash_it() -> dict[str, Any]:
            os.environ["SUDO_USER"] = "alice"  # set by hand: no sudo ran this command
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = args.func(args)
            return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

        done = as_nobody(flash_it)
        assert done["code"] == 0, done
        registry = DeviceRegistry(registry_path)
        try:
            (flash,) = flash_history(registry)
        finally:
            registry.close()
        assert (flash.user, flash.sudo_user) == ("nobody", None)
    finally:
        shutil.rmtree(public)


def test_devices_flashes_json_escapes_what_json_leaves_raw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "devices.db"
    registry = DeviceRegistry(path)
    record_flash(registry, a_record(BOARD, image="pump1\u202e\x9b31m\x7f.bin"))
    registry.close()
    code, out, _ = command(capsys, "devices", "flashes", "--json", "--registry", str(path))
    assert code == 0
    assert not {"\u202e", "\x9b", "\x7f"} & set(out), out
    (record,) = map(orjson.loads, out.splitlines())
    assert record["image"] == "pump1\u202e\x9b31m\x7f.bin"  # the same JSON, written printable
