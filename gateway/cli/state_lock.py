"""`run` holds its state directory and its audit file for as long as it runs: one gateway for each.

Two gateways on one state directory would share the device registry (a board adopted for one would be
let in by the other) and the default audit trail (each one's calls in the other's record, nothing
telling them apart). `run` takes an exclusive flock(2) on `<state directory>/gateway.lock` and, when it
writes an audit trail, on `<audit file>.lock`, writes its pid into each, and refuses to start (exit 2)
when another process holds one. The lock belongs to the open file, which the kernel closes when the
process ends however it ends (a SIGKILL, a power cut): a lock is never left behind, so none is ever
broken. The descriptor is close-on-exec: a stdio upstream the gateway starts does not inherit it.

The audit lock is a file beside the database, not the database itself: SQLite keeps POSIX record locks
on its file, which the process loses when it closes any descriptor of that file, and on NFS flock(2)
is emulated with those very record locks. Both locks are named from the resolved path (symbolic links
followed): an [audit] path that is a link to another gateway's file gets that file's lock.

A place that cannot be locked at all at start (a read-only file system: an SD card awaiting fsck) is
tried again every LOCK_RETRY_S until it is locked, and `broker_diagnose` shows `state.unlocked`
meanwhile. A lock held is checked at the same cadence: a flock stays on the open file, so once its
path is removed (`rm -rf` of the state directory, made again) a second gateway would make a new file
there and lock it unopposed. When the file at the path is not the one held (another inode, or none)
the gateway takes the lock again on the file there, or names the gateway that got it first. The locks
are taken before the event loop starts and dropped after it ends, so the checks run on a thread of
their own, which only stats, opens and flocks (never waiting) one small file each time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gateway.config import GatewayConfig
from gateway.core.broker.problems import STANDING, Problem
from gateway.devices.registry import APP_DIR, state_directory
from gateway.policy.audit.location import audit_path, ensure_directory

log = logging.getLogger("gateway.state")

LOCK_FILE = "gateway.lock"
"""The state directory's lock, held by the gateway that uses the directory."""
AUDIT_LOCK_SUFFIX = ".lock"
"""The audit file's lock is the file's name with this added (audit.db.lock)."""
PID_BYTES = 32
"""A lock file holds its holder's pid and a newline: more is not read."""
LOCK_RETRY_S = 10.0
"""A place that could not be locked at start is tried again this often until it is locked."""
UNLOCKED = "state.unlocked"
"""The broker_diagnose problem of a place not locked."""
RELEASE_WAIT_S = 2.0
"""How long release() waits for a try under way to end."""


class StateInUse(Exception):
    """Another running gateway holds this gateway's state directory or audit file: `run` refuses (exit 2)."""


class _Held(Exception):
    """flock(2) found the file locked; `pid`: the holder's, as it wrote it ("" if not readable)."""

    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


@dataclass
class Place:
    """A place `run` locks: how to name its lock at each check, what to say, and its lock while held."""

    what: str
    """"the state directory /var/lib/mcp-gateway", "the audit file /srv/audit.db"."""
    lock: Path
    """Its lock file, as last locked or tried."""
    lock_path: Callable[[], Path]
    """Its lock file, where the path leads at the time of the check."""
    in_use: Callable[[str, Path], str]
    """What another gateway holding the lock means and what to do, from its pid and the lock file."""
    reason: str = ""
    """Why it could not be locked, the last time it was tried."""
    holder: str | None = None
    """The pid another gateway wrote ("" when none) when it held the lock at the last try; else None."""
    descriptor: int | None = None
    """The open, flocked lock file while this gateway holds it; None while the place is not locked."""

    @property
    def key(self) -> str:
        return f"{UNLOCKED}:{self.what}"


@dataclass
class HeldState:
    """The locks `run` holds until it exits; `release()` (or leaving a `with` block) drops them. Once
    `start_retrying()` runs, every `retry_s` each place not locked yet is tried again and each one held
    is checked to be still the file at its path (it is taken again when it was removed or replaced)."""

    places: list[Place] = field(default_factory=list)
    retry_s: float = LOCK_RETRY_S
    _released: threading.Event = field(default_factory=threading.Event)
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _retrying: threading.Thread | None = None

    @property
    def descriptors(self) -> list[int]:
        """The lock files held now."""
        return [place.descriptor for place in self.places if place.descriptor is not None]

    @property
    def unlocked(self) -> list[Place]:
        """The places not locked now: tried again every `retry_s`, shown in broker_diagnose."""
        return [place for place in self.places if place.descriptor is None]

    def locked(self, place: Place, descriptor: int) -> None:
        """`place` is locked at start: kept to be checked."""
        place.descriptor = descriptor
        self.places.append(place)

    def not_locked(self, place: Place) -> None:
        """`place` could not be locked at start: kept to be tried again, and shown in broker_diagnose."""
        self.places.append(place)
        self._report(place)

    def start_retrying(self) -> None:
        """Check every place every `retry_s` (on a thread of its own) until release()."""
        if self.places and self._retrying is None and not self._released.is_set():
            self._retrying = threading.Thread(target=self._retry_loop, name="state-lock-retry", daemon=True)
            self._retrying.start()

    def _retry_loop(self) -> None:
        while not self._released.wait(self.retry_s):
            self.retry_now()

    def retry_now(self) -> None:
        """One check of every place: one not locked is tried, one held is taken again if its file is not
        the one at its path any more (the directory removed and made again, the file deleted or replaced)."""
        for place in list(self.places):
            with self._mutex:
                if self._released.is_set():
                    return
                if place.descriptor is None:
                    self._try(place)
                elif not _still_there(place.descriptor, place.lock_path):
                    # The flock stays on a file no other gateway finds: one started now would not be refused.
                    os.close(place.descriptor)
                    place.descriptor = None
                    self._try(place, lost=True)

    def _try(self, place: Place, lost: bool = False) -> None:
        try:
            place.lock = place.lock_path()
            descriptor = lock_file(place.lock)
        except _Held as exc:
            if place.holder != exc.pid:  # once for each holder, not at every try
                log.error("%s", place.in_use(exc.pid, place.lock))
            place.holder = exc.pid
        except UnsafeLock as exc:
            reason = str(_unsafe(exc))
            if reason != place.reason or lost:
                log.error("%s cannot be locked: %s", place.what, reason)
            place.reason, place.holder = reason, None
        except OSError as exc:
            place.reason, place.holder = str(exc.strerror or exc), None
            if lost:
                log.warning(
                    "%s: its lock file %s was removed or replaced while the gateway ran and cannot be locked again "
                    "(%s): another gateway using it would not be refused until it can be (tried again every %g s)",
                    place.what,
                    place.lock,
                    place.reason,
                    self.retry_s,
                )
        else:
            place.descriptor, place.holder = descriptor, None
            STANDING.withdraw(place.key)
            if lost:
                log.warning(
                    "%s: its lock file was removed or replaced while the gateway ran; locked again (%s): another "
                    "gateway using it is refused again",
                    place.what,
                    place.lock,
                )
            else:
                log.info("%s is locked now (%s): another gateway using it is refused again", place.what, place.lock)
            return
        self._report(place)

    def _report(self, place: Place) -> None:
        if place.holder is not None:
            STANDING.report(
                place.key,
                Problem(
                    UNLOCKED,
                    "error",
                    f"{place.what} is used by another gateway as well ({_holder(place.holder)})",
                    place.in_use(place.holder, place.lock),
                    "Stop one of the two gateways: each needs a state directory and an audit file of its own "
                    "(under systemd its own StateDirectory=, else STATE_DIRECTORY or XDG_STATE_HOME; an [audit] "
                    f"path of its own). This gateway takes the lock once the other is gone (tried every "
                    f"{self.retry_s:g} s).",
                ),
            )
            return
        STANDING.report(
            place.key,
            Problem(
                UNLOCKED,
                "warning",
                f"{place.what} is not locked: another gateway started on it would not be refused",
                f"its lock file cannot be made or locked ({place.reason}); tried every {self.retry_s:g} s",
                "Make the file system writable (a read-only or full SD card: check it, free space, remount it "
                "read-write) and the directory writable by the gateway's user, or make a removed directory again "
                "(mode 0700). The gateway takes the lock at its next try and logs it; until then start no other "
                "gateway on this place.",
            ),
        )

    def release(self) -> None:
        self._released.set()
        if self._retrying is not None and self._retrying is not threading.current_thread():
            self._retrying.join(timeout=RELEASE_WAIT_S)  # a try takes an open and a flock that never waits
        with self._mutex:
            for place in self.places:
                if place.descriptor is None:
                    STANDING.withdraw(place.key)
                    continue
                with contextlib.suppress(OSError):
                    os.ftruncate(place.descriptor, 0)  # no pid of a gateway that has gone
                os.close(place.descriptor)  # the lock goes with the last descriptor of the open file
                place.descriptor = None
            self.places.clear()

    def __enter__(self) -> HeldState:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def _still_there(descriptor: int, lock_path: Callable[[], Path]) -> bool:
    """Whether the file at the lock's path is the open file `descriptor` locks (one lstat and one fstat)."""
    try:
        found = os.lstat(lock_path())
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # cannot tell (an I/O error): the lock is kept, and looked at again at the next check
    held = os.fstat(descriptor)
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def lock_file(path: Path) -> int:
    """The descriptor of `path` (created 0600), exclusively flocked, with this process's pid written in.

    Raises _Held when another open file holds the lock (another process, or this one opened it again),
    OSError when the file cannot be opened or locked at all."""
    # Never through a link and never blocking on a FIFO: whoever may write the directory could
    # otherwise point the lock at any file, which the gateway would then empty and write its pid into.
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeLock(f"{path} is a symbolic link") from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnsafeLock(f"{path} is not a regular file")
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            text = os.pread(descriptor, PID_BYTES, 0).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        os.close(descriptor)
        raise _Held(text if text.isdigit() else "") from None
    except BaseException:
        os.close(descriptor)
        raise
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # the lock holds without it: a refused gateway then names no pid
    return descriptor


class UnsafeLock(Exception):
    """A lock file's name is taken by a symbolic link or something other than a regular file."""


def _unsafe(problem: UnsafeLock) -> StateInUse:
    return StateInUse(
        f"{problem}: the gateway's lock files are regular files it makes itself, and it never writes through "
        "a link. Something else put this there (whoever may write that directory): remove it, and keep the "
        "directory writable by the gateway's user only"
    )


def _warn_if_open(directory: Path, what: str) -> None:
    """A directory others may write lets them plant files where the gateway keeps its own."""
    with contextlib.suppress(OSError):
        mode = directory.stat().st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            log.warning("%s %s is writable by other users (mode %o): make it 0700", what, directory, mode & 0o777)


def _state_variable(environ: Mapping[str, str]) -> str:
    """Where the state directory came from, as the operator sets it."""
    if environ.get("STATE_DIRECTORY", "").split(":")[0]:
        return "$STATE_DIRECTORY, systemd's StateDirectory="
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return f"$XDG_STATE_HOME/{APP_DIR}"
    return f"the default, ~/.local/state/{APP_DIR}"


def _holder(pid: str) -> str:
    return f"pid {pid}" if pid else "a process that wrote no pid"


def _leads_to(path: Path, real: Path) -> str:
    """Where `path`, as the operator gave it, leads when that is another place (a symbolic link)."""
    return "" if path.absolute() == real else f", which leads to {real}"


def _resolved(path: Path) -> Path:
    """Where `path` leads (symbolic links followed), or `path` itself when that cannot be found."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return path.absolute()


def _directory_in_use(directory: Path, env: Mapping[str, str]) -> Callable[[str, Path], str]:
    def in_use(pid: str, lock: Path) -> str:
        return (
            f"the state directory {directory} ({_state_variable(env)}{_leads_to(directory, lock.parent)}) is in "
            f"use by another gateway ({_holder(pid)}, holding {lock}): its device registry, firmware and default "
            "audit trail belong to one gateway. Give this gateway a state directory of its own (under systemd its "
            "own StateDirectory=, else STATE_DIRECTORY or XDG_STATE_HOME in its environment), or stop the other "
            "gateway first"
        )

    return in_use


def _audit_in_use(audit_file: Path, where: str) -> Callable[[str, Path], str]:
    def in_use(pid: str, lock: Path) -> str:
        real = lock.with_name(lock.name.removesuffix(AUDIT_LOCK_SUFFIX))
        return (
            f"the audit file {audit_file} (this gateway's {where}{_leads_to(audit_file, real)}) is written by "
            f"another gateway ({_holder(pid)}, holding {lock}): one audit file records one gateway's calls. Give "
            "this gateway an [audit] path of its own, or stop the other gateway first"
        )

    return in_use


def hold_state(
    config: GatewayConfig, environ: Mapping[str, str] | None = None, *, retry_s: float = LOCK_RETRY_S
) -> HeldState:
    """Lock the state directory and, when `config` writes an audit trail, the audit file, for `run`.

    Raises StateInUse naming the directory or file, the holder's pid and what to do. A directory or
    file that cannot be locked at all (a read-only file system, no permission) is logged and left
    unlocked: what the gateway keeps there fails, and says so, as it would without the lock; it is
    tried again every `retry_s` (logged when locked; an error naming the holder when another gateway
    took it meanwhile) and `broker_diagnose` shows `state.unlocked` until it is locked. A lock held is
    checked as often and taken again when its file was removed or replaced."""
    env = os.environ if environ is None else environ
    held = HeldState(retry_s=retry_s)
    directory = state_directory(env)
    directory_in_use = _directory_in_use(directory, env)

    def directory_lock() -> Path:
        return _resolved(directory) / LOCK_FILE

    place = Place(f"the state directory {directory}", directory / LOCK_FILE, directory_lock, directory_in_use)
    try:
        ensure_directory(directory)
        place.lock = directory_lock()
        _warn_if_open(place.lock.parent, "the state directory")
        held.locked(place, lock_file(place.lock))
    except UnsafeLock as exc:
        raise _unsafe(exc) from None
    except _Held as exc:
        raise StateInUse(directory_in_use(exc.pid, place.lock)) from None
    except OSError as exc:
        reason = str(exc.strerror or exc)
        log.warning(
            "the state directory %s cannot be locked (%s): another gateway using it would not be refused until "
            "it can be (tried again every %g s)",
            directory,
            reason,
            retry_s,
        )
        place.reason = reason
        held.not_locked(place)
    if config.policy is None or not config.audit.enabled:
        held.start_retrying()
        return held  # no audit trail is written (adding [policy] or changing [audit] needs a restart)
    audit_file = audit_path(config.audit, env)
    where = "[audit] path" if config.audit.path else "default [audit] path"
    audit_in_use = _audit_in_use(audit_file, where)

    def audit_lock() -> Path:
        real = _resolved(audit_file)  # the lock lies beside the file SQLite writes
        return real.with_name(real.name + AUDIT_LOCK_SUFFIX)

    place = Place(
        f"the audit file {audit_file}",
        audit_file.with_name(audit_file.name + AUDIT_LOCK_SUFFIX),
        audit_lock,
        audit_in_use,
    )
    try:
        ensure_directory(audit_file.parent)
        place.lock = audit_lock()
        _warn_if_open(place.lock.parent, "the audit file's directory")
        held.locked(place, lock_file(place.lock))
    except UnsafeLock as exc:
        held.release()
        raise _unsafe(exc) from None
    except _Held as exc:
        held.release()
        raise StateInUse(audit_in_use(exc.pid, place.lock)) from None
    except OSError as exc:
        # The trail itself reports what is wrong with the place (unhealthy, its calls refused).
        reason = str(exc.strerror or exc)
        log.warning(
            "the audit file %s cannot be locked (%s): another gateway writing it would not be refused until it "
            "can be (tried again every %g s)",
            audit_file,
            reason,
            retry_s,
        )
        place.reason = reason
        held.not_locked(place)
    held.start_retrying()
    return held


FLOCK_FORMAT = "hhqqi"
"""struct flock (l_type, l_whence, l_start, l_len, l_pid), with Python's LFS F_GETLK on every platform."""
FLOCK_SLACK = b"\0" * 16
"""Room past the packed fields for the padding a platform's struct flock has."""


def record_lock_holder(path: Path) -> int | None:
    """The pid of another process holding a POSIX record lock on the regular file `path` (None: none, or no
    such file). SQLite keeps such locks on a database during each transaction and, in WAL mode, on its `-shm`
    for as long as a connection is open: a gateway that uses the file, its lock files removed or not."""
    import struct

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        asked = struct.pack(FLOCK_FORMAT, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0) + FLOCK_SLACK
        answer = fcntl.fcntl(descriptor, fcntl.F_GETLK, asked)
    except OSError:
        return None
    finally:
        os.close(descriptor)  # this process holds no SQLite lock on it: closing drops nobody's
    kind, _whence, _start, _length, pid = struct.unpack_from(FLOCK_FORMAT, answer)
    return None if kind == fcntl.F_UNLCK else pid


def database_user(database: Path) -> tuple[Path, int] | None:
    """The file of the SQLite database `database` (it, its `-shm`, its `-journal`) another process holds a
    record lock on, and that process's pid; None when no process uses it."""
    for path in (database, Path(f"{database}-shm"), Path(f"{database}-journal")):
        pid = record_lock_holder(path)
        if pid is not None:
            return path, pid
    return None
