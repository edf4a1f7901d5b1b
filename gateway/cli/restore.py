"""`mcp-gateway restore SRC`: put a backup of `mcp-gateway backup` back, checked first, never beside a running gateway.

The manifest and every file's size and sha256 are checked before anything is written. The state directory
(and the audit file's place) is locked as `run` locks it for as long as the restore writes, so a gateway
running there is refused (exit 2, naming its pid) and none can start meanwhile. A database, firmware image
or configuration file already in place is replaced only with --force, and then kept beside it renamed
`<name>.replaced-<UTC time>` (a database with its -wal and -shm files); a file whose content is already
the backup's is left as it is. With --with-config the configuration files go where the backed-up
configuration names them (restore_targets). After the restore each restored database passes
`PRAGMA quick_check`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gateway.cli.backup import state_dir_option, state_environment
from gateway.cli.backup_files import (
    FIRMWARE,
    PRIVATE_DIRECTORY,
    PRIVATE_FILE,
    BackupError,
    Entry,
    Manifest,
    quick_check,
    read_manifest,
    sha256_of,
    sync_directory,
    verify,
    write_copy,
)
from gateway.cli.common import Commands, with_config
from gateway.cli.restore_targets import (
    applied_mode,
    config_places,
    entry_owner,
    give_owner,
    is_secret,
    make_config_parents,
    mode_limit,
    newer,
)

DATABASE_NAMES = {"audit": "the audit trail", "registry": "the device registry"}
LOG_SUFFIXES = ("-wal", "-shm")


class _Refused(Exception):
    """The restore would overwrite something, or a gateway uses the place: exit 2, nothing written."""


@dataclass
class Step:
    """One file of the backup and where it goes; `replaces`: a file in place that differs (kept aside)."""

    entry: Entry
    target: Path
    replaces: bool
    state_owned: bool
    in_place: bool = False
    """The file at `target` holds the backup's content already: left as it is."""
    mode: int = PRIVATE_FILE
    """The mode it is given (restore_targets.applied_mode)."""
    via: Path | None = None
    """The symbolic link `target` was reached through: the link is kept, the file it leads to written."""

    @property
    def what(self) -> str:
        if self.entry.kind in DATABASE_NAMES:
            return DATABASE_NAMES[self.entry.kind]
        if self.entry.kind == "named":
            return f"the file of {self.entry.setting}" if self.entry.setting else "a file the configuration names"
        return "the configuration file" if self.entry.kind == "config" else "the firmware image"


def _audit_target(args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str]) -> Path:
    """Where the audit file goes: the [audit] path of --config / $MCP_GATEWAY_CONFIG or, with --with-config
    and neither given, of the backup's own configuration; else the default place in the state directory."""
    from gateway.cli.audit import trail_path
    from gateway.config import ENV_CONFIG_FILE

    name = args.config or env.get(ENV_CONFIG_FILE)
    if not name and args.with_config:
        copy = next((entry for entry in manifest.files if entry.kind == "config"), None)
        name = str(source / copy.path) if copy is not None else None
    return trail_path(argparse.Namespace(path=None, config=name), env).absolute()


def _file_step(entry: Entry, target: Path, state_owned: bool) -> Step:
    """A file goes to `target`: it replaces one whose content differs, and is left out where the same is.
    A configuration file's place that is a symbolic link is followed (the link kept, the file it leads to
    compared and written); one in the state directory, which the gateway's user may write, is not."""
    mode = applied_mode(entry)
    via = None
    if target.is_symlink() and not state_owned:
        try:
            leads_to = target.resolve(strict=True)
        except (OSError, RuntimeError):
            leads_to = None
        holder = target.parent.stat()
        if holder.st_uid != os.geteuid() or holder.st_mode & 0o022:  # another user may have made the link
            raise _Refused(
                f"{target} is a symbolic link in a directory another user may write (owner uid {holder.st_uid}, "
                f"mode {holder.st_mode & 0o7777:04o}): restore never writes through it, also with --force; check "
                "where it leads, replace it by the file or remove it, then restore again; nothing was restored"
            )
        if leads_to is None or not leads_to.is_file():
            raise _Refused(
                f"{target} is a symbolic link to {os.readlink(target)}, which leads to no regular file: restore "
                "never replaces a link, also with --force; point it at the file or remove it, then restore again; "
                "nothing was restored"
            )
        via, target = target, leads_to
    if target.is_symlink() or (target.exists() and not target.is_file()):
        return Step(entry, target, True, state_owned, mode=mode, via=via)
    if not target.exists():
        return Step(entry, target, False, state_owned, mode=mode, via=via)
    same = sha256_of(target) == (entry.size, entry.sha256)
    return Step(entry, target, not same, state_owned, in_place=same, mode=mode, via=via)


def _plan(
    args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str], places: Mapping[int, Path]
) -> list[Step]:
    from gateway.devices.registry import FILE_NAME, state_directory
    from gateway.flash.firmware import default_firmware_dir

    state = state_directory(env).absolute()
    firmware = default_firmware_dir(env).absolute()
    audit = _audit_target(args, source, manifest, env)
    steps = []
    for index, entry in enumerate(manifest.files):
        if entry.kind in DATABASE_NAMES:
            target = audit if entry.kind == "audit" else state / FILE_NAME
            in_place = target.exists() or target.is_symlink()
            steps.append(Step(entry, target, in_place, state in target.parents))
        elif entry.kind == "firmware":
            steps.append(_file_step(entry, firmware / Path(entry.path).relative_to(FIRMWARE), True))
        elif index in places:
            steps.append(_file_step(entry, places[index], False))
    return steps


def _lock(env: Mapping[str, str], audit: Path | None) -> list[int]:
    """Lock the state directory (and the audit file's place) as `run` does; _Refused naming the holder's pid."""
    from gateway.cli.state_lock import AUDIT_LOCK_SUFFIX, LOCK_FILE, UnsafeLock, _Held, lock_file
    from gateway.devices.registry import state_directory
    from gateway.policy.audit.location import ensure_directory

    places = [(f"the state directory {state_directory(env)}", state_directory(env), LOCK_FILE)]
    if audit is not None:
        places.append((f"the audit file {audit}", audit.parent, audit.name + AUDIT_LOCK_SUFFIX))
    descriptors: list[int] = []
    try:
        for what, directory, name in places:
            ensure_directory(directory)
            lock = directory.resolve() / name
            made = not (lock.exists() or lock.is_symlink())
            try:
                descriptors.append(lock_file(lock))
                if made and os.geteuid() == 0:  # the gateway's user must lock it after us
                    folder = lock.parent.stat()
                    os.fchown(descriptors[-1], folder.st_uid, folder.st_gid)
            except _Held as held:
                pid = f"pid {held.pid}" if held.pid else "a process that wrote no pid"
                raise _Refused(
                    f"{what} is in use by a running gateway ({pid}, holding {lock}): stop it first "
                    "(systemctl stop mcp-gateway), then restore; nothing was restored"
                ) from None
            except UnsafeLock as exc:
                raise _Refused(
                    f"{exc}: remove it (the gateway's lock files are regular files it makes itself)"
                ) from None
    except BaseException:
        _unlock(descriptors)
        raise
    return descriptors


def _unlock(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, 0)
        os.close(descriptor)


def _make_parents(directory: Path, owner: tuple[int, int] | None) -> None:
    """Create `directory` and its missing parents 0700; as root, given `owner` (the state directory's)."""
    missing = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=PRIVATE_DIRECTORY)
        if owner is not None and os.geteuid() == 0:
            os.chown(folder, *owner)


def _chown(path: Path, step: Step, state_owner: tuple[int, int] | None) -> None:
    """As root: a state file goes to the state directory's owner, another file to its recorded owner."""
    if os.geteuid() != 0:
        return
    if step.state_owned and state_owner is not None:
        os.chown(path, *state_owner)
        return
    give_owner(path, entry_owner(step.entry), step.target)


def _aside(target: Path, stamp: str) -> Path:
    """`<name>.replaced-<stamp>`, numbered when a restore in the same second kept one already."""
    aside = target.with_name(f"{target.name}.replaced-{stamp}")
    number = 1
    while any(path.exists() or path.is_symlink() for path in _with_logs(aside)):
        number += 1
        aside = target.with_name(f"{target.name}.replaced-{stamp}-{number}")
    return aside


def _with_logs(path: Path) -> list[Path]:
    return [path, *(path.with_name(path.name + suffix) for suffix in LOG_SUFFIXES)]


def _put(
    source: Path,
    step: Step,
    stamp: str,
    state_owner: tuple[int, int] | None,
    folders: Mapping[Path, Mapping[str, object]],
) -> str | None:
    """Write one file of the backup to its target (through a temporary file beside it, renamed in place);
    the name the replaced file was kept under, if any. `folders`: the recorded directories of config files."""
    target = step.target
    database = step.entry.kind in DATABASE_NAMES
    if database or step.state_owned:
        _make_parents(target.parent, state_owner if step.state_owned else None)
    else:
        make_config_parents(target.parent, folders, entry_owner(step.entry))
    temporary = target.with_name(f".{target.name}.restoring")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    write_copy(source / step.entry.path, temporary, step.mode)
    _chown(temporary, step, state_owner)
    aside: Path | None = None
    if step.replaces:
        aside = _aside(target, stamp)
        os.rename(target, aside)
    if database:
        for suffix in LOG_SUFFIXES:
            log = target.with_name(target.name + suffix)
            if aside is not None and log.exists():
                os.rename(log, aside.with_name(aside.name + suffix))  # the replaced database stays whole
            else:
                with contextlib.suppress(FileNotFoundError):
                    log.unlink()  # a stale log of no database: SQLite would replay it into the restored one
    os.replace(temporary, target)
    sync_directory(target.parent)
    return None if aside is None else str(aside)


def _restore(
    args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str], places: Mapping[int, Path]
) -> list[Step]:
    """Lock, plan, refuse or write; the steps written."""
    from gateway.devices.registry import state_directory

    writes_audit = any(entry.kind == "audit" for entry in manifest.files)
    descriptors = _lock(env, _audit_target(args, source, manifest, env) if writes_audit else None)
    try:
        steps = _plan(args, source, manifest, env, places)
        in_the_way = [step for step in steps if step.replaces]
        if in_the_way and not args.force:
            lines = "\n".join(
                f"  {step.target} ({step.what}) exists"
                + ("" if step.entry.kind in DATABASE_NAMES else " with other content")
                for step in in_the_way
            )
            raise _Refused(
                f"these files are in place and would be replaced:\n{lines}\nnothing was restored; --force replaces "
                "them and keeps each replaced file beside it as <name>.replaced-<UTC time>"
            )
        state = state_directory(env)
        state_info = state.stat()
        state_owner = (state_info.st_uid, state_info.st_gid)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        folders = {
            step.target.parent: step.entry.directory
            for step in steps
            if step.entry.directory and step.via is None and Path(step.entry.original).parent == step.target.parent
        }
        for step in steps:
            link = "" if step.via is None else f" (through the link {step.via})"
            if step.in_place:
                print(f"in place already: {step.what} {step.target}{link} (the backup's content)")
                continue
            kept = _put(source, step, stamp, state_owner, folders)
            print(f"restored {step.what} {step.target}{link} ({step.entry.size} bytes, mode {_mode_said(step)})")
            if kept is not None:
                print(f"  kept the file it replaced as {kept}")
    finally:
        _unlock(descriptors)
    return steps


def _mode_said(step: Step) -> str:
    """The mode applied, and the recorded one when restore narrowed it."""
    applied = f"{step.mode:04o}"
    if step.entry.kind in DATABASE_NAMES or int(step.entry.mode, 8) == step.mode:
        return applied
    kind = "a secret" if is_secret(step.entry) else "a file"
    return f"{applied}; the backup says {step.entry.mode}, restore gives {kind} at most {mode_limit(step.entry):04o}"


def cmd_restore(args: argparse.Namespace) -> int:
    source = Path(args.source).expanduser().absolute()
    env = state_environment(args)
    if not source.is_dir():  # the directory named on the command line: usage (docs/cli.md)
        print(
            f"mcp-gateway restore: {source} is not a directory: give the one mcp-gateway backup wrote", file=sys.stderr
        )
        return 2
    from gateway import __version__

    try:
        manifest = read_manifest(source)
        verify(source, manifest)
        for entry in manifest.files:
            if entry.kind not in DATABASE_NAMES:
                applied_mode(entry)
        places, left_out = config_places(args, source, manifest, env) if args.with_config else ({}, [])
    except BackupError as exc:
        print(f"mcp-gateway restore: {exc}", file=sys.stderr)
        return 1
    if newer(manifest.gateway_version, __version__):
        print(
            f"mcp-gateway restore: warning: the backup was made by gateway {manifest.gateway_version}, newer than "
            f"this one ({__version__}); its format {manifest.format} is one this gateway reads, but a newer "
            "gateway's databases may hold what this one does not know: update this gateway first if you can",
            file=sys.stderr,
        )
    try:
        steps = _restore(args, source, manifest, env, places)
    except _Refused as exc:
        print(f"mcp-gateway restore: {exc}", file=sys.stderr)
        return 2
    except BackupError as exc:
        print(f"mcp-gateway restore: {exc}", file=sys.stderr)
        return 1
    for line in left_out:
        print(line)
    failed = False
    for step in steps:
        if step.entry.kind in DATABASE_NAMES:
            problem = quick_check(step.target)
            if problem is not None:
                failed = True
                print(
                    f"mcp-gateway restore: {step.target} fails SQLite's quick_check after the restore: {problem}",
                    file=sys.stderr,
                )
    if not args.with_config:
        for entry in manifest.files:
            if entry.kind in ("config", "named"):
                named = f", {entry.setting}" if entry.setting else ""
                print(
                    f"not restored (--with-config puts it there): {source / entry.path} -> {entry.original} "
                    f"(mode {entry.mode}{named})"
                )
    for item in manifest.absent:
        print(f"not in the backup: {item.get('kind')} {item.get('original') or ''} ({item.get('why')})")
    if failed:
        return 1
    print("start the gateway, then check: mcp-gateway audit --limit 5, mcp-gateway devices")
    return 0


def add_restore(commands: Commands) -> None:
    restore = commands.add_parser(
        "restore",
        help="put a backup of `mcp-gateway backup` back, checked first, with the gateway stopped",
        description="Check SRC's manifest and every file's sha256, then write the databases into the state "
        "directory (the audit file where the configuration's [audit] path says) and firmware/ back; with "
        "--with-config the configuration files too, at their original paths. Refused while a gateway runs on the "
        "state directory. A file in place is replaced only with --force, and kept as <name>.replaced-<UTC time>.",
    )
    restore.add_argument("source", metavar="SRC", help="the backup's directory, as `mcp-gateway backup` wrote it")
    with_config(restore)
    state_dir_option(restore)
    restore.add_argument(
        "--with-config",
        action="store_true",
        help="also put the configuration file and the files it names back at their original paths",
    )
    restore.add_argument(
        "--force",
        action="store_true",
        help="replace files in place (each replaced one is kept as <name>.replaced-<UTC time>, never deleted)",
    )
    restore.set_defaults(func=cmd_restore)
