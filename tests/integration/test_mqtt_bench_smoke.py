"""The MQTT benchmark runs with one command and prints its table (no speed is asserted here)."""

from __future__ import annotations

from tests.support.bench_run import run_bench


def test_mqtt_bench_quick_run_prints_every_path_and_era() -> None:
    stdout, _ = run_bench("mqtt", "--quick", "--calls", "5", "--warmup", "1", timeout_s=50)
    header = next(line for line in stdout.splitlines() if line.startswith("| metric"))
    assert [cell.strip() for cell in header.strip("|").split("|")][1:4] == ["websocket", "mqtt plain", "mqtt mcp"]
    for row in (
        "session era: sequential get_status, median (ms)",
        "2026-07-28: sequential get_status, median (ms)",
        "2026-07-28: CPU per call, gateway (us)",
    ):
        assert row in stdout, stdout
    assert "ratio plain/ws" in stdout and "ratio mcp/ws" in stdout
