"""The device registry: the boards this gateway issued an identity to, and every board it has heard.

One SQLite file in the gateway's state directory (`devices.db` beside the audit trail's default
place: $STATE_DIRECTORY, else $XDG_STATE_HOME/mcp-gateway, else ~/.local/state/mcp-gateway). One row
per board, keyed by its device id (the `device_id` of its hello: the MAC on an ESP32):

- adoption (`mcp-gateway device install`): the SHA-256 digest of the board's own provider secret and
  the one slot it may publish (an MQTT board: no digest, its credential is its broker password); a
  slot has at most one adopted board (`adopt` refuses a second unless told to replace the first);
  revocation (`mcp-gateway devices revoke`) keeps the row and stamps it.
- sightings (the gateway, at each hello): how often, when last, firmware, schema hash, transport, slot.
  At most limits.max_devices rows: a new board past it takes the row of the board heard longest ago
  (never one an operator adopted or revoked, nor one with a session now), else it is not recorded; a
  registry over the bound (an older version kept more, or the bound was lowered) loses one row more
  per new board until it is within it, never many at once (MAX_FORGOTTEN_PER_HELLO).

The secret itself is never stored: only its digest, as `[[providers.auth.identities]] sha256` would be.
The state directory is one gateway's: `run` locks it (gateway/cli/state_lock.py), so no second gateway
takes these boards for its own; the CLI's commands read and write the file beside the gateway.
WAL mode: the gateway's readers never wait for a writer (the CLI, the sightings thread).

Lookups and listings only read: queries only (query_only), no schema statement, no journal change, nothing
made (no file: no boards), so a full disk leaves them working. There, a WAL file's `-shm` that cannot grow
(SQLITE_IOERR_SHMSIZE, SHMMAP) is done without: the file is read with its WAL index in the heap (exclusive
locking, held for the one read). Writes open it as ever, schema and journal set (on a full disk with the
WAL index in the heap too, so a command that reads through its connection still reads); one refused for
want of room (SQLITE_FULL, ENOSPC, an I/O error with no block free) says the file system is full and what
is free.

A command run as root (`sudo mcp-gateway flash … --registry`) reaches a file in a directory the gateway's
user may write: the file is made with O_EXCL and O_NOFOLLOW, its mode set through its descriptor, and a
registry that is a symbolic link in a directory another user may write is refused, never followed (a link
in a directory only this user or root may write is followed). SQLite opens the file by name: the check
runs right before the open, and a narrow race between the two remains.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, NotRequired, ParamSpec, TypedDict, TypeVar, Unpack

from gateway.devices.sqlite_journal import (
    connect_reader,
    exclusive_first,
    full_disk_note,
    heap_index_reader,
    journal_for,
    set_journal,
    shm_unsafe,
)

FILE_NAME = "devices.db"
APP_DIR = "mcp-gateway"
IDENTITY_PREFIX = "device:"
"""Adopted identities are named `device:<device id>`; configured names cannot hold a colon."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id TEXT PRIMARY KEY,
    slot TEXT,
    transport TEXT,
    port TEXT,
    digest TEXT UNIQUE,
    adopted_at REAL,
    revoked_at REAL,
    seen INTEGER NOT NULL DEFAULT 0,
    first_seen REAL,
    last_seen REAL,
    firmware TEXT,
    version TEXT,
    schema TEXT,
    seen_slot TEXT,
    seen_transport TEXT
)
"""

_COLUMNS = (
    "device_id, slot, transport, port, digest, adopted_at, revoked_at, seen, first_seen, last_seen, firmware,"
    " version, schema, seen_slot, seen_transport"
)
"""Every column the registry reads: a file whose devices table lacks one cannot be used."""
READ_TIMEOUT_S = 5.0
"""How long a read waits for a lock (a rollback journal's writer, or a reader holding the WAL index in its heap)."""
SHM_CANNOT_GROW = frozenset({sqlite3.SQLITE_IOERR_SHMSIZE, sqlite3.SQLITE_IOERR_SHMMAP})
"""SQLite's I/O errors of a `-shm` it cannot extend or map: a full file system under a WAL file."""
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_P = ParamSpec("_P")
_R = TypeVar("_R")
KEPT_BY_OPERATOR = "adopted_at IS NOT NULL OR revoked_at IS NOT NULL OR digest IS NOT NULL OR slot IS NOT NULL"
"""Rows an operator's command wrote (`mcp-gateway device install` adopts, `devices revoke` stamps): never
forgotten to make room for a board heard, since a revocation forgotten would admit the board again."""
MAX_FORGOTTEN_PER_HELLO = 2
"""Rows one new board's hello may forget: one to make its room, one to bring a registry over the bound
down by one. Bounded work per hello, and a registry over the bound shrinks as new boards come instead
of losing at once every row past it (an upgrade from a version without the bound, a lowered bound)."""


def state_directory(environ: Mapping[str, str] | None = None) -> Path:
    """The gateway's state directory, by the rules of its audit trail's default place
    (gateway/policy/audit/location.py): $STATE_DIRECTORY (systemd's StateDirectory=; the first of
    several), else $XDG_STATE_HOME/mcp-gateway (an absolute one), else ~/.local/state/mcp-gateway."""
    env = os.environ if environ is None else environ
    state = env.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        return Path(state)
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / APP_DIR
    return Path(env.get("HOME") or str(Path.home())) / ".local" / "state" / APP_DIR


def default_registry_path(environ: Mapping[str, str] | None = None) -> Path:
    """devices.db in the gateway's state directory."""
    return state_directory(environ) / FILE_NAME


def _private_directory(directory: Path) -> None:
    """Create `directory` and its missing parents with mode 0700 (the registry holds identities)."""
    missing = [candidate for candidate in (directory, *directory.parents) if not candidate.exists()]
    for candidate in reversed(missing):
        candidate.mkdir(mode=0o700, exist_ok=True)


def others_may_write(folder: Path) -> bool:
    """Whether a user other than root and this one owns `folder`, or group or others may write it: a link
    there (or a file it leads to there) may be pointed at any file meanwhile, so it is not followed."""
    info = folder.stat()
    return info.st_uid not in (0, os.geteuid()) or bool(info.st_mode & 0o022)


def _private_file(path: Path) -> None:
    """Make `path` (mode 0600, O_EXCL: never through a link) or find it a regular file, and give it mode
    0600 through its descriptor. A link here is one _refuse_planted_link let through: it is followed."""
    follow = path.is_symlink()
    no_follow = 0 if follow else os.O_NOFOLLOW
    try:
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | no_follow)
        except FileNotFoundError:  # missing (or a link to a missing file, followed as before)
            exclusive = 0 if follow else os.O_EXCL
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC | exclusive | no_follow, 0o600)
            except FileExistsError:  # another process (the gateway's sightings, a command) made it meanwhile
                descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | no_follow)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link made since the check: never followed
            raise RegistryUnusable(f"{path} is a symbolic link made meanwhile: not followed") from None
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise RegistryUnusable(f"{path} is {what}, not a database file")
        with contextlib.suppress(OSError):  # another user's file (the gateway's, read by root): keep its mode
            os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _os_reason(path: Path, exc: OSError) -> str:
    """`exc` as a sentence naming the part of `path` at fault."""
    if exc.errno == errno.ENOTDIR:
        for folder in reversed(path.parents):
            if folder.exists() and not folder.is_dir():
                return f"{folder} is {_kind(folder)}, not a directory"
    said = f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
    return said + (_room(path) if exc.errno == errno.ENOSPC else "")


def _room(path: Path) -> str:
    """What is free on the file system holding `path`: " (the file system is full: N bytes free of M in FOLDER)"."""
    folder = next((folder for folder in Path(os.path.abspath(path)).parents if folder.exists()), Path("/"))
    try:
        found = os.statvfs(folder)
    except OSError:
        return " (the file system is full)"
    unit = found.f_frsize or found.f_bsize
    return f" (the file system is full: {found.f_bavail * unit} bytes free of {found.f_blocks * unit} in {folder})"


def full_disk_text(exc: BaseException, path: Path) -> str:
    """_room's words when `exc` is a write refused for want of room: SQLITE_FULL, ENOSPC, or SQLite's I/O
    error while the file system has no block free for this user (full_disk_note's rule); else ""."""
    if isinstance(exc, OSError):
        return _room(path) if exc.errno == errno.ENOSPC else ""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL:
        return _room(path)
    return _room(path) if full_disk_note(exc, path) else ""


def _shm_cannot_grow(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in SHM_CANNOT_GROW


def _connect_reader(path: Path) -> sqlite3.Connection:
    """A connection whose statements only read (query_only), to a file that must exist: never made, no schema
    statement, no journal change. Opened read-write where SQLite may (else read-only, as mode=rw does), so
    the last connection to close still folds the write-ahead log into the file and leaves no `-wal`
    (a copy of devices.db alone stays whole); mode=ro could not. A WAL file whose `-shm` may have holes:
    connect_reader's heap index."""
    if shm_unsafe(path):
        return connect_reader(path, READ_TIMEOUT_S)
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=READ_TIMEOUT_S)
    try:
        db.execute("PRAGMA query_only = 1")
    except BaseException:
        db.close()
        raise
    return db


def _open_reader(path: Path) -> tuple[sqlite3.Connection, bool]:
    """`path` opened to read (_connect_reader), and whether it holds the devices table. A `-shm` that cannot
    grow (a full disk) is done without, where this user may write the file (heap_index_reader)."""
    db = _connect_reader(path)
    try:
        tables = db.execute(_TABLES).fetchall()
    except sqlite3.Error as exc:
        db.close()
        if not _shm_cannot_grow(exc) or not os.access(path, os.W_OK):
            raise
        db = heap_index_reader(path, READ_TIMEOUT_S)
        try:
            tables = db.execute(_TABLES).fetchall()
        except BaseException:
            db.close()
            raise
    return db, ("devices",) in tables


def roll_back(db: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled the transaction back itself
        db.execute("ROLLBACK")


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def issue_secret() -> str:
    """A board's own provider secret: 256 random bits, URL-safe (it goes in an HTTP header)."""
    return secrets.token_urlsafe(32)


def identity_name(device_id: str) -> str:
    return IDENTITY_PREFIX + device_id


class RegistryUnusable(sqlite3.DatabaseError):
    """The registry file cannot be opened, read or written; the message says why (a sqlite3 error, so
    every reader that copes with a damaged registry copes with this too)."""


class SlotTaken(Exception):
    """The slot already has an adopted board, another than the one being adopted."""

    def __init__(self, slot: str, device_id: str, adopted_at: float) -> None:
        self.slot = slot
        self.device_id = device_id
        self.adopted_at = adopted_at
        super().__init__(f"slot {slot} is adopted by {device_id} (since {local_time(adopted_at)})")


def local_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


@dataclass(frozen=True)
class Adopted:
    """An issued identity: the board, the one slot it may publish, and whether it was revoked;
    `replaced`: the boards whose adoption for that slot this one revoked (adopt with replace)."""

    device_id: str
    slot: str
    revoked: bool
    replaced: tuple[str, ...] = ()

    @property
    def identity(self) -> str:
        return identity_name(self.device_id)


class Hello(TypedDict):
    """What one hello said, as `record` and `record_within` take it (keyword arguments), and when it was
    heard (`when`, seconds since the epoch; absent or None: now)."""

    slot: str | None
    transport: str | None
    firmware: str | None
    version: str | None
    schema: str | None
    when: NotRequired[float | None]


def _heard_at(hello: Hello) -> float:
    when = hello.get("when")
    return time.time() if when is None else when


def _columns(hello: Hello) -> tuple[str | None, ...]:
    """What `hello` said, in the order of the columns firmware, version, schema, seen_slot, seen_transport."""
    return hello["firmware"], hello["version"], hello["schema"], hello["slot"], hello["transport"]


@dataclass(frozen=True)
class Bounded:
    """What record_within did: the registry's rows after it (None: not counted), whether the hello was
    recorded, how many rows of boards heard longest ago it deleted to make room, and when the last of
    those was last heard (seconds since the epoch; None when none went or it was never heard)."""

    rows: int | None
    recorded: bool
    forgotten: int = 0
    forgotten_heard: float | None = None


@dataclass(frozen=True)
class Census:
    """The registry's rows, and how many of them an operator wrote (KEPT_BY_OPERATOR: never forgotten)."""

    rows: int
    kept: int


@dataclass(frozen=True)
class DeviceRow:
    device_id: str
    slot: str | None
    transport: str | None
    port: str | None
    adopted: bool
    revoked: bool
    seen: int
    first_seen: float | None
    last_seen: float | None
    firmware: str | None
    version: str | None
    schema: str | None
    seen_slot: str | None
    seen_transport: str | None


def _writes(method: Callable[Concatenate[DeviceRegistry, _P], _R]) -> Callable[Concatenate[DeviceRegistry, _P], _R]:
    """`method`, with a write refused for want of room raised as RegistryUnusable saying so (full_disk_text)."""

    @functools.wraps(method)
    def write(registry: DeviceRegistry, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(registry, *args, **kwargs)
        except RegistryUnusable:
            raise
        except sqlite3.Error as exc:
            note = full_disk_text(exc, registry.path)
            if not note:
                raise
            raise RegistryUnusable(f"{exc}{note}") from exc

    return write


class DeviceRegistry:
    """The registry file, opened (and created, mode 0700 directory) on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._full_disk: str | None = None
        """Why the connection keeps its WAL index in the heap (a full disk), for check_writable to say."""

    def connection(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                _private_directory(self.path.parent)
                self._refuse_planted_link()
                _private_file(self.path)
            except OSError as exc:  # a part of the path is a file, no permission, a read-only file system, full
                raise RegistryUnusable(_os_reason(self.path, exc)) from None
            # WAL, or a rollback journal where WAL's memory-mapped index could die of SIGBUS on a full disk.
            journal = journal_for(self.path.absolute().parent)
            try:
                try:
                    self._db = self._set_up(journal, heap_index=False)
                except sqlite3.Error as exc:
                    # A full disk under a WAL file: its -shm cannot grow, so the WAL index goes in the heap
                    # (exclusive locking, released at close); reads work, and each write fails with SQLITE_FULL.
                    if not _shm_cannot_grow(exc) or not full_disk_note(exc, self.path):
                        raise
                    self._db = self._set_up(journal, heap_index=True)
                    self._full_disk = f"{exc}{full_disk_text(exc, self.path)}"
            except sqlite3.Error as exc:
                note = full_disk_text(exc, self.path)
                if note:
                    raise RegistryUnusable(f"{exc}{note}") from exc
                raise
        return self._db

    def _set_up(self, journal: str, *, heap_index: bool) -> sqlite3.Connection:
        """The file opened read-write, its journal, synchronous mode and schema set; `heap_index`: in
        exclusive locking mode from the first access, so a WAL file's index is kept in the heap, no -shm."""
        # After the mode: SQLite gives the -wal and -shm files the database file's mode.
        db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
        try:
            if heap_index:
                db.execute("PRAGMA locking_mode = EXCLUSIVE")
            else:
                exclusive_first(db, journal)
            set_journal(db, journal)
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def _refuse_planted_link(self) -> None:
        """RegistryUnusable when the registry is a symbolic link in a directory another user may write:
        that user may point it at any file, which this user (root, say) would make, chmod or write."""
        try:
            if not self.path.is_symlink() or not others_may_write(self.path.parent):
                return
            holder = self.path.parent.stat()
        except OSError:  # the directory is not there or not readable: the open that follows names it
            return
        raise RegistryUnusable(
            f"{self.path} is a symbolic link in {self.path.parent}, a directory another user may write (owner uid "
            f"{holder.st_uid}, mode {holder.st_mode & 0o7777:04o}): not followed; the registry is a file, not a "
            "link: remove the link (check where it leads), or name the file itself with --registry"
        )

    @_writes
    def check_writable(self) -> None:
        """Open the registry (made if missing), read its table and write to it in a transaction that
        is rolled back: RegistryUnusable (or another sqlite3 error) when any of it fails."""
        db = self.connection()
        db.execute(f"SELECT {_COLUMNS} FROM devices LIMIT 1").fetchall()
        if self._full_disk is not None:  # a rolled-back write in the heap's WAL index never reaches the disk
            raise RegistryUnusable(self._full_disk)
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT INTO devices (device_id) VALUES (?)", ("(a write check, rolled back)",))
        finally:
            roll_back(db)

    def check_readable(self) -> None:
        """What check_writable finds out, without making or changing anything (a dry run): the file
        read-only, or where it would be made; RegistryUnusable when it would not do."""
        self._refuse_planted_link()
        if not self.path.exists():
            existing = next(folder for folder in self.path.parents if folder.exists())
            if not existing.is_dir():
                raise RegistryUnusable(f"{existing} is {_kind(existing)}, not a directory: {self.path} cannot be made")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise RegistryUnusable(f"{self.path} cannot be made: {existing} is not writable by this user")
            return
        with self.read_only() as db:
            if db is not None:
                db.execute(f"SELECT {_COLUMNS} FROM devices LIMIT 1").fetchall()
        if not os.access(self.path, os.W_OK) or not os.access(self.path.parent, os.W_OK | os.X_OK):
            raise RegistryUnusable(f"{self.path} (or its directory) is not writable by this user")

    @contextlib.contextmanager
    def read_only(self) -> Iterator[sqlite3.Connection | None]:
        """The file opened read-only, nothing made or changed; None when it has no devices table yet
        (or no file). RegistryUnusable when it cannot be read."""
        try:
            with self._reading() as db:
                yield db
        except RegistryUnusable:
            raise
        except sqlite3.Error as exc:
            raise RegistryUnusable(str(exc)) from None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        """read_only's connection (_open_reader), closed at the end. An error is SQLite's own, or
        RegistryUnusable when the file is not one (a link, a directory) or the file system is full."""
        self._refuse_planted_link()
        if not self.path.exists():
            yield None
            return
        if not self.path.is_file():
            raise RegistryUnusable(f"{self.path} is {_kind(self.path)}, not a database file")
        try:
            db, tabled = _open_reader(self.path)
        except sqlite3.Error as exc:
            note = full_disk_note(exc, self.path)
            if note:
                raise RegistryUnusable(f"{exc}{note}") from None
            raise
        try:
            yield db if tabled else None
        except sqlite3.Error as exc:
            note = full_disk_note(exc, self.path)
            if note:
                raise RegistryUnusable(f"{exc}{note}") from None
            raise
        finally:
            db.close()

    def _row(self, query: str, parameters: tuple[str, ...]) -> tuple[object, ...] | None:
        """The first row `query` finds, read-only (_reading); None when there is no registry yet."""
        with self._reading() as db:
            return db.execute(query, parameters).fetchone() if db is not None else None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            self._full_disk = None

    # -- adoption -------------------------------------------------------------------------------

    def slot_holder(self, slot: str, device_id: str = "", *, read_only: bool = False) -> SlotTaken | None:
        """The other board adopted (not revoked) for `slot` as a SlotTaken, the latest; None when
        there is none or it is `device_id` itself. `read_only`: nothing made or changed (a dry run)."""
        query = (
            "SELECT device_id, adopted_at FROM devices WHERE slot = ? AND device_id != ?"
            " AND adopted_at IS NOT NULL AND revoked_at IS NULL ORDER BY adopted_at DESC LIMIT 1"
        )
        if read_only:
            with self.read_only() as db:
                row = db.execute(query, (slot, device_id)).fetchone() if db is not None else None
        else:
            row = self.connection().execute(query, (slot, device_id)).fetchone()
        return SlotTaken(slot, row[0], row[1]) if row else None

    @_writes
    def adopt(
        self,
        device_id: str,
        slot: str,
        transport: str,
        port: str | None,
        digest: str | None,
        *,
        replace: bool = False,
    ) -> Adopted:
        """Bind `device_id` to the secret whose hex SHA-256 is `digest`, for `slot` alone; an earlier
        identity of the board (revoked or not) is replaced. `digest` None: a board that holds no
        gateway secret (an MQTT board, whose credential is its broker password): adopted for `slot`,
        listed and revocable, but no provider token admits it.

        A slot has one adopted board: SlotTaken when another holds it, unless `replace`, which revokes
        the other's adoption in the same transaction (Adopted.replaced names them)."""
        db = self.connection()
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            others = db.execute(
                "SELECT device_id, adopted_at FROM devices WHERE slot = ? AND device_id != ?"
                " AND adopted_at IS NOT NULL AND revoked_at IS NULL ORDER BY adopted_at DESC",
                (slot, device_id),
            ).fetchall()
            if others and not replace:
                raise SlotTaken(slot, others[0][0], others[0][1])
            db.executemany(
                "UPDATE devices SET revoked_at = ? WHERE device_id = ?", [(now, other) for other, _ in others]
            )
            db.execute(
                "INSERT INTO devices (device_id, slot, transport, port, digest, adopted_at, revoked_at)"
                " VALUES (?, ?, ?, ?, ?, ?, NULL)"
                " ON CONFLICT(device_id) DO UPDATE SET slot = excluded.slot, transport = excluded.transport,"
                " port = excluded.port, digest = excluded.digest, adopted_at = excluded.adopted_at, revoked_at = NULL",
                (device_id, slot, transport, port, digest, now),
            )
        except BaseException:
            roll_back(db)
            raise
        db.execute("COMMIT")
        return Adopted(device_id, slot, False, tuple(other for other, _ in others))

    @_writes
    def revoke(self, device_id: str) -> Adopted | None:
        """Stamp the board's adoption revoked; None when it has none (never adopted)."""
        row = (
            self.connection()
            .execute("SELECT slot FROM devices WHERE device_id = ? AND adopted_at IS NOT NULL", (device_id,))
            .fetchone()
        )
        if row is None:
            return None
        self.connection().execute(
            "UPDATE devices SET revoked_at = COALESCE(revoked_at, ?) WHERE device_id = ?", (time.time(), device_id)
        )
        return Adopted(device_id, row[0], True)

    def standing_adoption(self, device_id: str) -> tuple[str, str] | None:
        """The slot and transport of the board's standing adoption (adopted, not revoked), else None; read-only."""
        row = self._row(
            "SELECT slot, transport FROM devices WHERE device_id = ? AND adopted_at IS NOT NULL AND revoked_at IS NULL",
            (device_id,),
        )
        return (str(row[0] or ""), str(row[1] or "")) if row else None

    def adopted(self, device_id: str) -> Adopted | None:
        """The board's adoption with a secret (revoked or not), read-only; None when it has none."""
        row = self._row(
            "SELECT device_id, slot, revoked_at FROM devices WHERE device_id = ? AND digest IS NOT NULL", (device_id,)
        )
        return Adopted(str(row[0]), str(row[1]), row[2] is not None) if row else None

    def revocation(self, device_id: str) -> Adopted | None:
        """The board's revoked adoption, whatever its transport (an MQTT board has no digest), else None."""
        row = self._row(
            "SELECT device_id, slot FROM devices WHERE device_id = ? AND revoked_at IS NOT NULL", (device_id,)
        )
        return Adopted(str(row[0]), str(row[1] or ""), True) if row else None

    def by_digest(self, digest: str) -> Adopted | None:
        """The adopted board whose secret has this hex SHA-256 digest (the index finds it; only the digest,
        never the secret, decides the lookup's time), read-only."""
        row = self._row("SELECT device_id, slot, revoked_at FROM devices WHERE digest = ?", (digest,))
        return Adopted(str(row[0]), str(row[1]), row[2] is not None) if row else None

    def for_slot(self, slot: str) -> DeviceRow | None:
        """The board adopted for `slot` (the latest adoption), else the one last seen serving it."""
        rows = [row for row in self.devices() if slot in (row.slot, row.seen_slot)]
        rows.sort(key=lambda row: (row.slot == slot and row.adopted, row.last_seen or 0.0), reverse=True)
        return rows[0] if rows else None

    # -- sightings ------------------------------------------------------------------------------

    @_writes
    def record(self, device_id: str, **hello: Unpack[Hello]) -> None:
        """One hello heard: count it and keep what it said."""
        now = _heard_at(hello)
        self.connection().execute(
            "INSERT INTO devices (device_id, seen, first_seen, last_seen, firmware, version, schema, seen_slot,"
            " seen_transport) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(device_id) DO UPDATE SET seen = seen + 1,"
            " first_seen = COALESCE(first_seen, excluded.first_seen),"
            " last_seen = excluded.last_seen, firmware = excluded.firmware, version = excluded.version,"
            " schema = excluded.schema, seen_slot = excluded.seen_slot, seen_transport = excluded.seen_transport",
            (device_id, now, now, *_columns(hello)),
        )

    @_writes
    def record_within(
        self,
        device_id: str,
        max_devices: int,
        rows: int | None,
        live: frozenset[str],
        **hello: Unpack[Hello],
    ) -> Bounded:
        """`record`, with the registry held to `max_devices` rows: a board already in it is counted as
        always (one indexed UPDATE); a new one is added while there is room, else rows of boards not heard
        for the longest time go first, except those an operator wrote (KEPT_BY_OPERATOR) and those of
        `live` (device ids with a session now): one to make room, and one more while the registry is over
        the bound (at most MAX_FORGOTTEN_PER_HELLO), so it never grows past the larger of its rows and the
        bound; when none may go, the new board is not recorded.
        `rows`: the caller's count of rows from the last call, None when unknown: counted (a full scan)
        only then and at the bound, so a hello under the bound costs no scan."""
        hello["when"] = now = _heard_at(hello)  # one time for the UPDATE and, when it finds no row, the INSERT
        db = self.connection()
        seen = db.execute(
            "UPDATE devices SET seen = seen + 1, first_seen = COALESCE(first_seen, ?), last_seen = ?, firmware = ?,"
            " version = ?, schema = ?, seen_slot = ?, seen_transport = ? WHERE device_id = ?",
            (now, now, *_columns(hello), device_id),
        )
        if seen.rowcount:
            return Bounded(rows, recorded=True)
        db.execute("BEGIN IMMEDIATE")
        try:
            if rows is None or rows >= max_devices:  # another process (a command) may have added or removed rows
                rows = int(db.execute("SELECT COUNT(*) FROM devices").fetchone()[0])
            heard: float | None = None
            forgotten = 0
            if rows >= max_devices:
                forgotten, heard = self._forget_oldest(db, min(rows - max_devices + 1, MAX_FORGOTTEN_PER_HELLO), live)
            rows -= forgotten
            recorded = rows < max_devices or forgotten > 0
            if recorded:
                self.record(device_id, **hello)
                rows += 1
        except BaseException:
            roll_back(db)
            raise
        db.execute("COMMIT")
        return Bounded(rows, recorded, forgotten, heard)

    @staticmethod
    def _forget_oldest(db: sqlite3.Connection, count: int, live: frozenset[str]) -> tuple[int, float | None]:
        """Delete up to `count` rows, the boards heard longest ago first, none KEPT_BY_OPERATOR nor in `live`:
        how many went, and when the last of them was last heard (None: none went, or never heard)."""
        oldest = db.execute(
            f"SELECT device_id, COALESCE(last_seen, first_seen) FROM devices WHERE NOT ({KEPT_BY_OPERATOR})"
            " ORDER BY COALESCE(last_seen, first_seen, 0), device_id LIMIT ?",
            (count + len(live),),
        ).fetchall()
        going = [(device_id, heard) for device_id, heard in oldest if device_id not in live][:count]
        db.executemany("DELETE FROM devices WHERE device_id = ?", [(device_id,) for device_id, _ in going])
        return len(going), (going[-1][1] if going else None)

    def census(self) -> Census | None:
        """The rows and the operator's rows, read-only in one scan (at start and at a reload, not per hello);
        None when there is no registry yet."""
        with self.read_only() as db:
            if db is None:
                return None
            rows, kept = db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN {KEPT_BY_OPERATOR} THEN 1 ELSE 0 END), 0) FROM devices"
            ).fetchone()
        return Census(int(rows), int(kept))

    def devices(self) -> list[DeviceRow]:
        """Every row, by device id, read-only; none when there is no registry yet."""
        with self._reading() as db:
            rows: list[Any] = (
                db.execute(
                    "SELECT device_id, slot, transport, port, adopted_at IS NOT NULL, revoked_at IS NOT NULL, seen,"
                    " first_seen, last_seen, firmware, version, schema, seen_slot, seen_transport"
                    " FROM devices ORDER BY device_id"
                ).fetchall()
                if db is not None
                else []
            )
        return [
            DeviceRow(
                row[0],
                row[1],
                row[2],
                row[3],
                bool(row[4]),
                bool(row[5]),
                row[6],
                row[7],
                row[8],
                row[9],
                row[10],
                row[11],
                row[12],
                row[13],
            )
            for row in rows
        ]
