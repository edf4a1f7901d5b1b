"""`python -m bench.pump_paths --quick` runs the board-vs-simulator benchmark and prints its table
(no speed is asserted; a missing `micropython` fails it)."""

from __future__ import annotations

from tests.support.bench_run import run_bench


def test_board_vs_simulator_bench_prints_its_table() -> None:
    stdout, _ = run_bench("pump_paths", "--quick", timeout_s=40)
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines() if line.startswith("| ")}
    for era in ("session era", "2026-07-28"):
        for metric in ("sequential get_status, median (ms)", "CPU per call, pump process (us)"):
            assert f"{era}: {metric}" in rows, stdout
    header = stdout.splitlines()[1]
    assert "board (MicroPython)" in header
    assert "simulator (CPython)" in header
    assert "ratio board/sim" in header
