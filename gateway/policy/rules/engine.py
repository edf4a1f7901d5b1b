"""The decision engine: a loaded policy, deciding each request by who asks, where and for what."""

from __future__ import annotations

import fnmatch

from gateway.core import method_rules
from gateway.core.names import BROKER_SLOT
from gateway.policy.arguments import ArgumentLimit
from gateway.policy.rules.capabilities import (
    BROKER_TOOL_NEEDS,
    MCP_CAPABILITIES,
    TOOL_PREFIX,
    TOOLS_CALL,
    VERBS,
    capability_of,
    tool_class,
)
from gateway.policy.rules.compiled import ConfirmRule, Grants, Place, compile_rules
from gateway.policy.rules.decision import ALWAYS, DEFAULT, Ask, Decision
from gateway.policy.rules.explain import explanation
from gateway.policy.rules.model import PolicyDocument
from gateway.policy.rules.paths import BROKER_PATH, segment
from gateway.policy.rules.subjects import caller_name

MAX_CACHED = 4096
"""Slots, and callers on slots, whose rules are kept worked out; past it a cache starts again (no growth
without bound when callers come and go)."""


class Policy:
    """A loaded policy; immutable (a reload builds a new one). Rules are worked out once per slot and
    per caller on a slot, and each decision is kept, so deciding a request again is one lookup."""

    def __init__(self, document: PolicyDocument) -> None:
        self.document = document
        self.rules = compile_rules(document)
        self._places: dict[str, Place] = {}
        self._grants: dict[tuple[frozenset[str], str], Grants] = {}
        self._decisions: dict[Ask, Decision] = {}

    def resource_of(self, slot: str) -> str:
        return self.place(slot).resource

    def decide(self, ask: Ask) -> Decision:
        decision = self._decisions.get(ask)
        if decision is None:
            if len(self._decisions) >= MAX_CACHED:
                self._decisions.clear()
            decision = self._decisions[ask] = self._decide(ask)
        return decision

    def _decide(self, ask: Ask) -> Decision:
        capability = capability_of(ask.method)
        place = self.place(ask.slot)
        if capability is None:
            if method_rules.needs_no_capability(ask.method):
                return Decision(True, f"{ask.method} is always allowed", (ALWAYS,), place.resource, "")
            if ask.method == method_rules.LOGGING_SET_LEVEL:
                return _decide_level(place, self.grants(ask.subjects, ask.slot))
            reason = f"Forbidden: {ask.method} is not relayed on {place.resource}: {method_rules.NOT_GOVERNED}"
            return Decision(False, reason, (DEFAULT,), place.resource, "")
        grants = self.grants(ask.subjects, ask.slot)
        if capability == TOOLS_CALL:
            return _decide_call(ask, place, grants)
        denied_by = grants.denied.get(capability)
        granted_by = grants.held.get(capability)
        if denied_by is None and granted_by is not None:
            reason = f"{grants.who} may {VERBS[capability]} on {place.resource} ({granted_by})"
            return Decision(True, reason, (granted_by,), place.resource, capability)
        why = denied_by or f"no role of theirs there grants {capability}"
        reason = (
            f"Forbidden: {grants.who} may not {VERBS[capability]} on {place.resource} ({why}); "
            f"ask the operator for {capability} there"
        )
        return Decision(False, reason, (denied_by or DEFAULT,), place.resource, capability)

    def may_see_tool(self, subjects: frozenset[str], slot: str, tool: str, read_only: bool | None) -> bool:
        """Whether the caller may call `tool`, so may see it listed: decide() without building its words,
        since it runs for every tool of every listing."""
        grants = self.grants(subjects, slot)
        held = grants.held
        if TOOLS_CALL not in held:
            return False
        named = TOOL_PREFIX + tool
        kind = tool_class(read_only)
        if named not in held and kind not in held:
            return False
        denied = grants.denied
        needs = BROKER_TOOL_NEEDS.get(tool) if slot == BROKER_SLOT else None
        if needs is not None and (needs not in held or needs in denied):
            return False
        return not denied or (TOOLS_CALL not in denied and named not in denied and kind not in denied)

    def explain(self, ask: Ask) -> list[str]:
        """The decision on `ask`, every rule considered and what it did, and the limits (for the CLI)."""
        return explanation(ask, self.decide(ask), self.place(ask.slot), self.rules)

    def place(self, slot: str) -> Place:
        """The slot's resource path and the rules that cover it, worked out on the slot's first request."""
        place = self._places.get(slot)
        if place is None:
            if len(self._places) >= MAX_CACHED:
                self._places.clear()
            place = self._places[slot] = self._place(slot)
        return place

    def grants(self, subjects: frozenset[str], slot: str) -> Grants:
        """What a caller holds and is denied on a slot, each with the first rule saying so."""
        key = (subjects, slot)
        grants = self._grants.get(key)
        if grants is None:
            if len(self._grants) >= MAX_CACHED:
                self._grants.clear()
            place = self.place(slot)
            held: dict[str, str] = {}
            for rule in place.assigns:
                if rule.applies_to(subjects):
                    for capability in rule.capabilities:
                        held.setdefault(capability, rule.id)
            denied: dict[str, str] = {}
            for rule in place.denies:
                if rule.applies_to(subjects):
                    for capability in rule.capabilities:
                        denied.setdefault(capability, rule.id)
            confirm: dict[str, ConfirmRule] = {}
            for confirming in place.confirms:
                if confirming.applies_to(subjects):
                    for capability in confirming.capabilities:
                        confirm.setdefault(capability, confirming)
            grants = self._grants[key] = Grants(held, denied, caller_name(subjects), confirm or None)
        return grants

    def _place(self, slot: str) -> Place:
        resource, mapped_by = self._map(slot)
        limits: dict[str, list[ArgumentLimit]] = {}
        for rule in self.rules.limits:
            if rule.covers(resource):
                limits.setdefault(rule.tool, []).append(rule.limit)
        return Place(
            resource,
            mapped_by,
            tuple(rule for rule in self.rules.assigns if rule.covers(resource)),
            tuple(rule for rule in self.rules.denies if rule.covers(resource)),
            {tool: tuple(found) for tool, found in limits.items()},
            tuple(rule for rule in self.rules.confirms if rule.covers(resource)),
        )

    def _map(self, slot: str) -> tuple[str, str]:
        """The slot's resource path, and what put it there."""
        mapped = self.document.resources.get(slot)
        if mapped is not None:
            return mapped, f'resources."{slot}"'
        if slot == BROKER_SLOT:  # the gateway's own slot: no pattern moves it out of /_system
            return BROKER_PATH, "the broker's fixed path"
        for index, pattern in enumerate(self.document.resource_patterns):
            if fnmatch.fnmatchcase(slot, pattern.slots):
                return pattern.path.replace("{slot}", segment(slot)), f"resource_patterns[{index}]"
        return f"/{segment(slot)}", "the default, /<slot>"


def _decide_level(place: Place, grants: Grants) -> Decision:
    """logging/setLevel: the level is shared upstream by every caller of the slot, so only a caller
    holding some MCP capability there (and not denied it) may set it."""
    for capability in MCP_CAPABILITIES:
        granted_by = grants.held.get(capability)
        if granted_by is not None and capability not in grants.denied:
            reason = f"{grants.who} may set the log level on {place.resource} ({granted_by})"
            return Decision(True, reason, (granted_by,), place.resource, capability)
    reason = (
        f"Forbidden: {grants.who} may not set the log level on {place.resource} (no role of theirs there "
        f"grants an MCP capability it is not denied); ask the operator for one of {', '.join(MCP_CAPABILITIES)} there"
    )
    return Decision(False, reason, (DEFAULT,), place.resource, "")


def _decide_call(ask: Ask, place: Place, grants: Grants) -> Decision:
    """tools/call: mcp.tools.call and the tool's own capability or its class, and no deny of any of them."""
    tool = ask.tool or ""
    who = grants.who
    named = TOOL_PREFIX + tool
    kind = tool_class(ask.read_only)
    limits = place.limits.get(tool, ())
    wanted = f"{named} or {kind}"
    what = f'call tool "{tool}" on {place.resource}'
    for capability in (TOOLS_CALL, named, kind):
        denied_by = grants.denied.get(capability)
        if denied_by is not None:
            hint = TOOLS_CALL if capability == TOOLS_CALL else wanted
            reason = f"Forbidden: {who} may not {what} ({denied_by}); ask the operator for {hint} there"
            return Decision(False, reason, (denied_by,), place.resource, capability, limits)
    call_by = grants.held.get(TOOLS_CALL)
    if call_by is None:
        reason = (
            f"Forbidden: {who} may not {what} (no role of theirs there grants {TOOLS_CALL}); "
            f"ask the operator for {TOOLS_CALL} and {wanted} there"
        )
        return Decision(False, reason, (DEFAULT,), place.resource, TOOLS_CALL, limits)
    needs = BROKER_TOOL_NEEDS.get(tool) if ask.slot == BROKER_SLOT else None
    if needs is not None and (needs not in grants.held or needs in grants.denied):
        why = grants.denied.get(needs) or f"no role of theirs there grants {needs}"
        reason = f"Forbidden: {who} may not {what} ({why}); ask the operator for {needs} there"
        return Decision(False, reason, (grants.denied.get(needs) or DEFAULT,), place.resource, needs, limits)
    capability = named if named in grants.held else kind
    tool_by = grants.held.get(capability)
    if tool_by is None:
        reason = (
            f"Forbidden: {who} may not {what} (no role of theirs there grants {wanted}); "
            f"ask the operator for {wanted} there"
        )
        return Decision(False, reason, (DEFAULT,), place.resource, kind, limits)
    rules = (call_by,) if tool_by == call_by else (call_by, tool_by)
    confirm = None
    # broker_approvals and broker_approve are how confirmations are given: held for one, no call could ever
    # be approved. Who may call them is still the policy's rights, decided above.
    gives_confirmations = ask.slot == BROKER_SLOT and tool in ("broker_approvals", "broker_approve")
    if grants.confirm is not None and not gives_confirmations:
        for asked in (TOOLS_CALL, named, kind):
            confirm = grants.confirm.get(asked)
            if confirm is not None:
                break
    reason = f"{who} may {what} ({', '.join(rules)})"
    if confirm is not None:
        reason += f" once a person confirms it ({confirm.id})"
    return Decision(True, reason, rules, place.resource, capability, limits, confirm)
