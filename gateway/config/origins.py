"""What an `allowed_origins` entry may be: an origin (`scheme://host[:port]`) or a pattern of one
(docs/security.md, "Origin and Host checks"). A browser sends exactly that form, so an entry with a
path, without a scheme, or with the scheme's default port could never match one, and a `*` for the
whole host would admit every site; refusing such an entry at load time names the mistake, where the
browser only shows a generic CORS error (or nothing at all, for the entry that admits everyone). An
IPv6 address stands in brackets and is rewritten to the one form a browser serialises; one without
brackets or with a zone id, which no browser sends, loads with a warning and is ignored."""

from __future__ import annotations

import ipaddress
import re

from gateway.config.hosts import NeverMatches, ipv6_text

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_PORT = re.compile(r"[1-9][0-9]{0,4}|\*")  # as a browser writes it: no leading zero
_LITERAL_TAIL = re.compile(r"(\.[a-z0-9_-]+){2,}")  # what follows a host's last '*': two labels or more
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin_of(entry: str) -> str:
    """The entry cut to `scheme://host[:port]`, for the hint in an error."""
    scheme, _, rest = entry.partition("://")
    for delimiter in "/?#":
        rest = rest.split(delimiter, 1)[0]
    return f"{scheme}://{rest}"


def _ipv6_host(entry: str, host: str, port: str | None) -> str:
    """The IPv6 literal host of an entry as a browser serialises it (`[fd00:0:0:0::2]` -> `[fd00::2]`,
    `[::ffff:127.0.0.1]` -> `[::ffff:7f00:1]`), or ValueError naming what is wrong."""
    if not host.startswith("["):
        try:
            ipaddress.IPv6Address(host.partition("%")[0])
        except ValueError:
            raise ValueError(
                f"{entry!r}: the host is neither a name nor an IPv6 address in brackets ('http://[fd00::2]:8080')"
            ) from None
        written = f"[{host}]" + (f":{port}" if port is not None else "")
        raise NeverMatches(
            f"allowed_origins entry {entry!r} never matches and is ignored: an IPv6 address in an origin stands "
            f"in brackets, as a browser sends it: write e.g. '{entry.split('://', 1)[0].strip().lower()}://{written}'"
        )
    if not host.endswith("]") or host.count("[") != 1 or host.count("]") != 1:
        raise ValueError(f"{entry!r}: the IPv6 address has no closing ']' (write e.g. 'http://[fd00::2]:8080')")
    literal = host[1:-1]
    if "*" in literal:
        raise ValueError(f"{entry!r}: a '*' cannot stand for part of an IPv6 address; list each address")
    if "%" in literal:
        raise NeverMatches(
            f"allowed_origins entry {entry!r} never matches and is ignored: a browser sends no zone id ('%...') "
            "in Origin; leave it out"
        )
    try:
        address = ipaddress.IPv6Address(literal)
    except ValueError:
        raise ValueError(f"{entry!r}: {literal!r} is not an IPv6 address") from None
    return f"[{ipv6_text(address)}]"


def check_origin_entry(entry: str) -> str:
    """The entry without surrounding spaces, its host in the form a browser sends (punycode, an IPv6
    address as the browser serialises it); NeverMatches for an entry no browser's Origin can match
    (an IPv6 address without brackets or with a zone id), ValueError for a malformed or unsafe one."""
    text = entry.strip().lower()
    if text == "*":
        raise ValueError(
            "'*' would admit every web page to the gateway; list each console's origin instead, "
            "e.g. 'https://console.plant.lan' or 'http://localhost:*'"
        )
    if text == "null":
        raise ValueError(
            "'null' is the Origin of sandboxed frames and local files, which any page can send; "
            "serve the console from an http(s) origin and list that"
        )
    scheme, separator, rest = text.partition("://")
    if not separator or not _SCHEME.fullmatch(scheme):
        raise ValueError(f"{entry!r} has no scheme: an origin is scheme://host[:port], e.g. 'http://{text}'")
    if rest.endswith("/"):
        rest = rest[:-1]
    if any(delimiter in rest for delimiter in "/?#"):
        raise ValueError(
            f"{entry!r} is a URL, not an origin: browsers send only scheme://host[:port]; write {_origin_of(text)!r}"
        )
    if "@" in rest:
        raise ValueError(f"{entry!r}: an origin names no user, only scheme://host[:port]")
    host, port = rest, None
    closing = rest.rfind("]")
    colon = rest.rfind(":")
    if colon > closing:
        host, port = rest[:colon], rest[colon + 1 :]
    if not host:
        raise ValueError(f"{entry!r} names no host")
    given_host = host
    if host.startswith("[") or host.endswith("]") or ":" in host:
        host = _ipv6_host(entry, host, port)
    if not host.isascii():
        # A browser sends an internationalised name in its ASCII (punycode) form.
        try:
            host = ".".join(label if label == "*" else label.encode("idna").decode() for label in host.split("."))
        except UnicodeError as exc:
            raise ValueError(f"{entry!r}: the host is not a valid internationalised name ({exc})") from None
    if "*" in host and not _LITERAL_TAIL.fullmatch(host.rsplit("*", 1)[1]):
        raise ValueError(
            f"{entry!r} would admit pages of sites not yours: a '*' in the host stands for labels under a "
            "domain of yours of two labels or more, as in 'https://*.plant.lan' ('*.com', '*.lan' admit anyone's)"
        )
    if port is not None:
        if not _PORT.fullmatch(port) or (port != "*" and int(port) > 65535):
            raise ValueError(f"{entry!r}: the port must be 1 to 65535 without leading zeros, or '*' (any port)")
        if port != "*" and _DEFAULT_PORTS.get(scheme) == int(port):
            raise ValueError(f"{entry!r}: a browser leaves the default port out of Origin; write '{scheme}://{host}'")
    if host != given_host:
        return f"{scheme}://{host}" + (f":{port}" if port is not None else "")
    return entry.strip()


def usable_origins(entries: list[str]) -> list[str]:
    """The allowed_origins entries the Origin check compares: those a browser's Origin can match."""
    usable = []
    for entry in entries:
        try:
            check_origin_entry(entry)
        except NeverMatches:
            continue
        except ValueError:
            pass  # refused when the configuration loads; a caller's own list is taken as given
        usable.append(entry)
    return usable
