"""All the matching rules or none: every rule is checked before any is debited.

Checking and debiting run without an await between them, so on the event loop no other call can
slip in between; a refusal by one rule leaves every other rule's counters as they were.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.policy.execution.counters import PRUNE_PER_DEBIT, GroupCounters, RuleCounters
from gateway.policy.execution.refusals import (
    CONCURRENCY_EXCEEDED,
    LIMIT_EXCEEDED,
    LIMIT_KEYS_FULL,
    QUANTITY_EXCEEDS_LIMIT,
    LimitRefusal,
    deciding,
    duration,
)
from gateway.policy.execution.rules import GroupKey, Target
from gateway.policy.execution.windows import WindowSpec


@dataclass(frozen=True)
class Debit:
    """One rule's part of an admission: its group (None: a group to create), what to debit."""

    counters: RuleCounters
    key: GroupKey
    group: GroupCounters | None
    windows: tuple[WindowSpec, ...]
    hold: bool
    """Take a place of the rule's concurrency (released when the call ends)."""


@dataclass(frozen=True)
class Held:
    """A place taken in one rule's concurrency, given back by `release`."""

    counters: RuleCounters
    key: GroupKey
    group: GroupCounters


def plan(
    matching: Iterable[tuple[RuleCounters, tuple[WindowSpec, ...], bool]], target: Target, quantity: int, now_ms: float
) -> list[Debit] | LimitRefusal:
    """What admitting `target` debits from each matching rule (its windows, and a concurrency place
    when asked), or the refusal when any rule has no room."""
    debits: list[Debit] = []
    refusals: list[LimitRefusal] = []
    for counters, windows, hold in matching:
        rule = counters.rule
        counters.prune(now_ms, PRUNE_PER_DEBIT)
        key = rule.key(target)
        group = counters.find(key)
        refused = _too_much(counters, windows, quantity)
        if refused is None and group is None:
            refused = _room(counters, key, now_ms)  # a new group starts empty: only its room can refuse
        elif refused is None and group is not None:
            # Every full window and a full concurrency, so the rule's answer is the one that decides.
            found = _windows(counters, key, group, windows, quantity, now_ms)
            if hold and rule.concurrency is not None and group.in_flight >= rule.concurrency:
                found.append(_concurrency(counters, key, group, now_ms))
            refused = deciding(found)
        if refused is not None:
            refusals.append(refused)
        else:
            debits.append(Debit(counters, key, group, windows, hold and rule.concurrency is not None))
    refusal = deciding(refusals)
    return refusal if refusal is not None else debits


def commit(debits: Sequence[Debit], quantity: int, now_ms: float) -> tuple[Held, ...]:
    """Debit every planned rule; returns the concurrency places taken."""
    held: list[Held] = []
    for debit in debits:
        group = debit.group if debit.group is not None else debit.counters.add(debit.key)
        for spec in debit.windows:
            group.windows[spec.kind].debit(now_ms, quantity)
        if debit.hold:
            group.in_flight += 1
            held.append(Held(debit.counters, debit.key, group))
        debit.counters.settle(debit.key, group, now_ms)  # into the idle heap, or kept out while in flight
    return tuple(held)


def release(held: Iterable[Held], now_ms: float) -> None:
    for place in held:
        place.counters.ended(place.key, place.group, now_ms)


def _scope(counters: RuleCounters, key: GroupKey) -> str:
    group = counters.rule.describe_group(key)
    return f" for {group}" if group else ""


def _windows(
    counters: RuleCounters,
    key: GroupKey,
    group: GroupCounters,
    windows: Sequence[WindowSpec],
    quantity: int,
    now_ms: float,
) -> list[LimitRefusal]:
    """A refusal for each of `windows` that has no room for `quantity` now."""
    rule = counters.rule
    found: list[LimitRefusal] = []
    for spec in windows:
        wait = group.windows[spec.kind].wait_ms(now_ms, quantity)
        if wait:
            found.append(
                LimitRefusal(
                    LIMIT_EXCEEDED,
                    f'Execution limit "{rule.id}" reached{_scope(counters, key)}: at most {spec.max} '
                    f"{_units(spec, spec.max)} per {duration(spec.window_ms)} ({spec.kind})",
                    rule.id,
                    wait,
                    spec.kind,
                )
            )
    return found


def _units(spec: WindowSpec, count: int) -> str:
    """The window's unit for `count`: "call" for one, else "calls"; a budget's unit as the policy names it."""
    return "call" if spec.unit == "calls" and count == 1 else spec.unit


def _too_much(counters: RuleCounters, windows: Iterable[WindowSpec], quantity: int) -> LimitRefusal | None:
    for spec in windows:
        if quantity > spec.max:
            return LimitRefusal(
                QUANTITY_EXCEEDS_LIMIT,
                f'Execution limit "{counters.rule.id}" allows at most {spec.max} {_units(spec, spec.max)} per '
                f"{duration(spec.window_ms)}; {quantity} at once can never pass",
                counters.rule.id,
                None,
                spec.kind,
            )
    return None


def _concurrency(counters: RuleCounters, key: GroupKey, group: GroupCounters, now_ms: float) -> LimitRefusal:
    """The rule's concurrency is full. Places kept by cancelled or timed-out calls are named, and when
    freeing only those lets the call pass, retryAfterMs is when enough of their holds have ended."""
    rule = counters.rule
    limit = rule.concurrency
    assert limit is not None
    calls = "call" if limit == 1 else "calls"
    kept = sorted(group.kept)
    held, retry = "", None
    if kept:
        hold_s = max(length for _, length in kept)
        one = len(kept) == 1
        by = (
            "a call that was cancelled or passed its deadline"
            if one
            else "calls that were cancelled or passed their deadlines"
        )
        until = "its device answers or at most" if one else "their devices answer or at most"
        held = (
            f" ({len(kept)} of them kept by {by}, until {until} {hold_s:g} s after "
            f"{'it' if one else 'each'} ended (limits.cancelled_call_hold_s))"
        )
        freed = group.in_flight - limit + 1  # places that must end before one more call fits
        if freed <= len(kept):
            retry = max(1, math.ceil(kept[freed - 1][0] - now_ms))
    return LimitRefusal(
        CONCURRENCY_EXCEEDED,
        f'Execution limit "{rule.id}": at most {limit} {calls} in flight{_scope(counters, key)}, and that many '
        f"are{held}; call again once one has ended",
        rule.id,
        retry,
        "concurrency",
    )


def _room(counters: RuleCounters, key: GroupKey, now_ms: float) -> LimitRefusal | None:
    wait = counters.room_wait(now_ms)
    if wait <= 0:
        return None
    rule = counters.rule
    groups = "group" if rule.max_keys == 1 else "groups"
    if math.isinf(wait):
        why, then = "each with a call in flight", "call again once one has ended, or the operator may raise max_keys"
    else:
        why, then = "none idle yet", "the operator may raise max_keys"
    return LimitRefusal(
        LIMIT_KEYS_FULL,
        f'Execution limit "{rule.id}" counts {rule.max_keys} {groups} already (max_keys), {why}, and cannot '
        f"count one more{_scope(counters, key)}; {then}",
        rule.id,
        None if math.isinf(wait) else max(1, math.ceil(wait)),
    )
