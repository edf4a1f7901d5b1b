"""What the stdio bridge (gateway/northbound/stdio_bridge.py) authenticates its requests with.

A bearer token, or an [auth.hmac] key that signs each request afresh (hmac_signing.py). The key's
secret file is read again before signing whenever it changed (modification or change time, size or
inode), so a rotated secret needs no restart of the bridge. A refusal the credentials can answer is
resent: signed before the gateway started (a few times, a second apart), or a signature that does not
match when the secret file holds a different secret now (once).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.config.auth import read_secret_file
from gateway.policy import hmac_signing

log = logging.getLogger("gateway.stdio")

BEFORE_START_RETRIES = 3
BEFORE_START_PAUSE_S = 1.0
"""A request refused as signed before the gateway started is signed again and resent this many times,
this long apart: enough for a clock a few seconds behind the gateway's, bounded so the host hears."""


class Credentials(Protocol):
    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]: ...

    def resend_after(self, status: int, body: Any, attempt: int) -> float | None:
        """After the gateway refused attempt `attempt` (0 first) with `status` and `body`: the pause
        before the request is sent again with fresh headers, or None to pass the refusal on."""
        ...


class NoCredentials:
    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        return {}

    def resend_after(self, status: int, body: Any, attempt: int) -> float | None:
        return None


@dataclass(frozen=True)
class BearerToken:
    token: str

    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def resend_after(self, status: int, body: Any, attempt: int) -> float | None:
        return None


class HmacKey:
    """Signs each request afresh with `key_id`'s secret, read again from `secret_file` when it changed."""

    def __init__(self, key_id: str, secret: bytes, secret_file: str | None = None) -> None:
        self.key_id = key_id
        self.secret = secret
        self.secret_file = secret_file
        self._file_state = self._stat()

    def _stat(self) -> tuple[int, int, int, int] | None:
        if self.secret_file is None:
            return None
        try:
            found = os.stat(self.secret_file)
        except OSError:
            return None
        # ctime as well: a same-size rewrite whose mtime is set back (cp -p, rsync -t) still moves it.
        return (found.st_mtime_ns, found.st_ctime_ns, found.st_size, found.st_ino)

    def read_again(self, *, force: bool = False) -> bool:
        """Read the secret file again when it changed (or when `force`); True when the secret differs."""
        state = self._stat()
        if self.secret_file is None or (state == self._file_state and not force):
            return False
        self._file_state = state
        try:
            secret = read_secret_file(self.secret_file, "--hmac-secret-file").encode("utf-8")
        except ValueError as exc:
            log.warning("%s; signing with the secret read before", exc)
            return False
        if secret == self.secret:
            return False
        self.secret = secret
        log.info("--hmac-secret-file %s changed: signing with the secret it holds now", self.secret_file)
        return True

    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        self.read_again()
        return hmac_signing.sign(self.key_id, self.secret, method, path, body)

    def resend_after(self, status: int, body: Any, attempt: int) -> float | None:
        description = body.get("error_description") if isinstance(body, dict) else None
        if status != 401 or not isinstance(description, str):
            return None
        if description.startswith(hmac_signing.SIGNED_BEFORE_START) and attempt < BEFORE_START_RETRIES:
            return BEFORE_START_PAUSE_S
        if description.startswith(hmac_signing.BAD_SIGNATURE) and self.read_again(force=True):
            return 0.0  # a rotated secret whose file kept its time and size: resend once with it
        return None
