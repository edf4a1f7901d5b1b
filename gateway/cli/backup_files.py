"""What `backup` and `restore` share: the manifest, the files a configuration names, copies that keep
their mode, SQLite's online copy and the checks of a copy (sha256, `PRAGMA quick_check`)."""

from __future__ import annotations

import contextlib
import errno
import grp
import hashlib
import os
import pwd
import resource
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gateway.cli.backup_fds import NotRegular, open_regular
from gateway.devices.sqlite_journal import connect_reader, shm_unsafe

MANIFEST = "manifest.json"
FORMAT = "mcp-gateway-backup/1"
"""The manifest's `format`: what `restore` reads. Another value is refused."""
DATABASES = "databases"
FIRMWARE = "firmware"
CONFIG = "config"
"""The backup's folders: the two databases, the state directory's firmware/ tree, the configuration files."""
PLACES = {"audit": DATABASES, "registry": DATABASES, "firmware": FIRMWARE, "config": CONFIG, "named": CONFIG}
"""The folder of the backup that holds each kind of file; a manifest that puts one elsewhere is refused."""
CHUNK_BYTES = 1 << 20
PRIVATE_FILE = 0o600
PRIVATE_DIRECTORY = 0o700
DEFAULT_BUSY_S = 10.0
"""How long a database copy waits for a lock the running gateway holds (--busy-timeout)."""
CA_BESIDE = "tls.cert_file"
"""The local CA of `mcp-gateway tls self-signed` (ca.pem, ca-key.pem) lies beside this setting's file; a backup
holds it under the setting `<name> beside tls.cert_file`."""
DESTINATION_ERRORS = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR_WRITE,
        sqlite3.SQLITE_IOERR_FSYNC,
        sqlite3.SQLITE_IOERR_DIR_FSYNC,
        sqlite3.SQLITE_IOERR_TRUNCATE,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
    }
)
"""SQLite's errors of a database copy that come from writing the copy (the source is opened read-only)."""
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
MAX_MANIFEST_BYTES = 4 << 20
"""The largest manifest.json restore reads: a backup's lists its files in a few hundred bytes each."""
MAX_ID = 2**32 - 2
"""The largest uid or gid a manifest may give (2**32 - 1 is chown's "keep")."""


class BackupError(Exception):
    """A backup or restore that cannot go on; the message names the file and what to do."""


@dataclass
class Entry:
    """One file of a backup: its `kind` (audit, registry, firmware, config, named), where it came from
    (`original`, absolute), its place in the backup (`path`, relative), size, sha256 and mode (octal text)."""

    kind: str
    original: str
    path: str
    size: int
    sha256: str
    mode: str
    owner: str | None = None
    group: str | None = None
    setting: str | None = None
    """For a file the configuration names: the setting that names it, e.g. auth.token_files[0]."""
    uid: int | None = None
    gid: int | None = None
    """The numeric owner and group (also of an owner or group without a name)."""
    link: str | None = None
    """The original was a symbolic link with this text: the backup holds the file it leads to."""
    directory: dict[str, Any] | None = None
    """For a configuration file: its directory's mode, owner, group, uid and gid, so that a restore that has to
    make the directory makes it as it was."""


@dataclass
class Manifest:
    gateway_version: str
    created: str
    state_directory: str
    config_file: str | None
    files: list[Entry] = field(default_factory=list)
    absent: list[dict[str, Any]] = field(default_factory=list)
    """What the backup does not hold, and why: {kind, original, why}."""
    format: str = FORMAT

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = [_given(entry) for entry in data["files"]]
        return {"format": data.pop("format"), **data}


def _given(item: dict[str, Any]) -> dict[str, Any]:
    """`item` without its None values, also in a nested object (a file's directory)."""
    return {
        key: _given(value) if isinstance(value, dict) else value for key, value in item.items() if value is not None
    }


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise BackupError(f"{where}: {name} is missing or not text")
    return value


def _optional(item: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise BackupError(f"{where}: {name} {value!r} is not {'a number' if kind is int else 'text'}")
    if name in ("uid", "gid") and isinstance(value, int) and value > MAX_ID:
        raise BackupError(f"{where}: {name} {value} is out of range (0 to {MAX_ID}): the manifest is damaged")
    return value


def _manifest_bytes(where: Path) -> bytes:
    """The manifest's bytes: a regular file, never read through a link, at most MAX_MANIFEST_BYTES."""
    try:
        descriptor = open_regular(where)
    except NotRegular as exc:
        raise BackupError(
            f"{where} is {exc.what}, not the regular file mcp-gateway backup writes: the backup is damaged or was "
            "changed; nothing was restored"
        ) from None
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BackupError(
            f"{where} is larger than {MAX_MANIFEST_BYTES} bytes, more than a backup's manifest: the backup is "
            "damaged or was changed; nothing was restored"
        )
    return data


def _absent(value: Any, where: str) -> list[dict[str, Any]]:
    """The manifest's `absent`: a list of objects whose values are text."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BackupError(f"{where}: absent {value!r:.40} is not a list: the manifest is damaged")
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not all(isinstance(text, str | None) for text in item.values()):
            raise BackupError(f"{where}: absent[{index}] is not an object of texts: the manifest is damaged")
    return value


def _directory(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    at = f"{where}, directory"
    if not isinstance(value, dict):
        raise BackupError(f"{at} is not an object")
    try:
        int(_text(value.get("mode"), "mode", at), 8)
    except ValueError:
        raise BackupError(f"{at}: mode {value.get('mode')!r} is not octal") from None
    for name, kind in (("owner", str), ("group", str), ("uid", int), ("gid", int)):
        _optional(value, name, kind, at)
    return value


def read_manifest(source: Path) -> Manifest:
    """The manifest of the backup at `source`; BackupError when it is missing, not JSON or not one."""
    import orjson

    where = source / MANIFEST
    try:
        data = orjson.loads(_manifest_bytes(where))
    except FileNotFoundError:
        raise BackupError(f"{where} not found: {source} is not a backup made by mcp-gateway backup") from None
    except OSError as exc:
        raise BackupError(f"{where} cannot be read: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise BackupError(f"{where} is not JSON ({exc}): the backup is damaged") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise BackupError(f"{where}: format {found!r} is not {FORMAT!r}, the one this gateway restores")
    files = data.get("files")
    if not isinstance(files, list):
        raise BackupError(f"{where}: files is missing or not a list")
    entries = []
    for index, item in enumerate(files):
        at = f"{where}, files[{index}]"
        if not isinstance(item, dict):
            raise BackupError(f"{at} is not an object")
        entry = Entry(
            kind=_text(item.get("kind"), "kind", at),
            original=_text(item.get("original"), "original", at),
            path=_text(item.get("path"), "path", at),
            size=size if isinstance(size := item.get("size"), int) and not isinstance(size, bool) else -1,
            sha256=_text(item.get("sha256"), "sha256", at),
            mode=_text(item.get("mode"), "mode", at),
            owner=_optional(item, "owner", str, at),
            group=_optional(item, "group", str, at),
            setting=_optional(item, "setting", str, at),
            uid=_optional(item, "uid", int, at),
            gid=_optional(item, "gid", int, at),
            link=_optional(item, "link", str, at),
            directory=_directory(item.get("directory"), at),
        )
        inside = Path(entry.path)
        if inside.is_absolute() or ".." in inside.parts or not Path(entry.original).is_absolute():
            raise BackupError(f"{at}: path {entry.path!r} or original {entry.original!r} is not a backup's")
        folder = PLACES.get(entry.kind)
        if folder is None:
            raise BackupError(
                f"{at}: kind {entry.kind!r} is none a backup holds: the manifest was changed; nothing was restored"
            )
        if len(inside.parts) < 2 or inside.parts[0] != folder:
            raise BackupError(
                f"{at}: a {entry.kind} file at {entry.path!r}, not in {folder}/ where a backup keeps it: the "
                "manifest was changed; nothing was restored"
            )
        try:
            int(entry.mode, 8)
        except ValueError:
            raise BackupError(f"{at}: mode {entry.mode!r} is not octal") from None
        entries.append(entry)
    return Manifest(
        gateway_version=str(data.get("gateway_version")),
        created=str(data.get("created")),
        state_directory=_text(data.get("state_directory"), "state_directory", str(where)),
        config_file=data.get("config_file") if isinstance(data.get("config_file"), str) else None,
        files=entries,
        absent=_absent(data.get("absent"), str(where)),
    )


def sha256_of(path: Path) -> tuple[int, str]:
    """The size and hex SHA-256 of the regular file at `path`, never read through a link (OSError ELOOP) nor
    from a FIFO or device (NotRegular)."""
    descriptor = open_regular(path)
    with os.fdopen(descriptor, "rb") as handle:
        return _hashed(handle)


def _hashed(handle: Any) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    while chunk := handle.read(CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def verify(source: Path, manifest: Manifest) -> None:
    """Every file the manifest lists is in the backup, whole (size and sha256); BackupError naming the first
    that is not."""
    for entry in manifest.files:
        inside = source / entry.path
        try:
            if inside.is_symlink() or not inside.is_file():
                raise BackupError(f"{inside} (backup of {entry.original}) is missing: the backup is incomplete")
            size, digest = sha256_of(inside)
        except NotRegular as exc:
            raise BackupError(f"{inside} (backup of {entry.original}) is {exc.what}: the backup was changed") from None
        except OSError as exc:
            raise BackupError(f"{inside} (backup of {entry.original}) cannot be read: {exc.strerror or exc}") from None
        if (size, digest) != (entry.size, entry.sha256):
            raise BackupError(
                f"{inside} (backup of {entry.original}) does not match the manifest (size {size}, sha256 "
                f"{digest[:16]}…; the manifest says size {entry.size}, sha256 {entry.sha256[:16]}…): the backup is "
                "damaged or was changed; nothing was restored"
            )


def ownership(info: os.stat_result) -> dict[str, Any]:
    """A file's owner and group: their names (left out for an id without a name) and numbers."""
    owner = group = None
    with contextlib.suppress(KeyError):
        owner = pwd.getpwuid(info.st_uid).pw_name
    with contextlib.suppress(KeyError):
        group = grp.getgrgid(info.st_gid).gr_name
    return {"owner": owner, "group": group, "uid": info.st_uid, "gid": info.st_gid}


def free_bytes(directory: Path) -> str:
    """The bytes an unprivileged writer may still write on `directory`'s file system ("?" if unknown)."""
    try:
        found = os.statvfs(directory)
    except OSError:
        return "?"
    return str(found.f_bavail * found.f_frsize)


def cannot_write(target: Path, dest: Path, why: str, full: bool, source: Path, size: int | None = None) -> BackupError:
    """The copy `target` (under `dest`) of `source` (`size` bytes; else a database, its size now with its
    write-ahead log) cannot be written: the destination's fault, not the source's."""
    said = "" if size is None else f"; {source} is {size} bytes"
    if size is None:
        with contextlib.suppress(OSError):
            size = source.stat().st_size
            said = f"; {source} is {size} bytes"
            # A database's copy holds the pages of its -wal too: the main file alone undersays what it needs.
            log = os.stat(f"{source}-wal").st_size
            if log:
                said += f", {log} more in its write-ahead log: the copy needs up to {size + log} bytes"
    free = free_bytes(target.parent)
    if full:
        return BackupError(f"cannot write {target}: the file system of {dest} is full ({free} bytes free{said})")
    # SQLite reports a write stopped by the process's file size limit as a disk I/O error: name the limit.
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        said += f"; this process may write files of at most {limit} bytes (ulimit -f)"
    return BackupError(f"cannot write {target}: {why} ({free} bytes free on the file system of {dest}{said})")


def write_copy(
    reading: int, source: Path, target: Path, mode: int, dest: Path | None = None, dir_fd: int | None = None
) -> tuple[int, str]:
    """Copy the open regular file `reading` (of `source`, named in errors) to the new file `target` (its name
    relative to `dir_fd` when given; never through a link; made `mode`), synced; its size and sha256.
    BackupError naming `target` and `dest` (default: its directory) when the copy cannot be written."""
    digest = hashlib.sha256()
    size = 0
    name = target.name if dir_fd is not None else target
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(name, flags, PRIVATE_FILE, dir_fd=dir_fd)
    try:
        with os.fdopen(descriptor, "wb") as writing:
            while chunk := os.read(reading, CHUNK_BYTES):
                writing.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            writing.flush()
            os.fchmod(descriptor, mode)
            os.fsync(descriptor)
    except OSError as exc:
        if exc.errno not in (*FULL_ERRNOS, errno.EFBIG, errno.EIO, errno.EROFS):
            raise
        why = exc.strerror or str(exc)
        full = exc.errno in FULL_ERRNOS
        raise cannot_write(target, dest or target.parent, why, full, source, os.fstat(reading).st_size) from None
    return size, digest.hexdigest()


def sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def quick_check(path: Path, busy_s: float = DEFAULT_BUSY_S) -> str | None:
    """None when the database at `path`, opened read-only, passes `PRAGMA quick_check`; else what is wrong."""
    try:
        db = connect_reader(path, busy_s)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.Error as exc:
        return str(exc)
    finally:
        db.close()
    found = [str(row[0]) for row in rows]
    if found == ["ok"]:
        return None
    # SQLite's report runs to many lines (a header, then one per problem): a message keeps one line.
    lines = [line for text in found for line in text.splitlines() if line.strip() and not line.startswith("***")]
    if not lines:
        return "; ".join(found)
    more = len(lines) - 1
    return lines[0] + (f" (and {more} more {'problem' if more == 1 else 'problems'})" if more else "")


def copy_database(source: Path, target: Path, busy_s: float, dest: Path) -> None:
    """One consistent state of the SQLite database `source` (a running gateway may be writing it) into the
    new file `target`, with SQLite's online backup; the copy is mode 0600, in rollback-journal mode (one file)
    and passes quick_check. BackupError naming `source` when it cannot be read or the copy is not whole, and
    naming `target` and `dest` (the backup) when the copy cannot be written (a full file system)."""
    fail = f"{source} cannot be backed up"
    staged = target.with_name(f".{target.name}.source")
    try:
        reading = _open_source(source, busy_s, staged, dest)
    except sqlite3.Error as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise BackupError(f"{fail}: {exc}") from None
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    except BaseException:
        reading.close()
        shutil.rmtree(staged, ignore_errors=True)
        raise
    made = os.fstat(descriptor)
    os.close(descriptor)
    try:
        writing = sqlite3.connect(target, timeout=busy_s)
        try:
            # The copy is this connection's alone: a WAL source's header makes it WAL until the switch
            # below, and in exclusive mode SQLite keeps its WAL index in the heap, never a -shm beside it.
            writing.execute("PRAGMA locking_mode = EXCLUSIVE")
            # All pages in one step: one read transaction, so one state of the file, while the writer goes on.
            reading.backup(writing)
            writing.execute("PRAGMA journal_mode = DELETE")
        finally:
            writing.close()
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code in DESTINATION_ERRORS:
            raise cannot_write(target, dest, str(exc), code == sqlite3.SQLITE_FULL, source) from None
        copy_fault = _copy_fault(source, target, made, busy_s)
        if copy_fault is not None:
            raise cannot_write(target, dest, f"{exc}; {copy_fault}", False, source) from None
        raise BackupError(f"{fail}: {exc} (is it a SQLite database, and whole?)") from None
    finally:
        reading.close()
        shutil.rmtree(staged, ignore_errors=True)
    problem = quick_check(target, busy_s)
    if problem is not None:
        copy_fault = _copy_fault(source, target, made, busy_s)
        if copy_fault is not None:
            raise cannot_write(
                target, dest, f"the copy fails SQLite's quick_check ({problem}); {copy_fault}", False, source
            )
        raise BackupError(f"{fail}: its copy fails SQLite's quick_check ({problem}): the database is damaged")
    os.chmod(target, PRIVATE_FILE)


def read_only_place(path: Path) -> bool:
    """Whether the file system holding `path` is mounted read-only."""
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _open_source(source: Path, busy_s: float, staged: Path, dest: Path) -> sqlite3.Connection:
    """A connection that reads `source`; one opened read-only is checked by a first read (sqlite3.Error: the
    source's fault, never the destination's).

    Read-write, never create, where the file may be written: a read-only connection that is the last to close
    cannot remove the -wal and -shm it made beside a database the gateway holds only while it uses it (the
    registry); SQLite folds the log on that last close as the gateway's own would. A file that may not be
    written is opened read-only; on a read-only file system (a card mounted ro) SQLite can make no WAL index,
    so a file with no log is read as immutable, and one with a log is copied with it into `staged` (beside
    the copy, under `dest`) and read there, its log folded into that copy."""
    uri = source.resolve().as_uri()
    read_only = read_only_place(source)
    if not read_only and os.access(source, os.W_OK):
        reading = sqlite3.connect(f"{uri}?mode=rw", uri=True, timeout=busy_s)
        if shm_unsafe(source):
            # A file left in WAL mode where its -shm may have holes (SIGBUS on a full disk): the WAL index
            # in the heap instead; the running gateway waits for the copy (or the copy for it).
            reading.execute("PRAGMA locking_mode = EXCLUSIVE")
        return reading  # read in the copy, which waits for a gateway's lock up to busy_s
    if not read_only:
        reading = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=busy_s)
    elif _log_size(source) == 0:
        reading = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=busy_s)
    else:
        staged.mkdir(mode=PRIVATE_DIRECTORY)
        for suffix in ("", "-wal"):
            try:
                with open(f"{source}{suffix}", "rb") as original, open(staged / f"db{suffix}", "xb") as copy:
                    shutil.copyfileobj(original, copy, CHUNK_BYTES)
            except OSError as exc:
                if exc.errno not in FULL_ERRNOS:
                    raise sqlite3.OperationalError(f"{source}{suffix} cannot be read: {exc.strerror}") from None
                raise cannot_write(staged, dest, exc.strerror or str(exc), True, source) from None
        reading = sqlite3.connect(f"{(staged / 'db').as_uri()}?mode=rw", uri=True, timeout=busy_s)
    try:
        reading.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        reading.close()
        raise
    return reading


def _log_size(source: Path) -> int:
    try:
        return os.stat(f"{source}-wal").st_size
    except OSError:
        return 0


def _copy_fault(source: Path, target: Path, made: os.stat_result, busy_s: float) -> str | None:
    """Why a failed database copy is the copy's own fault, not the source's (None when it may be the source's):
    the copy is gone or is another file than the one made (another process writes the backup's directory),
    or the source passes quick_check on its own."""
    try:
        now = os.stat(target, follow_symlinks=False)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
        return "the copy was removed or replaced while it was written: another process writes this directory"
    if quick_check(source, busy_s) is None:
        return f"{source} itself passes quick_check"
    return None


def settings_in(data: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every file a configuration file's own TOML data names, as `named_files` names the setting
    (`providers.auth.shared_secret.file`, `auth.token_files[0]`) and the path as written."""
    if isinstance(data, dict):
        for key, item in data.items():
            here = f"{where}.{key}" if where else str(key)
            if isinstance(item, str) and (key == "file" or key.endswith("_file")):
                yield here, item
            elif isinstance(item, list) and key.endswith("_files"):
                yield from ((f"{here}[{index}]", text) for index, text in enumerate(item) if isinstance(text, str))
            else:
                yield from settings_in(item, here)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from settings_in(item, f"{where}[{index}]")


def named_files(config: BaseModel) -> list[tuple[str, Path]]:
    """Every file the configuration names (settings called `file`, `*_file`, `*_files`: the policy file, token
    files, secret files, TLS certificates, keys and CA files, headers files), as the setting and the absolute
    path (a relative one is read from the working directory, as the gateway reads it); each path once."""
    found: dict[Path, str] = {}
    for setting, text in settings_in(config.model_dump(mode="json")):
        found.setdefault(Path(text).absolute(), setting)
    return [(setting, path) for path, setting in found.items()]


def mode_text(mode: int) -> str:
    return f"{stat.S_IMODE(mode):04o}"
