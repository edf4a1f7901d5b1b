"""Tool names over many slots: `<slot><separator><tool>`, safe characters, at most 64, unique
(docs/protocol-clients.md, "`_all`", "Tool groups").

`_all` uses "-" (`<slot>-<tool>`); the tool-group endpoints /mcp use `groups_separator`, "__" by default
(`<slot>__<tool>`, as the original MCP bridge named them). The rules are the same for both."""

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


class NameBook:
    """Aggregate names that never change meaning while the gateway runs.

    The first time a (slot, tool) pair is seen it gets the rule's name (or a -2, -3, ... variant when
    another pair holds that name). From then on the pair keeps that name, and no other pair is ever
    given it, even after the pair's provider left. So a client holding an old tools/list can never
    reach a different device's tool by calling a name it remembers: the name either still means the
    same tool or is unknown. Up to `max_retired` names of departed pairs are remembered.
    """

    def __init__(self, separator: str = "-", max_retired: int = 4096) -> None:
        self.separator = separator
        self.max_retired = max_retired
        self.by_pair: dict[tuple[str, str], str] = {}
        self.by_name: dict[str, tuple[str, str]] = {}

    def names_for(self, entries: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """Map each present (slot, tool), in the given order, to its name."""
        current: dict[str, tuple[str, str]] = {}
        for pair in entries:
            name = self.by_pair.get(pair)
            if name is None:
                name = self._new_name(pair)
                self.by_pair[pair] = name
                self.by_name[name] = pair
            current[name] = pair
        self._forget_oldest_retired(current)
        return current

    def _new_name(self, pair: tuple[str, str]) -> str:
        base = base_name(pair[0], pair[1], self.separator)
        name = base
        counter = 2
        while name in self.by_name:
            suffix = f"-{counter}"
            name = base[: MAX_NAME - len(suffix)] + suffix
            counter += 1
        return name

    def _forget_oldest_retired(self, current: dict[str, tuple[str, str]]) -> None:
        retired = len(self.by_pair) - len(current)
        if retired <= self.max_retired:
            return
        for pair, name in list(self.by_pair.items()):  # insertion order: oldest first
            if retired <= self.max_retired:
                return
            if name not in current:
                del self.by_pair[pair]
                del self.by_name[name]
                retired -= 1


def aggregate_names(entries: Iterable[tuple[str, str]], separator: str = "-") -> dict[str, tuple[str, str]]:
    """Names for one membership seen fresh: (slot, tool) pairs in the given order to unique names.

    The caller fixes the order (slots sorted by name, tools in provider order), so the same
    membership always yields the same names; a collision keeps the first and suffixes the rest
    with -2, -3, ... cut so that the whole name still fits in 64 characters.
    """
    return NameBook(separator).names_for(entries)
