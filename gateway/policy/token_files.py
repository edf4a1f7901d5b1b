"""Token files: the static client tokens `mcp-gateway token create` writes, and the gateway reads.

A token file is TOML and holds no token, only what is needed to recognise one:

    [[tokens]]
    name = "scada"
    scopes = ["pump-1", "metrics"]
    sha256 = "<hex SHA-256 of the token>"
    created = "2026-01-31T12:00:00Z"

The token itself is printed once at creation and never stored. Files are written atomically (a
temporary file in the same directory, then rename) with mode 0600, so a reader never sees half a
file and nobody but the owner can read the hashes. A file others can write is refused (whoever writes
it adds a token); one others can read is used, with a warning. Every command that rewrites a file
holds an exclusive lock on `.<name>.lock` beside it from its read to its rename (locked_token_file),
so parallel commands never lose each other's changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import stat
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, NamedTuple

import orjson
from pydantic import Field, ValidationError, field_validator

from gateway.config import PrincipalName, Scope, Section, check_sha256_hex
from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file
from gateway.devices.mosquitto_passwd import keep_owner

APPLIANCE_DIR = Path("/etc/mcp-gateway")
TOKEN_BYTES = 32
"""256 random bits per token (secrets.token_urlsafe: 43 URL-safe characters)."""
LOCK_WAIT_S = 10.0
"""How long a command waits for another's lock on a token file before it gives up (TokenFileLocked)."""
LOCK_POLL_S = 0.02
HEADER = (
    "# mcp-gateway client tokens, written by `mcp-gateway token create`.\n"
    "# Only SHA-256 hashes are stored: a token is shown once, when it is created.\n"
    "# Revoke a token with `mcp-gateway token revoke NAME` (or delete its entry);\n"
    "# the gateway notices changes to this file.\n"
)


RULES = {
    "name": "a token name is 1 to 64 letters, digits and . _ @ : + -, starting with a letter or digit",
    "scopes": "a scope is 1 to 128 printable ASCII characters without spaces, double quotes or backslashes",
}


class TokenFileError(Exception):
    """A token file cannot be used; the message names the file and what is wrong."""


class TokenFileLocked(TokenFileError):
    """Another command held the token file's lock for longer than LOCK_WAIT_S."""


class TokenEntry(Section):
    name: PrincipalName
    scopes: list[Scope] = Field(default_factory=list)
    sha256: Annotated[str, Field(min_length=64, max_length=64)]
    created: str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        return check_sha256_hex(value, "sha256")


class TokenFile(Section):
    tokens: list[TokenEntry] = Field(default_factory=list)


def default_token_file() -> Path:
    """/etc/mcp-gateway/tokens.toml on an appliance (the directory exists), else ./tokens.toml."""
    return APPLIANCE_DIR / "tokens.toml" if APPLIANCE_DIR.is_dir() else Path("tokens.toml")


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_token_file(text: str, path: Path) -> list[TokenEntry]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenFileError(f"token file {path}: invalid TOML: {exc}") from exc
    try:
        entries = TokenFile.model_validate(data).tokens
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TokenFileError(f"token file {path}: {where}: {first['msg']}") from exc
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise TokenFileError(f"token file {path}: the name {entry.name!r} appears twice")
        seen.add(entry.name)
    return entries


class TokenClash(TokenFileError):
    """Two tokens with one name, or one token under two names: `names` and `places` are the two's."""

    def __init__(self, message: str, names: tuple[str, str], places: tuple[str, str]) -> None:
        super().__init__(message)
        self.names = names
        self.places = places


class TokenSource(NamedTuple):
    """One token as the uniqueness rule sees it: its name, where it is configured, its hex SHA-256 (None
    when it cannot be known here: the token of an [[auth.tokens]] entry in the service's environment)."""

    name: str
    where: str
    sha256: str | None


def check_unique(tokens: Iterable[TokenSource]) -> None:
    """TokenFileError for two tokens with one name, or one token under two names, across [[auth.tokens]]
    and every token file: either would make the caller ambiguous, so the gateway loads neither."""
    by_name: dict[str, str] = {}
    by_digest: dict[str, TokenSource] = {}
    for token in tokens:
        if token.name in by_name:
            raise TokenClash(
                f"the token name {token.name!r} is used in both {by_name[token.name]} and {token.where}",
                (token.name, token.name),
                (by_name[token.name], token.where),
            )
        by_name[token.name] = token.where
        if token.sha256 is None:
            continue
        owner = by_digest.setdefault(token.sha256, token)
        if owner.name != token.name:
            raise TokenClash(
                f"tokens {owner.name!r} ({owner.where}) and {token.name!r} ({token.where}) are the same token; "
                "give each its own",
                (owner.name, token.name),
                (owner.where, token.where),
            )


def check_not_writable_by_others(path: Path, mode: int) -> None:
    """Whoever can write a token file can add a token of their own: refuse group/world-writable files.
    The advice is 600 even when its group may read it: unlike a key file read through its group, a
    token file others can read is warned of (gateway/config/auth.py token_file_readable_warning)."""
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise TokenFileError(
            f"token file {path}: writable by users other than its owner (mode {stat.S_IMODE(mode):04o}); "
            f"run `chmod 600 {path}`"
        )


def read_token_file(path: Path) -> list[TokenEntry]:
    """The entries of one token file; TokenFileError when it is missing, unsafe or invalid."""
    try:
        data = read_regular_file(
            path,
            "token file",
            MAX_SECRET_FILE_BYTES,
            check=lambda info: check_not_writable_by_others(path, info.st_mode),
        )
        text = data.decode("utf-8")
    except FileRefused as exc:  # a FIFO (opened without waiting for a writer), a device, over the bound
        raise TokenFileError(f"token file {path}: {exc.reason}") from exc
    except FileNotFoundError as exc:
        raise TokenFileError(
            f"token file {path}: not found; create it with `mcp-gateway token create NAME --file {path}`"
        ) from exc
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"token file {path}: not UTF-8 text") from exc
    except (OSError, ValueError) as exc:  # not readable, a directory, below a file, a name too long, a NUL
        raise TokenFileError(f"token file {path}: not readable ({getattr(exc, 'strerror', None) or exc})") from exc
    return parse_token_file(text, path)


def render_token_file(entries: list[TokenEntry]) -> str:
    # Names, scopes and hashes are restricted to printable ASCII without quote or backslash, so a
    # JSON string is also a valid TOML basic string.
    lines = [HEADER]
    for entry in entries:
        lines.append("[[tokens]]")
        lines.append(f"name = {orjson.dumps(entry.name).decode()}")
        lines.append(f"scopes = [{', '.join(orjson.dumps(scope).decode() for scope in entry.scopes)}]")
        lines.append(f'sha256 = "{entry.sha256}"')
        if entry.created is not None:
            lines.append(f"created = {orjson.dumps(entry.created).decode()}")
        lines.append("")
    return "\n".join(lines)


def _directory_error(path: Path, directory: Path, exc: OSError) -> OSError:
    """An error naming `path` and its directory (what the user can fix), not a file made inside it."""
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(f"cannot write {path}: the directory {directory} does not exist (create it first)")
    return type(exc)(f"cannot write {path}: the directory {directory}: {exc.strerror or exc}")


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a mode-0600 temporary file beside it, then rename."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _directory_error(path, directory, exc) from None
    try:
        os.fchmod(fd, 0o600)
        with contextlib.suppress(FileNotFoundError, PermissionError):
            # Rewritten by root, a file the service's user owns stays its own (docs/operations.md, "systemd").
            keep_owner(fd, path.stat())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename itself is durable only once the directory is synced.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def lock_file_of(target: Path) -> Path:
    return target.with_name(f".{target.name}.lock")


def _take_lock(lock: Path, path: Path, deadline: float) -> int | None:
    """The descriptor of `lock`, locked exclusively; None when the file was removed (by its previous
    holder, on release) while this waited: the caller opens it again."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TokenFileLocked(
                        f"token file {path}: another command has held its lock file {lock} for over "
                        f"{LOCK_WAIT_S:g} s; wait for it to finish, then try again (nothing written)"
                    ) from None
                time.sleep(LOCK_POLL_S)
        try:
            current = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


@contextlib.contextmanager
def locked_token_file(path: Path) -> Iterator[Path]:
    """Hold the exclusive lock of the token file `path` (its lock file beside the file a symlink points
    to), waiting at most LOCK_WAIT_S (TokenFileLocked); yields the path to write: `path` with symlinks
    resolved, so a link keeps pointing at the file it names. The lock file is removed on release, and
    a command that locked a removed one locks the new one instead, so no file is left behind."""
    target = Path(os.path.realpath(path))
    lock = lock_file_of(target)
    deadline = time.monotonic() + LOCK_WAIT_S
    fd = None
    while fd is None:
        try:
            fd = _take_lock(lock, path, deadline)
        except (FileNotFoundError, PermissionError) as exc:
            raise _directory_error(path, lock.parent, exc) from None
        except OSError as exc:  # e.g. a symlink or a directory where the lock file goes
            raise type(exc)(f"cannot write {path}: its lock file {lock}: {exc.strerror or exc}") from None
    try:
        yield target
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # before the unlock: a waiter then sees the removal and takes a fresh file
        os.close(fd)


def check_token_file_mode(path: Path, mode: int) -> None:
    """TokenFileError unless `path` (whose st_mode is `mode`) is a regular file nobody but its owner can
    write (check_not_writable_by_others): the gateway's rule, which create, list and revoke follow. A
    file others can read is used: it holds hashes of random tokens, not tokens (the warning is
    gateway.config.auth.token_file_readable_warning's)."""
    if not stat.S_ISREG(mode):
        raise TokenFileError(f"token file {path}: not a regular file")
    check_not_writable_by_others(path, mode)


def create_token(
    path: Path,
    name: str,
    scopes: list[str],
    *,
    replace: bool = False,
    check: Callable[[list[TokenEntry]], None] | None = None,
) -> str:
    """Add a new random token for `name` to the token file at `path` and return the token.

    Refuses (TokenFileError) a file others can write, a name already present unless `replace`, and
    invalid names or scopes; `check` sees the file's entries as they would be written and may refuse
    them too (TokenFileError) before anything is written. Only the token's SHA-256 is written, in a
    file of mode 0600, under the file's lock (locked_token_file).
    """
    with locked_token_file(path) as target:
        return _create_locked(path, target, name, scopes, replace=replace, check=check)


def _create_locked(
    path: Path,
    target: Path,
    name: str,
    scopes: list[str],
    *,
    replace: bool,
    check: Callable[[list[TokenEntry]], None] | None,
) -> str:
    entries: list[TokenEntry] = []
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        check_token_file_mode(path, mode)
        entries = read_token_file(path)
    existing = [entry for entry in entries if entry.name == name]
    if existing and not replace:
        raise TokenFileError(
            f"token file {path}: a token named {name!r} exists already; pass --replace to replace it "
            "(the old token stops working)"
        )
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        entry = TokenEntry(
            name=name,
            scopes=list(dict.fromkeys(scopes)),
            sha256=token_sha256(token),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0])
        raise TokenFileError(RULES.get(field, str(exc))) from exc
    result = [*(item for item in entries if item.name != name), entry]
    if check is not None:
        check(result)
    write_atomically(target, render_token_file(result))
    return token


def withdraw_token(path: Path, name: str, sha256: str) -> bool:
    """Remove the entry `name` from the token file under its lock, if it still holds the token whose
    SHA-256 is `sha256` (not one written since by another command); whether it was removed."""
    with locked_token_file(path) as target:
        entries = read_token_file(path)
        kept = [entry for entry in entries if (entry.name, entry.sha256) != (name, sha256)]
        if len(kept) == len(entries):
            return False
        write_atomically(target, render_token_file(kept))
        return True
