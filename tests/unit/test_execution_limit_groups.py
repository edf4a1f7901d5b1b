"""The groups of an execution limit: a group whose windows are empty and that has no call in flight is
dropped, a full rule finds the idle ones (and says when time alone frees one), and each rule's refusal
count lives and resets with its counters (gateway/policy/execution/counters.py, docs/governance-limits.md)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from gateway.core.broker.diagnose import diagnose
from gateway.policy.execution.admission import Admission, ExecutionLimits
from gateway.policy.execution.counters import PRUNE_PER_DEBIT
from tests.unit.test_diagnose import view as diagnosis_view
from tests.unit.test_execution_limits import Clock, admitted, call, entries, limits, refused

A = frozenset({"token:agent-a"})
B = frozenset({"token:agent-b"})


def keys_rule(max_keys: int, window_ms: int = 1000, **more: object) -> dict[str, object]:
    return {
        "id": "keys",
        "group_by": ["subject"],
        "max_keys": max_keys,
        "rate": {"max": 100, "window_ms": window_ms},
        **more,
    }


def groups(engine: ExecutionLimits) -> int:
    """The groups the rule holds, read without status() (which drops idle groups itself)."""
    return len(engine.rules[0].groups)


def test_a_group_created_after_an_idle_one_was_dropped_goes_idle_in_turn() -> None:
    clock = Clock()
    engine = limits(keys_rule(1), clock=clock)
    admitted(call(engine, subjects=A))
    clock.advance_ms(7)
    assert refused(call(engine, subjects=B)).data() == {
        "reason": "limit_keys_full",
        "ruleId": "keys",
        "retryAfterMs": 993,
    }
    clock.advance_ms(1193)
    admitted(call(engine, subjects=B))  # agent-a's window is empty: its group makes room
    clock.advance_ms(10)
    refusal = refused(call(engine, subjects=A))  # agent-b's window still counts its call
    assert refusal.retry_after_ms == 990
    assert "none idle yet" in refusal.text and "in flight" not in refusal.text
    clock.advance_ms(990)
    admitted(call(engine, subjects=A))
    clock.advance_ms(75_000)
    admitted(call(engine, subjects=B))
    admitted(call(engine, subjects=B))


def test_every_group_of_a_full_rule_goes_idle_once_its_window_is_empty() -> None:
    clock = Clock()
    engine = limits(keys_rule(2), clock=clock)
    subjects = [frozenset({f"token:agent-{n}"}) for n in range(6)]
    for first, second, third in zip(subjects[::3], subjects[1::3], subjects[2::3], strict=True):
        admitted(call(engine, subjects=first))
        admitted(call(engine, subjects=second))
        assert refused(call(engine, subjects=third)).retry_after_ms == 1000
        clock.advance_ms(1000)
        admitted(call(engine, subjects=third))
        clock.advance_ms(1000)
    assert groups(engine) == 1  # the last group's window emptied; the next call drops it
    admitted(call(engine, subjects=subjects[0]))
    admitted(call(engine, subjects=subjects[1]))


def test_idle_groups_are_dropped_by_later_calls_and_by_status_without_a_full_rule() -> None:
    clock = Clock()
    engine = limits(keys_rule(4096, window_ms=2000), clock=clock)
    admitted(call(engine, subjects=A))
    admitted(call(engine, subjects=B))
    clock.advance_ms(2000)
    admitted(call(engine, subjects=frozenset({"token:agent-c"})))
    assert groups(engine) == 1  # a and b went idle and the call dropped them on its way
    clock.advance_ms(120_000)
    (rule,) = engine.status()["rules"]
    assert rule["groups"] == 0 and rule["busiest"] == []


def test_a_call_drops_a_bounded_number_of_idle_groups_and_the_rest_go_with_later_calls() -> None:
    clock = Clock()
    engine = limits(keys_rule(4096), clock=clock)
    for n in range(100):
        admitted(call(engine, subjects=frozenset({f"token:agent-{n}"})))
    clock.advance_ms(1000)
    admitted(call(engine, subjects=A))
    assert groups(engine) == 101 - PRUNE_PER_DEBIT
    for _ in range(100 // PRUNE_PER_DEBIT + 1):
        admitted(call(engine, subjects=A))
    assert groups(engine) == 1


def test_a_full_rule_of_groups_with_calls_in_flight_says_so_and_has_no_retry() -> None:
    clock = Clock()
    engine = limits(keys_rule(1, concurrency=1), clock=clock)
    held = admitted(call(engine, subjects=A))
    clock.advance_ms(5000)  # the window is empty; only the call in flight keeps the group
    refusal = refused(call(engine, subjects=B))
    assert refusal.retry_after_ms is None
    assert refusal.text.startswith(
        'Execution limit "keys" counts 1 group already (max_keys), each with a call in flight, and cannot count '
        "one more for subject token:agent-b; call again once one has ended"
    )
    engine.release(held)
    assert groups(engine) == 0  # its window emptied while it was in flight: dropped when the call ends
    admitted(call(engine, subjects=B))


def test_a_group_whose_call_ends_inside_its_window_is_dropped_when_the_window_empties() -> None:
    clock = Clock()
    engine = limits(keys_rule(1, concurrency=1), clock=clock)
    held = admitted(call(engine, subjects=A))
    clock.advance_ms(300)
    engine.release(held)
    assert refused(call(engine, subjects=B)).retry_after_ms == 700
    clock.advance_ms(700)
    admitted(call(engine, subjects=B))


def test_the_refusal_count_of_a_rule_starts_from_zero_when_it_changes_or_comes_back() -> None:
    kept = {"id": "kept", "match": {"capability": "tool:stop"}, "calls": {"max": 1, "window_ms": 60_000}}
    changed = {"id": "changed", "match": {"capability": "tool:start"}, "calls": {"max": 1, "window_ms": 60_000}}
    engine = limits(kept, changed)
    for tool in ("stop", "start"):
        admitted(call(engine, tool))
        refused(call(engine, tool))
        refused(call(engine, tool))

    def refused_by_rule() -> dict[str, int]:
        return {rule["id"]: rule["refused"] for rule in engine.status()["rules"]}

    assert refused_by_rule() == {"kept": 2, "changed": 2}
    engine.swap(entries(kept, {**changed, "calls": {"max": 2, "window_ms": 60_000}}))
    assert refused_by_rule() == {"kept": 2, "changed": 0}
    engine.swap(entries(kept))
    engine.swap(entries(kept, changed))  # removed and added again: a new rule
    assert refused_by_rule() == {"kept": 2, "changed": 0}
    assert engine.status()["refusals"]["total"] == 4  # the log of every refusal is the gateway's, not a rule's


@dataclass
class ModelGroup:
    last_ms: float | None = None
    in_flight: int = 0


@dataclass
class Model:
    """Groups as the docs define them, by a scan of every group: what the counters must agree with."""

    max_keys: int
    window_ms: int
    concurrency: int
    groups: dict[str, ModelGroup] = field(default_factory=dict)

    def idle(self, group: ModelGroup, now_ms: float) -> bool:
        return not group.in_flight and (group.last_ms is None or group.last_ms + self.window_ms <= now_ms)

    def admit(self, name: str, now_ms: float) -> tuple[bool, str | None, int | None]:
        """(admitted, refusal reason, retryAfterMs)."""
        self.groups = {key: group for key, group in self.groups.items() if not self.idle(group, now_ms)}
        group = self.groups.get(name)
        if group is None:
            if len(self.groups) >= self.max_keys:
                waits = [g.last_ms + self.window_ms for g in self.groups.values() if not g.in_flight and g.last_ms]
                return False, "limit_keys_full", math.ceil(min(waits) - now_ms) if waits else None
            group = self.groups[name] = ModelGroup()
        elif group.in_flight >= self.concurrency:
            return False, "concurrency_exceeded", None
        group.last_ms = now_ms
        group.in_flight += 1
        return True, None, None


def test_the_counters_agree_with_a_scan_of_every_group_over_random_traffic() -> None:
    rng = random.Random(20260728)
    for _ in range(40):
        clock = Clock()
        window_ms = rng.choice((50, 200, 1000))
        max_keys = rng.randint(1, 4)
        engine = limits(
            {
                "id": "keys",
                "group_by": ["subject"],
                "max_keys": max_keys,
                "rate": {"max": 1_000_000, "window_ms": window_ms},  # never full: only groups and places decide
                "concurrency": 2,
            },
            clock=clock,
        )
        model = Model(max_keys, window_ms, 2)
        held: list[tuple[str, Admission]] = []
        for _ in range(300):
            clock.now = round(clock.now + rng.choice((0, 1, 5, 20, window_ms // 2, window_ms, 3 * window_ms)) / 1000, 3)
            now_ms = engine.now_ms()
            if held and rng.random() < 0.4:
                name, admission = held.pop(rng.randrange(len(held)))
                engine.release(admission)
                if name in model.groups:
                    model.groups[name].in_flight -= 1
                continue
            name = f"token:agent-{rng.randrange(6)}"
            expected = model.admit(name, now_ms)
            answer = call(engine, subjects=frozenset({name}))
            if isinstance(answer, Admission):
                assert expected[0], (name, now_ms, expected)
                held.append((name, answer))
            else:
                assert (False, answer.reason, answer.retry_after_ms) == expected, (name, now_ms)
            assert engine.status()["rules"][0]["groups"] == len(
                [group for group in model.groups.values() if not model.idle(group, now_ms)]
            )


def test_the_diagnosis_claims_retry_after_only_for_refusals_time_resolves() -> None:
    engine = limits({"id": "one-start", "concurrency": 1})
    admitted(call(engine))
    assert refused(call(engine)).retry_after_ms is None  # concurrency_exceeded: a call must end first
    problems = diagnose(replace(diagnosis_view(), governance={"limits": engine.status()}))
    (refusals,) = [problem for problem in problems if problem.id == "limits.refused"]
    assert "got -32029 (with retryAfterMs when time alone lets the call pass)" in refusals.fix
