"""Host text as the gateway reads it: wildcard binds, the URL host of a bind address, allowed_hosts
entries, and the strict RFC 3986 authority (`host[:port]`) the Host check and the audience check share.

IP literals are compared as addresses (`[0:0::1]` is `[::1]`, `FD00::2` is `fd00::2`): `host_key` gives
the one spelling every comparison uses, IPv6 without brackets in the form a browser writes (ipv6_text)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_REG_NAME = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+")
"""An RFC 3986 reg-name (an IPv4 address is one too), not empty."""
_PORT = re.compile(r"[0-9]{0,5}")
_NAME = re.compile(r"[A-Za-z0-9\-._~]+")
"""An allowed_hosts name: what a client puts in Host for a DNS name."""


class MalformedAuthority(ValueError):
    """The text is not `host[:port]` as RFC 3986 writes an authority without user info; the message says why."""


@dataclass(frozen=True)
class Authority:
    host: str
    """host_key of the host: IPv6 as ipv6_text writes it (no brackets), IPv4 dotted, a name in lower case."""
    port: int | None
    """The port as written; None when the authority names none (or an empty one, `host:`)."""

    @property
    def url_host(self) -> str:
        """The host as a URL writes it (an IPv6 address in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host


def ipv6_text(address: ipaddress.IPv6Address) -> str:
    """`address` as a browser serialises it in a URL (WHATWG URL, RFC 5952): lower-case hex pieces
    without leading zeros, the first longest run of two or more zero pieces as '::', and hex even for
    an IPv4-mapped address (`::ffff:7f00:1`, not `::ffff:127.0.0.1`)."""
    value = int(address)
    pieces = [(value >> (112 - 16 * index)) & 0xFFFF for index in range(8)]
    best_start, best_length, start = -1, 1, -1
    for index, piece in enumerate([*pieces, 1]):
        if piece == 0 and start == -1:
            start = index
        elif piece != 0 and start != -1:
            if index - start > best_length:
                best_start, best_length = start, index - start
            start = -1
    if best_start == -1:
        return ":".join(f"{piece:x}" for piece in pieces)
    head = ":".join(f"{piece:x}" for piece in pieces[:best_start])
    tail = ":".join(f"{piece:x}" for piece in pieces[best_start + best_length :])
    return f"{head}::{tail}"


def host_key(host: str) -> str:
    """The one spelling of a host name or address that comparisons use (see the module text)."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text.lower()
    return ipv6_text(address) if isinstance(address, ipaddress.IPv6Address) else str(address)


def parse_authority(text: str) -> Authority:
    """`text` as an RFC 3986 authority without user info (a Host header, a URL's authority): `[IPv6]`
    or a reg-name / IPv4 address, optionally followed by `:` and the port's digits. Anything else (text
    after `]`, a second `:`, an `@`, a bad IPv6 literal, a zone id) raises MalformedAuthority."""
    if text.startswith("["):
        closing = text.find("]")
        if closing == -1:
            raise MalformedAuthority(f"{text!r}: the IPv6 literal has no closing ']'")
        literal, rest = text[1:closing], text[closing + 1 :]
        if rest and not rest.startswith(":"):
            raise MalformedAuthority(f"{text!r}: only ':' and a port may follow the IPv6 literal")
        if "%" in literal:
            raise MalformedAuthority(f"{text!r}: a zone id names an interface of the sender, not a host")
        try:
            host = ipv6_text(ipaddress.IPv6Address(literal))
        except ValueError:
            raise MalformedAuthority(f"{text!r}: {literal!r} inside the brackets is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        name, _, port_text = text.partition(":")
        if not _REG_NAME.fullmatch(name):
            raise MalformedAuthority(f"{text!r}: the host is not a name or address (RFC 3986 reg-name)")
        host = host_key(name)
    if not _PORT.fullmatch(port_text) or (port_text and int(port_text) > 65535):
        raise MalformedAuthority(f"{text!r}: the port must be digits only, 0 to 65535")
    return Authority(host, int(port_text) if port_text else None)


class NeverMatches(ValueError):
    """A config entry that is well formed but can never match a request (a zone id, an IPv6 origin
    without brackets, a '*' that would admit anyone's names): loaded, ignored, and warned of."""


_WILDCARD_DOMAIN = re.compile(r"(?:\.[a-z0-9_~-]+){2,}")
"""What follows '*' in an allowed_hosts wildcard: a domain of two labels or more ('.plant.lan')."""
_SUBDOMAIN = re.compile(r"[a-z0-9_~-]+(?:\.[a-z0-9_~-]+)*")
"""What a wildcard's '*' stands for in a Host: one label or more."""
_ALLOWED_HOST_FORMS = (
    "write a name ('gw.plant.lan'), a wildcard ('*.plant.lan') or an address ('10.0.0.5', '[fd00::2]'), "
    "optionally with ':port', without scheme"
)


@dataclass(frozen=True)
class AllowedHost:
    """One allowed_hosts entry as the Host check reads it."""

    host: str
    """host_key of the host; for a wildcard the domain under it ('plant.lan' for '*.plant.lan')."""
    port: int | None
    """The port a Host must name; None: any port, or none."""
    wildcard: bool = False

    @property
    def text(self) -> str:
        """The entry as the configuration keeps it: 'fd00::2', '[fd00::2]:3000', '*.plant.lan:3000'."""
        host = f"*.{self.host}" if self.wildcard else self.host
        if self.port is None:
            return host
        return f"{Authority(host, None).url_host}:{self.port}"

    def admits(self, authority: Authority) -> bool:
        if self.port is not None and authority.port != self.port:
            return False
        if not self.wildcard:
            return authority.host == self.host
        below, dot, domain = authority.host.rpartition("." + self.host)
        return bool(dot) and not domain and _SUBDOMAIN.fullmatch(below) is not None


def read_allowed_host(entry: str) -> AllowedHost:
    """An allowed_hosts entry as the Host check compares it: a name, an address (bracketed or not) or a
    subdomain wildcard ('*.plant.lan': one label or more under plant.lan), each optionally with ':port'
    (then a Host must name that port). NeverMatches for an entry no Host can match (a zone id, a '*'
    anywhere but as the first label of a domain of two labels or more); ValueError when malformed."""
    text = entry.strip()
    literal = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    address_part, percent, _ = literal.lstrip("[").partition("%")
    if percent:
        try:
            address = ipaddress.IPv6Address(address_part)
        except ValueError:
            pass
        else:
            raise NeverMatches(
                f"allowed_hosts entry {entry!r} never matches and is ignored: a Host header carries no zone id "
                f"('%...'); write the address alone ({ipv6_text(address)!r})"
            )
    if "://" in text:
        raise ValueError(f"allowed_hosts entry {entry!r} names a scheme: {_ALLOWED_HOST_FORMS}")
    try:
        return AllowedHost(host_key(str(ipaddress.ip_address(literal))), None)
    except ValueError:
        pass
    try:
        authority = parse_authority(text)
    except MalformedAuthority as exc:
        raise ValueError(f"allowed_hosts entry {exc}: {_ALLOWED_HOST_FORMS}") from None
    name = authority.host
    if text.startswith("["):  # parse_authority read the IPv6 literal
        return AllowedHost(name, authority.port)
    without_stars = name.replace("*", "")
    if without_stars and not _NAME.fullmatch(without_stars):
        raise ValueError(f"allowed_hosts entry {entry!r} is not a host name: {_ALLOWED_HOST_FORMS}")
    if "*" not in name:
        return AllowedHost(name, authority.port)
    domain = name[1:]
    if not name.startswith("*.") or not _WILDCARD_DOMAIN.fullmatch(domain) or domain.rsplit(".", 1)[1].isdigit():
        raise NeverMatches(
            f"allowed_hosts entry {entry!r} never matches and is ignored: a '*' stands only as the first label, "
            "for one label or more under a domain of yours of two labels or more, as in '*.plant.lan' "
            "('*', '*.lan' would admit names not yours; an address has no wildcard)"
        )
    return AllowedHost(domain[1:], authority.port, wildcard=True)


def check_allowed_host(entry: str) -> str:
    """An allowed_hosts entry as the configuration keeps it (read_allowed_host: `fd00::2`, `[fd00::2]`
    and `FD00::2` alike are `fd00::2`; `Pump-GW.plant.lan:3000` is `pump-gw.plant.lan:3000`), or
    NeverMatches / ValueError naming what is wrong."""
    return read_allowed_host(entry).text


class HostAllowList:
    """The hosts a Host header may name: `names` (the loopback names, the bind address) at any port,
    and the allowed_hosts `entries` as read_allowed_host reads them (one that never matches is left out)."""

    def __init__(self, names: Iterable[str], entries: Iterable[str]) -> None:
        self.any_port = {host_key(name) for name in names}
        self.with_port: set[tuple[str, int]] = set()
        self.wildcards: list[AllowedHost] = []
        for entry in entries:
            try:
                allowed = read_allowed_host(entry)
            except ValueError:  # NeverMatches; a malformed entry is refused when the configuration loads
                continue
            if allowed.wildcard:
                self.wildcards.append(allowed)
            elif allowed.port is None:
                self.any_port.add(allowed.host)
            else:
                self.with_port.add((allowed.host, allowed.port))

    def admits(self, authority: Authority) -> bool:
        """Whether a Host (or a URL's authority) read by parse_authority names one of these hosts."""
        if authority.host in self.any_port:
            return True
        if authority.port is not None and (authority.host, authority.port) in self.with_port:
            return True
        return any(wildcard.admits(authority) for wildcard in self.wildcards)


def is_wildcard(host: str) -> bool:
    """Whether binding `host` listens on every address: "" (both families), or an unspecified address
    in any spelling (`0.0.0.0`, `::`, `::0`, `0:0:0:0:0:0:0:0`)."""
    if host == "":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def url_host(bind_host: str) -> str:
    """The host of the URL the gateway reaches itself at when bound to `bind_host`: a wildcard of one
    family names that family's loopback (asyncio binds `::` IPv6-only, so 127.0.0.1 has nothing
    listening there: `[::1]`), "" (both families) 127.0.0.1, an IPv6 address in brackets."""
    if is_wildcard(bind_host):
        return "[::1]" if ":" in bind_host else "127.0.0.1"
    if ":" in bind_host and not bind_host.startswith("["):
        return f"[{bind_host}]"
    return bind_host
