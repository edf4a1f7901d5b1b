"""Text from the network as a terminal may show it: what does not print written as its JSON escape.

A leaf both the operator CLI (gateway.client) and LAN discovery use: a provider, a client or any host
advertising on the LAN chooses the characters, and an operator's terminal reads them.
"""

from __future__ import annotations

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    """One character as JSON writes it escaped: `\\n`, `\\u001b`, a surrogate pair past U+FFFF."""
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def terminal_text(text: str, lines: bool = False) -> str:
    """Text from a provider or a client (a tool's name, description, result) as a terminal may show it:
    each character that does not print (a C0 or C1 control character that starts an escape sequence, DEL,
    a carriage return that overwrites the line, a bidi or other format character that reorders it) written
    as its JSON escape (`\\u001b`). With `lines`, newline and tab stay (and CRLF is a newline), so that
    multi-line text stays multi-line; without, they are escaped too. JSON in, JSON out: an escape lands
    only inside a string, where it stands for the same character."""
    if lines:
        text = text.replace("\r\n", "\n")
    return "".join(char if char.isprintable() or (lines and char in "\n\t") else _escaped(char) for char in text)
