"""How `restore` writes one file of a backup: the plan's step, the directory it writes into (under the state
directory reached without following a link), the copy made from one descriptor and checked as it is written
(a database also with quick_check before it is renamed into place), and the file in place kept aside."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.cli.backup_fds import NotDirectory, NotRegular, link_on_the_way, open_below, open_regular
from gateway.cli.backup_files import PRIVATE_DIRECTORY, PRIVATE_FILE, BackupError, Entry, quick_check, write_copy
from gateway.cli.restore_targets import entry_owner, give_owner, make_config_parents

DATABASE_NAMES = {"audit": "the audit trail", "registry": "the device registry"}
LOG_SUFFIXES = ("-wal", "-shm", "-journal")
"""SQLite's files beside a database (WAL, its index, the rollback journal of sqlite_journal.ROLLBACK): SQLite
would replay one left there into the restored file."""


class Refused(Exception):
    """The restore would overwrite something, a gateway uses the place, or a directory on the way under the
    state directory is a link: exit 2 (nothing written, unless the message says what was)."""


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


def no_link_on_the_way(state: Path, target: Path) -> None:
    """Refused when a directory between the state directory and `target` is a link or no directory."""
    found = link_on_the_way(state, target.parent.relative_to(state).parts)
    if found is not None:
        raise Refused(_through(found, "nothing was restored"))


def _through(found: NotDirectory, said: str) -> str:
    return (
        f"{found.path} is {found.what}: restore never writes through a link (or into what is no directory) under "
        "the state directory, which the gateway's user may write, also with --force; move it away (firmware/ and "
        f"its folders are directories), then restore again; {said}"
    )


def _make_parents(directory: Path) -> None:
    """Create `directory` (an audit file's outside the state directory) and its missing parents 0700."""
    missing = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=PRIVATE_DIRECTORY)


def _folder(
    step: Step,
    state: Path,
    state_owner: tuple[int, int] | None,
    folders: Mapping[Path, Mapping[str, object]],
    before: str,
) -> int:
    """A descriptor of the directory `step` writes into, made when missing: under the state directory each
    directory opened from the one above without following a link (made 0700, as root given the state
    directory's owner); the audit file's and a configuration file's (the target configuration's, root's) as
    named."""
    parent = step.target.parent
    if step.state_owned:

        def made(descriptor: int) -> None:
            if state_owner is not None and os.geteuid() == 0:
                os.fchown(descriptor, *state_owner)

        try:
            return open_below(state, parent.relative_to(state).parts, made, PRIVATE_DIRECTORY)
        except NotDirectory as exc:
            raise Refused(_through(exc, before)) from None
    if step.entry.kind in DATABASE_NAMES:
        _make_parents(parent)
    else:
        make_config_parents(parent, folders, entry_owner(step.entry))
    return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _chown(name: str, folder: int, step: Step, state_owner: tuple[int, int] | None) -> None:
    """As root: a state file goes to the state directory's owner, another file to its recorded owner."""
    if os.geteuid() != 0:
        return
    if step.state_owned and state_owner is not None:
        os.chown(name, *state_owner, dir_fd=folder, follow_symlinks=False)
        return
    give_owner(name, entry_owner(step.entry), step.target, folder)


def _there(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _aside(name: str, folder: int, stamp: str) -> str:
    """`<name>.replaced-<stamp>`, numbered when a restore in the same second kept one already."""
    aside = f"{name}.replaced-{stamp}"
    number = 1
    while any(_there(each, folder) for each in _with_logs(aside)):
        number += 1
        aside = f"{name}.replaced-{stamp}-{number}"
    return aside


def _with_logs(name: str) -> list[str]:
    return [name, *(name + suffix for suffix in LOG_SUFFIXES)]


def _copy_checked(source: Path, step: Step, temporary: str, folder: int, before: str) -> None:
    """Copy the backup's file into `temporary` in `folder` from one descriptor, hashing as it goes: the bytes
    written are the bytes checked. BackupError (the temporary file removed) when the file changed since the
    check, or is a link or no regular file now."""
    entry = step.entry
    inside = source / entry.path
    tail = (
        f"the backup was changed while restore ran; {step.target} was not written and {before}: check the backup "
        "and who may write it, then run restore again with --force"
    )
    try:
        reading = open_regular(inside)
    except NotRegular as exc:
        raise BackupError(
            f"{inside} (backup of {entry.original}) is {exc.what} now, after restore checked it: {tail}"
        ) from None
    except OSError as exc:
        raise BackupError(f"{inside} (backup of {entry.original}) cannot be read: {exc.strerror or exc}") from None
    try:
        size, digest = write_copy(reading, inside, step.target.with_name(temporary), step.mode, dir_fd=folder)
    except BackupError as exc:
        # A full disk, a file too large, an I/O error: the partial copy would only take more space.
        _remove(temporary, folder)
        raise BackupError(
            f"{exc}; {step.target} was not written and {before}: free space on that file system (or repair it), "
            "then run restore again with --force"
        ) from None
    except BaseException:
        _remove(temporary, folder)
        raise
    finally:
        os.close(reading)
    if (size, digest) != (entry.size, entry.sha256):
        os.unlink(temporary, dir_fd=folder)
        raise BackupError(
            f"{inside} (backup of {entry.original}) changed after restore checked it (size {size}, sha256 "
            f"{digest[:16]}…; the manifest says size {entry.size}, sha256 {entry.sha256[:16]}…): {tail}"
        )


def _database_checked(source: Path, step: Step, temporary: str, folder: int, before: str) -> None:
    """The copied database passes `PRAGMA quick_check` before it is renamed into place: one that fails is
    removed, so the target stays as it was (a damaged backup whose sums were made to match)."""
    problem = quick_check(step.target.with_name(temporary))
    if problem is None:
        return
    _remove(temporary, folder)
    raise BackupError(
        f"{source / step.entry.path} (backup of {step.entry.original}) fails SQLite's quick_check ({problem}): the "
        f"backup's database is damaged; {step.target} was not written and {before}: restore a backup whose "
        "databases pass the check"
    )


def _remove(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def put(
    source: Path,
    step: Step,
    stamp: str,
    state: Path,
    state_owner: tuple[int, int] | None,
    folders: Mapping[Path, Mapping[str, object]],
    restored: int = 0,
) -> str | None:
    """Write one file of the backup to its target (through a temporary file beside it, renamed in place);
    the name the replaced file was kept under, if any. `folders`: the recorded directories of config files;
    `restored`: how many files this restore wrote before this one (its errors say what stays)."""
    target = step.target
    name = target.name
    before = "the files said restored above stay in place" if restored else "no file was restored"
    folder = _folder(step, state, state_owner, folders, before)
    temporary = f".{name}.restoring"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        aside = _written(source, step, stamp, state_owner, temporary, folder, before)
    except BaseException:
        _remove(temporary, folder)  # a copy of a secret may not stay under a name nobody looks at
        raise
    finally:
        os.close(folder)
    return None if aside is None else str(target.with_name(aside))


def _written(
    source: Path,
    step: Step,
    stamp: str,
    state_owner: tuple[int, int] | None,
    temporary: str,
    folder: int,
    before: str,
) -> str | None:
    """put's copy, checks and renames in `folder`; the name the replaced file was kept under, if any."""
    name = step.target.name
    _copy_checked(source, step, temporary, folder, before)
    if step.entry.kind in DATABASE_NAMES:
        _database_checked(source, step, temporary, folder, before)
    _chown(temporary, folder, step, state_owner)
    aside: str | None = None
    if step.replaces:
        aside = _aside(name, folder, stamp)
        os.rename(name, aside, src_dir_fd=folder, dst_dir_fd=folder)
    if step.entry.kind in DATABASE_NAMES:
        for suffix in LOG_SUFFIXES:
            log = name + suffix
            if aside is not None and _there(log, folder):
                # the replaced database stays whole
                os.rename(log, aside + suffix, src_dir_fd=folder, dst_dir_fd=folder)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(log, dir_fd=folder)  # a stale log of no database: SQLite would replay it
    os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    os.fsync(folder)
    return aside
