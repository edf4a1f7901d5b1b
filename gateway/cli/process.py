"""What a command's process needs before anything else: the three standard descriptors open."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

STANDARD_DESCRIPTORS = (0, 1, 2)


def reopen_standard_descriptors() -> None:
    """Open each of fds 0, 1 and 2 that is closed (`mcp-gateway run <&- >&-`) onto /dev/null, and give
    Python's sys.stdin, sys.stdout and sys.stderr a stream on it when it has none.

    Left closed, the next file or socket the process opens takes that number: the event loop's signal
    wake-up socket then is fd 0 or 1 (uvloop aborts on it at the first signal), a log line to stderr
    goes into whatever holds fd 2, and print() to a closed stdout is lost or fails."""
    for descriptor in STANDARD_DESCRIPTORS:
        try:
            os.fstat(descriptor)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, as 0-2 go in order
            if opened != descriptor:
                os.dup2(opened, descriptor)
                os.close(opened)
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 (the process's own, for its life)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115


def utf8_arguments(argv: Sequence[str]) -> list[str]:
    """The command line as the UTF-8 a terminal sends, also under a locale Python reads as ASCII
    (`LC_ALL=C` with `PYTHONUTF8=0`): there `pompe à eau` arrives as surrogate escapes, which no URL,
    JSON or file name accepts. Bytes that are no UTF-8 keep their escapes."""
    return [os.fsencode(arg).decode("utf-8", errors="surrogateescape") for arg in argv]


def not_utf8(text: str) -> str | None:
    """`text` with its bytes that are no UTF-8 written as `\\xe9`, when it holds any (the escapes
    `utf8_arguments` keeps); None for text that is UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape" if _escapes_only(text) else "backslashreplace").decode(
            "utf-8", "backslashreplace"
        )
    return None


def _escapes_only(text: str) -> bool:
    """Every surrogate in `text` is one of surrogateescape's (U+DC80 to U+DCFF, a byte it could not decode)."""
    return all(not 0xD800 <= ord(char) <= 0xDFFF or 0xDC80 <= ord(char) <= 0xDCFF for char in text)
