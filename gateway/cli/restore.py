"""`mcp-gateway restore SRC`: put a backup of `mcp-gateway backup` back, checked first, never beside a running gateway.

The manifest and every file's size and sha256 are checked before anything is written. The state directory
(and the audit file's place) is locked as `run` locks it for as long as the restore writes, so a gateway
running there is refused (exit 2, naming its pid) and none can start meanwhile. A database, firmware image
or configuration file already in place is replaced only with --force, and then kept beside it renamed
`<name>.replaced-<UTC time>` (a database with its -wal and -shm files); a file whose content is already
the backup's is left as it is. With --with-config the configuration files go where the backed-up
configuration names them (restore_targets), one outside the configuration file's directory only with
--force. Each file is copied from one descriptor and checked as it is written, and nothing is written
through a link under the state directory (restore_write). A database copy passes `PRAGMA quick_check`
before it is renamed into place (one that fails leaves the target as it was), and again after the restore.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from gateway.cli.backup import state_dir_option, state_environment, unfinished_backup
from gateway.cli.backup_fds import NotRegular
from gateway.cli.backup_files import (
    FIRMWARE,
    MANIFEST,
    BackupError,
    Entry,
    Manifest,
    quick_check,
    read_manifest,
    sha256_of,
    verify,
)
from gateway.cli.common import Commands, directory_name, with_config
from gateway.cli.restore_targets import (
    applied_mode,
    config_places,
    is_secret,
    mode_limit,
    newer,
    normal_place,
    outside_places,
)
from gateway.cli.restore_write import DATABASE_NAMES, Refused, Step, no_link_on_the_way, put
from gateway.devices.registry import others_may_write  # one judgement for root-run commands, the registry's too


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
        if others_may_write(target.parent):  # another user may have made the link
            holder = target.parent.stat()
            raise Refused(
                f"{target} is a symbolic link in a directory another user may write (owner uid {holder.st_uid}, "
                f"mode {holder.st_mode & 0o7777:04o}): restore never writes through it, also with --force; check "
                "where it leads, replace it by the file or remove it, then restore again; nothing was restored"
            )
        if leads_to is None or not leads_to.is_file():
            raise Refused(
                f"{target} is a symbolic link to {os.readlink(target)}, which leads to no regular file: restore "
                "never replaces a link, also with --force; point it at the file or remove it, then restore again; "
                "nothing was restored"
            )
        via, target = target, leads_to
    if target.is_symlink() or (target.exists() and not target.is_file()):
        return Step(entry, target, True, state_owned, mode=mode, via=via)
    if not target.exists():
        return Step(entry, target, False, state_owned, mode=mode, via=via)
    try:
        same = sha256_of(target) == (entry.size, entry.sha256)
    except (OSError, NotRegular):  # swapped meanwhile: replaced (kept aside), never read through
        same = False
    return Step(entry, target, not same, state_owned, in_place=same, mode=mode, via=via)


def _plan(
    args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str], places: Mapping[int, Path]
) -> list[Step]:
    from gateway.devices.registry import FILE_NAME, state_directory
    from gateway.flash.firmware import FOLDER

    state = state_directory(env).absolute()
    firmware = state / FOLDER  # where backup took it from: the state directory's own
    audit = _audit_target(args, source, manifest, env)
    steps = []
    for index, entry in enumerate(manifest.files):
        if entry.kind in DATABASE_NAMES:
            target = audit if entry.kind == "audit" else state / FILE_NAME
            if state in target.parents:
                no_link_on_the_way(state, target)
            in_place = target.exists() or target.is_symlink()
            steps.append(Step(entry, target, in_place, state in target.parents))
        elif entry.kind == "firmware":
            target = firmware / Path(entry.path).relative_to(FIRMWARE)
            no_link_on_the_way(state, target)
            steps.append(_file_step(entry, target, True))
        elif index in places:
            steps.append(_file_step(entry, places[index], False))
    return steps


def _lock(env: Mapping[str, str], audit: Path | None) -> list[int]:
    """Lock the state directory (and the audit file's place) as `run` does; Refused naming the holder's pid."""
    from gateway.cli.state_lock import AUDIT_LOCK_SUFFIX, LOCK_FILE, UnsafeLock, _Held, lock_file
    from gateway.devices.registry import state_directory
    from gateway.policy.audit.location import ensure_directory

    places = [(f"the state directory {state_directory(env)}", state_directory(env), LOCK_FILE)]
    if audit is not None:
        places.append((f"the audit file {audit}", audit.parent, audit.name + AUDIT_LOCK_SUFFIX))
    descriptors: list[int] = []
    try:
        for what, directory, name in places:
            try:
                ensure_directory(directory)
            except (NotADirectoryError, FileExistsError):
                raise Refused(_no_directory(what, directory, audit is not None and directory == audit.parent)) from None
            lock = directory.resolve() / name
            made = not (lock.exists() or lock.is_symlink())
            try:
                descriptors.append(lock_file(lock))
                if made and os.geteuid() == 0:  # the gateway's user must lock it after us
                    folder = lock.parent.stat()
                    os.fchown(descriptors[-1], folder.st_uid, folder.st_gid)
            except _Held as held:
                pid = f"pid {held.pid}" if held.pid else "a process that wrote no pid"
                raise Refused(
                    f"{what} is in use by a running gateway ({pid}, holding {lock}): stop it first "
                    "(systemctl stop mcp-gateway), then restore; nothing was restored"
                ) from None
            except UnsafeLock as exc:
                raise Refused(
                    f"{exc}: remove it (the gateway's lock files are regular files it makes itself)"
                ) from None
    except BaseException:
        _unlock(descriptors)
        raise
    return descriptors


def _no_directory(what: str, directory: Path, of_audit: bool) -> str:
    """Why `directory` cannot be made: a part of its way is a file; the setting that names it."""
    blocker = next((part for part in (directory, *directory.parents) if part.exists() and not part.is_dir()), None)
    why = f"{blocker} is a file, not a directory" if blocker is not None else "a part of it is no directory"
    setting = "the [audit] path of the configuration" if of_audit else "--state-dir or $STATE_DIRECTORY"
    return (
        f"{what} cannot be written: {why}; {setting} names a place under it: set it to a place in a directory (or "
        "move the file away), then restore again; nothing was restored"
    )


def _not_in_use(steps: list[Step]) -> None:
    """Refused when another process uses a database in place (a gateway whose lock files were removed)."""
    from gateway.cli.state_lock import database_user

    for step in steps:
        if step.entry.kind not in DATABASE_NAMES:
            continue
        found = database_user(step.target)
        if found is not None:
            path, pid = found
            raise Refused(
                f"{step.target} ({step.what}) is in use by process {pid} (it holds a SQLite lock on {path}), a "
                "gateway whose lock files were removed or another program: stop it first (systemctl stop "
                "mcp-gateway), then restore; nothing was restored"
            )


def _unlock(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, 0)
        os.close(descriptor)


def _restore(
    args: argparse.Namespace, source: Path, manifest: Manifest, env: Mapping[str, str], places: Mapping[int, Path]
) -> list[Step]:
    """Lock, plan, refuse or write; the steps written."""
    from gateway.devices.registry import state_directory

    writes_audit = any(entry.kind == "audit" for entry in manifest.files)
    descriptors = _lock(env, _audit_target(args, source, manifest, env) if writes_audit else None)
    try:
        steps = _plan(args, source, manifest, env, places)
        _not_in_use(steps)
        in_the_way = [step for step in steps if step.replaces]
        if in_the_way and not args.force:
            lines = "\n".join(
                f"  {step.target} ({step.what}) exists"
                + ("" if step.entry.kind in DATABASE_NAMES else " with other content")
                for step in in_the_way
            )
            raise Refused(
                f"these files are in place and would be replaced:\n{lines}\nnothing was restored; --force replaces "
                "them and keeps each replaced file beside it as <name>.replaced-<UTC time>"
            )
        state = state_directory(env).absolute()
        state_info = state.stat()
        state_owner = (state_info.st_uid, state_info.st_gid)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        folders = {
            step.target.parent: step.entry.directory
            for step in steps
            if step.entry.directory
            and step.via is None
            and normal_place(Path(step.entry.original)).parent == step.target.parent
        }
        restored = 0
        for step in steps:
            link = "" if step.via is None else f" (through the link {step.via})"
            if step.in_place:
                print(f"in place already: {step.what} {step.target}{link} (the backup's content)")
                continue
            kept = put(source, step, stamp, state, state_owner, folders, restored)
            restored += 1
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

    unfinished = None if (source / MANIFEST).exists() else unfinished_backup(source)
    if unfinished is not None:  # a backup writes its manifest last: without one, its claim says what SRC is
        print(f"mcp-gateway restore: {unfinished}", file=sys.stderr)
        return 1
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
    outside = outside_places(manifest, places)
    if outside and not args.force:
        print(
            "mcp-gateway restore: with --with-config, restore writes where the backed-up configuration says, and "
            "these places are not beside it:\n" + "\n".join(outside) + "\ncheck them in the backup's configuration "
            "(restore without --with-config lists every place), then restore again with --force to write them "
            "there; nothing was restored",
            file=sys.stderr,
        )
        return 2
    try:
        steps = _restore(args, source, manifest, env, places)
    except Refused as exc:
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
                place = normal_place(Path(entry.original))  # where --with-config would write, `..` folded
                spelled = "" if str(place) == entry.original else f", named {entry.original}"
                print(
                    f"not restored (--with-config puts it there): {source / entry.path} -> {place} "
                    f"(mode {entry.mode}{named}{spelled})"
                )
    for item in manifest.absent:
        print(f"not in the backup: {item.get('kind')} {item.get('original') or ''} ({item.get('why')})")
    if failed:
        return 1
    print(f"start the gateway, then check: {_checks(args, steps)}")
    return 0


def _checks(args: argparse.Namespace, steps: list[Step]) -> str:
    """The commands that read what restore wrote, with the configuration and state directory it was given."""
    audit = "mcp-gateway audit --limit 5"
    trail = next((step.target for step in steps if step.entry.kind == "audit"), None)
    if args.config:
        audit += f" --config {shlex.quote(args.config)}"
    elif args.state_dir and trail is not None:
        audit += f" --path {shlex.quote(str(trail))}"
    devices = "mcp-gateway devices"
    if args.state_dir:
        from gateway.devices.registry import FILE_NAME

        registry = Path(args.state_dir).expanduser().absolute() / FILE_NAME
        devices += f" --registry {shlex.quote(str(registry))}"
    return f"{audit}, {devices}"


def add_restore(commands: Commands) -> None:
    restore = commands.add_parser(
        "restore",
        help="put a backup of `mcp-gateway backup` back, checked first, with the gateway stopped",
        description="Check SRC's manifest and every file's sha256, then write the databases into the state "
        "directory (the audit file where the configuration's [audit] path says) and firmware/ back; with "
        "--with-config the configuration files too, at their original paths. Refused while a gateway runs on the "
        "state directory. A file in place is replaced only with --force, and kept as <name>.replaced-<UTC time>.",
    )
    restore.add_argument(
        "source", metavar="SRC", type=directory_name, help="the backup's directory, as `mcp-gateway backup` wrote it"
    )
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
        help="replace files in place (each replaced one is kept as <name>.replaced-<UTC time>, never deleted); "
        "with --with-config also write a file the configuration puts outside its own directory",
    )
    restore.set_defaults(func=cmd_restore)
