"""The serial benchmark runs with one command and prints its tables (no speed is asserted here)."""

from __future__ import annotations

from tests.support.bench_run import run_bench


def test_serial_bench_quick_run_prints_framing_and_both_paths() -> None:
    stdout, _ = run_bench("serial", "--quick", "--calls", "5", "--warmup", "1", timeout_s=50)
    headers = [line for line in stdout.splitlines() if line.startswith("| ")]
    framing = next(line for line in headers if line.startswith("| message"))
    assert "| orjson (ns)" in framing and "| framing (ns)" in framing and "| framing/orjson" in framing
    round_trip = next(line for line in headers if line.startswith("| metric"))
    assert [cell.strip() for cell in round_trip.strip("|").split("|")][1:4] == [
        "websocket",
        "serial (pty)",
        "ratio serial/ws",
    ]
    for row in (
        "| tools/call get_status (request) ",
        "| get_status answer ",
        "| tools/list page (",
        "session era: sequential get_status, median (ms)",
        "2026-07-28: sequential get_status, median (ms)",
        "2026-07-28: CPU per call, gateway (us)",
    ):
        assert row in stdout, stdout
    assert "a PTY has no baud rate" in stdout
