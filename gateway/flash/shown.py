"""Text from outside the command (a file name, another process's command line) as a terminal may show it."""

from __future__ import annotations

from gateway.client import terminal_text

ELLIPSIS = "…"


def printable(text: str, limit: int | None = None) -> str:
    """`text` with each character that does not print (a control character that starts an escape
    sequence, a newline, a format character that reorders the line) written as its JSON escape
    (`\\u001b`, gateway.client.terminal_text); cut to `limit` characters, the last one an ellipsis,
    when it is longer."""
    shown = terminal_text(text)
    if limit is not None and len(shown) > limit:
        return shown[: max(limit - 1, 0)] + ELLIPSIS
    return shown
