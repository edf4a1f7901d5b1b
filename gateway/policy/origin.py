"""The one Origin/Host predicate applied to every HTTP and WebSocket entry (docs/security.md, "Origin and Host checks").

A request with an Origin header passes only if that origin is allowed; one without (native clients,
boards) passes. While bound to loopback, the Host header must name this machine, which defeats DNS
rebinding (a hostile page whose name resolves to 127.0.0.1); so must an absolute-form request target
(`POST http://evil.example/...`), whose authority names the server in place of Host (RFC 9112 §3.2.2),
and a request without Host (HTTP/1.0 allows one) is refused. Two Origin or two Host headers make a
malformed request (RFC 6454 §7.3, RFC 9112 §3.2): which one would count is anybody's guess. The Host
is read strictly as `host[:port]` (gateway/config/hosts.py): `[::1].evil.example` or `[::1]@evil` names
no host and is refused, and IP literals compare as addresses (`[0:0::1]:3000` names ::1).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.config.hosts import Authority, HostAllowList, MalformedAuthority, parse_authority
from gateway.config.origins import usable_origins

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
_PORT_CHARS = frozenset("0123456789")
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


class _Pattern:
    """'http://localhost:*' matches any port; 'https://*.plant.lan' any subdomain; else exact.

    A '*' after ':' stands for one or more digits, any other '*' for one or more host characters
    (letters, digits, '_', '.', '-'); everything else is literal; case-insensitive. Matched by
    stepping a set of pattern positions through the origin once (a Thompson NFA), so the time is
    linear in the Origin header whatever the stars: a backtracking regex took seconds of the event
    loop on one crafted header against a pattern such as 'https://*.*.*.plant.lan' (found by fuzzing)."""

    def __init__(self, origin: str) -> None:
        self.tokens: list[str | frozenset[str]] = []
        for index, piece in enumerate(origin.lower().split("*")):
            if index:
                after_colon = bool(self.tokens) and self.tokens[-1] == ":"
                self.tokens.append(_PORT_CHARS if after_colon else _HOST_CHARS)
            self.tokens.extend(piece)

    def fullmatch(self, text: str) -> bool:
        tokens = self.tokens
        # (i, inside): tokens[:i] are matched; inside means the star tokens[i] has taken a character
        # already and may take more (or end, which is state (i + 1, False)).
        states = {(0, False)}
        for char in text.lower():
            following: set[tuple[int, bool]] = set()
            for index, inside in states:
                if index == len(tokens):
                    continue
                token = tokens[index]
                if isinstance(token, str):
                    if not inside and char == token:
                        following.add((index + 1, False))
                elif char in token:
                    following.add((index, True))
                    following.add((index + 1, False))
            if not following:
                return False
            states = following
        return (len(tokens), False) in states


def _spellings(origin: str) -> tuple[str, ...]:
    """An entry and, for one ending in ':*' (any port), the entry without a port: a browser leaves the
    scheme's default port out (`http://localhost`, not `http://localhost:80`)."""
    if origin.endswith(":*"):
        return (origin, origin[:-2])
    return (origin,)


@functools.lru_cache(maxsize=64)  # every request sends one of a few Host values; any may arrive
def _host_of(host: str) -> Authority | str:
    """A Host header (or a request target's authority) read strictly ('[::1]:3000' -> ::1, port 3000),
    or why it is malformed: text after ']' ('[::1].evil.example'), an '@', a second ':'."""
    text = host.strip()
    if not text:
        return Authority("", None)  # names no host: refused while bound to loopback, as a missing Host is
    try:
        return parse_authority(text)
    except MalformedAuthority as exc:
        return str(exc)


def target_authority(target: str) -> str | None:
    """The host (and port) a raw request target names: the authority of an absolute-form target
    (`http://evil.example:3000/x` -> 'evil.example:3000', userinfo left out) or an authority-form one
    (CONNECT); None for the origin-form path every client sends a server ('/x') and for '*'."""
    if target.startswith("/") or target == "*":
        return None
    _, separator, rest = target.partition("://")
    if not separator:
        return target
    end = len(rest)
    for delimiter in "/?#":
        found = rest.find(delimiter)
        if found != -1:
            end = min(end, found)
    return rest[:end].rpartition("@")[2]


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str
    description: str


class OriginPolicy:
    def __init__(
        self, allowed_origins: list[str], loopback_only: bool, allowed_hosts: list[str], bind_host: str
    ) -> None:
        self.allowed_origins = list(allowed_origins)
        self._patterns = [
            _Pattern(text) for origin in usable_origins(allowed_origins) for text in _spellings(origin.rstrip("/"))
        ]
        self.loopback_only = loopback_only
        # Compared as addresses: bound to 0:0:0:0:0:0:0:1, a Host of [::1]:3000 names it too.
        self.allowed_hosts = HostAllowList((*LOOPBACK_HOSTS, bind_host), allowed_hosts)

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None:
            return True
        return any(pattern.fullmatch(origin) for pattern in self._patterns)

    def own_origin(self, origin: str | None, host: str | None) -> bool:
        """Whether `origin` is this gateway's own origin: the Host it was reached at, when that Host
        names this gateway (a loopback name, the bind address, or an allowed_hosts entry).

        Only a page served from this very host and port carries that origin, and the gateway serves
        no pages, so admitting it opens nothing; a rebinding page carries its own name (evil.com),
        which is never one of this gateway's. MCP clients that send an Origin equal to the URL they
        talk to (the conformance suite does) are therefore served without configuration."""
        if origin is None or host is None:
            return False
        reached = _host_of(host)
        if isinstance(reached, str) or not self.allowed_hosts.admits(reached):
            return False
        scheme, separator, authority = origin.rstrip("/").partition("://")
        if not separator or scheme.lower() not in ("http", "https"):
            return False
        sent = _host_of(authority)
        return sent == reached

    def check_request(self, origins: Sequence[str], hosts: Sequence[str], target: str) -> Refusal | None:
        """The verdict on one request: every Origin and every Host header it carries, in order, and its
        raw request target (the path as sent, absolute-form included)."""
        if len(origins) > 1:
            return Refusal(
                400,
                "duplicate_origin",
                f"The request carries {len(origins)} Origin headers; a browser sends one. "
                "Send at most one Origin header.",
            )
        if len(hosts) > 1:
            return Refusal(
                400,
                "duplicate_host",
                f"The request carries {len(hosts)} Host headers; HTTP allows exactly one. "
                "Send one Host header naming this gateway.",
            )
        origin = origins[0] if origins else None
        host = hosts[0] if hosts else None
        authority = None if target[:1] == "/" else target_authority(target)  # nearly every request: a path
        if authority is None:
            return self.check(origin, host)
        # Absolute-form: the target's authority names the server, not Host (RFC 9112 §3.2.2); a Host
        # sent along must name this gateway too, so neither name can smuggle the other past the guard.
        refusal = self.check(origin, authority)
        if refusal is not None and refusal.error == "host_not_allowed":
            return Refusal(
                403,
                "host_not_allowed",
                f"The request target names {authority!r}, not this gateway (an absolute-form target, as sent to a "
                "proxy). While bound to loopback only localhost names are accepted (DNS-rebinding guard); send the "
                "path alone (POST /<slot>/mcp), or add the name to allowed_hosts if it is yours.",
            )
        if refusal is None and host is not None:
            refusal = self.check(None, host)
        return refusal

    def check(self, origin: str | None, host: str | None) -> Refusal | None:
        """The verdict on one Origin (None: none sent) and the name the request was sent to (None: no Host)."""
        # The common case (no Origin, a loopback Host) decided inline: this runs on every request.
        if origin is not None and not self.origin_allowed(origin) and not self.own_origin(origin, host):
            return Refusal(
                403,
                "origin_not_allowed",
                f"Origin {origin!r} is not allowed. Browsers are refused unless their origin is configured: add it to "
                "allowed_origins in the config file, or set MCP_GATEWAY_ALLOWED_ORIGINS='[\"<origin>\"]'.",
            )
        if not self.loopback_only:
            return None
        reached = None if host is None else _host_of(host)
        if reached is None:
            # Only HTTP/1.0 may leave Host out; a request naming no host proves nothing about its page.
            return Refusal(
                403,
                "host_not_allowed",
                "The request has no Host header. While bound to loopback the Host must name this gateway "
                "(DNS-rebinding guard): send Host: localhost (every HTTP/1.1 client does).",
            )
        if isinstance(reached, str):
            return Refusal(
                403,
                "host_not_allowed",
                f"The Host is malformed: {reached}. While bound to loopback the Host must name this gateway "
                "(DNS-rebinding guard): send Host: <name or address>[:<port>], an IPv6 address in brackets "
                "([::1]:3000).",
            )
        if not self.allowed_hosts.admits(reached):
            return Refusal(
                403,
                "host_not_allowed",
                f"Host {host!r} is not a name of this gateway. While bound to loopback only localhost names are "
                "accepted (DNS-rebinding guard); add the name to allowed_hosts if it is yours.",
            )
        return None
