"""bench.relay_calls reads per-call counts from a cProfile file (no processes started here)."""

from __future__ import annotations

import asyncio
import cProfile
from pathlib import Path

from bench.relay_calls import per_call


def _helper() -> int:
    return len([1, 2, 3])


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_counts_python_functions_loop_turns_and_own_code(tmp_path: Path) -> None:
    out = tmp_path / "window.prof"
    profile = cProfile.Profile()
    loop = asyncio.new_event_loop()
    try:
        profile.enable()
        for _ in range(10):
            _helper()
        loop.run_until_complete(_turns(4))
        profile.disable()
    finally:
        loop.close()
    profile.dump_stats(str(out))
    counts = per_call(out, 10, str(Path(__file__).resolve()))
    assert counts.own_calls >= 1.0  # _helper once per counted call, and _turns as it resumes
    assert any(where.endswith(" _helper") and count == 1.0 for count, where in counts.top)
    assert counts.all_calls > counts.python_calls > counts.own_calls
    assert counts.loop_turns > 0
