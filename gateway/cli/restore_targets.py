"""Where `restore --with-config` puts each configuration file, and the mode and owner a restored file gets.

A file the configuration names goes where the backed-up configuration file (its size and sha256 checked)
names it, never where the manifest's `original` alone says: the manifest records it, and restore refuses
a backup whose two disagree. Modes come from the manifest, but restore never sets setuid, setgid or sticky
bits (a manifest asking for them is refused), nor write for group or others, and gives a secret at most
0640. As root, owners come from the manifest by name (the number where the backup recorded no name), and
an owner or group that does not exist here is said on stderr, the file left to root.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.cli.backup_files import CA_BESIDE, MANIFEST, BackupError, Entry, Manifest, settings_in

MODE_LIMIT = 0o755
"""The most a restored configuration file or firmware image gets: no write for group or others."""
SECRET_MODE_LIMIT = 0o640
"""The most a restored secret gets (a file named by a setting of a key, token, secret, password or headers)."""
SECRET_WORDS = ("key", "token", "secret", "password", "headers")
SPECIAL_BITS = 0o7000
"""setuid, setgid, sticky: no file a gateway keeps has them; a manifest that asks for them is refused."""
MADE_DIRECTORY_MODE = 0o750
"""A directory restore makes for a configuration file whose directory the backup does not record: owned by
the file's owner and group."""


def is_secret(entry: Entry) -> bool:
    return entry.kind == "named" and any(word in (entry.setting or "").lower() for word in SECRET_WORDS)


def mode_limit(entry: Entry) -> int:
    return SECRET_MODE_LIMIT if is_secret(entry) else MODE_LIMIT


def applied_mode(entry: Entry) -> int:
    """The mode restore gives a configuration file or firmware image: the recorded one within its limit;
    BackupError for a recorded setuid, setgid or sticky bit."""
    recorded = int(entry.mode, 8)
    if recorded & SPECIAL_BITS:
        raise BackupError(
            f"{entry.original}: the manifest gives it mode {entry.mode} (setuid, setgid or sticky), which no file "
            "of a gateway has and restore never sets: the manifest was changed; nothing was restored"
        )
    return recorded & mode_limit(entry)


def normal_place(path: Path) -> Path:
    """`path` made absolute with `.` and `..` folded: the one text restore both checks and writes, so a
    `<config dir>/../elsewhere` is judged where it lands."""
    return Path(os.path.normpath(path.absolute()))


def _named_place(setting: str, settings: Mapping[str, str]) -> Path | None:
    """Where the backed-up configuration puts the file of `setting` (None: it does not name it)."""
    from gateway.policy.tls_self_signed import CA_CERT, CA_KEY

    name, beside, base = setting.partition(" beside ")
    if beside:
        if base != CA_BESIDE or name not in (CA_CERT, CA_KEY) or base not in settings:
            return None
        return normal_place(Path(settings[base])).parent / name
    return normal_place(Path(settings[setting])) if setting in settings else None


def _written_absolute(setting: str, settings: Mapping[str, str]) -> bool:
    return Path(settings.get(setting.partition(" beside ")[2] or setting, "/")).is_absolute()


def config_places(
    args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str]
) -> tuple[dict[int, Path], list[str]]:
    """Where each configuration file of the backup goes (by its index in manifest.files): the configuration
    file to --config ($MCP_GATEWAY_CONFIG), else to the manifest's config_file; each file it names where the
    backed-up configuration names it. Also a line for each file left out (named by no setting of the file).
    BackupError when the manifest disagrees with the backed-up configuration."""
    from gateway.config import ENV_CONFIG_FILE

    where = source / MANIFEST
    configs = [(index, entry) for index, entry in enumerate(manifest.files) if entry.kind == "config"]
    if len(configs) > 1:
        raise BackupError(f"{where} lists {len(configs)} configuration files, a backup one: it was changed")
    places: dict[int, Path] = {}
    settings: dict[str, str] = {}
    if configs:
        index, entry = configs[0]
        given = args.config or env.get(ENV_CONFIG_FILE)
        if given:
            places[index] = normal_place(Path(given).expanduser())
        elif manifest.config_file != entry.original:
            raise BackupError(
                f"{where}: the configuration file's original {entry.original} is not the backup's config_file "
                f"{manifest.config_file}: the manifest was changed; nothing was restored"
            )
        else:
            places[index] = normal_place(Path(entry.original))
        copy = source / entry.path
        try:
            settings = dict(settings_in(tomllib.loads(copy.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BackupError(f"{copy} (backup of {entry.original}) is not a TOML configuration ({exc})") from None
    left_out = []
    for index, entry in enumerate(manifest.files):
        if entry.kind != "named":
            continue
        setting = entry.setting or ""
        place = _named_place(setting, settings)
        if place is None:
            left_out.append(
                f"not restored: {source / entry.path} -> {entry.original} ({setting or 'no setting'}): the backed-up "
                "configuration file does not name it (the environment or a flag did, at the backup); copy it by "
                "hand if it belongs there"
            )
        elif place != normal_place(Path(entry.original)):
            relative = "" if _written_absolute(setting, settings) else ", restore runs in another directory than the "
            relative += "" if not relative else "backup did (the path is relative: run restore there)"
            raise BackupError(
                f"{where}: {entry.original} ({setting}) is not where the backed-up configuration file puts it "
                f"({place}): the manifest was changed{relative}, or the environment or a flag named another file at "
                "the backup; nothing was restored"
            )
        else:
            places[index] = place
    return places, left_out


def outside_places(manifest: Manifest, places: Mapping[int, Path]) -> list[str]:
    """A line for each file the configuration names that goes outside the restored configuration file's
    directory (and its subdirectories): an appliance keeps them beside it, so one elsewhere is written only
    with --force. Places are compared with `..` folded (normal_place) and again with the directories that
    exist on their way resolved, so neither `<dir>/../x` nor a directory link under the configuration's
    directory reaches elsewhere unasked; the file itself may be a link (restore_write follows it as it is)."""
    configs = (
        places[index] for index, entry in enumerate(manifest.files) if entry.kind == "config" and index in places
    )
    folder = next(configs, None)
    if folder is None:
        return []
    home = folder.parent
    real_home = Path(os.path.realpath(home))
    lines = []
    for index, place in places.items():
        entry = manifest.files[index]
        if entry.kind != "named":
            continue
        named = "" if entry.original == str(place) else f" (named {entry.original})"
        if home not in place.parents:
            lines.append(
                f"  {place} ({entry.setting}){named} is outside {home}, the directory of the configuration file "
                "restored"
            )
            continue
        real_folder = Path(os.path.realpath(place.parent))
        if real_folder != real_home and real_home not in real_folder.parents:
            lines.append(
                f"  {place} ({entry.setting}) is outside {home}, the directory of the configuration file restored: "
                f"a directory on its way is a symbolic link, and it leads to {real_folder}"
            )
    return lines


def _id_of(name: str, lookup: Any) -> int | None:
    try:
        return int(lookup(name)[2])
    except KeyError:
        return None


def owner_ids(recorded: Mapping[str, Any]) -> tuple[int, int, list[str]]:
    """The uid and gid to give a restored file or directory (-1: keep), from its recorded `owner`, `group`,
    `uid`, `gid`: by name where one is recorded (this machine's id of that name), else the number; and
    the names that do not exist here."""
    found: list[int] = []
    missing: list[str] = []
    for what, number, lookup in (("owner", "uid", pwd.getpwnam), ("group", "gid", grp.getgrnam)):
        name = recorded.get(what)
        value = recorded.get(number)
        if isinstance(name, str) and name:
            known = _id_of(name, lookup)
            if known is None:
                missing.append(f"{what} {name}")
            found.append(-1 if known is None else known)
        else:
            found.append(value if isinstance(value, int) else -1)
    return found[0], found[1], missing


def entry_owner(entry: Entry) -> dict[str, Any]:
    return {"owner": entry.owner, "group": entry.group, "uid": entry.uid, "gid": entry.gid}


def give_owner(
    path: Path | str, recorded: Mapping[str, Any], shown: Path, dir_fd: int | None = None
) -> tuple[int, int]:
    """As root: chown `path` (relative to `dir_fd` when given; a link itself, never the file it leads to) to
    its recorded owner and group; a name missing here is said on stderr (naming `shown`) and that part left to
    root."""
    uid, gid, missing = owner_ids(recorded)
    if missing:
        print(
            f"mcp-gateway restore: warning: {shown}: {' and '.join(missing)} (recorded in the backup) does not exist "
            "on this machine, so it is left to root; create it and chown the file, or the gateway's user may not "
            "open it",
            file=sys.stderr,
        )
    os.chown(path, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    return uid, gid


def make_config_parents(directory: Path, recorded: Mapping[Path, Mapping[str, Any]], owner: Mapping[str, Any]) -> None:
    """Create `directory` and its missing parents: each as the backup recorded it (mode within 0755, owner,
    group), else MADE_DIRECTORY_MODE with the restored file's `owner` (as root)."""
    missing = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    for folder in reversed(missing):
        known = recorded.get(folder)
        mode = int(str(known["mode"]), 8) & MODE_LIMIT if known else MADE_DIRECTORY_MODE
        folder.mkdir(mode=mode)
        os.chmod(folder, mode)  # not narrowed by the umask
        if os.geteuid() == 0:
            give_owner(folder, known or owner, folder)


def newer(version: str, than: str) -> bool:
    """Whether the release `version` comes after `than` (numeric parts compared; False when unreadable)."""

    def parts(text: str) -> tuple[int, ...] | None:
        numbers = text.split("+", maxsplit=1)[0].split(".")
        return tuple(int(part) for part in numbers) if all(part.isdigit() for part in numbers) else None

    left, right = parts(version), parts(than)
    return left is not None and right is not None and left > right
