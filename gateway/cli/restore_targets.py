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
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.cli.backup_files import CA_BESIDE, MANIFEST, BackupError, Entry, Manifest, settings_in

MODE_LIMIT = 0o755
"""The most a restored configuration file or firmware image gets: no write for group or others."""
SECRET_MODE_LIMIT = 0o640
"""The most a restored secret gets (a file named by one of SECRET_SETTINGS)."""
SECRET_SETTINGS = (
    "auth.token_files[]",
    "auth.tokens[].file",
    "auth.hmac.keys[].file",
    "providers.auth.shared_secret.file",
    "providers.auth.identities[].file",
    "tls.key_file",
    f"ca-key.pem beside {CA_BESIDE}",
    "mqtt.brokers[].password.file",
    "mqtt.brokers[].key_password.file",
    "mqtt.brokers[].key_file",
    "upstreams.remote[].secret.file",
    "upstreams.remote[].headers_file",
    "upstreams.remote[].oauth_client_credentials.client_secret.file",
    "telemetry.headers_file",
)
"""The settings whose file holds a secret (gateway/config: tokens, HMAC keys, provider secrets and identities,
private keys and their passwords, MQTT passwords, upstream secrets, headers, OAuth client secrets), with each
list index written `[]`."""
SPECIAL_BITS = 0o7000
"""setuid, setgid, sticky: no file a gateway keeps has them; a manifest that asks for them is refused."""
MADE_DIRECTORY_MODE = 0o750
"""A directory restore makes for a configuration file whose directory the backup does not record: owned by
the file's owner and group."""


def is_secret(entry: Entry) -> bool:
    """Whether `entry` is a file of one of SECRET_SETTINGS; also one of no setting known here (a later gateway's):
    a file given too little access is fixed with chmod, a secret given too much is read."""
    if entry.kind != "named":
        return False
    setting = re.sub(r"\[\d+\]", "[]", entry.setting or "")
    return setting in SECRET_SETTINGS or setting not in PUBLIC_SETTINGS


PUBLIC_SETTINGS = (
    "policy.file",
    "tls.cert_file",
    "tls.client_ca_file",
    f"ca.pem beside {CA_BESIDE}",
    "mqtt.brokers[].ca_file",
    "mqtt.brokers[].cert_file",
    "upstreams.remote[].ca_file",
    "auth.oauth.jwks_file",
)
"""The settings whose file holds nothing secret (policies, certificates, public keys)."""


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


VERSION = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<phase>alpha|beta|preview|pre|a|b|c|rc)[-_.]?(?P<pre>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?",
    re.IGNORECASE,
)
"""A PEP 440 version (packaging is no dependency of the gateway): release, pre-release, post-release, dev."""
PHASES = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
MAX_VERSION_CHARS = 100


def version_key(text: str) -> tuple[Any, ...] | None:
    """`text`'s order by PEP 440 (1.0.dev1 < 1.0a1 < 1.0rc1 < 1.0 < 1.0.post1); None when it is no version."""
    found = VERSION.fullmatch(text.strip()) if len(text) <= MAX_VERSION_CHARS else None
    if found is None:
        return None
    release = [int(part) for part in found["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    phase, post, dev = found["phase"], found["post"], found["dev"]
    if phase is not None:
        pre: tuple[int, ...] = (1, PHASES[phase.lower()], int(found["pre"] or 0))
    elif dev is not None and post is None:
        pre = (0,)  # 1.0.dev1 comes before 1.0a1
    else:
        pre = (2,)
    return (
        tuple(release),
        pre,
        -1 if post is None else int(post or 0),
        (1,) if dev is None else (0, int(dev or 0)),
    )


def newer(version: str, than: str) -> bool:
    """Whether the version `version` comes after `than` by PEP 440, pre-releases included (False when either
    is unreadable)."""
    left, right = version_key(version), version_key(than)
    return left is not None and right is not None and left > right
