"""Tables for a person at a terminal: cells in columns two spaces apart, no trailing blanks."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.client import display_width, padded


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """`header` and `rows` as lines, each column as wide as its widest cell in terminal columns (a CJK
    character takes two)."""
    table = [header, *rows]
    widths = [max(display_width(line[column]) for line in table) for column in range(len(header))]
    return "\n".join(
        "  ".join(padded(cell, width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )
