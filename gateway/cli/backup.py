"""`mcp-gateway backup DEST`: one consistent, complete, verifiable copy of a gateway, taken while it runs.

DEST (a new or empty directory, made 0700) receives the audit trail and the device registry, each copied
with SQLite's online backup (one state of the file, while the gateway goes on writing) and checked with
`PRAGMA quick_check`; the state directory's firmware/ tree; the configuration file, every file it names
and the local CA of `tls self-signed` beside the server certificate; and manifest.json, which lists each
file's original path, its place in the backup, size, sha256, mode and owner (`mcp-gateway restore` checks
them all before it writes anything). A run claims DEST (CLAIM) before it writes anything, so a second
backup into the same DEST is refused (exit 2) and a failing run removes only its own files. A database
that cannot be read, or a DEST that cannot take a copy, stops the backup (exit 1) and leaves no DEST
behind; a DEST inside the state directory, one another user owns or could rename (a directory above it
another user owns, or group or others may write without the sticky bit), one that cannot be made or
written, or an audit trail expected at a relative [audit] path that names no file from this working
directory, is refused (exit 2).
Every image and configuration file is opened once, never through a link the gateway's user may have made
(backup_fds), and copied from that descriptor.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pwd
import shutil
import stat
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.cli.backup_fds import NotDirectory, NotRegular, open_below, open_regular, tree
from gateway.cli.backup_files import (
    CA_BESIDE,
    CONFIG,
    DATABASES,
    DEFAULT_BUSY_S,
    FIRMWARE,
    FULL_ERRNOS,
    MANIFEST,
    PRIVATE_DIRECTORY,
    PRIVATE_FILE,
    BackupError,
    Entry,
    Manifest,
    copy_database,
    free_bytes,
    mode_text,
    named_files,
    ownership,
    sha256_of,
    sync_directory,
    write_copy,
)
from gateway.cli.common import Commands, decimal_number, directory_name, with_config
from gateway.devices.registry import others_may_write  # one judgement for root-run commands, the registry's too


def state_environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment the state directory is found from, with --state-dir as $STATE_DIRECTORY when given."""
    env = dict(os.environ)
    if getattr(args, "state_dir", None):
        env["STATE_DIRECTORY"] = str(Path(args.state_dir).expanduser().absolute())
    return env


CLAIM = ".mcp-gateway-backup.lock"
"""The file a backup makes first in DEST (O_EXCL, holding its pid and an flock) and removes last: DEST is
that run's alone while it exists, so a second backup into the same DEST is refused instead of mixing
files with the first, and a failing run removes only what it made."""


CLAIM_SETTLE_S = 5.0
"""How long an empty, unlocked claim is taken for a run that has only just made it; older, it was left by a
run stopped before it locked and wrote its pid."""


class _Refused(Exception):
    """DEST cannot take a backup: exit 2, nothing written."""


class _Claim:
    """DEST, held by this run: `made` when this run created the directory; `identity` its (st_dev, st_ino)
    when claimed."""

    def __init__(self, dest: Path, descriptor: int, made: bool, identity: tuple[int, int]) -> None:
        self.dest = dest
        self.descriptor = descriptor
        self.made = made
        self.identity = identity

    def replaced(self) -> bool:
        """Whether the name DEST leads to another file than the directory claimed (renamed, or swapped for a
        link): then nothing is removed by that name, whatever it leads to now is not this run's."""
        try:
            info = os.lstat(self.dest)
        except FileNotFoundError:
            return True
        return not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) != self.identity

    def release(self, keep: bool) -> None:
        """End the hold; unless `keep` (the backup is whole), first remove what this run wrote: under the
        claim nothing else was written into DEST."""
        if not keep and self.replaced():
            print(
                f"mcp-gateway backup: {self.dest} is no longer the directory this backup claimed (it was renamed or "
                "replaced meanwhile): nothing was removed through it; find the part this backup wrote (it holds "
                f"{CLAIM}) and remove it",
                file=sys.stderr,
            )
            os.close(self.descriptor)
            return
        if not keep:
            try:
                children = list(self.dest.iterdir())
            except OSError:  # DEST removed meanwhile: nothing of this run's left to remove
                children = []
            for child in children:
                if child.name == CLAIM:
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        child.unlink()
        self.let_go(keep)

    def let_go(self, keep: bool = False) -> None:
        """Remove the claim alone (and DEST, when this run made it and it is empty: never another's files)."""
        with contextlib.suppress(OSError):
            os.unlink(self.dest / CLAIM)
        os.close(self.descriptor)
        if keep:
            sync_directory(self.dest)
        elif self.made:
            with contextlib.suppress(OSError):  # another run's claim in it since: its directory now
                self.dest.rmdir()


def _cannot_write(dest: Path, exc: OSError) -> _Refused:
    """DEST (or a missing parent) cannot be made or written: named, not a traceback (docs/cli.md: exit 2)."""
    where = Path(exc.filename) if exc.filename else dest
    if exc.errno in FULL_ERRNOS:
        why = f"the file system is full ({free_bytes(where if where.is_dir() else where.parent)} bytes free)"
    else:
        text = exc.strerror or str(exc)
        why = text[:1].lower() + text[1:]
    said = "" if where in (dest, dest / CLAIM) else f" ({where})"
    return _Refused(f"cannot write {dest}{said}: {why}; no backup was left")


def _holder(dest: Path) -> tuple[str, bool]:
    """Who holds DEST's claim: " (pid N)" (or "") and whether a run still holds it."""
    holder = ""
    held = True
    with contextlib.suppress(OSError):
        descriptor = os.open(dest / CLAIM, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return "", False  # a directory or a device: no backup made it, and none holds it
            holder = os.read(descriptor, 32).decode(errors="replace").strip()
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                # An empty claim nobody locks: a run between making it and locking it (a moment), or one
                # stopped in that moment (then it stays empty and ages).
                # abs(): a claim dated ahead (the clock stepped back since) must age too.
                held = not holder and abs(time.time() - os.fstat(descriptor).st_mtime) < CLAIM_SETTLE_S
        finally:
            os.close(descriptor)
    if held and not holder and os.path.islink(dest / CLAIM):
        held = False  # a link in the claim's place: no backup made it (a backup makes a regular file)
    return (f" (pid {holder})" if holder.isdigit() else ""), held


def _incomplete(dest: Path, pid: str) -> str:
    return (
        f"{dest} holds an incomplete backup: the backup{pid} that wrote it was stopped before it finished "
        f"({CLAIM} is left); remove {dest} (restore refuses it) and back up again"
    )


def unfinished_backup(dest: Path) -> str | None:
    """Why restore refuses DEST when a backup's claim is in it (one running, or one stopped before it
    finished: the same words backup says); None without a claim."""
    if not os.path.lexists(dest / CLAIM):
        return None
    pid, held = _holder(dest)
    if held:
        return f"a backup{pid} is still writing {dest}: wait for it to end, then restore"
    return _incomplete(dest, pid)


def _in_use(dest: Path) -> _Refused:
    """The refusal for a DEST whose claim another run holds, or one a stopped run left."""
    pid, held = _holder(dest)
    if held:
        return _Refused(
            f"another backup{pid} is writing {dest}: wait for it to end, or give another directory (two backups "
            "never share one)"
        )
    return _Refused(_incomplete(dest, pid))


def _prepare(dest: Path, state: Path) -> _Claim:
    """Make DEST (0700, with missing parents 0700) or take an empty one, and claim it (CLAIM): this run's
    until `release`. _Refused when it is inside the state directory, not empty, in use or cannot be written."""
    if dest.is_symlink():
        # Never written through a link: a link an untrusted user can change would steer a root-run backup.
        raise _link_refused(dest)
    try:
        place, home = dest.resolve(), state.resolve()
    except RuntimeError:  # a loop of symbolic links in a parent
        raise _Refused(f"{dest} cannot be reached: its path runs into a loop of symbolic links") from None
    if place == home or home in place.parents:
        raise _Refused(
            f"{dest} is inside the state directory {state}: every later backup would hold this one (its secrets "
            "too) as a firmware image or a stray file; give a directory outside the state directory"
        )
    if dest.exists() and not dest.is_dir():
        raise _Refused(f"{dest} exists and is not a directory: give a new or empty directory")
    _refuse_swappable_folders(dest, place)
    made = False
    try:
        for folder in reversed([folder for folder in dest.parents if not folder.exists()]):
            with contextlib.suppress(FileExistsError):  # made by a run beside this one: as good
                folder.mkdir(mode=PRIVATE_DIRECTORY)
        try:
            dest.mkdir(mode=PRIVATE_DIRECTORY)
            made = True
        except FileExistsError:
            pass
        # What is there now, be it made (a link, another's directory) since the first look: once it is this
        # user's directory in a folder no other user may rename entries of, the name stays that directory.
        found = os.lstat(dest)
        if not made:
            _refuse_foreign(dest, found)
            _check_empty(dest)
        # O_EXCL: of two runs that both found DEST empty, one makes the claim and the other is refused.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(dest / CLAIM, flags, PRIVATE_FILE)
    except FileExistsError as exc:
        if exc.filename is not None and Path(exc.filename).name == CLAIM:
            raise _in_use(dest) from None
        raise _cannot_write(dest, exc) from None
    except OSError as exc:
        if made:
            with contextlib.suppress(OSError):
                dest.rmdir()
        raise _cannot_write(dest, exc) from None
    claim = _Claim(dest, descriptor, made, (found.st_dev, found.st_ino))
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        # Checked again under the claim: a run that ended between the first look and the claim left its files.
        _check_empty(dest, claimed=True)
        if not made:
            os.chmod(dest, PRIVATE_DIRECTORY)
    except _Refused:
        claim.let_go()
        raise
    except OSError as exc:
        claim.let_go()
        raise _cannot_write(dest, exc) from None
    return claim


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _refuse_swappable_folders(dest: Path, place: Path) -> None:
    """Refuse a DEST below a directory a user other than root and this one may rename entries in: that user
    could swap DEST (or a folder on its way) for a link while the backup writes and removes by name. Unlike
    others_may_write (which judges a link to follow), a sticky directory such as /tmp is fine: in it only an
    entry's owner renames the entry, and DEST must be this user's (_refuse_foreign)."""
    euid = os.geteuid()
    folders = dict.fromkeys([dest.parent, *dest.parent.parents, place.parent, *place.parent.parents])
    for folder in folders:
        try:
            info = os.stat(folder)
        except OSError:  # not there yet (made 0700 by this run) or not reachable: named when it is made
            continue
        where = "in" if folder in (dest.parent, place.parent) else "below"
        if info.st_uid not in (0, euid):
            raise _Refused(
                f"{dest} is {where} {folder}, which belongs to {_user(info.st_uid)}, not to root or the user running "
                f"this backup: that user could swap {dest} for a link while the backup writes; give a directory "
                "only root or you may change"
            )
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise _Refused(
                f"{dest} is {where} {folder} (mode {info.st_mode & 0o7777:04o}), which group or others may write "
                f"and which has no sticky bit: any of them could swap {dest} for a link while the backup writes; "
                "give a directory only root or you may change"
            )


def _link_refused(dest: Path) -> _Refused:
    """The refusal of a DEST that is a symbolic link, named with where it leads."""
    target = ""
    with contextlib.suppress(OSError):  # removed since: named without its target
        target = f" (to {os.readlink(dest)})"
    return _Refused(f"{dest} is a symbolic link{target}: give the directory itself, new or empty")


def _refuse_foreign(dest: Path, info: os.stat_result) -> None:
    """Refuse an existing DEST this user does not own (or a link made in its place since the first look): its
    owner could swap it for a link while the backup writes, even in a sticky directory."""
    if stat.S_ISLNK(info.st_mode):
        raise _link_refused(dest)
    if info.st_uid != os.geteuid():
        raise _Refused(
            f"{dest} belongs to {_user(info.st_uid)}, not to the user running this backup: another user could swap "
            "it for a link while the backup writes; give a new directory or one you own"
        )


def _check_empty(dest: Path, claimed: bool = False) -> None:
    names = set(os.listdir(dest))
    if claimed:
        names.discard(CLAIM)
    elif CLAIM in names:
        raise _in_use(dest)
    if names:
        raise _Refused(f"{dest} is not empty: give a new or empty directory (a backup is never mixed with other files)")


class _Writer:
    """The backup under way: each file copied into DEST and listed in the manifest."""

    def __init__(self, dest: Path, manifest: Manifest) -> None:
        self.dest = dest
        self.manifest = manifest

    def _folder(self, relative: Path) -> Path:
        target = self.dest / relative
        for folder in reversed([self.dest / part for part in relative.parents if str(part) != "."]):
            if not folder.exists():
                folder.mkdir(mode=PRIVATE_DIRECTORY)
        return target

    def absent(self, kind: str, original: Path | None, why: str) -> None:
        self.manifest.absent.append({"kind": kind, "original": None if original is None else str(original), "why": why})

    def database(self, kind: str, original: Path, name: str, busy_s: float, why_absent: str) -> None:
        if not original.exists() and not original.is_symlink():
            self.absent(kind, original, why_absent)
            return
        # SQLite opens by name: a link in a directory another user may write (the gateway's state
        # directory, to a root-run backup) could lead it to any database on the machine.
        if original.is_symlink() and others_may_write(original.parent):
            raise BackupError(
                f"{original} cannot be backed up: it is a symbolic link in {original.parent}, a directory another "
                f"user may write (the {kind} database is a file, not a link)"
            )
        if not original.is_file():
            raise BackupError(f"{original} cannot be backed up: it is not a regular file (the {kind} database)")
        relative = Path(DATABASES) / name
        target = self._folder(relative)
        copy_database(original, target, busy_s, self.dest)
        info = original.stat()
        size, digest = sha256_of(target)
        self.manifest.files.append(
            Entry(kind, str(original), str(relative), size, digest, mode_text(PRIVATE_FILE), **ownership(info))
        )

    def file(
        self,
        kind: str,
        original: Path,
        relative: Path,
        reading: int,
        setting: str | None = None,
        link: str | None = None,
    ) -> None:
        """Copy the open regular file `reading` (of `original`) to `relative` in DEST and list it: the mode and
        owner are those of the descriptor read, so the manifest says what was copied."""
        info = os.fstat(reading)
        target = self._folder(relative)
        size, digest = write_copy(reading, original, target, info.st_mode & 0o777, self.dest)
        directory = None
        if kind in ("config", "named"):
            folder = original.parent.stat()
            directory = {"mode": mode_text(folder.st_mode), **ownership(folder)}
        self.manifest.files.append(
            Entry(
                kind,
                str(original),
                str(relative),
                size,
                digest,
                mode_text(info.st_mode),
                **ownership(info),
                setting=setting,
                link=link,
                directory=directory,
            )
        )

    def firmware(self, directory: Path) -> None:
        """The firmware/ tree, which the gateway's user writes: walked without following a link (firmware/
        itself included), each image opened once and copied only when it is a regular file; the rest listed."""
        try:
            top = open_below(directory.parent, [directory.name])
        except FileNotFoundError:
            self.absent("firmware", directory, "no firmware directory")
            return
        except NotDirectory as exc:
            self.absent("firmware", directory, f"{exc.what}: not copied")
            return

        def inside_dest(relative: Path) -> bool:
            path = directory / relative
            return path == self.dest or self.dest in path.parents

        try:
            for relative, reading, why in tree(top, inside_dest):
                if reading is None:
                    self.absent("firmware", directory / relative, why)
                    continue
                try:
                    self.file("firmware", directory / relative, Path(FIRMWARE) / relative, reading)
                finally:
                    os.close(reading)
        finally:
            os.close(top)

    def configuration(self, config_file: Path | None, config: Any) -> None:
        listed: list[tuple[str, str | None, Path]] = []
        if config_file is not None:
            listed.append(("config", None, config_file))
        listed += [("named", setting, path) for setting, path in named_files(config)]
        listed += self._local_ca(config, {path for _, _, path in listed})
        for index, (kind, setting, path) in enumerate(listed):
            named = f" (named by {setting})" if setting else ""
            try:
                info = path.lstat()
                link, place = None, path
                if stat.S_ISLNK(info.st_mode):
                    link, place = os.readlink(path), path.resolve(strict=True)
                    writer = next((folder for folder in (path.parent, place.parent) if others_may_write(folder)), None)
                    if writer is not None:
                        why = f"a symbolic link through {writer}, a directory another user may write: not followed"
                        self.absent(kind, path, why + named)
                        continue
                reading = open_regular(place)
            except (FileNotFoundError, RuntimeError):  # RuntimeError: a loop of links
                self.absent(kind, path, f"not found{named}")
                continue
            except NotRegular as exc:
                raise BackupError(
                    f"{path} cannot be backed up: it is {exc.what}, not a regular file ({setting or 'the config file'})"
                ) from None
            try:
                self.file(kind, path, Path(CONFIG) / f"{index:02d}-{path.name}", reading, setting, link)
            finally:
                os.close(reading)

    def _local_ca(self, config: Any, listed: set[Path]) -> list[tuple[str, str | None, Path]]:
        """The local CA `mcp-gateway tls self-signed` writes beside the server certificate (ca-key.pem issues
        the next one), when there is one; the half of it that is missing is listed as absent."""
        from gateway.policy.tls_self_signed import CA_CERT, CA_KEY

        if config.tls.cert_file is None:
            return []
        folder = Path(config.tls.cert_file).absolute().parent
        found = [(name, folder / name) for name in (CA_CERT, CA_KEY) if (folder / name) not in listed]
        if not any(path.exists() for _, path in found):
            return []
        for _, path in found:
            if not path.exists():
                why = f"not found beside {CA_BESIDE} (without {CA_KEY} a renewal of the certificate makes a new CA)"
                self.absent("named", path, why)
        return [("named", f"{name} beside {CA_BESIDE}", path) for name, path in found if path.exists()]


def _write_manifest(dest: Path, manifest: Manifest) -> None:
    import orjson

    path = dest / MANIFEST
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(orjson.dumps(manifest.as_json(), option=orjson.OPT_INDENT_2) + b"\n")
        handle.flush()
        os.fsync(descriptor)
    for folder in (dest / DATABASES, dest / FIRMWARE, dest / CONFIG, dest):
        if folder.is_dir():
            sync_directory(folder)


def take_backup(args: argparse.Namespace, dest: Path, env: Mapping[str, str]) -> Manifest:
    """Write the backup into the prepared `dest`; BackupError (or OSError) when it cannot be made whole."""
    from gateway import __version__
    from gateway.cli.common import _config_flags
    from gateway.config import ENV_CONFIG_FILE, load_config
    from gateway.devices.registry import FILE_NAME, state_directory
    from gateway.flash.firmware import FOLDER
    from gateway.policy.audit.location import audit_path

    name = args.config or env.get(ENV_CONFIG_FILE) or None
    config = load_config(name, environ=env, flags=_config_flags(args))
    state = state_directory(env).absolute()
    created = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    config_file = Path(name).absolute() if name else None
    manifest = Manifest(__version__, created, str(state), None if config_file is None else str(config_file))
    writer = _Writer(dest, manifest)
    configured = audit_path(config.audit, env)
    audit = configured.absolute()
    writes = config.policy is not None and config.audit.enabled
    if writes and not configured.is_absolute() and not audit.exists() and not audit.is_symlink():
        # The gateway opens its trail at start: no file here means a working directory other than run's.
        from gateway.cli.audit import relative_trail_hint

        remedy = (
            "run the backup where the gateway runs (cron starts in $HOME: cd there first) or make [audit] path absolute"
        )
        raise _Refused(f"no audit trail at {configured} ({relative_trail_hint(configured, remedy)})")
    writer.database(
        "audit",
        audit,
        "audit.db",
        args.busy_timeout,
        "no file yet" if writes else "no audit trail configured (no [policy], or [audit] enabled = false) and no file",
    )
    writer.database("registry", state / FILE_NAME, FILE_NAME, args.busy_timeout, "no file yet (no board heard)")
    writer.firmware(state / FOLDER)  # the state directory's own, as restore puts it back (not flash's fallback)
    if config_file is None:
        writer.absent("config", None, "no configuration file (--config, $MCP_GATEWAY_CONFIG): built-in defaults")
    writer.configuration(config_file, config)
    _write_manifest(dest, manifest)
    return manifest


def cmd_backup(args: argparse.Namespace) -> int:
    import orjson

    from gateway.devices.registry import state_directory

    dest = Path(args.dest).expanduser().absolute()
    env = state_environment(args)
    try:
        claim = _prepare(dest, state_directory(env).absolute())
    except _Refused as exc:
        print(f"mcp-gateway backup: {exc}", file=sys.stderr)
        return 2
    done = False
    try:
        manifest = take_backup(args, dest, env)
        done = True
    except _Refused as exc:
        print(f"mcp-gateway backup: {exc}; no backup was left in {dest}", file=sys.stderr)
        return 2
    except BackupError as exc:
        print(f"mcp-gateway backup: {exc}; no backup was left in {dest}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = exc.filename or dest
        if exc.errno in FULL_ERRNOS:
            why = f"cannot write {where}: the file system of {dest} is full ({free_bytes(dest)} bytes free)"
        else:
            why = f"{where}: {exc.strerror or exc}"
        print(f"mcp-gateway backup: {why}; no backup was left in {dest}", file=sys.stderr)
        return 1
    finally:
        claim.release(keep=done)
    if args.json:
        sys.stdout.write(orjson.dumps(manifest.as_json()).decode() + "\n")
        return 0
    total = sum(entry.size for entry in manifest.files)
    count = len(manifest.files)
    files = "1 file" if count == 1 else f"{count} files"
    print(f"backed up {files}, {total} bytes, to {dest} (listed in {dest / MANIFEST})")
    for item in manifest.absent:
        print(f"  not in the backup: {item['kind']} {item['original'] or ''} ({item['why']})".replace("  (", " ("))
    return 0


def state_dir_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the gateway's state directory (default: $STATE_DIRECTORY, else $XDG_STATE_HOME/mcp-gateway, else "
        "~/.local/state/mcp-gateway; on the appliance /var/lib/mcp-gateway)",
    )


def add_backup(commands: Commands) -> None:
    backup = commands.add_parser(
        "backup",
        help="copy the gateway's databases, firmware and configuration into a new directory, while it runs",
        description="Write a consistent, complete backup into DEST (a new or empty directory, made 0700): the "
        "audit trail and the device registry (SQLite's online backup, checked with quick_check), the state "
        "directory's firmware/, the configuration file and the files it names, and manifest.json with each file's "
        "original path, size, sha256 and mode. The gateway may keep running.",
    )
    backup.add_argument("dest", metavar="DEST", type=directory_name, help="the backup's directory: new, or empty")
    with_config(backup)
    state_dir_option(backup)
    backup.add_argument(
        "--busy-timeout",
        type=decimal_number(0),
        default=DEFAULT_BUSY_S,
        metavar="SECONDS",
        help=f"how long a database copy waits for a lock the running gateway holds (default {DEFAULT_BUSY_S:g})",
    )
    backup.add_argument("--json", action="store_true", help="print the manifest (JSON) instead of the summary")
    backup.set_defaults(func=cmd_backup)
