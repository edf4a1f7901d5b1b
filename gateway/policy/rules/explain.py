"""The words of `mcp-gateway policy explain`: one decision, every rule considered and what it did, the limits."""

from __future__ import annotations

import json
from collections.abc import Iterable

from gateway.core import method_rules
from gateway.policy.arguments import ArgumentLimit
from gateway.policy.rules.capabilities import (
    MCP_CAPABILITIES,
    TOOL_OBSERVE,
    TOOL_PREFIX,
    TOOLS_CALL,
    capability_of,
    tool_class,
)
from gateway.policy.rules.compiled import ConfirmRule, Place, Rule, Rules
from gateway.policy.rules.decision import Ask, Decision


def explanation(ask: Ask, decision: Decision, place: Place, rules: Rules) -> list[str]:
    """Lines for a person: the decision first, then why, rule by rule."""
    asked = _asked(ask)
    lines = [
        f"{'allowed' if decision.allowed else 'denied'}: {decision.reason}",
        f"caller: {', '.join(sorted(ask.subjects)) or '(no subject)'}",
        f'resource: {place.resource} (slot "{ask.slot}", by {place.mapped_by})',
    ]
    if not asked:
        if method_rules.needs_no_capability(ask.method):
            lines.append(f"capability: none ({ask.method} is always allowed)")
        elif ask.method == method_rules.LOGGING_SET_LEVEL:
            lines.append(f"capability: any of {', '.join(MCP_CAPABILITIES)} (the slot's log level is shared)")
        else:
            lines.append(f"capability: none grants it ({method_rules.NOT_GOVERNED})")
        return lines
    if ask.method == "tools/call":
        kind = tool_class(ask.read_only)
        named = f"{TOOL_PREFIX}{ask.tool or ''}"
        which = "an observe tool" if kind == TOOL_OBSERVE else "a control tool"
        lines.append(f"capability: {TOOLS_CALL}, and {named} or {kind} ({which})")
    else:
        lines.append(f"capability: {asked[0]}")
    lines.append("rules:")
    lines.extend(f"  {_considered(rule, 'grants', ask, place.assigns, asked)}" for rule in rules.assigns)
    lines.extend(f"  {_considered(rule, 'denies', ask, place.denies, asked)}" for rule in rules.denies)
    if not rules.assigns and not rules.denies:
        lines.append("  (none: nothing is granted, so only always-allowed methods pass)")
    if ask.method == "tools/call":
        lines.extend(_limits(ask, place, rules))
        if decision.confirm is not None:
            lines.append(confirmation_line(decision.confirm))
    return lines


def confirmation_line(rule: ConfirmRule) -> str:
    """Who confirms a call `rule` holds, and how long an answer counts."""
    if rule.by == "another":
        who = "another principal approves (mcp-gateway approve), never the caller's own client; an approval"
    else:
        who = (
            "a person answers through the caller's own client (elicitation), else another principal approves; "
            "an answer or an approval"
        )
    return f'confirmation: {rule.id}, by = "{rule.by}": {who} counts for {rule.expires_s} s'


def _asked(ask: Ask) -> tuple[str, ...]:
    """The capabilities that decide `ask`: one, or for tools/call the call and the tool's two."""
    capability = capability_of(ask.method)
    if capability is None:
        return ()
    if capability == TOOLS_CALL:
        return (TOOLS_CALL, f"{TOOL_PREFIX}{ask.tool or ''}", tool_class(ask.read_only))
    return (capability,)


def _considered(rule: Rule, verb: str, ask: Ask, covering: Iterable[Rule], asked: tuple[str, ...]) -> str:
    role = f" as {rule.role}" if rule.role else f" {', '.join(sorted(rule.capabilities))}"
    head = f"{rule.id} {rule.principal}{role} on {', '.join(p.text for p in rule.patterns)}"
    if rule not in covering:
        return f"{head}: not this resource"
    if not rule.applies_to(ask.subjects):
        return f"{head}: not this caller"
    relevant = [capability for capability in asked if capability in rule.capabilities]
    if not relevant:
        return f"{head}: applies, {verb} none of what is asked"
    return f"{head}: applies, {verb} {', '.join(relevant)}"


def _limits(ask: Ask, place: Place, rules: Rules) -> list[str]:
    tool = ask.tool or ""
    mine = [rule for rule in rules.limits if rule.tool == tool]
    if not mine:
        return [f'limits on "{tool}": none']
    lines = [f'limits on "{tool}":']
    for rule in mine:
        where = ", ".join(pattern.text for pattern in rule.patterns)
        applies = "applies" if rule.covers(place.resource) else "not this resource"
        lines.append(f"  {rule.id} on {where}: {applies}; {describe_limit(rule.limit)}")
    return lines


def describe_limit(limit: ArgumentLimit) -> str:
    """speed_rpm min 300, max 2000 (clamp)."""
    bounds = []
    if limit.minimum is not None:
        bounds.append(f"min {limit.minimum:g}")
    if limit.maximum is not None:
        bounds.append(f"max {limit.maximum:g}")
    if limit.allowed is not None:
        bounds.append(f"allowed {json.dumps(list(limit.allowed))}")
    return f"{limit.argument} {', '.join(bounds)} ({limit.action})"
