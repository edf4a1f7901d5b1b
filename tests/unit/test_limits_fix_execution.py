"""Execution limits: the refusal of one rule with several limits names the one that decides
(gateway/policy/execution/debits.py), a cancelled or timed-out call keeps its concurrency place until
the device's late answer or a bound (gateway/policy/execution/admission.py), and the words for one."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from gateway.core.broker.diagnose import diagnose
from gateway.policy.execution.admission import KEPT_AFTER_CANCEL_S, Admission, ExecutionLimits
from tests.unit.test_diagnose import view as diagnosis_view
from tests.unit.test_execution_limits import Clock, admitted, call, entries, limits, refused, used

RESETS = {
    "id": "resets",
    "match": {"capability": "tool:reset_fault"},
    "group_by": ["subject"],
    "rate": {"max": 2, "window_ms": 5000},
    "calls": {"max": 2, "window_ms": 600_000},
}
SLOW_START = {
    "id": "slow-start",
    "match": {"capability": "tool:start"},
    "calls": {"max": 1, "window_ms": 2000},
    "concurrency": 1,
}


def test_the_longest_window_of_one_rule_decides_its_retry_after() -> None:
    clock = Clock()
    engine = limits(RESETS, clock=clock)
    admitted(call(engine, "reset_fault"))
    clock.advance_ms(100)
    admitted(call(engine, "reset_fault"))
    clock.advance_ms(100)
    refusal = refused(call(engine, "reset_fault"))
    # Both windows are full; only the calls window's wait lets the call pass.
    assert refusal.kind == "calls"
    assert refusal.retry_after_ms is not None and refusal.retry_after_ms > 590_000
    assert refusal.message().startswith('Execution limit "resets" reached for subject token:agent: at most 2 calls ')
    clock.advance_ms(refusal.retry_after_ms)
    admitted(call(engine, "reset_fault"))  # retrying as told passes


def test_a_full_concurrency_beside_a_full_window_gives_no_retry_after() -> None:
    clock = Clock()
    engine = limits(SLOW_START, clock=clock)
    admitted(call(engine, "start"))  # in flight
    clock.advance_ms(300)
    refusal = refused(call(engine, "start"))
    # Time alone does not let it pass: the start in flight must end.
    assert (refusal.reason, refusal.kind, refusal.retry_after_ms) == ("concurrency_exceeded", "concurrency", None)
    assert "retryAfterMs" not in refusal.data()


def test_one_is_said_in_the_singular() -> None:
    clock = Clock()
    engine = limits({**SLOW_START, "concurrency": 2}, clock=clock)
    admitted(call(engine, "start"))
    refusal = refused(call(engine, "start"))
    assert refusal.message().startswith('Execution limit "slow-start" reached: at most 1 call per 2 s (calls)')
    full = limits({"id": "per-agent", "group_by": ["subject"], "max_keys": 1, "concurrency": 1})
    admitted(call(full))
    refused(call(full, subjects=frozenset({"token:other"})))
    problems = {
        problem.id: problem for problem in diagnose(replace(diagnosis_view(), governance={"limits": full.status()}))
    }
    assert problems["limits.keys_full"].evidence.startswith("1 group of at most 1 (max_keys)")
    assert (
        problems["limits.refused"].summary == "Execution limits refused 1 call or reservation since the gateway started"
    )


def in_flight(engine: ExecutionLimits) -> int:
    return sum(group.get("in_flight", 0) for group in used(engine, "slow-start"))


def kept(admission: Admission) -> bool:
    """Whether the call keeps its places, waiting for the device's late answer."""
    return admission.kept is not None and not admission.released


async def test_a_cancelled_call_keeps_its_place_until_the_late_answer_then_gives_it_back_once() -> None:
    engine = ExecutionLimits(entries({**SLOW_START, "calls": {"max": 100, "window_ms": 2000}}), clock=Clock())
    first = admitted(call(engine, "start"))
    engine.ended(first, "cancelled")
    assert kept(first)
    assert refused(call(engine, "start")).reason == "concurrency_exceeded"  # the device still ramps
    engine.release(first)  # its late answer
    assert not kept(first) and first.released and in_flight(engine) == 0
    second = admitted(call(engine, "start"))
    engine.release(first)  # once only: the second call's place stays taken
    assert in_flight(engine) == 1
    engine.ended(second, "ok")
    assert in_flight(engine) == 0


async def test_a_timed_out_call_keeps_its_place_at_most_the_bound() -> None:
    assert KEPT_AFTER_CANCEL_S == 60.0
    engine = ExecutionLimits(
        entries({**SLOW_START, "calls": {"max": 100, "window_ms": 2000}}), clock=Clock(), kept_after_cancel_s=0.05
    )
    first = admitted(call(engine, "start"))
    engine.ended(first, "timeout")
    assert refused(call(engine, "start")).reason == "concurrency_exceeded"
    await asyncio.sleep(0.2)  # no answer came: the bound gives the place back
    assert first.released and first.kept is None and in_flight(engine) == 0
    admitted(call(engine, "start"))
    engine.release(first)  # an answer after the bound frees nothing more
    assert in_flight(engine) == 1


async def test_the_gateways_own_tools_give_their_place_back_at_the_cancel() -> None:
    engine = ExecutionLimits(entries({**SLOW_START, "calls": {"max": 100, "window_ms": 2000}}), clock=Clock())
    broker_call = admitted(call(engine, "start", slot="_broker", resource="/_system/broker"))
    engine.ended(broker_call, "cancelled")  # stopped with its call: nothing goes on
    assert broker_call.released and broker_call.kept is None
    for outcome in ("ok", "tool-error", "error"):
        admitted_call = admitted(call(engine, "start"))
        engine.ended(admitted_call, outcome)
        assert admitted_call.released


# --- what a refusal says of places kept by cancelled calls ----------------------------------------------

ONE_SLOW = {"id": "one-slow", "match": {"capability": "tool:slow"}, "concurrency": 1}
HELD_WORDS = (
    "1 of them kept by a call that was cancelled or passed its deadline, until its device answers or at most "
    "60 s after it ended (limits.cancelled_call_hold_s)"
)


async def test_a_place_kept_by_a_cancelled_call_is_named_with_when_time_frees_it() -> None:
    clock = Clock()
    engine = limits(ONE_SLOW, clock=clock)
    first = admitted(call(engine, "slow"))
    engine.ended(first, "cancelled")  # an SDK server never answers a cancelled request
    clock.advance_ms(10_000)
    refusal = refused(call(engine, "slow"))
    assert refusal.reason == "concurrency_exceeded" and refusal.kind == "concurrency"
    assert refusal.text == (
        f'Execution limit "one-slow": at most 1 call in flight, and that many are ({HELD_WORDS}); '
        "call again once one has ended"
    )
    assert refusal.retry_after_ms == 50_000 and refusal.data()["retryAfterMs"] == 50_000
    clock.advance_ms(20_000)
    assert refused(call(engine, "slow")).retry_after_ms == 30_000  # counts down with the hold
    engine.release(first)  # the device's late answer ends the hold early
    admitted(call(engine, "slow"))


async def test_a_call_in_flight_beside_kept_places_gives_no_retry_after() -> None:
    clock = Clock()
    engine = limits({**ONE_SLOW, "concurrency": 2}, clock=clock)
    cancelled = admitted(call(engine, "slow"))
    engine.ended(cancelled, "timeout")
    running = admitted(call(engine, "slow"))
    refusal = refused(call(engine, "slow"))
    # Freeing the kept place would let a call pass: when its hold ends.
    assert "1 of them kept by a call that was cancelled" in refusal.text
    assert refusal.retry_after_ms == 60_000
    engine.release(cancelled)
    again = admitted(call(engine, "slow"))
    refusal = refused(call(engine, "slow"))
    assert refusal.retry_after_ms is None and "kept" not in refusal.text  # only ending calls free a place
    engine.ended(running, "ok")
    engine.ended(again, "ok")


async def test_the_hold_that_lets_the_call_pass_decides_its_retry_after() -> None:
    clock = Clock()
    engine = limits({**ONE_SLOW, "concurrency": 2}, clock=clock)
    first = admitted(call(engine, "slow"))
    second = admitted(call(engine, "slow"))
    engine.ended(first, "cancelled")
    clock.advance_ms(5000)
    engine.ended(second, "cancelled")
    refusal = refused(call(engine, "slow"))
    assert "2 of them kept by calls that were cancelled or passed their deadlines, until their devices" in (
        refusal.text
    )
    assert refusal.retry_after_ms == 55_000  # the first hold ends first; one free place is enough
    with_live = limits(ONE_SLOW, clock=clock)
    live = admitted(call(with_live, "slow"))
    refusal = refused(call(with_live, "slow"))
    assert refusal.retry_after_ms is None and "kept" not in refusal.text
    with_live.ended(live, "ok")


async def test_across_rules_a_kept_place_waits_only_when_time_alone_lets_the_call_pass() -> None:
    clock = Clock()
    agent, other = frozenset({"token:agent"}), frozenset({"token:other"})
    per_caller = {"id": "per-caller", "match": {"capability": "tool:slow"}, "group_by": ["subject"], "concurrency": 1}
    engine = limits(ONE_SLOW, {**per_caller, "concurrency": 2}, clock=clock)
    engine.ended(admitted(call(engine, "slow", subjects=agent)), "cancelled")
    assert refused(call(engine, "slow", subjects=other)).retry_after_ms == 60_000  # the other rule has room
    # A rule that only an ending call frees decides: time alone does not let the call pass.
    engine = limits({**ONE_SLOW, "concurrency": 2}, per_caller, clock=clock)
    live = admitted(call(engine, "slow", subjects=agent))
    engine.ended(admitted(call(engine, "slow", subjects=other)), "cancelled")
    refusal = refused(call(engine, "slow", subjects=agent))
    assert (refusal.rule_id, refusal.retry_after_ms) == ("per-caller", None)
    engine.ended(live, "ok")
    # The hold ends in 60 s, the calls window frees in 120 s: the longer wait decides.
    engine = limits({**ONE_SLOW, "calls": {"max": 1, "window_ms": 120_000}}, clock=clock)
    engine.ended(admitted(call(engine, "slow")), "cancelled")
    refusal = refused(call(engine, "slow"))
    assert (refusal.kind, refusal.retry_after_ms) == ("calls", 120_000)
