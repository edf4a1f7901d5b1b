"""Which tool names from a provider the gateway shows its clients (docs/provider-api.md, "Tool names").

MCP (2025-11-25) says a tool name SHOULD be 1 to 128 characters and unique within its server. A client
shows names to people and models and calls tools by them, so a name is left out of the list when it
is empty or longer than 128 characters, when it holds a character that does not show as itself (a
control character such as a newline, a bidirectional control such as U+202E that reorders the text
around it, another format character such as a zero-width space, a line or paragraph separator), or
when an earlier tool of the same list has the same name.
"""

from __future__ import annotations

import unicodedata

MAX_NAME_CHARS = 128
"""The longest name MCP 2025-11-25 says a tool should have."""
BIDI_CONTROLS = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))
HIDDEN_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
SHOWN_CHARS = 40
"""How much of a long name a warning quotes."""


def name_problem(name: str) -> str | None:
    """Why `name` is not shown to clients, or None when it may be."""
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name)} characters long, over {MAX_NAME_CHARS}"
    if name.isascii() and name.isprintable():
        return None  # every usual name: no character to look at one by one
    for char in name:
        if char in BIDI_CONTROLS:
            return f"it holds the bidirectional control U+{ord(char):04X}"
        kind = HIDDEN_CATEGORIES.get(unicodedata.category(char))
        if kind is not None:
            return f"it holds {kind}, U+{ord(char):04X}"
    return None


def shown(name: str) -> str:
    """`name` as a log line may quote it: escaped (repr), a long one cut to its start and its length."""
    if len(name) <= SHOWN_CHARS:
        return repr(name)
    return f"{name[:SHOWN_CHARS]!r}… ({len(name)} characters)"
