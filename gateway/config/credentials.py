"""Secrets named by an environment variable or a file, read once at load time, and credentials sent to upstreams."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import ClassVar

from pydantic import PrivateAttr, SecretStr, model_validator

from gateway.config.base import Section
from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file


def header_safe(value: str, what: str) -> str:
    """`value`, a credential that goes into an HTTP header: ValueError naming `what` and the place of a
    control character in it, never the secret (aiohttp refuses such a header at every request, so
    whoever sends it would hear nothing back)."""
    for position, char in enumerate(value, 1):
        if ord(char) < 0x20 or ord(char) == 0x7F:
            raise ValueError(
                f"{what}: holds the control character {char!r} (U+{ord(char):04X}, character {position}), which an "
                "HTTP header cannot carry; give the credential as printable text"
            )
    return value


class WritableByOthers(ValueError):
    """A secret or key file users other than its owner may write: whoever writes it chooses the secret
    (or the key), so it is refused wherever it is read; the message names the file and its mode."""


MOUNTINFO = "/proc/self/mountinfo"


def _file_system_read_only(device: int) -> bool:
    """True when the file system of `device` (a st_dev) is read-only as a whole (its super options in
    /proc/self/mountinfo say `ro`: a squashfs, an ISO, a partition mounted ro), so no mount of it writes.
    False when it is writable, or not found (a btrfs subvolume's st_dev names no mount): the safe side."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="replace") as mounts:
            for line in mounts:  # one line held at a time, however many mounts
                fields = line.split()
                if len(fields) > 2 and fields[2] == wanted and " - " in line:
                    return "ro" in line.rsplit(" - ", 1)[1].split()[-1].split(",")
    except OSError:
        pass
    return False


def read_only_here(path: str | os.PathLike[str]) -> bool:
    """True when the mount `path` is on is read-only (statvfs ST_RDONLY): chmod fails there."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def nobody_writes(path: str | os.PathLike[str], device: int) -> bool:
    """True when no one can write the file at `path` (on the file system of `device`) whatever its mode:
    its mount is read-only and so is its file system. A read-only mount of a writable file system (a
    read-only bind mount, systemd's ReadOnlyPaths=, a container's :ro volume) is not enough: the file
    is written through the file system's other mounts."""
    return read_only_here(path) and _file_system_read_only(device)


def private_mode(mode: int) -> str:
    """The mode to advise for a secret or key file whose st_mode is `mode`: 640 when its group may read
    it, 600 otherwise. A file only its group may read is used without a word (a key root owns that the
    service reads through its group, Debian's ssl-cert layout), and `chmod 600` would lock that service out."""
    return "640" if mode & stat.S_IRGRP else "600"


def only_its_owner_writes(path: str | os.PathLike[str], where: str) -> Callable[[os.stat_result], None]:
    """A read_regular_file check: WritableByOthers (`<where> is writable by users other than its owner
    (mode 0666); run chmod 640 <path>`, private_mode's advice) for a file its group or others may write,
    unless nobody_writes it (a read-only file system). The one rule of every secret and key file: [auth]
    and provider secrets, [tls] key_file, [[mqtt.brokers]] key files and password files. One others may
    only read is used and warned of (gateway/config/auth.py)."""

    def check(info: os.stat_result) -> None:
        if not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return
        mode = f"{where} is writable by users other than its owner (mode {stat.S_IMODE(info.st_mode):04o})"
        narrower = private_mode(info.st_mode)
        if not read_only_here(path):
            raise WritableByOthers(f"{mode}; run `chmod {narrower} {os.fspath(path)}`")
        if not _file_system_read_only(info.st_dev):
            raise WritableByOthers(
                f"{mode} where its file system is mounted writable (this mount of it is read-only, so chmod "
                f"fails here); run `chmod {narrower}` on the file there (the source of a bind mount, or the path "
                "outside a service's ReadOnlyPaths=)"
            )

    return check


MIN_PROVIDER_SECRET_CHARS = 16
"""A provider secret shorter than this is refused: it could be guessed from the plant network."""


def read_secret(
    env: str | None,
    file: str | None,
    what: str,
    min_chars: int = MIN_PROVIDER_SECRET_CHARS,
    *,
    owner_only: bool = False,
) -> SecretStr:
    """The secret named by exactly one of `env` (a variable name) or `file` (a path), stripped.

    Read once at load time so a missing variable or file stops the gateway before it listens.
    `min_chars` guards secrets the gateway checks; a credential it only sends (to a remote
    upstream) is as long as its issuer made it, so those pass min_chars=1. With `owner_only`, a file
    others may write is refused (only_its_owner_writes)."""
    if (env is None) == (file is None):
        raise ValueError(f"{what}: give exactly one of env (a variable name) or file (a path)")
    if env is not None:
        text = os.environ.get(env, "")
        if not text.strip():
            raise ValueError(f"{what}: environment variable {env} is not set or empty")
    else:
        assert file is not None
        try:
            check = only_its_owner_writes(file, f"{what}: file {file}") if owner_only else None
            text = read_regular_file(file, what, MAX_SECRET_FILE_BYTES, check).decode("utf-8")
        except FileRefused as exc:  # a FIFO, a device, a file over the bound
            raise ValueError(str(exc)) from None
        except FileNotFoundError:
            raise ValueError(f"{what}: file {file} not found") from None
        except UnicodeDecodeError:
            raise ValueError(f"{what}: file {file} is not UTF-8 text") from None
        except OSError as exc:  # not readable, a directory, below a file, a name too long, ...
            raise ValueError(f"{what}: file {file} is not readable ({exc.strerror or exc})") from None
    secret = text.strip()
    if len(secret) < min_chars:
        where = f"environment variable {env}" if env is not None else f"file {file}"
        raise ValueError(
            f"{what}: the secret in {where} is shorter than {min_chars} characters; "
            "use a random one (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return SecretStr(secret)


def check_header_value(value: str, what: str) -> str:
    """`value` if an HTTP header can carry it (no line break, no NUL), else ValueError naming `what`."""
    if any(ch in value for ch in "\r\n\0"):
        raise ValueError(f"{what}: the value contains a line break or NUL")
    return value


class UpstreamSecretConfig(Section):
    """A credential the gateway sends to a remote upstream: from an environment variable or a file (exactly one)."""

    OWNER_ONLY: ClassVar[bool] = False
    """A file others may write is refused (PrivateSecretConfig)."""
    env: str | None = None
    file: str | None = None
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> UpstreamSecretConfig:
        secret = read_secret(self.env, self.file, "secret", min_chars=1, owner_only=self.OWNER_ONLY)
        self._secret = SecretStr(check_header_value(secret.get_secret_value(), "secret"))
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret


class PrivateSecretConfig(UpstreamSecretConfig):
    """A credential ([[mqtt.brokers]] password, key_password) whose file is refused when users other than
    its owner may write it, as [auth]'s secrets are: whoever writes it chooses what the gateway sends."""

    OWNER_ONLY: ClassVar[bool] = True
