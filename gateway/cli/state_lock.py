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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gateway.config import GatewayConfig
from gateway.devices.registry import APP_DIR, state_directory
from gateway.policy.audit.location import audit_path, ensure_directory

log = logging.getLogger("gateway.state")

LOCK_FILE = "gateway.lock"
"""The state directory's lock, held by the gateway that uses the directory."""
AUDIT_LOCK_SUFFIX = ".lock"
"""The audit file's lock is the file's name with this added (audit.db.lock)."""
PID_BYTES = 32
"""A lock file holds its holder's pid and a newline: more is not read."""


class StateInUse(Exception):
    """Another running gateway holds this gateway's state directory or audit file: `run` refuses (exit 2)."""


class _Held(Exception):
    """flock(2) found the file locked; `pid`: the holder's, as it wrote it ("" if not readable)."""

    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


@dataclass
class HeldState:
    """The locks `run` holds until it exits; `release()` (or leaving a `with` block) drops them."""

    descriptors: list[int] = field(default_factory=list)

    def release(self) -> None:
        while self.descriptors:
            descriptor = self.descriptors.pop()
            with contextlib.suppress(OSError):
                os.ftruncate(descriptor, 0)  # no pid of a gateway that has gone
            os.close(descriptor)  # the lock goes with the last descriptor of the open file

    def __enter__(self) -> HeldState:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


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


def hold_state(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> HeldState:
    """Lock the state directory and, when `config` writes an audit trail, the audit file, for `run`.

    Raises StateInUse naming the directory or file, the holder's pid and what to do. A directory or
    file that cannot be locked at all (a read-only file system, no permission) is logged and left
    unlocked: what the gateway keeps there fails, and says so, as it would without the lock."""
    env = os.environ if environ is None else environ
    held = HeldState()
    directory = real_directory = state_directory(env)
    lock = directory / LOCK_FILE
    try:
        ensure_directory(directory)
        real_directory = directory.resolve()
        lock = real_directory / LOCK_FILE
        _warn_if_open(real_directory, "the state directory")
        held.descriptors.append(lock_file(lock))
    except UnsafeLock as exc:
        raise _unsafe(exc) from None
    except _Held as exc:
        raise StateInUse(
            f"the state directory {directory} ({_state_variable(env)}{_leads_to(directory, real_directory)}) is "
            f"in use by another gateway ({_holder(exc.pid)}, holding {lock}): its device registry, firmware and "
            "default audit trail belong to one gateway. Give this gateway a state directory of its own (under "
            "systemd its own StateDirectory=, else STATE_DIRECTORY or XDG_STATE_HOME in its environment), or stop "
            "the other gateway first"
        ) from None
    except OSError as exc:
        log.warning(
            "the state directory %s cannot be locked (%s): another gateway using it would not be refused",
            directory,
            exc.strerror or exc,
        )
    if config.policy is None or not config.audit.enabled:
        return held  # no audit trail is written (adding [policy] or changing [audit] needs a restart)
    audit_file = real_audit = audit_path(config.audit, env)
    audit_lock = audit_file.with_name(audit_file.name + AUDIT_LOCK_SUFFIX)
    where = "[audit] path" if config.audit.path else "default [audit] path"
    try:
        ensure_directory(audit_file.parent)
        real_audit = audit_file.resolve()  # the lock lies beside the file SQLite writes
        audit_lock = real_audit.with_name(real_audit.name + AUDIT_LOCK_SUFFIX)
        _warn_if_open(real_audit.parent, "the audit file's directory")
        held.descriptors.append(lock_file(audit_lock))
    except UnsafeLock as exc:
        held.release()
        raise _unsafe(exc) from None
    except _Held as exc:
        held.release()
        raise StateInUse(
            f"the audit file {audit_file} (this gateway's {where}{_leads_to(audit_file, real_audit)}) is written "
            f"by another gateway ({_holder(exc.pid)}, holding {audit_lock}): one audit file records one "
            "gateway's calls. Give this gateway an [audit] path of its own, or stop the other gateway first"
        ) from None
    except OSError as exc:
        # The trail itself reports what is wrong with the place (unhealthy, its calls refused).
        log.warning(
            "the audit file %s cannot be locked (%s): another gateway writing it would not be refused",
            audit_file,
            exc.strerror or exc,
        )
    return held
