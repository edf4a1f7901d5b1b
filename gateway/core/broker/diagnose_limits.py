"""Problems of execution limits (docs/governance-limits.md), read from the governance status the policy
layer reports (`limits`): calls refused by a limit, rules whose groups fill their max_keys, a budget
ledger that refused reservations for want of room, and [[limits]] on an argument a slot's tool takes
not (docs/governance-arguments.md), whose calls pass unchecked by them.

Pure: the status in, problems out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.broker.problems import GatewayView, Problem

SHOWN_REFUSALS = 3
"""Recent refusals named in the evidence, newest first; the count covers them all."""
LEDGER_ROOM = ("ledger_full", "caller_reservations_full")
"""Refusal reasons of a budget ledger without room (gateway/policy/execution/refusals.py)."""
CALLER_FULL = "caller_reservations_full"
SHOWN_NOT_TAKEN = 5
"""(slot, tool, rule) triples named in the evidence of limits.argument_not_taken; the count covers them all."""


def limit_problems(view: GatewayView) -> list[Problem]:
    governance = view.governance
    limits = governance.get("limits") if isinstance(governance, Mapping) else None
    if not isinstance(limits, Mapping):
        return []
    problems = [_full(rule) for rule in limits.get("rules") or () if isinstance(rule, Mapping) and _is_full(rule)]
    refusals = limits.get("refusals")
    full = _ledger_refusals(refusals)
    if full:
        problems.append(_ledger_full(full, limits.get("reservations")))
    if isinstance(refusals, Mapping) and refusals.get("total"):
        problems.append(_refused(refusals))
    untaken = [entry for entry in limits.get("arguments_not_taken") or () if isinstance(entry, Mapping)]
    if untaken:
        problems.append(_not_taken(untaken))
    return problems


def _not_taken(untaken: list[Mapping[str, Any]]) -> Problem:
    named = "; ".join(
        f'{entry.get("rule")} on "{entry.get("argument")}": tool {entry.get("tool")} on slot {entry.get("slot")} '
        f"takes {', '.join(str(name) for name in entry.get('takes') or ()) or 'no arguments'}"
        for entry in untaken[:SHOWN_NOT_TAKEN]
    )
    more = len(untaken) - SHOWN_NOT_TAKEN
    return Problem(
        "limits.argument_not_taken",
        "warning",
        f"{_count(len(untaken), 'argument limit does', 'argument limits do')} not apply: the tool's input schema "
        "takes no argument of the limit's name, so its calls are forwarded unchecked by the limit",
        named + (f"; and {more} more (broker_info governance.limits.arguments_not_taken)" if more > 0 else ""),
        "If the provider renamed the argument (a new firmware or version), write the [[limits]] rule for the new "
        "name and reload the policy; if the tool never takes it (another device's tool of the same name), narrow "
        "the rule's resources to the slots whose tool does.",
        untaken[0].get("slot") if len({entry.get("slot") for entry in untaken}) == 1 else None,
    )


def _is_full(rule: Mapping[str, Any]) -> bool:
    groups, most = rule.get("groups"), rule.get("max_keys")
    return isinstance(groups, int) and isinstance(most, int) and groups >= most


def _full(rule: Mapping[str, Any]) -> Problem:
    rule_id = rule.get("id")
    return Problem(
        "limits.keys_full",
        "warning",
        f'Execution limit "{rule_id}" counts as many groups as it may: calls of a new group are refused',
        f"{_count(rule.get('groups'), 'group', 'groups')} of at most {rule.get('max_keys')} (max_keys), grouped by "
        f"{', '.join(rule.get('group_by') or ()) or 'nothing'}; a group is dropped once its windows are empty "
        "and it has no call in flight",
        f'Raise max_keys of the rule "{rule_id}" in the policy and reload it, or group by fewer keys.',
    )


def _ledger_refusals(refusals: object) -> list[Mapping[str, Any]]:
    """The kept recent refusals of the ledger for want of room."""
    if not isinstance(refusals, Mapping):
        return []
    recent = refusals.get("recent") or ()
    return [entry for entry in recent if isinstance(entry, Mapping) and entry.get("reason") in LEDGER_ROOM]


def _ledger_full(full: list[Mapping[str, Any]], reservations: object) -> Problem:
    held = reservations if isinstance(reservations, Mapping) else {}
    callers = sorted({str(entry.get("subject")) for entry in full if entry.get("reason") == CALLER_FULL})
    return Problem(
        "limits.ledger_full",
        "warning",
        "The budget ledger refused reservations for want of room: providers hold many grants they have not settled",
        f"{_count(len(full), 'reservation', 'reservations')} among the recent refusals "
        f"({', '.join(sorted({str(entry.get('reason')) for entry in full}))}); the ledger holds {held.get('held')} "
        f"records of at most {held.get('max_reservations')}, {held.get('unsettled')} unsettled"
        + (f"; callers at their own bound: {', '.join(callers)}" if callers else ""),
        "Have each provider settle a reservation as soon as its native work ends (broker/budget/settle) and "
        "reserve only right before the work: a settled or expired record makes room at once. A caller at its "
        "bound (caller_reservations_full) is reserving past its share: find what its calls ask the provider to do.",
    )


def _refused(refusals: Mapping[str, Any]) -> Problem:
    recent = [entry for entry in refusals.get("recent") or () if isinstance(entry, Mapping)]
    named = "; ".join(
        f"rule {entry.get('ruleId') or '-'} ({entry.get('reason')}) refused {entry.get('subject')} on "
        f"{entry.get('slot')}" + (f" calling {entry['tool']}" if entry.get("tool") else "")
        for entry in reversed(recent[-SHOWN_REFUSALS:])
    )
    return Problem(
        "limits.refused",
        "info",
        f"Execution limits refused {_count(refusals.get('total'), 'call or reservation', 'calls or reservations')} "
        "since the gateway started",
        f"most recent: {named}" if named else "none kept",
        "Expected when agents go past the operator's limits: the agents got -32029 (with retryAfterMs when "
        "time alone lets the call pass) and nothing reached the device. broker_info governance.limits shows "
        "each rule's counts; raise a rule's limits in the policy if the work is legitimate.",
    )


def _count(count: object, one: str, many: str) -> str:
    """`count` with its noun: "1 group", "2 groups"."""
    return f"{count} {one if count == 1 else many}"
