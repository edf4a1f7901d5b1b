"""The benchmarks run with one command each and print their tables (no speed is asserted here)."""

from __future__ import annotations

import pytest

from bench.relay_ab import checked_out
from tests.support.bench_run import REPO, run_bench

EXPECTED_ROWS = [
    "session era: sequential call, median (ms)",
    "session era: sequential call, p95 (ms)",
    "session era: throughput, 32 clients (calls/s)",
    "2026-07-28: sequential call, median (ms)",
    "2026-07-28: sequential call, paths taking turns call by call, median (ms)",
    "2026-07-28: throughput, 32 clients (calls/s)",
    "2026-07-28: CPU per sequential call, gateway (us)",
    "2026-07-28: sequential call via bare aiohttp relay (no checks), median (ms)",
    "2026-07-28: bare relay, paths taking turns call by call, median (ms)",
    "2026-07-28: CPU per sequential call, bare relay (us)",
    "2026-07-28: sequential call, bare relay (1st column) against gateway, median (ms)",
    "gateway RSS per connected device (5 devices) (KiB)",
    "gateway peak RSS over the run (VmHWM) (MiB)",
]


@pytest.mark.timeout(90)
def test_quick_run_prints_the_table() -> None:
    stdout, stderr = run_bench("relay", "--quick", timeout_s=80)
    lines = stdout.splitlines()
    assert any(line.startswith("| metric ") and "| ratio " in line and "| result " in line for line in lines)
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}
    for metric in EXPECTED_ROWS:
        assert metric in rows, f"missing row {metric!r} in:\n{stdout}"
    # Every call succeeded on both paths: a failing path would print a warning on stderr.
    assert "failed calls" not in stderr, stderr[-3000:]
    latency = rows["session era: sequential call, median (ms)"].split("|")
    direct, gateway = float(latency[2]), float(latency[3])
    assert direct > 0 and gateway > 0
    floor = rows["2026-07-28: sequential call via bare aiohttp relay (no checks), median (ms)"].split("|")
    assert float(floor[2]) > 0 and float(floor[3]) > 0  # the bare relay answered every call too
    turns = rows["2026-07-28: bare relay, paths taking turns call by call, median (ms)"].split("|")
    assert float(turns[2]) > 0 and float(turns[3]) > 0  # so did every path taking turns
    assert "All targets met." in stdout or "TARGET MISSED:" in stdout


@pytest.mark.timeout(90)
def test_quick_call_count_prints_both_relays() -> None:
    stdout, _stderr = run_bench("relay_calls", "--quick", "--top", "3", timeout_s=80)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    for name in ("Python functions run (ones defined in Python)", "event-loop turns"):
        cells = rows[f"2026-07-28: per sequential call, {name}"]
        bare, gateway = float(cells[2]), float(cells[3])
        assert bare > 0 and gateway > 0, cells  # both relays were counted while they served calls
    own = rows["2026-07-28: per sequential call,   of which the relay's own code"]
    assert float(own[2]) > 0 and float(own[3]) > 0  # each relay's own module ran: the right code was counted
    assert "gateway/northbound/streamable_http.py" in stdout or "gateway/entry.py" in stdout


@pytest.mark.timeout(90)
def test_quick_ab_run_compares_two_trees() -> None:
    # The repository against itself, given as a directory: both trees' gateways and servers start,
    # every path answers, and the table has a row per tree.
    stdout, _stderr = run_bench("relay_ab", str(REPO), str(REPO), "--quick", timeout_s=80)
    rows = [line.split("|") for line in stdout.splitlines() if line.startswith(("| baseline", "| candidate"))]
    assert len(rows) == 2, stdout
    for cells in rows:
        assert float(cells[2]) > 0 and float(cells[5].replace(",", "")) > 0, cells  # timed, and the gateway worked
    assert "the candidate was faster in" in stdout


def test_a_revision_is_checked_out_into_a_worktree_that_goes_away() -> None:
    with checked_out("HEAD") as tree:
        assert (tree / "gateway" / "__init__.py").is_file()
        assert tree != REPO
    assert not tree.exists()
    with checked_out(str(REPO)) as same:
        assert same == REPO


@pytest.mark.timeout(90)
def test_quick_soak_prints_its_readings() -> None:
    stdout, stderr = run_bench("soak", "--quick", timeout_s=80)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    for name in ("resident memory (MiB)", "open file descriptors", "slots tracked", "metric series"):
        cells = rows[name]
        assert all(cell.strip() for cell in cells[2:6]), cells  # a reading after warm-up, middle and end
    assert float(rows["resident memory (MiB)"][4]) > 0
    assert "round 3/3" in stderr  # every round ran; a failed call would have ended the run with an error
    assert "Stray slot names refused at the slot limit: 0." in stdout  # no new name was turned away


@pytest.mark.timeout(120)
def test_quick_link_soak_brings_every_link_back() -> None:
    # Needs mosquitto, as CI installs it: without it the run stops with a message and this fails.
    stdout, stderr = run_bench("soak_links", "--quick", timeout_s=110)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    for name in ("resident memory (MiB)", "open file descriptors", "threads", "metric series"):
        assert all(cell.strip() for cell in rows[name][2:6]), rows[name]
    assert [cell.strip() for cell in rows["slots connected"][2:5]] == ["4", "4", "4"]  # every link came back
    assert "240 calls, 0 failed." in stdout
    assert "boards reboot 1x, broker restarts 1x, serial replugged 1x" in stdout
    for event in ("boards reboot", "broker restarts", "serial replugged"):
        assert f"({event})" in stderr


@pytest.mark.timeout(90)
def test_quick_storm_serves_every_board_and_prints_its_row() -> None:
    stdout, _stderr = run_bench("storm", "--boards", "20", "--quick", timeout_s=80)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    cells = [cell.strip() for cell in rows["20"]]
    served, gone, rss, tracebacks = float(cells[2]), float(cells[5]), float(cells[8]), cells[9]
    # Twenty boards may all be gone within the table's hundredths of a second: 0.00 is a time too.
    assert served > 0 and gone >= 0 and rss > 0, cells
    assert tracebacks == "0", stdout
    assert "not every board was served" not in stdout and "still attached" not in stdout
    assert "/healthz failed" not in stdout


@pytest.mark.timeout(90)
def test_quick_audit_run_compares_group_commit_with_one_commit_per_decision() -> None:
    stdout, _stderr = run_bench("audit", "--quick", timeout_s=80)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    for name in ("decisions/s, 1 writer", "decisions/s, 32 writers", "decision() p99, 32 writers (ms)"):
        single, group = (float(cell.replace(",", "")) for cell in rows[name][2:4])
        assert single > 0 and group > 0, rows[name]
    commits = rows["commits per 100 decisions, 32 writers"]
    assert float(commits[3]) < float(commits[2])  # concurrent decisions shared their commits
    assert float(rows["trail size per 10,000 calls (MiB)"][3]) > 0


@pytest.mark.timeout(60)
def test_quick_argument_check_bench_times_every_case() -> None:
    stdout, _stderr = run_bench("arguments", "--quick", timeout_s=50)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    for case in (
        "orjson.loads of the tools/call body (the gateway parses it anyway)",
        "check_arguments: schema + 1 limit, within",
        "check_arguments: schema + 1 limit, clamped (new dict)",
        "check_arguments: refused by the schema (message built)",
        "fastjsonschema validator alone (compiled once)",
    ):
        assert float(rows[case][2].replace(",", "")) > 0, rows.get(case, stdout)
        assert rows[case][3].strip().endswith("x"), rows[case]  # a ratio to the baseline, measured in the same run
    assert "jsonschema: prebuilt Draft202012Validator.validate" in rows or "jsonschema is not installed" in stdout


@pytest.mark.timeout(90)
def test_quick_governance_run_compares_governed_with_ungoverned_calls() -> None:
    stdout, stderr = run_bench("governance", "--quick", timeout_s=80)
    rows = {line.split("|")[1].strip(): line.split("|") for line in stdout.splitlines() if line.startswith("| ")}
    assert "failed calls" not in stderr, stderr[-3000:]  # every set_speed succeeded through both gateways
    for name in ("sequential call, median of block medians (ms)", "throughput, 32 clients (calls/s)"):
        ungoverned, governed = (float(cell.replace(",", "")) for cell in rows[name][2:4])
        assert ungoverned > 0 and governed > 0, rows[name]
        assert rows[name][4].strip().endswith("x") and rows[name][7].strip() in ("met", "missed"), rows[name]
    assert float(rows["audit decisions committed per second, 32 clients (records/s)"][3].replace(",", "")) > 0
    assert float(rows["audit commits per 100 decisions, 32 clients (group commit) (commits)"][3]) > 0
    assert float(rows["audit trail per 10,000 calls (decision + result) (MiB)"][3]) > 0
    assert "All targets met." in stdout or "TARGET MISSED:" in stdout
