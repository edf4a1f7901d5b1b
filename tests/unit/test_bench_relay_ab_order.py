"""bench.relay_ab's order of blocks: its clients stay open from round to round, so no block may
follow one of its own path, across a round's boundary either, and every path takes every seat."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from bench.relay_ab import PATHS, round_plan, run_plan


@pytest.mark.parametrize(("calls", "block"), [(200, 25), (10, 5), (30, 25), (10, 25), (7, 1)])
def test_no_block_of_a_run_follows_one_of_its_own_path(calls: int, block: int) -> None:
    # Reversing the cycle every round ran the last path of a round again first in the next one: the
    # candidate's block followed itself at every other round boundary.
    plan = run_plan(rounds=9, calls=calls, block=block)
    following_itself = [index for index, (a, b) in enumerate(pairwise(plan), 1) if a[0] == b[0]]
    assert following_itself == []


def test_every_path_gets_its_calls_every_round() -> None:
    for round_index in range(6):
        totals: Counter[str] = Counter()
        for path, count in round_plan(round_index, calls=30, block=25):
            totals[path] += count
        assert totals == dict.fromkeys(PATHS, 30)


def test_every_path_takes_every_seat_once_in_as_many_rounds_as_paths() -> None:
    firsts = [round_plan(round_index, calls=10, block=5)[0][0] for round_index in range(len(PATHS))]
    assert sorted(firsts) == sorted(PATHS)
