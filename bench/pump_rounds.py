"""What the pump benchmarks (pump_paths, mqtt, serial) share: their round options, the figures of
one timed round, and the table that compares each path with a baseline path.

Each of them times sequential `get_status` calls through the gateway on two or three paths to the
same pump code, in rotating rounds (bench.processes.rotating_rounds); a figure is the median over
rounds and a ratio the median of the per-round ratios against the baseline path.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.processes import rotating_rounds, timed_get_status
from bench.report import MODE_LABELS, MODES, markdown_table, median, parse_modes, percentile, round_ratios, spread

Figures = dict[str, dict[str, dict[str, list[float]]]]
"""figures[mode][path][name] -> one value per round."""

LATENCY_ROWS = (("median", "sequential get_status, median", "ms"), ("p95", "sequential get_status, p95", "ms"))


@dataclass
class RoundOptions:
    rounds: int
    calls: int
    warmup: int
    modes: Sequence[str]


def new_figures() -> Figures:
    return defaultdict(lambda: defaultdict(lambda: defaultdict(list)))


def add_round_arguments(parser: argparse.ArgumentParser, rounds_help: str) -> None:
    """--rounds, --calls, --warmup, --modes; the caller adds --quick (its help says what else it shortens)."""
    parser.add_argument("--rounds", type=int, help=f"{rounds_help} (default 5; quick 1)")
    parser.add_argument("--calls", type=int, help="timed calls per round, path and era (default 400; quick 20)")
    parser.add_argument("--warmup", type=int, help="untimed calls before each timed run (default 30; quick 3)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"protocol eras, comma-separated (default {MODES})")


def round_options(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    full: tuple[int, int, int] = (5, 400, 30),
    quick: tuple[int, int, int] = (1, 20, 3),
) -> RoundOptions:
    """The round options of parsed `args`: each one given, else its default (rounds, calls, warmup) of
    `full`, or of `quick` with --quick. A parser error for --rounds or --calls under 1, or --warmup
    under 0 (0 given stays 0: it is not the default)."""
    defaults = quick if args.quick else full
    options = RoundOptions(
        rounds=args.rounds if args.rounds is not None else defaults[0],
        calls=args.calls if args.calls is not None else defaults[1],
        warmup=args.warmup if args.warmup is not None else defaults[2],
        modes=parse_modes(parser, args.modes),
    )
    if options.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {options.rounds}")
    if options.calls < 1:
        parser.error(f"--calls must be at least 1, not {options.calls}")
    if options.warmup < 0:
        parser.error(f"--warmup must not be negative, not {options.warmup}")
    return options


async def timed_round(
    figures: Figures, options: RoundOptions, mode: str, path: str, url: str, cpu_of: dict[str, int]
) -> None:
    """One timed run of `path` in era `mode` against `url`: latency figures, and the CPU per call of
    each process in `cpu_of` (figure name -> pid)."""
    latencies, cpu = await timed_get_status(url, mode, options.calls, options.warmup, list(cpu_of.values()))
    into = figures[mode][path]
    into["median"].append(median(latencies) * 1000)
    into["p95"].append(percentile(latencies, 0.95) * 1000)
    for name, seconds in zip(cpu_of, cpu, strict=True):
        into[name].append(seconds / options.calls * 1e6)


async def all_rounds(
    options: RoundOptions, paths: Sequence[str], url_of: Callable[[str], str], cpu_of: Callable[[str], dict[str, int]]
) -> Figures:
    """Every timed round of a pump bench: `options.rounds` rotations over `paths` in every era, each
    path called at `url_of(path)` with the CPU of the processes `cpu_of(path)` names."""
    figures = new_figures()
    await rotating_rounds(
        options.rounds,
        options.modes,
        paths,
        lambda mode, path: timed_round(figures, options, mode, path, url_of(path), cpu_of(path)),
    )
    return figures


def render(
    figures: Figures,
    modes: Sequence[str],
    rows: Sequence[tuple[str, str, str]],
    columns: dict[str, str],
    ratios: Sequence[tuple[str, str, str]],
) -> str:
    """A Markdown table: one line per era and row (key, label, unit), one column per path (path ->
    header), then one ratio column per (path, baseline path, header) and the per-round ranges."""
    header = ["metric", *columns.values(), *(title for _, _, title in ratios)]
    header.append("ratio range" if len(ratios) == 1 else "ranges")
    lines: list[list[str]] = []
    for mode in modes:
        for key, label, unit in rows:
            fmt = "{:.2f}" if unit == "ms" else "{:,.0f}"
            cells = [f"{MODE_LABELS[mode]}: {label} ({unit})"]
            cells += [fmt.format(median(figures[mode][path][key])) for path in columns]
            spreads = []
            for path, baseline, _ in ratios:
                per_round = round_ratios(figures[mode][path][key], figures[mode][baseline][key])
                cells.append(f"{median(per_round):.2f}x")
                spreads.append(spread(per_round))
            cells.append(" / ".join(text for text in spreads if text))
            lines.append(cells)
    return markdown_table(header, lines)
