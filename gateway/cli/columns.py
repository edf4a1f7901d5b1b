"""Tables for a person at a terminal: cells in columns two spaces apart, no trailing blanks."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """`header` and `rows` as lines, each column as wide as its widest cell."""
    table = [header, *rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )
