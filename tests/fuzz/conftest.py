"""The fuzz suite's plumbing: the `fuzz` marker, the long profile's timeout, and the inputs table.

At the end of a session that ran fuzz tests, a table of inputs tried per target is printed; with
MCPGW_FUZZ_REPORT=<file> it is also written there as Markdown (the numbers in docs/security-limits.md,
"Results", come from such a file).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import pytest

from tests.fuzz import budget

FUZZ_DIR = Path(__file__).parent
LONG_TIMEOUT_S = 6 * 3600
"""The long profile runs minutes per test; pytest-timeout's 60 s would cut it off."""

_started = time.monotonic()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzz: property-based fuzzing of a parser a stranger can reach (tests/fuzz)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if FUZZ_DIR in item.path.parents:
            item.add_marker(pytest.mark.fuzz)
            # Hypothesis warns when it renders the (large, nested) strategies of this suite; harmless.
            item.add_marker(pytest.mark.filterwarnings("ignore:Generating overly large repr"))
            if budget.LONG:
                item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and "tests/fuzz/" in report.nodeid.replace(os.sep, "/"):
        budget.failures[report.nodeid] += 1


def summary_lines() -> list[str]:
    width = max(len(name) for name in budget.inputs)
    lines = [f"fuzz profile {budget.PROFILE}: inputs tried per target", ""]
    lines += [f"  {name:<{width}}  {count:>9,}" for name, count in sorted(budget.inputs.items())]
    lines += ["", f"  {'total':<{width}}  {sum(budget.inputs.values()):>9,}"]
    failed = sorted(budget.failures)
    lines.append(f"  failing fuzz tests: {len(failed)}" + "".join(f"\n    {nodeid}" for nodeid in failed))
    return lines


def markdown_report() -> str:
    elapsed = time.monotonic() - _started
    rows = [
        f"Profile `{budget.PROFILE}`, {sum(budget.inputs.values()):,} inputs in {elapsed:.0f} s "
        f"(Python {platform.python_version()}, {os.cpu_count()} CPUs), failing fuzz tests: {len(budget.failures)}",
        "",
        "| Target | Inputs |",
        "|---|---:|",
    ]
    rows += [f"| `{name}` | {count:,} |" for name, count in sorted(budget.inputs.items())]
    rows.append(f"| **total** | **{sum(budget.inputs.values()):,}** |")
    return "\n".join(rows) + "\n"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not budget.inputs:
        return
    terminalreporter.section("fuzz inputs")
    for line in summary_lines():
        terminalreporter.write_line(line)
    report = os.environ.get("MCPGW_FUZZ_REPORT")
    if report:
        Path(report).write_text(markdown_report(), encoding="utf-8")
        terminalreporter.write_line(f"  written to {report}")
