"""mosquitto's password file, read and written here (no `mosquitto_passwd` needed on the host).

One line per user, `username:$7$<iterations>$<salt>$<hash>`, as mosquitto 2.0's `mosquitto_passwd`
writes it (`-H sha512-pbkdf2`, its default in 2.0): the hash is PBKDF2-HMAC-SHA512 of the password
over the 12 random salt bytes, 64 bytes long; salt and hash are standard base64 with padding. The
older `$6$<salt>$<hash>` lines (one SHA-512 of the password followed by the salt, mosquitto 1.x) are
read and checked too. Other lines (comments, `$8$` argon2id of mosquitto 2.1, anything unknown) are
kept as they are; only the line of the user changed is touched.

A change is atomic: the whole new file is written to a temporary file in the same directory (mode
0600 while it is written), given the old file's mode and owner, fsynced, and renamed over the old
one, so mosquitto (which reads the file at start and at SIGHUP) sees the old file or the new one,
never half of one. Each change holds an exclusive `flock` on `<file>.lock` beside the file (made
mode 0600 when missing, and kept) from its read to its rename, so two installs at once both keep
their user; an operator's `mosquitto_passwd`, which takes no lock, may still lose its change or this one.
A lock held longer than LOCK_WAIT_S (a change takes a fraction of a second) is a stuck holder: the change
is refused, naming the lock and who holds it, instead of waiting without end.

Usernames are compared as mosquitto reads them: the text before a line's first colon with the
blanks at its ends trimmed (C `isspace`), so `pump-7 :...` is user pump-7. A username written here
never starts or ends with one, nor holds a control character (check_username).

API
---
hash_password(password, salt=None, iterations=ITERATIONS) -> str   "$7$..."
verify(hashed, password) -> bool          checks a $7$ or $6$ hash (False for any other)
read(path, option) -> dict[str, str]      username -> hash, in file order
check_writable(path, option) -> None      what set_user/remove_user need, checked without a change
set_user(path, username, password, option) -> bool      True when it replaced an earlier line
remove_user(path, username, option) -> bool             False when the user was not there
keep_owner(descriptor, info) -> None      a new file takes the owner of the one it replaces (also
                                          used by token files and `tls self-signed`)
PasswordFileError: every failure, one line naming the file (and `option`, the command-line option
that names it, when the file is missing) and, for permissions, the modes and owners involved.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import grp
import hashlib
import hmac
import os
import pwd
import secrets
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DEFAULT_PASSWORD_FILE = Path("/etc/mosquitto/mcp-gateway/passwd")
"""The appliance's file: `password_file` in image/mosquitto/mcp-gateway.conf."""

ITERATIONS = 101
"""mosquitto_passwd 2.0's own count. The boards' passwords are 256 random bits, so the count adds
nothing against guessing; mosquitto computes the hash at every CONNECT, so it costs at each one."""
SALT_BYTES = 12
HASH_BYTES = 64
LOCK_WAIT_S = 30.0
"""How long a change waits for the lock another one holds before it is refused."""
MAX_FILE_BYTES = 4 * 1024 * 1024
"""A password file larger than this is refused (a board's line is about 130 bytes)."""


class PasswordFileError(Exception):
    pass


def hash_password(password: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """The `$7$` hash mosquitto checks `password` against."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, HASH_BYTES)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def _b64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def verify(hashed: str, password: str) -> bool:
    """Whether `password` matches the `$7$` (PBKDF2-HMAC-SHA512) or `$6$` (SHA-512) hash `hashed`."""
    parts = hashed.split("$")
    try:
        if len(parts) == 5 and parts[:2] == ["", "7"]:
            iterations = int(parts[2])
            if not 0 < iterations <= 10_000_000:
                return False
            salt, expected = _b64(parts[3]), _b64(parts[4])
            actual = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, len(expected))
        elif len(parts) == 4 and parts[:2] == ["", "6"]:
            salt, expected = _b64(parts[2]), _b64(parts[3])
            actual = hashlib.sha512(password.encode("utf-8") + salt).digest()
        else:
            return False
    except (ValueError, binascii.Error, UnicodeEncodeError):
        return False
    return len(expected) > 0 and hmac.compare_digest(actual, expected)


MOSQUITTO_BLANKS = " \t\n\v\f\r"
"""What mosquitto trims from both ends of a username it reads from the file (C isspace)."""
LOCK_SUFFIX = ".lock"


def check_username(username: str) -> None:
    if (
        not username
        or ":" in username
        or username.startswith("#")
        or any(ord(c) < 32 or ord(c) == 127 for c in username)
    ):
        raise PasswordFileError(
            f"{username!r} cannot be a mosquitto username (it must not be empty, hold a colon or a control "
            "character, or start with #)"
        )
    if username != username.strip(MOSQUITTO_BLANKS):
        raise PasswordFileError(
            f"{username!r} cannot be a mosquitto username: it starts or ends with a blank, which mosquitto trims "
            f"when it reads the password file, so the line would be user {username.strip(MOSQUITTO_BLANKS)!r}'s"
        )


def _owner(info: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{user}:{group}"


def _describe(info: os.stat_result) -> str:
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner {_owner(info)}"


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _target(path: Path) -> Path:
    """The file itself (a symbolic link is followed: the rename replaces the file, not the link)."""
    return Path(os.path.realpath(path))


def _stat(path: Path, option: str) -> os.stat_result:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise PasswordFileError(
            f"the mosquitto password file {path} does not exist ({option} names it; the appliance's "
            "operator makes it once, before the first start: see docs/mqtt-broker.md)"
        ) from None
    except OSError as exc:
        raise PasswordFileError(f"the mosquitto password file {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise PasswordFileError(f"the mosquitto password file {path} is not a regular file ({option} names it)")
    if info.st_size > MAX_FILE_BYTES:
        raise PasswordFileError(
            f"the mosquitto password file {path} holds {info.st_size} bytes, more than the {MAX_FILE_BYTES} "
            "a password file is allowed here"
        )
    return info


def _lines(path: Path, option: str) -> tuple[list[str], os.stat_result]:
    info = _stat(path, option)
    try:
        data = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except PermissionError:
        raise PasswordFileError(
            f"cannot read the mosquitto password file {path} ({_describe(info)}) as {_me()}: "
            "run the command as root (sudo)"
        ) from None
    except OSError as exc:
        raise PasswordFileError(f"the mosquitto password file {path} cannot be read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PasswordFileError(f"the mosquitto password file {path} is not UTF-8 text") from None
    return text.splitlines(), info


def _username(line: str) -> str | None:
    """The user a line is about (mosquitto's own reading: up to the first colon), None for a comment
    or a blank line."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    return stripped.split(":", 1)[0].strip(MOSQUITTO_BLANKS)


def read(path: Path, option: str = "--mosquitto-passwd") -> dict[str, str]:
    """Every user of the file and the hash on its line ("" for a line without one)."""
    lines, _ = _lines(_target(path), option)
    users: dict[str, str] = {}
    for line in lines:
        name = _username(line)
        if name is not None:
            users[name] = line.strip().split(":", 1)[1] if ":" in line else ""
    return users


def check_writable(path: Path, option: str = "--mosquitto-passwd") -> None:
    """Raise PasswordFileError unless the file can be read and replaced (its directory written)."""
    target = _target(path)
    _lines(target, option)
    directory = target.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PasswordFileError(
            f"cannot write the mosquitto password file {target}: the new file is renamed over it, and its "
            f"directory {directory} ({_describe(directory.stat())}) is not writable by {_me()}; "
            "run the command as root (sudo)"
        )


def keep_owner(descriptor: int, info: os.stat_result) -> None:
    """Give the open file `descriptor` the owner and group in `info` (of the file it is to replace), so
    a file root rewrites stays readable by the service that owns it. PermissionError when this user may
    not (only root gives a file to another user); nothing is done when they are the file's already."""
    made = os.fstat(descriptor)
    if (made.st_uid, made.st_gid) != (info.st_uid, info.st_gid):
        os.fchown(descriptor, info.st_uid, info.st_gid)


def _replace(path: Path, lines: list[str], info: os.stat_result) -> None:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    directory = path.parent
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=directory)
    except PermissionError:
        raise PasswordFileError(
            f"cannot write the mosquitto password file {path}: its directory {directory} "
            f"({_describe(directory.stat())}) is not writable by {_me()}; run the command as root (sudo)"
        ) from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            try:
                keep_owner(out.fileno(), info)
            except PermissionError:
                raise PasswordFileError(
                    f"cannot keep the owner {_owner(info)} of the mosquitto password file {path} as "
                    f"{_me()} (mosquitto might no longer read it): run the command as root (sudo)"
                ) from None
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself on disk (not every filesystem lets a folder be fsynced)
        folder = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """An exclusive flock on `<file>.lock` beside the file, held from the read to the rename: another
    change waits instead of renaming a file that lacks this one's line (or this one lacking its)."""
    lock = target.with_name(target.name + LOCK_SUFFIX)
    try:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise PasswordFileError(
            f"cannot open the lock file {lock} of the mosquitto password file {target}: {exc.strerror}; "
            "run the command as root (sudo)"
        ) from None
    try:
        _wait_for_lock(descriptor, lock, target)
        yield
    finally:
        os.close(descriptor)  # ends the lock


def _wait_for_lock(descriptor: int, lock: Path, target: Path) -> None:
    """Take the exclusive flock on `descriptor`, retried up to LOCK_WAIT_S; PasswordFileError past it."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    from gateway.flash.port import lock_holders

    holders = [holder for holder in lock_holders(str(lock)) or [] if f"(pid {os.getpid()})" not in holder]
    who = ", ".join(holders) if holders else "another program"
    raise PasswordFileError(
        f"the lock {lock} of the mosquitto password file {target} is held by {who} for more than {LOCK_WAIT_S:g} s "
        "(another install or revoke takes it for a fraction of a second): the file was not changed; end that "
        "program, or run the command again once it has ended"
    )


def set_user(path: Path, username: str, password: str, option: str = "--mosquitto-passwd") -> bool:
    """Give `username` this password (a new `$7$` line where its old one was, else at the end);
    True when the user was there before."""
    check_username(username)
    target = _target(path)
    check_writable(target, option)
    with _locked(target):
        return _set_line(target, username, f"{username}:{hash_password(password)}", option)


def _set_line(target: Path, username: str, line: str, option: str) -> bool:
    lines, info = _lines(target, option)
    kept: list[str] = []
    replaced = False
    for old in lines:
        if _username(old) == username:
            if not replaced:
                kept.append(line)
            replaced = True
        else:
            kept.append(old)
    if not replaced:
        kept.append(line)
    _replace(target, kept, info)
    return replaced


def remove_user(path: Path, username: str, option: str = "--mosquitto-passwd") -> bool:
    """Remove every line of `username`; False (and the file untouched) when it had none."""
    check_username(username)
    target = _target(path)
    if username not in read(target, option):  # nothing to change: no lock (nor a writable folder) needed
        return False
    check_writable(target, option)
    with _locked(target):
        lines, info = _lines(target, option)
        kept = [line for line in lines if _username(line) != username]
        if len(kept) == len(lines):
            return False
        _replace(target, kept, info)
    return True
