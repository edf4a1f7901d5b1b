"""Execution limits on tools/call: sliding windows, all matching rules or none, group_by, concurrency,
retryAfterMs, the bound on groups, reload and status (gateway/policy/execution)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from gateway.core.broker.diagnose import diagnose
from gateway.policy.execution.admission import Admission, ExecutionLimits
from gateway.policy.execution.refusals import LimitRefusal
from gateway.policy.execution.windows import WINDOW_PIECES, SlidingWindow, WindowSpec
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.model import ExecutionLimit
from gateway.policy.rules.subjects import identity_of
from tests.unit.test_diagnose import view as diagnosis_view

AGENT = frozenset({"token:agent"})
OTHER = frozenset({"token:other"})
PUMP = "/plant/pump-1"


class Clock:
    """Seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000


def entries(*rules: dict[str, Any]) -> tuple[ExecutionLimit, ...]:
    return check_policy({"execution_limits": list(rules)}).execution_limits


def limits(*rules: dict[str, Any], clock: Clock | None = None, **options: Any) -> ExecutionLimits:
    return ExecutionLimits(entries(*rules), clock=clock or Clock(), **options)


def call(
    engine: ExecutionLimits,
    tool: str = "set_speed",
    subjects: frozenset[str] = AGENT,
    slot: str = "pump-1",
    resource: str = PUMP,
    read_only: bool | None = None,
) -> Admission | LimitRefusal:
    return engine.admit_call(subjects, slot, tool, read_only, resource)


def admitted(answer: Admission | LimitRefusal) -> Admission:
    assert isinstance(answer, Admission), answer
    return answer


def refused(answer: Admission | LimitRefusal) -> LimitRefusal:
    assert isinstance(answer, LimitRefusal), answer
    return answer


def used(engine: ExecutionLimits, rule_id: str) -> list[dict[str, Any]]:
    rule = next(rule for rule in engine.status()["rules"] if rule["id"] == rule_id)
    return list(rule["busiest"])


# --- windows ---------------------------------------------------------------------------------------


def test_a_window_admits_max_then_refuses_until_its_oldest_call_leaves_it() -> None:
    clock = Clock()
    engine = limits({"id": "w", "calls": {"max": 3, "window_ms": 1000}}, clock=clock)
    for _ in range(3):
        admitted(call(engine))
        clock.advance_ms(100)
    refusal = refused(call(engine))
    assert refusal.data() == {"reason": "limit_exceeded", "ruleId": "w", "retryAfterMs": 700, "kind": "calls"}
    assert refusal.message() == ('Execution limit "w" reached: at most 3 calls per 1 s (calls); retry after 700 ms')
    clock.advance_ms(699)
    assert refused(call(engine)).retry_after_ms == 1
    clock.advance_ms(1)
    admitted(call(engine))
    refused(call(engine))  # the second call is still in the window


def test_rate_and_calls_both_apply() -> None:
    clock = Clock()
    engine = limits(
        {"id": "both", "rate": {"max": 2, "window_ms": 1000}, "calls": {"max": 3, "window_ms": 60_000}}, clock=clock
    )
    admitted(call(engine))
    admitted(call(engine))
    assert refused(call(engine)).kind == "rate"
    clock.advance_ms(1000)
    admitted(call(engine))
    clock.advance_ms(1000)
    refusal = refused(call(engine))
    assert (refusal.kind, refusal.retry_after_ms) == ("calls", 58_000)


def test_a_window_keeps_bounded_memory_and_never_admits_more_than_max_in_any_window() -> None:
    spec = WindowSpec("calls", 50, 1000)
    window = SlidingWindow(spec)
    randomness = random.Random(7)
    now, admitted_at = 0.0, []
    for _ in range(5000):
        now += randomness.choice([0.1, 1.0, 3.0, 20.0, 90.0])
        if window.wait_ms(now, 1) == 0:
            window.debit(now, 1)
            admitted_at.append(now)
        assert window.pieces <= WINDOW_PIECES + 1
    for index, start in enumerate(admitted_at):
        inside = [moment for moment in admitted_at[index:] if moment < start + spec.window_ms]
        assert len(inside) <= spec.max
    assert len(admitted_at) > 100  # capacity came back, window after window


def test_a_window_never_fits_more_than_its_max_at_once() -> None:
    window = SlidingWindow(WindowSpec("budget", 5, 1000, "op"))
    assert window.wait_ms(0, 6) is None
    assert window.wait_ms(0, 5) == 0


# --- matching and atomicity ------------------------------------------------------------------------


def test_one_rule_refusing_debits_no_other_rule() -> None:
    engine = limits(
        {"id": "wide", "calls": {"max": 10, "window_ms": 60_000}, "concurrency": 5},
        {"id": "narrow", "match": {"capability": "tool:start"}, "calls": {"max": 1, "window_ms": 60_000}},
    )
    admitted(call(engine, "start"))
    assert used(engine, "wide") == [{"group": {}, "calls": 1, "in_flight": 1}]
    refusal = refused(call(engine, "start"))
    assert refusal.rule_id == "narrow"
    assert used(engine, "wide") == [{"group": {}, "calls": 1, "in_flight": 1}]  # neither a call nor a place taken
    admitted(call(engine, "stop"))  # only "wide" matches stop
    assert used(engine, "wide") == [{"group": {}, "calls": 2, "in_flight": 2}]


@pytest.mark.parametrize(
    ("match", "matching", "not_matching"),
    [
        ({}, {}, None),
        ({"subject": "token:agent"}, {}, {"subjects": OTHER}),
        ({"subject": "group:ops"}, {"subjects": frozenset({"user:a", "group:ops"})}, {}),
        ({"subject": "*"}, {"subjects": frozenset({"anonymous"})}, None),
        ({"provider": "pump-*"}, {"slot": "pump-7"}, {"slot": "valve-1"}),
        ({"capability": "tool:set_speed"}, {}, {"tool": "start"}),
        ({"capability": "tool.control"}, {"tool": "start"}, {"tool": "get_status", "read_only": True}),
        ({"capability": "tool.observe"}, {"tool": "get_status", "read_only": True}, {}),
        ({"capability": "mcp.tools.call"}, {"tool": "anything"}, None),
        ({"resource": "/plant/**"}, {}, {"resource": "/office/printer"}),
        ({"resource": "/plant/pump-*"}, {"resource": "/plant/pump-9"}, {"resource": "/plant/valve-1"}),
    ],
)
def test_selectors_match_what_they_name_and_omitted_ones_match_everyone(
    match: dict[str, Any], matching: dict[str, Any], not_matching: dict[str, Any] | None
) -> None:
    rule = {"id": "r", "match": match, "calls": {"max": 1, "window_ms": 60_000}}
    engine = limits(rule)
    admitted(call(engine, **matching))
    refused(call(engine, **matching))
    if not_matching is not None:
        other = limits(rule)
        admitted(call(other, **matching))
        admitted(call(other, **not_matching))  # not counted by the rule, so not refused by it


def test_group_by_subject_partitions_by_the_callers_stable_identity_never_its_groups() -> None:
    engine = limits({"id": "per-agent", "group_by": ["subject"], "calls": {"max": 1, "window_ms": 60_000}})
    admitted(call(engine, subjects=frozenset({"user:alice", "group:ops", "client:hmi"})))
    # The same user with other groups and client is the same caller.
    assert refused(call(engine, subjects=frozenset({"user:alice", "group:night"}))).rule_id == "per-agent"
    admitted(call(engine, subjects=frozenset({"user:bob", "group:ops"})))
    admitted(call(engine, subjects=frozenset({"anonymous"})))
    refused(call(engine, subjects=frozenset({"anonymous"})))  # one shared anonymous bucket
    message = refused(call(engine, subjects=frozenset({"user:bob"}))).message()
    assert message.startswith('Execution limit "per-agent" reached for subject user:bob: at most 1 call per 1 min')


def test_the_identity_is_user_then_service_then_token_then_client() -> None:
    assert identity_of({"client:c", "token:t", "service:s", "user:u", "group:g"}) == "user:u"
    assert identity_of({"client:c", "token:t", "service:s"}) == "service:s"
    assert identity_of({"client:c", "token:t"}) == "token:t"
    assert identity_of({"client:c", "group:g"}) == "client:c"
    assert identity_of({"group:g"}) == identity_of({"anonymous"}) == "anonymous"


def test_group_by_provider_and_capability_partition_too() -> None:
    engine = limits(
        {"id": "p", "group_by": ["provider", "capability"], "calls": {"max": 1, "window_ms": 60_000}},
    )
    admitted(call(engine, "start", slot="pump-1"))
    admitted(call(engine, "start", slot="pump-2"))
    admitted(call(engine, "stop", slot="pump-1"))
    refusal = refused(call(engine, "start", slot="pump-1", subjects=OTHER))
    assert "for provider pump-1, capability tool:start" in refusal.message()
    assert {tuple(group["group"].values()) for group in used(engine, "p")} == {
        ("pump-1", "tool:start"),
        ("pump-2", "tool:start"),
        ("pump-1", "tool:stop"),
    }


# --- concurrency -----------------------------------------------------------------------------------


def test_concurrency_is_released_when_the_call_ends_and_a_second_release_changes_nothing() -> None:
    engine = limits(
        {"id": "one-start", "match": {"capability": "tool:start"}, "group_by": ["provider"], "concurrency": 1}
    )
    first = admitted(call(engine, "start"))
    refusal = refused(call(engine, "start", subjects=OTHER))
    assert refusal.data() == {"reason": "concurrency_exceeded", "ruleId": "one-start", "kind": "concurrency"}
    assert refusal.retry_after_ms is None  # time alone does not end the call in flight
    assert "at most 1 call in flight for provider pump-1" in refusal.message()
    admitted(call(engine, "start", slot="pump-2"))
    engine.release(first)
    second = admitted(call(engine, "start"))
    engine.release(first)  # already released: the second call keeps its place
    refused(call(engine, "start"))
    engine.release(second)
    admitted(call(engine, "start"))


def test_a_refusal_time_cannot_resolve_wins_else_the_longest_wait() -> None:
    clock = Clock()
    engine = limits(
        {"id": "short", "calls": {"max": 1, "window_ms": 1000}},
        {"id": "long", "calls": {"max": 1, "window_ms": 5000}},
        {"id": "single", "match": {"capability": "tool:start"}, "concurrency": 1},
        clock=clock,
    )
    admitted(call(engine, "start"))
    assert refused(call(engine, "start")).rule_id == "single"
    refusal = refused(call(engine, "stop"))
    assert (refusal.rule_id, refusal.retry_after_ms) == ("long", 5000)


# --- the bound on groups ---------------------------------------------------------------------------


def test_a_full_table_of_busy_groups_refuses_a_new_group_until_one_is_idle() -> None:
    clock = Clock()
    engine = limits(
        {"id": "per-agent", "group_by": ["subject"], "max_keys": 2, "calls": {"max": 5, "window_ms": 1000}},
        clock=clock,
    )
    admitted(call(engine, subjects=frozenset({"token:a"})))
    clock.advance_ms(200)
    admitted(call(engine, subjects=frozenset({"token:b"})))
    refusal = refused(call(engine, subjects=frozenset({"token:c"})))
    assert refusal.data() == {"reason": "limit_keys_full", "ruleId": "per-agent", "retryAfterMs": 800}
    admitted(call(engine, subjects=frozenset({"token:a"})))  # known groups still count
    clock.advance_ms(800)
    refused(call(engine, subjects=frozenset({"token:c"})))  # "a" was used again at 200 ms
    clock.advance_ms(400)
    admitted(call(engine, subjects=frozenset({"token:c"})))  # "a" and "b" went idle and were dropped
    assert engine.status()["rules"][0]["groups"] == 1


def test_groups_with_calls_in_flight_are_never_dropped() -> None:
    engine = limits({"id": "c", "group_by": ["subject"], "max_keys": 1, "concurrency": 2})
    held = admitted(call(engine, subjects=frozenset({"token:a"})))
    refusal = refused(call(engine, subjects=frozenset({"token:b"})))
    assert refusal.reason == "limit_keys_full" and refusal.retry_after_ms is None
    engine.release(held)
    admitted(call(engine, subjects=frozenset({"token:b"})))


# --- reload and status -----------------------------------------------------------------------------


def test_a_reload_keeps_the_counters_of_unchanged_rules_only() -> None:
    kept = {"id": "kept", "match": {"capability": "tool:stop"}, "calls": {"max": 1, "window_ms": 60_000}}
    changed = {"id": "changed", "match": {"capability": "tool:start"}, "calls": {"max": 1, "window_ms": 60_000}}
    engine = limits(kept, changed, {"id": "single", "match": {"capability": "tool:start"}, "concurrency": 1})
    held = admitted(call(engine, "start"))
    admitted(call(engine, "stop"))
    engine.swap(entries(kept, {**changed, "calls": {"max": 2, "window_ms": 60_000}}))
    assert refused(call(engine, "stop")).rule_id == "kept"  # unchanged: its call is still counted
    admitted(call(engine, "start"))  # changed: it counts from zero, and "single" is gone
    admitted(call(engine, "start"))
    assert refused(call(engine, "start")).rule_id == "changed"
    engine.release(held)  # a call admitted under a rule now gone ends harmlessly


def test_status_shows_rules_groups_and_a_bounded_list_of_recent_refusals() -> None:
    engine = limits(
        {"id": "per-agent", "group_by": ["subject"], "calls": {"max": 1, "window_ms": 60_000}, "concurrency": 3},
        recent_refusals=2,
    )
    admitted(call(engine))
    for _ in range(3):
        refused(call(engine))
    status = engine.status()
    (rule,) = status["rules"]
    assert rule == {
        "id": "per-agent",
        "group_by": ["subject"],
        "limits": {"calls": {"max": 1, "window_ms": 60_000}, "concurrency": 3},
        "groups": 1,
        "max_keys": 4096,
        "in_flight": 1,
        "busiest": [{"group": {"subject": "token:agent"}, "calls": 1, "in_flight": 1}],
        "refused": 3,
    }
    assert status["refusals"]["total"] == 3
    recent = status["refusals"]["recent"]
    assert len(recent) == 2
    assert {key: recent[-1][key] for key in ("reason", "ruleId", "slot", "subject", "tool")} == {
        "reason": "limit_exceeded",
        "ruleId": "per-agent",
        "slot": "pump-1",
        "subject": "token:agent",
        "tool": "set_speed",
    }


def test_without_rules_every_call_is_admitted_and_holds_nothing() -> None:
    engine = limits()
    answer = admitted(call(engine))
    assert answer.held == ()
    engine.release(answer)


def test_the_diagnosis_names_recent_refusals_and_a_full_rule() -> None:
    engine = limits(
        {"id": "per-agent", "group_by": ["subject"], "max_keys": 1, "calls": {"max": 1, "window_ms": 60_000}},
    )
    admitted(call(engine))
    refused(call(engine))
    refused(call(engine, subjects=OTHER))
    problems = diagnose(replace(diagnosis_view(), governance={"limits": engine.status()}))
    by_id = {problem.id: problem for problem in problems}
    assert by_id["limits.keys_full"].severity == "warning"
    assert "1 group of at most 1 (max_keys), grouped by subject" in by_id["limits.keys_full"].evidence
    refusals = by_id["limits.refused"]
    assert refusals.summary == "Execution limits refused 2 calls or reservations since the gateway started"
    assert refusals.evidence.startswith(
        "most recent: rule per-agent (limit_keys_full) refused token:other on pump-1 calling set_speed; "
        "rule per-agent (limit_exceeded) refused token:agent"
    )
