"""Adopted identities for provider authentication ([providers.auth] mode "identities").

`mcp-gateway device install` issues each board its own secret, bound to exactly its slot, and keeps
the digest in the device registry. The gateway asks the registry at each check, so a board adopted
or revoked while it runs is admitted or refused from its next dial, without a restart or a reload.
A lookup opens the registry read-only (nothing made or written: a full disk does not stop it), asks one
indexed SELECT (WAL: it never waits for a writer) and closes it: the gateway holds no connection between
lookups, so the write-ahead log is folded into devices.db as the last user closes it and a copy of the
file alone is whole. A registry that does not exist yet holds no identity, and one that cannot be read
admits nobody by it (logged once, with what to do for its cause; `unreadable` says why until a lookup
reads it again, for the refusal's text and broker_diagnose).

The slot of each adopted identity found standing is remembered (at most MAX_REMEMBERED, the latest), so a
configuration reload that finds the registry unreadable keeps the links it admitted (`held_slot`).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from gateway.devices.registry import IDENTITY_PREFIX, Adopted, DeviceRegistry, default_registry_path
from gateway.devices.sqlite_journal import FULL_NOTE

log = logging.getLogger("gateway.devices.adopted")
_Question = Callable[[DeviceRegistry], Adopted | None]
MAX_REMEMBERED = 4096
"""Adopted identities whose slot is remembered for a reload (limits.max_devices' default); the oldest goes."""


class AdoptedIdentities:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_registry_path()
        self.unreadable: str | None = None
        """Why the registry could not be read at the last lookup; None when it could (or is not there)."""
        self.remedy = ""
        """What to do about `unreadable`, for its cause (a sentence that starts with a verb)."""
        self._slots: dict[str, str] = {}

    def lookup(self, digest: bytes) -> Adopted | None:
        """The adopted board whose secret has this SHA-256 digest (revoked or not); None when none has."""
        return self._remembered(self._ask(lambda registry: registry.by_digest(digest.hex())))

    def standing(self, identity: str | None) -> Adopted | None:
        """The adopted identity of this name when it still stands (adopted and not revoked), else None."""
        if identity is None or not identity.startswith(IDENTITY_PREFIX):
            return None
        found = self._remembered(self._ask(lambda registry: registry.adopted(identity[len(IDENTITY_PREFIX) :])))
        return found if found is not None and not found.revoked else None

    def held_slot(self, identity: str) -> str | None:
        """The slot this adopted identity stood for at its last lookup here, else None."""
        return self._slots.get(identity)

    def remember(self, identity: str, slot: str) -> None:
        """Keep `identity`'s slot (a link carried over a reload that could not read the registry)."""
        self._slots.pop(identity, None)
        self._slots[identity] = slot
        while len(self._slots) > MAX_REMEMBERED:
            del self._slots[next(iter(self._slots))]

    def _remembered(self, found: Adopted | None) -> Adopted | None:
        if found is not None and not found.revoked:
            self.remember(found.identity, found.slot)
        elif found is not None:
            self._slots.pop(found.identity, None)
        return found

    def revoked(self, device_id: str) -> bool:
        """Whether this board was adopted and its identity revoked (over any transport)."""
        return self._ask(lambda registry: registry.revocation(device_id)) is not None

    def _ask(self, question: _Question) -> Adopted | None:
        registry = DeviceRegistry(self.path)
        try:
            # exists() raises too: EACCES on a directory the gateway's user may not search (root-made, 0700).
            if not self.path.exists():
                self._readable()
                return None
            found = question(registry)
        except (sqlite3.Error, OSError) as exc:
            self._unreadable(exc)
            return None
        finally:
            registry.close()
        self._readable()
        return found

    def _unreadable(self, exc: sqlite3.Error | OSError) -> None:
        self.remedy = self._remedy(exc)
        if self.unreadable is None:  # once until it is read again
            log.warning(
                "device registry %s cannot be read (%s): adopted boards are refused and revocations are not "
                "checked; %s",
                self.path,
                _reason(exc),
                self.remedy,
            )
        self.unreadable = _reason(exc)

    def _remedy(self, exc: sqlite3.Error | OSError) -> str:
        """What to do about `exc`, by its cause: a permission, a full disk, a damaged file, else the check."""
        found = getattr(exc, "sqlite_errorcode", None)
        code = found & 0xFF if isinstance(found, int) else None
        denied = isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM)
        if denied or (code == sqlite3.SQLITE_CANTOPEN and not os.access(self.path, os.R_OK)):
            return (
                "let the gateway's user read the file and enter each directory above it "
                "(e.g. chown the state directory to the service user)"
            )
        if FULL_NOTE.rstrip(")") in str(exc) or code == sqlite3.SQLITE_FULL:
            return f"free space on the file system holding {self.path.parent}"
        if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return (
                "put back a copy, or move it aside with its -wal and -shm files and adopt the boards again "
                "(mcp-gateway device install)"
            )
        return f"check it with mcp-gateway devices --registry {self.path}, which reads it as the gateway does"

    def _readable(self) -> None:
        if self.unreadable is not None:
            self.unreadable = None
            log.info("device registry %s can be read again: adopted boards are admitted", self.path)


def _reason(exc: sqlite3.Error | OSError) -> str:
    """`exc` in words, with its errno's name when it has one (EACCES, ENOTDIR, ...)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or exc} [{name}]" + (f": {exc.filename}" if exc.filename else "")
    return str(exc) or type(exc).__name__
