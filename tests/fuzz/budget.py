"""How hard the fuzz suite tries, and the tally of inputs each target was given.

Two profiles, picked by the environment variable MCPGW_FUZZ:

- unset or "ci": a bounded run, part of every `scripts/test` (the whole fuzz suite well under a minute
  on two cores). Each target names its own example count, chosen by what one input costs.
- "long": every target gets LONG_FACTOR times as many inputs (MCPGW_FUZZ_FACTOR overrides the
  factor), and the per-test timeout is lifted (tests/fuzz/conftest.py). The command is in
  docs/security-limits.md "Running it".

Every input a fuzz test tries is counted under its target's name with `tally(name)`; the conftest
prints the table at the end of the session (and writes it to MCPGW_FUZZ_REPORT when that is set).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, settings

PROFILE = os.environ.get("MCPGW_FUZZ", "ci").strip().lower() or "ci"
if PROFILE not in ("ci", "long"):
    raise RuntimeError(f"MCPGW_FUZZ={PROFILE!r}: use 'ci' (default) or 'long'")
LONG = PROFILE == "long"
LONG_FACTOR = float(os.environ.get("MCPGW_FUZZ_FACTOR", "10"))

DEADLINE_MS = 2_000
"""Per-input time bound. The parsers do microseconds of work per input; two seconds (a thousandfold
margin) only fails on runaway work such as regex backtracking or a quadratic loop, never on a busy
machine being slow."""

inputs: Counter[str] = Counter()
"""Inputs tried per target in this session."""
failures: Counter[str] = Counter()
"""Failing fuzz tests per target in this session (filled in by the conftest from test reports)."""


def tally(target: str, count: int = 1) -> None:
    inputs[target] += count


def examples(ci: int) -> int:
    """The example count of a target: `ci` in the bounded run, LONG_FACTOR times as many in the long one."""
    return max(1, round(ci * LONG_FACTOR)) if LONG else ci


def fuzz_settings(ci_examples: int, **overrides: Any) -> settings:
    """Hypothesis settings for one fuzz test. The example database is off in CI (each run starts clean
    and the suite stays reproducible from the printed seed); the long run keeps it, so a failure it
    finds is replayed first the next time."""
    options: dict[str, Any] = {
        "max_examples": examples(ci_examples),
        "deadline": DEADLINE_MS,
        "derandomize": False,
        # No "explain" phase: it re-parses test sources, which CPython 3.11 can trip over (SystemError)
        # after deeply nested inputs; a failure is reported with its minimal example all the same.
        "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        "print_blob": True,
        "suppress_health_check": [
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    }
    if not LONG:
        options["database"] = None
    options.update(overrides)
    return settings(**options)
