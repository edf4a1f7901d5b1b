"""Tool names in the aggregate (WIRE.md §6): `<slot>-<tool>`, safe characters, at most 64, unique."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME = 64
HASH_DIGITS = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def sanitize(text: str) -> str:
    return _UNSAFE.sub("_", text)


def _short_hash(slot: str, tool: str) -> str:
    return hashlib.sha256(f"{slot}\x00{tool}".encode("utf-8", errors="surrogatepass")).hexdigest()[:HASH_DIGITS]


def base_name(slot: str, tool: str, separator: str = "-") -> str:
    """The name before collision handling; long names are cut and given a hash of the full pair."""
    name = sanitize(f"{slot}{separator}{tool}")
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - HASH_DIGITS - 1]}-{_short_hash(slot, tool)}"
    return name


def aggregate_names(entries: Iterable[tuple[str, str]], separator: str = "-") -> dict[str, tuple[str, str]]:
    """Map each (slot, tool), in the given order, to a unique aggregate name.

    The caller fixes the order (slots sorted by name, tools in provider order), so the same
    membership always yields the same names; a collision keeps the first and suffixes the rest
    with -2, -3, ... cut so that the whole name still fits in 64 characters.
    """
    names: dict[str, tuple[str, str]] = {}
    for slot, tool in entries:
        base = base_name(slot, tool, separator)
        name = base
        counter = 2
        while name in names:
            suffix = f"-{counter}"
            name = base[: MAX_NAME - len(suffix)] + suffix
            counter += 1
        names[name] = (slot, tool)
    return names
