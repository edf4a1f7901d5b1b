"""The benchmark table: medians, percentiles and the verdict against each target."""

from __future__ import annotations

import math

from bench.report import Row, median, missed, percentile, render


def test_percentile_is_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.95) == 95.0
    assert percentile([3.0], 0.95) == 3.0
    assert math.isnan(percentile([], 0.5))
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_latency_target_is_a_ceiling_and_throughput_a_floor() -> None:
    slow = Row("latency", "ms", 1.0, 1.2, target="<= 1.10x", limit=1.10)
    fast = Row("latency", "ms", 1.0, 1.05, target="<= 1.10x", limit=1.10)
    starved = Row("throughput", "calls/s", 1000, 800, target=">= 0.90x", limit=0.90, higher_is_better=True)
    assert (slow.verdict, fast.verdict, starved.verdict) == ("MISS", "pass", "MISS")
    assert missed([slow, fast, starved]) == [slow, starved]


def test_ratio_is_the_median_of_the_rounds_ratios() -> None:
    # Round 2 ran while the machine was busy: both paths slowed, their ratio did not.
    row = Row("latency", "ms", 1.5, 1.6, round_ratios=[1.02, 1.04, 1.03])
    assert row.ratio == 1.03
    assert Row("latency", "ms", 2.0, 3.0).ratio == 1.5


def test_table_shows_ratio_and_spread_and_dashes_for_gateway_only_rows() -> None:
    rows = [
        Row("seq median", "ms", 2.0, 1.0, round_ratios=[0.4, 0.5, 0.6], target="<= 1.10x", limit=1.10),
        Row("gateway CPU", "us", None, 300.0),
    ]
    table = render(rows).splitlines()
    assert table[0].startswith("| metric")
    assert [cell.strip() for cell in table[2].split("|")[1:-1]] == [
        "seq median (ms)",
        "2.00",
        "1.00",
        "0.50x",
        "0.40-0.60",
        "<= 1.10x",
        "pass",
    ]
    # Columns line up, so the table reads as well in a terminal as in Markdown.
    assert len({len(line) for line in table}) == 1
    assert [cell.strip() for cell in table[3].split("|")[1:-1]] == ["gateway CPU (us)", "-", "300", "-", "", "", ""]


def test_pump_table_compares_each_path_with_its_baseline_round_by_round() -> None:
    from bench.pump_rounds import new_figures
    from bench.pump_rounds import render as render_rounds

    figures = new_figures()
    for path, values in {"ws": [1.0, 2.0, 1.0], "plain": [1.1, 2.4, 1.2], "mcp": [2.0, 4.0, 2.0]}.items():
        figures["legacy"][path]["median"] = values
    table = render_rounds(
        figures,
        ["legacy"],
        [("median", "sequential get_status, median", "ms")],
        {"ws": "websocket", "plain": "mqtt plain", "mcp": "mqtt mcp"},
        [("plain", "ws", "ratio plain/ws"), ("mcp", "ws", "ratio mcp/ws")],
    )
    header, _, row = table.splitlines()
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "metric",
        "websocket",
        "mqtt plain",
        "mqtt mcp",
        "ratio plain/ws",
        "ratio mcp/ws",
        "ranges",
    ]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells == [
        "session era: sequential get_status, median (ms)",
        "1.00",
        "1.20",
        "2.00",
        "1.20x",
        "2.00x",
        "1.10-1.20 / 2.00-2.00",
    ]
