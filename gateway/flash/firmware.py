"""Which file to write: `--firmware` as a path, or a name in the firmware directory.

The appliance keeps its images in `<state dir>/firmware/` ($STATE_DIRECTORY/firmware under systemd,
else $XDG_STATE_HOME/mcp-gateway/firmware, else ~/.local/state/mcp-gateway/firmware), with a
`SHA256SUMS` file in `sha256sum`'s format (`<hex>  <name>`, or `<hex> *<name>`). A file in a
directory that has a SHA256SUMS must be listed there and match: a damaged or unlisted image is
refused. Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from gateway.flash.errors import FlashError

SUMS_FILE = "SHA256SUMS"
APP_DIR = "mcp-gateway"


def default_firmware_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    state_directory = env.get("STATE_DIRECTORY", "").split(":")[0]
    if state_directory:
        return Path(state_directory) / "firmware"
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / APP_DIR / "firmware"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / APP_DIR / "firmware"


def read_sums(directory: Path) -> dict[str, str] | None:
    """name -> lower-case hex SHA-256 from directory/SHA256SUMS; None when there is no such file."""
    try:
        text = (directory / SUMS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    sums: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, name = line.strip().partition(" ")
        name = name.strip().removeprefix("*")
        if len(digest) == 64 and name:
            sums[name] = digest.lower()
    return sums


def resolve(firmware: str, firmware_dir: Path) -> Path:
    """The file `--firmware` names: an existing path, else a name (with or without .bin) in firmware_dir."""
    given = Path(firmware).expanduser()
    if given.exists() or os.sep in firmware:
        return given
    for name in (firmware, f"{firmware}.bin"):
        candidate = firmware_dir / name
        if candidate.is_file():
            return candidate
    listed = sorted(read_sums(firmware_dir) or {})
    known = f"; the directory lists: {', '.join(listed)}" if listed else ""
    raise FlashError(
        "firmware-not-found",
        f"no file {firmware!r} here, and no image of that name in the firmware directory {firmware_dir}{known}",
    )


def check_sum(path: Path, data: bytes) -> str | None:
    """Refuse `data` when the SHA256SUMS next to `path` does not list it or lists another digest.
    Returns the digest that was checked, or None when the directory has no SHA256SUMS."""
    sums = read_sums(path.parent)
    if sums is None:
        return None
    expected = sums.get(path.name)
    if expected is None:
        raise FlashError(
            "checksum-mismatch",
            f"{path.name} is not listed in {path.parent / SUMS_FILE}: refusing an image nobody recorded",
        )
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise FlashError(
            "checksum-mismatch",
            f"{path} does not match {SUMS_FILE}: SHA-256 {actual}, expected {expected}; "
            "the file is damaged or was replaced: copy it again",
        )
    return actual


def images_in(firmware_dir: Path) -> list[Path]:
    """The images SHA256SUMS lists in firmware_dir that exist, in name order."""
    sums = read_sums(firmware_dir) or {}
    return [firmware_dir / name for name in sorted(sums) if (firmware_dir / name).is_file()]
