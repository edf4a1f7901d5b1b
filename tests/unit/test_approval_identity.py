"""Whose call an approval is (gateway/policy/rules/subjects.py identity_of): the subject the caller authenticated
as, Principal.key as a subject, as sessions go; never its groups or its OAuth client. The per-caller bound
and the own-call refusal of `by = "another"` go by it (docs/governance.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import errors
from gateway.core.policy_interface import REFUSED_META_KEY
from gateway.core.principal import ANONYMOUS, Principal
from gateway.policy.approvals import Approvals, ApprovalsFull
from gateway.policy.governor import Governor
from gateway.policy.rules import Policy, subjects_of
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.subjects import identity_of

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/**"]}],
    "confirm": [{"principal": "*", "capabilities": ["tool:start"], "resources": ["/**"], "by": "another"}],
}

ALICE_AGENT = Principal("alice", "oauth", client="agent-app")
ALICE_DESK = Principal("alice", "oauth", groups=frozenset({"approvers"}), client="desk")


@pytest.mark.parametrize(
    ("principal", "caller"),
    [
        (ALICE_AGENT, "user:alice"),
        (ALICE_DESK, "user:alice"),
        (Principal("alice", "token"), "token:alice"),
        (Principal("Alice", "token"), "token:Alice"),
        (Principal("bridge", "hmac"), "service:bridge"),
        (ANONYMOUS, "anonymous"),
    ],
)
def test_the_caller_is_the_subject_it_authenticated_as(principal: Principal, caller: str) -> None:
    assert identity_of(subjects_of(principal)) == caller


def test_one_user_has_one_quota_whatever_client_or_groups_its_tokens_name() -> None:
    approvals = Approvals(limit=10, per_caller=2)
    for n, principal in enumerate((ALICE_AGENT, Principal("alice", "oauth"))):
        approvals.request(f"a{n}", f"b{n}", subjects_of(principal), "s", "/s", "t", {"n": n}, "c", 60)
    with pytest.raises(ApprovalsFull) as full:
        approvals.request("a9", "b9", subjects_of(ALICE_DESK), "s", "/s", "t", {}, "c", 60)
    assert full.value.limit == "max_pending_approvals_per_caller"
    # A static token named alice is another caller (as for sessions: another Principal.key).
    approvals.request("t1", "u1", subjects_of(Principal("alice", "token")), "s", "/s", "t", {}, "c", 60)
    # Anonymous callers cannot be told apart: they share one quota.
    for n in (1, 2):
        approvals.request(f"n{n}", f"m{n}", subjects_of(ANONYMOUS), "s", "/s", "t", {"n": n}, "c", 60)
    with pytest.raises(ApprovalsFull):
        approvals.request("n3", "m3", subjects_of(ANONYMOUS), "s", "/s", "t", {"n": 3}, "c", 60)


async def test_a_user_never_approves_their_own_call_and_another_identity_does() -> None:
    governor = Governor(Policy(check_policy(POLICY)), trail=None)
    waiting = await governor.admit_call(ALICE_AGENT, "pump-1", {"name": "start"}, "start", {}, "streamable-http")
    assert waiting.answer is not None
    approval = waiting.answer["_meta"][REFUSED_META_KEY]["approval"]
    for own in (ALICE_DESK, Principal("alice", "oauth"), ALICE_AGENT):
        with pytest.raises(errors.RpcError) as refused:
            governor.decide_approval(own, approval, True)
        assert refused.value.data == {"reason": "own_call", "approval": approval}
    assert governor.decide_approval(Principal("alice", "token"), approval, True)["decided_by"] == "token:alice"
    assert (await governor.admit_call(ALICE_AGENT, "pump-1", {"name": "start"}, "start", {}, "sse")).allowed


async def test_anonymous_callers_never_approve_each_others_calls() -> None:
    governor = Governor(Policy(check_policy(POLICY)), trail=None)
    waiting = await governor.admit_call(ANONYMOUS, "pump-1", {"name": "start"}, "start", {}, "streamable-http")
    assert waiting.answer is not None
    approval = waiting.answer["_meta"][REFUSED_META_KEY]["approval"]
    with pytest.raises(errors.RpcError) as refused:
        governor.decide_approval(ANONYMOUS, approval, True)
    assert refused.value.data == {"reason": "own_call", "approval": approval}
