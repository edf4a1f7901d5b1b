"""[policy] at run time: its inline rules or its file, loaded and checked whole, then swapped in (as
`mcp-gateway policy reload` does; execution-limit counters carry over). Adding or removing [policy]
needs a restart: the audit trail opens, and every way in is wired to the policy, at start. [audit]
needs one too (its database is open, its writer running)."""

from __future__ import annotations

import logging

from gateway.config import GatewayConfig, PolicyConfig
from gateway.policy.governor import Governor
from gateway.policy.rules import Policy, PolicyError, load_policy
from gateway.reload.context import Context, Prepared
from gateway.reload.report import Refused

OWNS = ("policy",)
log = logging.getLogger("gateway.policy")


class PolicySwap(Prepared):
    def __init__(self, changes: list[str], governor: Governor, policy: Policy | None, source: PolicyConfig) -> None:
        super().__init__(changes)
        self.governor = governor
        self.policy = policy
        self.source = source
        self.previous: tuple[PolicyConfig | None, Policy, int] | None = None

    def swap(self) -> None:
        governor = self.governor
        self.previous = (governor.source, governor.policy, governor.reloads)
        governor.source = self.source
        if self.policy is not None:
            governor.swap(self.policy)
            log.info("policy reloaded (%d reloads)", governor.reloads)

    def undo(self) -> None:
        if self.previous is None:
            return
        source, policy, reloads = self.previous
        governor = self.governor
        governor.source = source
        if governor.policy is not policy:
            governor.swap(policy)  # execution-limit counters carry over, as they did forward
            log.info("policy put back: the configuration reload was refused")
        governor.reloads = reloads


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
