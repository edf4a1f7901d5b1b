"""Resource paths and the patterns rules name them by: exact, `*` within one segment, `**` for a subtree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SYSTEM_ROOT = "/_system"
"""Where the gateway's own slots live (`_broker` is /_system/broker); no mapping may put a slot there."""
BROKER_PATH = "/_system/broker"


class PatternError(ValueError):
    """A path or pattern that cannot be used; the message says why."""


@dataclass(frozen=True)
class PathPattern:
    """One compiled pattern: `matches(path)` is a single regular-expression match."""

    text: str
    _regex: re.Pattern[str] = field(repr=False, compare=False)

    def matches(self, path: str) -> bool:
        return self._regex.fullmatch(path) is not None


def segment(name: str) -> str:
    """A slot name as one path segment: a "/" in it (slot names may hold one) cannot add a level."""
    return name.replace("%", "%25").replace("/", "%2F")


def _segments(text: str, what: str) -> list[str]:
    if not text.startswith("/"):
        raise PatternError(f'{what} "{text}" must start with "/", e.g. "/site1/line2/pump-1"')
    if not text.isprintable():
        raise PatternError(f"{what} {text!r} holds control characters")
    if text == "/":
        return []
    parts = text[1:].split("/")
    if "" in parts:
        raise PatternError(f'{what} "{text}" has an empty segment ("//" or a trailing "/")')
    if any(part in (".", "..") for part in parts):
        raise PatternError(f'{what} "{text}" has a "." or ".." segment; write the path it means')
    return parts


def check_path(text: str) -> str:
    """`text` if it is an exact resource path (no wildcards), else PatternError."""
    if "*" in text:
        raise PatternError(f'resource path "{text}" holds "*": a slot maps to one exact path')
    _segments(text, "resource path")
    if text == SYSTEM_ROOT or text.startswith(SYSTEM_ROOT + "/"):
        raise PatternError(f'resource path "{text}" is under {SYSTEM_ROOT}, which is reserved for the gateway\'s slots')
    return text


def _segment_regex(chunks: list[str]) -> str:
    """The chunks of a segment between its "*"s as a regular expression that never backtracks into a
    "*": each chunk between two stars is taken at its first occurrence, in an atomic group (as
    fnmatch does), which matches whatever backtracking would, in time linear in the path. "a*b*c*d"
    with a plain [^/]* per star backtracked polynomially on a long slot name (8 stars: 43 s)."""
    first, *rest = (re.escape(chunk) for chunk in chunks)
    if not rest:
        return first
    *middle, last = rest
    return first + "".join(f"(?>[^/]*?{chunk})" for chunk in middle) + "[^/]*" + last


def compile_pattern(text: str) -> PathPattern:
    """Compile a rule's resource pattern once; PatternError says what is wrong with it."""
    parts = _segments(text, "pattern")
    subtree = bool(parts) and parts[-1] == "**"
    if subtree:
        parts = parts[:-1]
    pieces = []
    for part in parts:
        if "**" in part:
            raise PatternError(f'pattern "{text}": "**" stands alone as the last segment ("/site1/**")')
        # "*" is any run of characters within one segment, so "pump-*" matches "pump-3" but not "pump-3/x".
        pieces.append("/" + _segment_regex(part.split("*")))
    body = "".join(pieces)
    # "/site1/**" is /site1 itself and everything below it; "/**" is every path.
    regex = body + "(?:/.*)?" if subtree else (body or "/")
    return PathPattern(text, re.compile(regex, re.DOTALL))
