"""[policy] at run time: its inline rules or its file, loaded and checked whole, then swapped in (as
`mcp-gateway policy reload` does; execution-limit counters carry over, and a refused reload puts back
the very counters it found). Adding or removing [policy]
needs a restart: the audit trail opens, and every way in is wired to the policy, at start. [audit]
needs one too (its database is open, its writer running)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.config import GatewayConfig, PolicyConfig
from gateway.policy.execution.counters import RuleCounters
from gateway.policy.governor import Governor
from gateway.policy.rules import Policy, PolicyError, load_policy
from gateway.reload.context import Context, Prepared
from gateway.reload.report import Refused

OWNS = ("policy",)
log = logging.getLogger("gateway.policy")


@dataclass(frozen=True)
class Before:
    """What a policy swap changes in the governor, saved to be put back exactly."""

    source: PolicyConfig | None
    policy: Policy
    reloads: int
    limit_rules: tuple[RuleCounters, ...]
    """The execution-limit rules with their counters: swapping back keeps a rule's counters only when its
    id and definition match both ways, so going back through swap would start some from zero."""
    confirms_changed_s: float


class PolicySwap(Prepared):
    def __init__(self, changes: list[str], governor: Governor, policy: Policy | None, source: PolicyConfig) -> None:
        super().__init__(changes)
        self.governor = governor
        self.policy = policy
        self.source = source
        self.before: Before | None = None

    def swap(self) -> None:
        governor = self.governor
        self.before = Before(
            governor.source, governor.policy, governor.reloads, governor.limits.rules, governor.confirms_changed_s
        )
        governor.source = self.source
        if self.policy is not None:
            governor.swap(self.policy)
            log.info("policy reloaded (%d reloads)", governor.reloads)

    def undo(self) -> None:
        before = self.before
        if before is None:
            return
        governor = self.governor
        governor.source = before.source
        try:
            if governor.policy is not before.policy:
                governor.swap(before.policy)  # tells listening clients again, as the swap forward did
                log.info("policy put back: the configuration reload was refused")
        finally:
            # Exactly what the swap found, even when telling clients fails: the very counters (no quota
            # starts again) and the time the [[confirm]] rules last changed (no waiting call's rule is
            # marked as from an earlier policy).
            governor.limits.rules = before.limit_rules
            governor.confirms_changed_s = before.confirms_changed_s
            governor.reloads = before.reloads


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if (old.policy is None) != (new.policy is None):
        raise Refused(
            "policy: adding or removing [policy] needs a restart (the audit trail opens, and every way in is "
            "wired to the policy, at start)"
        )
    governor = context.running.governor
    if new.policy is None or governor is None:
        return None
    try:
        policy = load_policy(new.policy)  # its file is read again, even when [policy] itself is unchanged
    except PolicyError as exc:
        log.error("policy reload failed, the policy in force stays: %s", exc)
        raise Refused(f"policy: {exc}") from exc
    if policy.document == governor.policy.document:
        if old.policy == new.policy:
            return None
        return PolicySwap(["policy: moved, the same rules"], governor, None, new.policy)
    return PolicySwap(["policy: reloaded"], governor, policy, new.policy)
