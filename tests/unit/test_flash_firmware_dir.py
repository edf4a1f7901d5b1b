"""`mcp-gateway flash`'s default firmware directory (gateway/flash/firmware.py, docs/field.md "Which image:
the firmware directory"): a technician's shell on the appliance has no $STATE_DIRECTORY, and finds the
service's /var/lib/mcp-gateway/firmware all the same; the error that finds no image says which directory
it looked in and why. Real directories in tmp_path stand in for /var/lib/mcp-gateway/firmware.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.flash import firmware
from gateway.flash.errors import FlashError
from gateway.flash.firmware import default_firmware_dir, resolve
from tests.support.unprivileged import as_nobody


@pytest.fixture
def appliance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The appliance's firmware directory, there; the shell's environment without STATE_DIRECTORY."""
    directory = tmp_path / "var-lib" / "mcp-gateway" / "firmware"
    directory.mkdir(parents=True)
    monkeypatch.setattr(firmware, "APPLIANCE_FIRMWARE_DIR", directory, raising=False)
    for name in ("STATE_DIRECTORY", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return directory


def test_a_shell_without_state_directory_uses_the_appliances_directory(appliance: Path, tmp_path: Path) -> None:
    assert default_firmware_dir() == appliance
    assert default_firmware_dir({"HOME": str(tmp_path / "home")}) == appliance
    # It comes before $XDG_STATE_HOME and the home directory, as /etc/mcp-gateway does for `token create`.
    assert default_firmware_dir({"XDG_STATE_HOME": str(tmp_path / "xdg")}) == appliance


def test_state_directory_comes_first(appliance: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert default_firmware_dir({"STATE_DIRECTORY": f"{state}:/other"}) == state / "firmware"


def test_without_the_appliances_directory_the_users_own(appliance: Path, tmp_path: Path) -> None:
    appliance.rmdir()
    home = tmp_path / "home"
    assert default_firmware_dir({"HOME": str(home)}) == home / ".local" / "state" / "mcp-gateway" / "firmware"
    xdg = tmp_path / "xdg"
    assert default_firmware_dir({"XDG_STATE_HOME": str(xdg)}) == xdg / "mcp-gateway" / "firmware"
    # A file of that name is no directory.
    appliance.write_text("")
    assert default_firmware_dir({"HOME": str(home)}) == home / ".local" / "state" / "mcp-gateway" / "firmware"


@pytest.fixture
def locked() -> Iterator[Path]:
    """A firmware directory inside a state directory root made 0700, in a folder nobody may reach."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "state" / "firmware").mkdir(parents=True)
        (folder / "state").chmod(0o700)
        yield folder / "state" / "firmware"
    finally:
        shutil.rmtree(folder)


def test_an_appliance_directory_this_user_may_not_enter_is_still_the_one(root: None, locked: Path) -> None:
    """The service's state directory is 0700: a technician who is not its user gets the appliance's
    directory (and an error naming it when it is read), not a home directory that has no images."""

    def choose() -> dict[str, Any]:
        return {"dir": str(default_firmware_dir({"HOME": "/nonexistent"}, locked))}

    assert as_nobody(choose) == {"dir": str(locked)}


def test_the_no_image_error_says_which_directory_and_why(appliance: Path, tmp_path: Path) -> None:
    with pytest.raises(FlashError) as found:
        resolve("pump1-c3", default_firmware_dir())
    assert str(found.value) == (
        f"no file 'pump1-c3' here, and no image of that name in the firmware directory {appliance} (the "
        "appliance's: $STATE_DIRECTORY is not set and this directory is there; --firmware-dir names another)"
    )
    appliance.rmdir()
    home_dir = tmp_path / "home" / ".local" / "state" / "mcp-gateway" / "firmware"
    with pytest.raises(FlashError) as found:
        resolve("pump1-c3", default_firmware_dir())
    assert str(found.value) == (
        f"no file 'pump1-c3' here, and no image of that name in the firmware directory {home_dir} (this user's: "
        f"$STATE_DIRECTORY is not set and there is no {appliance}; --firmware-dir names another)"
    )
    # --firmware-dir: named by the command line, nothing to explain.
    other = tmp_path / "other"
    with pytest.raises(FlashError) as found:
        resolve("pump1-c3", other)
    assert str(found.value) == f"no file 'pump1-c3' here, and no image of that name in the firmware directory {other}"
