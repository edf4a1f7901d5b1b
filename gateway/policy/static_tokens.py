"""Static client tokens: for small sites without an authorization server.

Tokens come from the configuration ([[auth.tokens]]: a SHA-256, or the token in an environment
variable or a file) and from token files written by `mcp-gateway token create`. Each maps to a named
principal with scopes. The presented token is hashed and compared with every known hash using
`hmac.compare_digest` (no early exit), so timing says nothing about which hash came close.

A static token is a long-lived secret: over plain HTTP it would cross the plant network readable by
anyone on the path. It is therefore accepted from another machine only when the listener serves TLS;
without TLS only clients on this machine may use one: a loopback peer, or a peer whose address is the
listener's own (a client here calling a gateway bound to a LAN address, which has no loopback listener;
the kernel carries that connection over loopback, and drops a packet from outside that claims a local
source). A reverse proxy on this machine that terminates TLS counts as such a client.

Token files are re-read when they change (checked at most once a second), so `token create` and
revoking by deleting an entry need no restart. A file that becomes invalid, or clashes with
another token (a name or token used twice), keeps its previous tokens: logged as an error and shown by
broker_diagnose as auth.token_file_unusable until the file is used again. A file that disappears
revokes its tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.config import ConfigError, GatewayConfig
from gateway.core.broker.problems import STANDING, Problem
from gateway.core.principal import Principal
from gateway.policy.token_files import TokenClash, TokenFileError, TokenSource, read_token_file
from gateway.policy.token_files import check_unique as check_unique_tokens
from gateway.policy.verifier import AuthFailure, Endpoint, is_loopback_peer
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.static_tokens")

RELOAD_CHECK_S = 1.0
"""How often (at most) token files are checked for changes, on the request path."""
TOKEN_FILE_UNUSABLE = "auth.token_file_unusable"
"""broker_diagnose's problem for a token file that changed but cannot be used."""


@dataclass(frozen=True)
class StaticToken:
    principal: Principal
    digest: bytes
    """Raw SHA-256 of the token."""
    origin: str
    """Where it was configured ("config" or a token file path), for error messages."""


FileStamp = tuple[int, int, int, int]  # (inode, size, mtime_ns, ctime_ns)


def _stamp(path: Path) -> FileStamp | None:
    try:
        info = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    # The change time too: an in-place edit of the same size whose mtime is set back (cp -p, rsync -t,
    # touch -r) keeps inode, size and mtime, but every write and chmod moves ctime, which no user can set.
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def tokens_from_file(path: Path) -> list[StaticToken]:
    return [
        StaticToken(Principal(entry.name, "token", frozenset(entry.scopes)), bytes.fromhex(entry.sha256), str(path))
        for entry in read_token_file(path)
    ]


def check_unique(tokens: list[StaticToken]) -> None:
    """Two tokens with one name, or one token under two names, would make the caller ambiguous (the rule
    `mcp-gateway token create` and `revoke` check before they write, token_files.check_unique)."""
    check_unique_tokens(TokenSource(token.principal.name, token.origin, token.digest.hex()) for token in tokens)


def _address(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not isinstance(text, str):
        return None
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def from_this_machine(request: web.Request) -> bool:
    """True when the caller runs on the gateway's machine: a loopback peer, or a TCP peer whose address
    is the one the connection reached (the listener's own)."""
    if is_loopback_peer(request.remote):
        return True
    transport = request.transport
    if transport is None:
        return False
    peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
    if not (isinstance(peer, tuple) and isinstance(local, tuple) and peer and local):
        return False
    address = _address(peer[0])
    return address is not None and address == _address(local[0])


def _clash_fix(exc: TokenFileError) -> str:
    """The way out of a clash: a name used twice is undone at either place; one token under two names
    must go at both, since removing one name lets the file load and the token with it under the other."""
    if isinstance(exc, TokenClash) and exc.names[0] != exc.names[1]:
        first, second = exc.names
        return (
            f"One token under two names ({first!r}, {second!r}): removing either name leaves the token accepted "
            "under the other. To withdraw it, remove both (`mcp-gateway token revoke NAME --file FILE` for a "
            "token file, the [[auth.tokens]] entry and `mcp-gateway reload` for the configuration); to keep it "
            "for one caller, remove only the copy, and it stays valid for that caller."
        )
    return (
        "A name used twice: revoke one (`mcp-gateway token revoke NAME --file FILE`), or remove the "
        "[[auth.tokens]] entry and run `mcp-gateway reload`."
    )


def _untold() -> None:
    return None


def regranted(before: Mapping[str, frozenset[str]], after: Mapping[str, frozenset[str]]) -> bool:
    """Whether a caller in both holds other scopes now: its sessions' tool lists at _all and the tool
    groups may differ. A caller added has no session yet, and one removed is refused from its next request."""
    return any(name in after and after[name] != scopes for name, scopes in before.items())


class StaticTokenVerifier:
    kind = "token"

    def __init__(
        self,
        configured: list[StaticToken],
        files: list[Path],
        *,
        tls: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configured = configured
        self.files = files
        self.tls = tls
        self.clock = clock
        self.by_file: dict[Path, list[StaticToken]] = {}
        self.stamps: dict[Path, FileStamp | None] = {}
        self.unusable: dict[Path, str] = {}
        """Files that changed but cannot be used (kept at their previous tokens), and why."""
        for path in files:
            self.stamps[path] = _stamp(path)
            self.by_file[path] = tokens_from_file(path)
        self.tokens = self._combine()
        self.checked_at = clock()
        self._watching: asyncio.Task[None] | None = None
        self._reading = False
        """The watcher is reading token files in a thread (_reload_off_loop)."""
        self.grants_changed: Callable[[], None] = _untold
        """Called when a token file's edit changed who holds which scopes (ClientAuth points it at its
        scopes_changed: _all and the tool groups show each caller the tools its scopes cover)."""

    @classmethod
    def from_config(cls, config: GatewayConfig, metrics: Metrics) -> StaticTokenVerifier | None:
        auth = config.auth
        if not auth.tokens and not auth.token_files:
            return None
        configured = [
            StaticToken(Principal(entry.name, "token", frozenset(entry.scopes)), bytes.fromhex(entry.digest), "config")
            for entry in auth.tokens
        ]
        try:
            return cls(configured, [Path(name) for name in auth.token_files], tls=config.tls.enabled)
        except TokenFileError as exc:
            raise ConfigError(f"auth.token_files: {exc}") from exc

    def _combine(self) -> list[StaticToken]:
        tokens = [*self.configured, *(token for path in self.files for token in self.by_file.get(path, []))]
        check_unique(tokens)
        return tokens

    def reload_if_changed(self) -> None:
        """Pick up token files edited since the last look (at most once per RELOAD_CHECK_S). A file that
        cannot be used is looked at again every time, changed or not: the clash that stops it may be
        mended in another file or by a reload of [[auth.tokens]]."""
        due = self._due()
        if due:
            self._apply(due, self._read(due))

    async def _reload_off_loop(self) -> None:
        """reload_if_changed with the files read in a thread: a slow file system does not hold the event
        loop. Meanwhile a request's own look (verify) is skipped and the tokens in force answer it."""
        due = self._due()
        if not due:
            return
        self._reading = True
        try:
            read = await asyncio.to_thread(self._read, due)
        finally:
            self._reading = False
        self._apply(due, read)

    def _due(self) -> list[tuple[Path, FileStamp | None]]:
        """The files to read again with their stamps (a stat each, cheap), when a look is due."""
        now = self.clock()
        if self._reading or now - self.checked_at < RELOAD_CHECK_S:
            return []
        self.checked_at = now
        due = []
        # Unusable files last: an edit of another file in this same look may be what mends them.
        for path in sorted(self.files, key=lambda path: path in self.unusable):
            stamp = _stamp(path)
            if stamp != self.stamps.get(path) or path in self.unusable:
                due.append((path, stamp))
        return due

    @staticmethod
    def _read(due: list[tuple[Path, FileStamp | None]]) -> dict[Path, list[StaticToken] | TokenFileError]:
        """Each file's tokens, or why it cannot be used; touches nothing else, so it may run in a thread."""
        read: dict[Path, list[StaticToken] | TokenFileError] = {}
        for path, stamp in due:
            if stamp is None:
                continue
            try:
                read[path] = tokens_from_file(path)
            except TokenFileError as exc:
                read[path] = exc
        return read

    def _apply(
        self, due: list[tuple[Path, FileStamp | None]], read: Mapping[Path, list[StaticToken] | TokenFileError]
    ) -> None:
        before = self.grants()
        for path, stamp in due:
            self.stamps[path] = stamp
            previous = self.by_file.get(path, [])
            if stamp is None:
                # Deleting the file revokes its tokens (fail closed).
                self.by_file[path] = []
                self._usable(path)
                log.warning("token file %s is gone: its %d tokens no longer work", path, len(previous))
                continue
            try:
                tokens = read[path]
                if isinstance(tokens, TokenFileError):
                    raise tokens
                self.by_file[path] = tokens
                self.tokens = self._combine()
            except TokenFileError as exc:
                self.by_file[path] = previous
                self._unusable(path, exc)
                continue
            self._usable(path)
            log.info("token file %s reloaded: %d tokens", path, len(self.by_file[path]))
        self.tokens = self._combine()
        if regranted(before, self.grants()):
            self.grants_changed()

    def _unusable(self, path: Path, exc: TokenFileError) -> None:
        """Keep `path`'s previous tokens and say so: one error line per reason, and a standing problem in
        broker_diagnose until the file is used again (an edit that revokes a token does not apply meanwhile)."""
        reason = str(exc)
        if self.unusable.get(path) != reason:
            log.error("token file %s changed but cannot be used, keeping its previous tokens: %s", path, reason)
        self.unusable[path] = reason
        STANDING.report(
            f"{TOKEN_FILE_UNUSABLE}:{path}",
            Problem(
                TOKEN_FILE_UNUSABLE,
                "error",
                f"The token file {path} changed but cannot be used: the gateway keeps its previous tokens, so "
                "tokens revoked or changed in it since are still accepted as they were",
                f"{path}: {reason}",
                "Mend the file: `mcp-gateway token list --config CONFIG` checks it with [[auth.tokens]] and every "
                f"token file, as the gateway does. {_clash_fix(exc)} The gateway uses the file within "
                f"{RELOAD_CHECK_S:g} s of it loading and withdraws this problem; until then a restart fails.",
            ),
        )

    def _usable(self, path: Path) -> None:
        if self.unusable.pop(path, None) is not None:
            log.info("token file %s can be used again", path)
        STANDING.withdraw(f"{TOKEN_FILE_UNUSABLE}:{path}")

    def grants(self) -> dict[str, frozenset[str]]:
        """Each token's caller (names are unique) and the scopes it holds."""
        return {token.principal.name: token.principal.scopes for token in self.tokens}

    def match(self, bearer: str) -> StaticToken | None:
        digest = hashlib.sha256(bearer.encode("utf-8")).digest()
        found: StaticToken | None = None
        for token in self.tokens:  # every one, no early exit
            if hmac.compare_digest(token.digest, digest):
                found = token
        return found

    async def verify(
        self, request: web.Request, bearer: str | None, endpoint: Endpoint
    ) -> Principal | AuthFailure | None:
        if bearer is None:
            return None
        if self.files:
            self.reload_if_changed()
        token = self.match(bearer)
        if token is None:
            return None
        if not self.tls and not from_this_machine(request):
            return AuthFailure(
                "not_tls",
                "Static tokens are accepted from other machines only over TLS, and this gateway serves plain "
                "HTTP: configure [tls] on the gateway (the token may have been seen on the way; replace it), "
                "or call from the gateway's own machine.",
            )
        return token.principal

    def posture(self) -> dict[str, Any]:
        return {"static_tokens": len(self.tokens)}

    async def start(self) -> None:
        # Looked at on a schedule of its own too, not only when a request presents a token: an idle
        # connection's revocation and the list_changed of an edited token's scopes wait for no request.
        if self.files and self._watching is None:
            self._watching = asyncio.get_running_loop().create_task(self._watch_files())

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_CHECK_S)
            await self._reload_off_loop()

    async def close(self) -> None:
        for path in self.unusable:
            STANDING.withdraw(f"{TOKEN_FILE_UNUSABLE}:{path}")
        self.unusable.clear()
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
