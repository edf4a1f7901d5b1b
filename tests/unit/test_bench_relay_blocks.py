"""bench.relay's sequential rounds: short blocks per path that take turns in a cycle, none after itself."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from bench.relay import block_plan, order_for


def test_the_order_is_reversed_every_other_round() -> None:
    assert order_for(("direct", "gateway", "bare"), 0) == ("direct", "gateway", "bare")
    assert order_for(("direct", "gateway", "bare"), 1) == ("bare", "gateway", "direct")
    assert order_for(["direct", "gateway"], 2) == ("direct", "gateway")


def test_every_path_gets_its_calls_in_blocks_that_take_turns() -> None:
    plan = block_plan(("direct", "gateway", "bare"), calls=400, block=25)
    totals: Counter[str] = Counter()
    for path, count in plan:
        totals[path] += count
    assert totals == {"direct": 400, "gateway": 400, "bare": 400}
    assert {count for _path, count in plan} == {25}
    assert [path for path, _count in plan[:6]] == ["direct", "gateway", "bare", "direct", "gateway", "bare"]


def test_no_block_ever_follows_one_of_its_own_path() -> None:
    # A path right after itself finds its processes warm: the middle path of a reversed order never
    # got that, and read slower than it is (docs/performance.md, "Why short blocks, in a cycle").
    for paths in (("direct", "gateway"), ("direct", "gateway", "bare"), ("a", "b", "c", "d")):
        plan = block_plan(paths, calls=400, block=25)
        assert all(first != second for (first, _), (second, _) in pairwise(plan)), paths


def test_calls_that_do_not_fill_the_last_block_go_in_a_shorter_one() -> None:
    assert block_plan(("direct", "gateway"), calls=30, block=25) == [
        ("direct", 25),
        ("gateway", 25),
        ("direct", 5),
        ("gateway", 5),
    ]


def test_a_block_larger_than_the_calls_is_one_block_per_path() -> None:
    assert block_plan(("direct", "gateway"), calls=10, block=25) == [("direct", 10), ("gateway", 10)]
