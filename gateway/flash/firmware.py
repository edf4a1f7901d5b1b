"""Which file to write: `--firmware` as a path, or a name in the firmware directory.

The appliance keeps its images in `<state dir>/firmware/` ($STATE_DIRECTORY/firmware under systemd;
from a shell without it /var/lib/mcp-gateway/firmware when that directory is there, as `token create`
finds /etc/mcp-gateway; else $XDG_STATE_HOME/mcp-gateway/firmware, else ~/.local/state/mcp-gateway/
firmware), with a `SHA256SUMS` file in `sha256sum`'s format (`<hex>  <name>`, or `<hex> *<name>`). A
file in a directory that has a SHA256SUMS must be listed there and match: a damaged or unlisted image
is refused. Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.flash.errors import FlashError
from gateway.flash.shown import printable

SUMS_FILE = "SHA256SUMS"
APP_DIR = "mcp-gateway"


FOLDER = "firmware"
"""The firmware directory's name in a state directory (what backup and restore carry with it)."""
APPLIANCE_FIRMWARE_DIR = Path("/var/lib/mcp-gateway") / FOLDER
"""$STATE_DIRECTORY/firmware of the appliance's service (StateDirectory=mcp-gateway), where docs/field.md
has technicians put the images."""


def default_firmware_dir(environ: Mapping[str, str] | None = None, appliance: Path | None = None) -> Path:
    return firmware_dir_choice(environ, appliance)[0]


def firmware_dir_choice(environ: Mapping[str, str] | None = None, appliance: Path | None = None) -> tuple[Path, str]:
    """The default firmware directory and why it is the one (for the error that finds no image there);
    `appliance`: the appliance's directory (default APPLIANCE_FIRMWARE_DIR)."""
    env = os.environ if environ is None else environ
    appliance = APPLIANCE_FIRMWARE_DIR if appliance is None else appliance
    state_directory = env.get("STATE_DIRECTORY", "").split(":")[0]
    if state_directory:
        return Path(state_directory) / FOLDER, "$STATE_DIRECTORY/firmware"
    if _present(appliance):
        return appliance, "the appliance's: $STATE_DIRECTORY is not set and this directory is there"
    unset = f"$STATE_DIRECTORY is not set and there is no {appliance}"
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / APP_DIR / FOLDER, f"$XDG_STATE_HOME/{APP_DIR}/firmware: {unset}"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / APP_DIR / FOLDER, f"this user's: {unset}"


def _present(directory: Path) -> bool:
    try:
        return directory.is_dir()
    except OSError:  # there, in a state directory this user may not enter: the read that follows says so
        return True


def _origin(firmware_dir: Path) -> str:
    """Why `firmware_dir` was used, when it is the default one (not --firmware-dir)."""
    default, why = firmware_dir_choice()
    return f" ({why}; --firmware-dir names another)" if firmware_dir == default else ""


def read_entries(directory: Path) -> tuple[dict[str, str], dict[str, str]] | None:
    """The entries of directory/SHA256SUMS, name -> lower-case hex SHA-256, split into plain file names
    (`./name` read as `name`) and names with a directory part (`sub/x.bin`, `../x.bin`, as
    `sha256sum sub/*.bin` writes them); None when there is no such file."""
    try:
        text = (directory / SUMS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    plain: dict[str, str] = {}
    foreign: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, name = line.strip().partition(" ")
        name = name.strip().removeprefix("*").removeprefix("./")
        if len(digest) == 64 and name and name not in (".", ".."):
            (foreign if "/" in name else plain)[name] = digest.lower()
    return plain, foreign


def read_sums(directory: Path) -> dict[str, str] | None:
    """The images SHA256SUMS lists beside it: name -> digest; None when there is no such file.

    An entry with a directory part records a file of another directory: it is no image of this one
    (the file is checked against it only when named itself: check_sum)."""
    entries = read_entries(directory)
    return None if entries is None else entries[0]


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
    known = f"; the directory lists: {', '.join(map(printable, listed))}" if listed else ""
    raise FlashError(
        "firmware-not-found",
        f"no file {firmware!r} here, and no image of that name in the firmware directory "
        f"{printable(str(firmware_dir))}{_origin(firmware_dir)}{known}",
    )


def check_sum(path: Path, data: bytes, firmware_dir: Path | None = None) -> str | None:
    """Refuse `data` when the SHA256SUMS next to `path` does not list it or lists another digest.
    Without a list beside it, an entry of firmware_dir's list that names this very file through a
    directory part (`sub/x.bin`) is its record and is compared. Returns the digest that was checked,
    or None when nothing records the file."""
    sums = read_sums(path.parent)
    if sums is None:
        recorded = _recorded_elsewhere(path, firmware_dir)
        if recorded is None:
            return None
        sums = {path.name: recorded}
    expected = sums.get(path.name)
    if expected is None:
        raise FlashError(
            "checksum-mismatch",
            f"{printable(path.name)} is not listed in {printable(str(path.parent / SUMS_FILE))}: refusing an image "
            "nobody recorded",
        )
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise FlashError(
            "checksum-mismatch",
            f"{printable(str(path))} does not match {SUMS_FILE}: SHA-256 {actual}, expected {expected}; "
            "the file is damaged or was replaced: copy it again",
        )
    return actual


def _recorded_elsewhere(path: Path, firmware_dir: Path | None) -> str | None:
    """The digest firmware_dir's SHA256SUMS records for `path` under a name with a directory part.
    A firmware directory this user cannot read records nothing for it (the image was given by path)."""
    if firmware_dir is None:
        return None
    try:
        entries = read_entries(firmware_dir)
        if entries is None:
            return None
        target = path.resolve()
        return next((digest for name, digest in entries[1].items() if (firmware_dir / name).resolve() == target), None)
    except (OSError, RuntimeError, ValueError):  # unreadable, not UTF-8, a loop of links, a name refused
        return None


@dataclass(frozen=True)
class Directory:
    """What a firmware directory holds, against its SHA256SUMS."""

    path: Path
    listed: list[Path]
    """The files SHA256SUMS lists that are there, in name order: the images to choose from."""
    unlisted: list[Path]
    """The `*.bin` files SHA256SUMS does not list (all of them when there is no SHA256SUMS), in name order."""
    missing: list[str]
    """The names SHA256SUMS lists that are not there (deleted or renamed since it was written)."""
    has_sums: bool
    foreign: list[str]
    """The names SHA256SUMS lists with a directory part: files of other directories, no images of this one."""

    @property
    def sums_path(self) -> Path:
        return self.path / SUMS_FILE

    def record_command(self) -> str:
        return f"cd {self.path} && sha256sum *.bin > {SUMS_FILE}"

    def missing_text(self) -> str:
        """A clause naming the stale entries, or "" when every listed file is there."""
        if not self.missing:
            return ""
        names = ", ".join(map(printable, self.missing))
        return f"{SUMS_FILE} lists {names}, not in the directory (deleted or renamed since it was written)"

    def foreign_text(self) -> str:
        """A clause naming the entries with a directory part, or "" when there are none."""
        if not self.foreign:
            return ""
        names = ", ".join(map(printable, self.foreign))
        return (
            f"{SUMS_FILE} lists {names} with a directory part: no image of this directory (give it with "
            "--firmware, or move it beside the list and record it there)"
        )


def survey(firmware_dir: Path) -> Directory:
    """The listed, unlisted and missing images of firmware_dir. `*.bin` is what the recording command
    (`sha256sum *.bin > SHA256SUMS`) lists, so other files (a README, SHA256SUMS itself) are not images."""
    entries = read_entries(firmware_dir)
    sums, foreign = entries if entries is not None else (None, {})
    names = sums or {}
    listed = [firmware_dir / name for name in sorted(names) if (firmware_dir / name).is_file()]
    missing = [name for name in sorted(names) if not (firmware_dir / name).exists()]
    try:
        present = sorted(entry for entry in os.listdir(firmware_dir) if entry.endswith(".bin"))
    except OSError:  # no such directory, or not readable: nothing is there to choose from
        present = []
    unlisted = [
        firmware_dir / name
        for name in present
        if not name.startswith(".") and name not in names and (firmware_dir / name).is_file()
    ]
    return Directory(firmware_dir, listed, unlisted, missing, sums is not None, sorted(foreign))
