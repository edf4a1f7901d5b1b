"""The C board benchmark runs with one command and prints its tables (no speed is asserted here)."""

from __future__ import annotations

from tests.support.bench_run import run_bench


def test_c_board_bench_quick_run_prints_every_path_memory_and_cpu() -> None:
    # It builds its own non-sanitized pump1-host into build/c-bench/ (a minute at most the first time).
    stdout, _ = run_bench("c_board", "--quick", "--calls", "5", "--warmup", "1", timeout_s=120)
    headers = [line for line in stdout.splitlines() if line.startswith("| ")]
    round_trip = next(line for line in headers if line.startswith("| metric"))
    assert [cell.strip() for cell in round_trip.strip("|").split("|")][1:6] == [
        "C board (pump1-host)",
        "MicroPython board",
        "simulator (CPython)",
        "ratio C/MicroPython",
        "ratio C/sim",
    ]
    for row in (
        "session era: sequential get_status, median (ms)",
        "2026-07-28: sequential get_status, median (ms)",
        "2026-07-28: CPU per call, pump process (us)",
        "| pump process ",
        "| C board (pump1-host) ",
        "C board CPU per call from /proc/<pid>/stat: ",
        "-DMCPB_SANITIZE=OFF",
    ):
        assert row in stdout, stdout
