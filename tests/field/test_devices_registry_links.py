"""A registry that is a symbolic link planted by another user is never followed by a command run as root.

On the appliance the state directory belongs to the gateway's user, and the field guide runs `sudo
mcp-gateway flash … --registry <state dir>/devices.db`: the gateway's user (nobody here) plants the link,
root runs the commands. Nothing is made, chmodded or written at the link's target; the commands name the
link. A link in a directory only this user (or root) may write is followed as before.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.devices.flashes import flash_history, record_flash
from gateway.devices.registry import DeviceRegistry, RegistryUnusable
from tests.field.images import build_image
from tests.field.test_device_install import run_cli
from tests.field.test_flash_records import BOARD, OTHER, a_record, flash_command
from tests.support.fake_rom import FakeRom
from tests.support.unprivileged import NOBODY, as_nobody

REFUSAL = (
    "is a symbolic link in {folder}, a directory another user may write (owner uid 65534, mode 0755): not followed"
)


@pytest.fixture
def public() -> Iterator[Path]:
    """A folder nobody may reach (pytest's tmp_path is 0700), with a state directory nobody owns."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "state").mkdir(mode=0o755)
        os.chown(folder / "state", NOBODY, -1)
        yield folder
    finally:
        shutil.rmtree(folder)


def plant(link: Path, target: Path) -> None:
    """nobody, the state directory's owner, makes `link` lead to `target`."""

    def make() -> dict[str, Any]:
        os.symlink(target, link)
        return {}

    as_nobody(make)
    assert link.lstat().st_uid == NOBODY


async def test_a_planted_link_to_roots_file_is_neither_chmodded_nor_written(
    root: None, public: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = public / "victim"
    victim.write_text("root's file, meant world-readable\n")
    victim.chmod(0o644)
    registry_path = public / "state" / "devices.db"
    plant(registry_path, victim)

    code, out, err = await run_cli(capsys, "devices", "--registry", str(registry_path))

    assert (code, out) == (1, "")
    assert f"{registry_path} {REFUSAL.format(folder=registry_path.parent)}" in err, err
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert victim.read_text() == "root's file, meant world-readable\n"
    with pytest.raises(RegistryUnusable, match="a directory another user may write"):
        record_flash(DeviceRegistry(registry_path), a_record(OTHER))
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert victim.read_text() == "root's file, meant world-readable\n"


async def test_a_planted_link_to_nowhere_makes_no_root_file(
    root: None, public: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = public / "created-by-root"
    registry_path = public / "state" / "devices.db"
    plant(registry_path, created)

    for argv in (["devices", "flashes"], ["devices"]):
        code, _, err = await run_cli(capsys, *argv, "--registry", str(registry_path))
        assert code in (0, 1), err
        assert not created.exists() and not created.is_symlink()
    registry = DeviceRegistry(registry_path)
    for attempt in (registry.check_writable, lambda: record_flash(registry, a_record(OTHER))):
        with pytest.raises(RegistryUnusable, match="not followed"):
            attempt()
    assert not created.exists()


def test_a_root_flash_keeps_its_record_out_of_a_planted_link(
    root: None, public: Path, rom: FakeRom, capsys: pytest.CaptureFixture[str]
) -> None:
    created = public / "created-by-root"
    registry_path = public / "state" / "devices.db"
    plant(registry_path, created)
    image = public / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))

    code, out, err = flash_command(capsys, rom.pair.path, image, "--no-handover", "--registry", str(registry_path))

    assert code == 0, err
    assert out.splitlines()[-1] == "Reset: the board starts the new firmware."
    (note,) = err.splitlines()
    assert note.startswith("mcp-gateway flash: note: the flash is not recorded"), note
    assert REFUSAL.format(folder=registry_path.parent) in note, note
    assert not created.exists()


def test_a_link_in_a_directory_only_this_user_writes_is_followed(tmp_path: Path) -> None:
    """The operator's own link (to a registry kept elsewhere) works as before, made at its target 0600."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    state = tmp_path / "own-state"
    state.mkdir(mode=0o700)
    (state / "devices.db").symlink_to(elsewhere / "devices.db")
    registry = DeviceRegistry(state / "devices.db")

    record_flash(registry, a_record(BOARD))
    registry.close()

    assert (state / "devices.db").is_symlink()
    assert stat.S_IMODE((elsewhere / "devices.db").stat().st_mode) == 0o600
    assert [flash.device_id for flash in flash_history(DeviceRegistry(state / "devices.db"))] == [BOARD]


def test_a_registry_is_made_0600_and_an_existing_one_given_0600(tmp_path: Path) -> None:
    made = DeviceRegistry(tmp_path / "new" / "devices.db")
    made.check_writable()
    made.close()
    assert stat.S_IMODE((tmp_path / "new" / "devices.db").stat().st_mode) == 0o600

    existing = tmp_path / "old" / "devices.db"
    existing.parent.mkdir()
    existing.touch(mode=0o644)
    existing.chmod(0o644)
    DeviceRegistry(existing).check_writable()
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600
