"""Adopted identities for provider authentication ([providers.auth] mode "identities").

`mcp-gateway device install` issues each board its own secret, bound to exactly its slot, and keeps
the digest in the device registry. The gateway asks the registry at each check, so a board adopted
or revoked while it runs is admitted or refused from its next dial, without a restart or a reload.
A lookup opens the registry, asks one indexed SELECT (WAL: it never waits for a writer) and closes it:
the gateway holds no connection between lookups, so the write-ahead log is folded into devices.db
as the last user closes it and a copy of the file alone is whole. A registry that does not exist yet
holds no identity, and one that cannot be read admits nobody by it (logged once; `unreadable` says
why until a lookup reads it again, for the refusal's text and broker_diagnose).
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from gateway.devices.registry import IDENTITY_PREFIX, Adopted, DeviceRegistry, default_registry_path

log = logging.getLogger("gateway.devices.adopted")
_Question = Callable[[DeviceRegistry], Adopted | None]


class AdoptedIdentities:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_registry_path()
        self.unreadable: str | None = None
        """Why the registry could not be read at the last lookup; None when it could (or is not there)."""

    def lookup(self, digest: bytes) -> Adopted | None:
        """The adopted board whose secret has this SHA-256 digest (revoked or not); None when none has."""
        return self._ask(lambda registry: registry.by_digest(digest.hex()))

    def standing(self, identity: str | None) -> Adopted | None:
        """The adopted identity of this name when it still stands (adopted and not revoked), else None."""
        if identity is None or not identity.startswith(IDENTITY_PREFIX):
            return None
        found = self._ask(lambda registry: registry.adopted(identity[len(IDENTITY_PREFIX) :]))
        return found if found is not None and not found.revoked else None

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
        if self.unreadable is None:  # once until it is read again
            log.warning(
                "device registry %s cannot be read (%s): adopted boards are refused and revocations are not "
                "checked; let the gateway's user read the file and enter each directory above it "
                "(e.g. chown the state directory to the service user)",
                self.path,
                _reason(exc),
            )
        self.unreadable = _reason(exc)

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
