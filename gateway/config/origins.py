"""What an `allowed_origins` entry may be: an origin (`scheme://host[:port]`) or a pattern of one
(docs/security.md, "Origin and Host checks"). A browser sends exactly that form, so an entry with a
path, without a scheme, or a bare `*` could never match one; refusing it at load time names the
mistake, where the browser only shows a generic CORS error."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_PORT = re.compile(r"[0-9]{1,5}|\*")


def _origin_of(entry: str) -> str:
    """The entry cut to `scheme://host[:port]`, for the hint in an error."""
    scheme, _, rest = entry.partition("://")
    for delimiter in "/?#":
        rest = rest.split(delimiter, 1)[0]
    return f"{scheme}://{rest}"


def check_origin_entry(entry: str) -> str:
    """The entry as given, or ValueError saying why no browser's Origin could ever match it."""
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
    if port is not None and not _PORT.fullmatch(port):
        raise ValueError(f"{entry!r}: the port must be digits or '*' (any port)")
    return entry
