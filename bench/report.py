"""Statistics over benchmark rounds and the tables the benchmarks print (pure functions, no I/O)."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Container, Sequence
from dataclasses import dataclass

MODES = ("legacy", "2026-07-28")
"""The protocol eras a benchmark's SDK clients speak (mcp.Client's `mode`)."""
MODE_LABELS = {"legacy": "session era", "2026-07-28": "2026-07-28"}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p95 of 400 calls is the 380th fastest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def ratio(value: float, baseline: float) -> float:
    if baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return math.nan
    return value / baseline


@dataclass
class Row:
    """One line of the table: a figure (median over rounds) for each path and how they compare."""

    metric: str
    unit: str
    direct: float | None  # None: the figure has no direct counterpart (gateway-only)
    gateway: float
    round_ratios: Sequence[float] = ()  # gateway/direct of each round
    target: str = ""  # e.g. "<= 1.10"; empty for figures that explain rather than judge
    limit: float | None = None
    higher_is_better: bool = False

    @property
    def ratio(self) -> float | None:
        """The median of the rounds' own ratios: each round pairs a direct and a gateway run taken
        back to back, so drift between rounds cancels out of it (the ratio of the two medians
        would not cancel it)."""
        if self.direct is None:
            return None
        finite = [value for value in self.round_ratios if not math.isnan(value)]
        return median(finite) if finite else ratio(self.gateway, self.direct)

    @property
    def verdict(self) -> str:
        value = self.ratio
        if self.limit is None or value is None:
            return ""
        if math.isnan(value):
            return "n/a"
        met = value >= self.limit if self.higher_is_better else value <= self.limit
        return "pass" if met else "MISS"


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "n/a"
    if unit in ("calls/s", "us"):
        return f"{value:,.0f}"
    if unit in ("MiB",):
        return f"{value:.1f}"
    if unit in ("KiB",):
        return f"{value:.0f}"
    return f"{value:.2f}"


def round_ratios(values: Sequence[float], baselines: Sequence[float]) -> list[float]:
    """Each round's value ÷ the baseline measured in the same round."""
    return [ratio(value, baseline) for value, baseline in zip(values, baselines, strict=True)]


def spread(ratios: Sequence[float]) -> str:
    """The lowest and highest round's ratio ("0.98-1.07"), or "" with fewer than two rounds."""
    finite = [value for value in ratios if not math.isnan(value)]
    if len(finite) < 2:
        return ""
    return f"{min(finite):.2f}-{max(finite):.2f}"


def render(rows: Sequence[Row]) -> str:
    """A Markdown table: pasteable into docs/performance.md as it is."""
    header = ["metric", "direct", "gateway", "ratio", "ratio range", "target", "result"]
    lines = []
    for row in rows:
        row_ratio = row.ratio
        lines.append(
            [
                f"{row.metric} ({row.unit})",
                _number(row.direct, row.unit),
                _number(row.gateway, row.unit),
                "-" if row_ratio is None else ("n/a" if math.isnan(row_ratio) else f"{row_ratio:.2f}x"),
                spread(row.round_ratios),
                row.target,
                row.verdict,
            ]
        )
    return markdown_table(header, lines, left=(0, 5, 6))


def markdown_table(header: Sequence[str], lines: Sequence[Sequence[str]], left: Container[int] = (0,)) -> str:
    """A Markdown table of text cells: the columns in `left` left-aligned (the metric's name), the
    figures right-aligned."""
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) for i in range(len(header))]

    def row(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells))
            + " |"
        )

    separator = "|" + "|".join(":" + "-" * (w + 1) if i in left else "-" * (w + 1) + ":" for i, w in enumerate(widths))
    return "\n".join([row(header), separator + "|", *(row(line) for line in lines)])


def parse_modes(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The protocol eras of a --modes value ("legacy,2026-07-28"); a parser error for any other."""
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes takes {', '.join(MODES)}; got {text!r}")
    return modes


def missed(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if row.verdict in ("MISS", "n/a")]
