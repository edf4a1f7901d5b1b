"""Confirmation of device writes (gateway/policy/confirmation.py, approvals.py, [[confirm]] in the policy):
which calls wait, how an answer is bound to one call and used once, and the approvals' bounds."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import errors
from gateway.core.policy_interface import REFUSED_META_KEY, AnswerInstead, ConfirmRetry
from gateway.core.principal import Principal
from gateway.policy.approvals import Approvals, ApprovalsFull, ApprovalUnknown, binding_of
from gateway.policy.confirmation import Confirmations, Question
from gateway.policy.governor import Governor
from gateway.policy.refusal_results import declined_result
from gateway.policy.rules import Ask, Policy, PolicyError
from gateway.policy.rules.checking import check_policy
from gateway.policy.rules.compiled import ConfirmRule

AGENT = frozenset({"token:agent"})
POLICY: dict[str, Any] = {
    "roles": {
        "operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]},
        "auditor": {"capabilities": ["broker.audit.read"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "operator", "resources": ["/**"]},
        {"principal": "token:boss", "role": "operator", "resources": ["/**"]},
        {"principal": "token:boss", "role": "auditor", "resources": ["/_system/**"]},
    ],
    "confirm": [
        {"principal": "token:agent", "capabilities": ["tool.control"], "resources": ["/site1/**"], "expires_s": 60},
        {"principal": "*", "capabilities": ["tool:purge"], "resources": ["/**"]},
    ],
    "resource_patterns": [{"slots": "pump-*", "path": "/site1/{slot}"}],
}


def policy() -> Policy:
    return Policy(check_policy(POLICY))


def test_control_calls_of_the_named_caller_wait_observe_calls_and_others_do_not() -> None:
    rules = policy()
    start = rules.decide(Ask(AGENT, "pump-1", "tools/call", "start", False))
    assert start.allowed and start.confirm is not None and start.confirm.id == "confirm[0]"
    assert start.confirm.expires_s == 60
    assert "once a person confirms it (confirm[0])" in start.reason
    assert rules.decide(Ask(AGENT, "pump-1", "tools/call", "get_status", True)).confirm is None
    assert rules.decide(Ask(frozenset({"token:boss"}), "pump-1", "tools/call", "start", False)).confirm is None
    assert rules.decide(Ask(AGENT, "valve-1", "tools/call", "open", False)).confirm is None  # not under /site1
    purge = rules.decide(Ask(frozenset({"token:boss"}), "valve-1", "tools/call", "purge", False))
    assert purge.confirm is not None and purge.confirm.id == "confirm[1]" and purge.confirm.expires_s == 300


def test_explain_names_the_confirmation_and_who_confirms() -> None:
    lines = policy().explain(Ask(AGENT, "pump-1", "tools/call", "start", False))
    assert (
        'confirmation: confirm[0], by = "caller": a person answers through the caller\'s own client (elicitation), '
        "else another principal approves; an answer or an approval counts for 60 s"
    ) in lines
    another = {**POLICY, "confirm": [{**POLICY["confirm"][0], "by": "another"}]}
    lines = Policy(check_policy(another)).explain(Ask(AGENT, "pump-1", "tools/call", "start", False))
    assert (
        'confirmation: confirm[0], by = "another": another principal approves (mcp-gateway approve), never the '
        "caller's own client; an approval counts for 60 s"
    ) in lines


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"capabilities": []}, "confirm[0].capabilities: needs at least"),
        ({"capabilities": ["tool.contrl"]}, 'did you mean "tool.control"'),
        ({"expires_s": 0}, "expires_s"),
        ({"resources": ["/a/**/b"]}, "confirm[0].resources"),
        ({"principal": "nobody"}, "confirm[0].principal"),
        ({"by": "self"}, "confirm[0].by: input should be 'caller' or 'another'"),
    ],
)
def test_confirm_mistakes_are_named(entry: dict[str, Any], expected: str) -> None:
    valid = {"principal": "token:a", "capabilities": ["tool.control"], "resources": ["/**"]}
    with pytest.raises(PolicyError) as refused:
        check_policy({"confirm": [{**valid, **entry}]})
    assert expected in str(refused.value)


def test_recent_decisions_need_broker_audit_read_besides_observing() -> None:
    rules = policy()
    boss, agent = frozenset({"token:boss"}), AGENT
    assert rules.may_see_tool(boss, "_broker", "broker_audit_recent", True)
    assert not rules.may_see_tool(agent, "_broker", "broker_audit_recent", True)
    assert rules.may_see_tool(agent, "_broker", "broker_approvals", True)
    refused = rules.decide(Ask(agent, "_broker", "tools/call", "broker_audit_recent", True))
    assert not refused.allowed and "ask the operator for broker.audit.read there" in refused.reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_approval_is_bound_used_once_and_expires() -> None:
    clock = Clock()
    approvals = Approvals(limit=2, clock=clock, monotonic=clock)
    binding = binding_of(AGENT, "pump-1", "start", {"speed_rpm": 900})
    first = approvals.request(binding, binding, AGENT, "pump-1", "/site1/pump-1", "start", {"speed_rpm": 900}, "c", 60)
    assert approvals.request(binding, binding, AGENT, "pump-1", "/p", "start", {}, "c", 60) is first  # one per call
    assert approvals.take(binding) is None  # pending: nothing to use yet
    approvals.decide(first.id, True, "token:boss")
    with pytest.raises(ApprovalUnknown):
        approvals.decide(first.id, False, "token:boss")  # decided once
    assert binding_of(AGENT, "pump-1", "start", {"speed_rpm": 901}) != binding
    taken = approvals.take(binding)
    assert taken is first and taken.state == "approved"
    assert approvals.take(binding) is None  # used
    second = approvals.request(binding, binding, AGENT, "pump-1", "/p", "start", {}, "c", 60)
    clock.now += 61
    assert approvals.listed() == [] and approvals.get(second.id) is None
    with pytest.raises(ApprovalUnknown):
        approvals.decide(second.id, True, "token:boss")


def test_approvals_are_bounded_and_secrets_never_shown() -> None:
    approvals = Approvals(limit=1)
    approvals.request("a1", "b1", AGENT, "s", "/s", "t", {"api_key": "k", "speed": 1}, "c", 60)
    assert approvals.listed()[0]["arguments"] == {"api_key": "***", "speed": 1}
    with pytest.raises(ApprovalsFull):
        approvals.request("a2", "b2", AGENT, "s", "/s", "t", {}, "c", 60)


def question(arguments: object) -> Question:
    rule = ConfirmRule("confirm[0]", "token:agent", (), frozenset({"tool.control"}), expires_s=60)
    return Question(AGENT, "token:agent", "pump-1", "/site1/pump-1", "start", arguments, rule, arguments)


class Stateless:
    """A 2026-07-28 caller that declared elicitation: asked by input_required, answering in its retry."""

    way = "input"

    def __init__(self, retry: ConfirmRetry | None = None) -> None:
        self.retry = retry

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a stateless caller is never sent a request")

    async def device_state(self) -> object:
        return {"state": "stopped"}


async def asked_state(confirmations: Confirmations, arguments: object) -> str:
    with pytest.raises(AnswerInstead) as asked:
        await confirmations.ask(question(arguments), Stateless())
    result = asked.value.result
    assert result["resultType"] == "input_required"
    assert result["inputRequests"]["confirm"]["method"] == "elicitation/create"
    return str(result["requestState"])


async def test_a_request_state_answers_its_own_call_once_and_only_before_it_expires() -> None:
    clock = Clock()
    confirmations = Confirmations(Approvals(clock=clock, monotonic=clock))
    yes = {"action": "accept", "content": {"approve": True}}
    state = await asked_state(confirmations, {"speed_rpm": 900})
    with pytest.raises(errors.RpcError) as moved:
        await confirmations.ask(question({"speed_rpm": 2900}), Stateless(ConfirmRetry(state, yes)))
    assert moved.value.data == {"reason": "mismatch"}
    answer = await confirmations.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(state, yes)))
    assert answer.confirmed and answer.by == "token:agent via input_required"
    with pytest.raises(errors.RpcError) as replayed:
        await confirmations.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(state, yes)))
    assert replayed.value.data == {"reason": "used"}
    late = await asked_state(confirmations, {"speed_rpm": 900})
    clock.now += 61
    with pytest.raises(errors.RpcError) as expired:
        await confirmations.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(late, yes)))
    assert expired.value.data == {"reason": "expired"}
    other = Confirmations(Approvals(clock=clock, monotonic=clock))  # another gateway run: another key
    with pytest.raises(errors.RpcError) as foreign:
        await other.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(state, yes)))
    assert foreign.value.data == {"reason": "mismatch"}


@pytest.mark.parametrize(
    ("answer", "confirmed", "unusable"),
    [
        ({"action": "accept", "content": {"approve": True}}, True, False),
        ({"action": "accept", "content": {"approve": False}}, False, False),
        ({"action": "decline"}, False, False),
        ({"action": "cancel"}, False, False),
        (None, False, False),
        # Fail closed: an accept that does not match the question's schema ({"approve": boolean}, required) is a no.
        ({"action": "accept"}, False, True),
        ({"action": "accept", "content": {}}, False, True),
        ({"action": "accept", "content": {"approve": "false"}}, False, True),
        ({"action": "accept", "content": {"approve": "true"}}, False, True),
        ({"action": "accept", "content": {"approve": 0}}, False, True),
        ({"action": "accept", "content": {"approve": 1}}, False, True),
        ({"action": "accept", "content": {"approve": "no"}}, False, True),
        ({"action": "accept", "content": {"approve": None}}, False, True),
        ({"action": "accept", "content": [True]}, False, True),
    ],
)
async def test_only_an_accept_with_approve_true_confirms(
    answer: dict[str, Any] | None, confirmed: bool, unusable: bool
) -> None:
    confirmations = Confirmations()
    state = await asked_state(confirmations, {})
    result = await confirmations.ask(question({}), Stateless(ConfirmRetry(state, answer)))
    assert (result.confirmed, result.unusable) == (confirmed, unusable)
    if unusable:
        text = declined_result(question({}), result)["content"][0]["text"]
        assert "answered accept without content.approve = true, which does not match the question's schema" in text


async def test_the_question_requires_approve() -> None:
    with pytest.raises(AnswerInstead) as asked:
        await Confirmations().ask(question({}), Stateless())
    schema = asked.value.result["inputRequests"]["confirm"]["params"]["requestedSchema"]
    assert schema["required"] == ["approve"] and schema["properties"]["approve"]["type"] == "boolean"


async def test_a_caller_never_approves_its_own_call() -> None:
    governor = Governor(policy(), trail=None)
    agent = Principal(kind="token", name="agent")
    waiting = await governor.admit_call(agent, "pump-1", {"name": "start"}, "start", {}, "streamable-http")
    assert waiting.answer is not None and waiting.effect == "wait-confirmation"
    approval = waiting.answer["_meta"][REFUSED_META_KEY]["approval"]
    with pytest.raises(errors.RpcError) as own:
        governor.decide_approval(agent, approval, True)
    assert own.value.data == {"reason": "own_call", "approval": approval}
    decided = governor.decide_approval(Principal(kind="token", name="boss"), approval, True)
    assert decided["decided_by"] == "token:boss"
    verdict = await governor.admit_call(agent, "pump-1", {"name": "start"}, "start", {}, "streamable-http")
    assert verdict.allowed


def test_one_callers_waiting_calls_are_bounded_apart_from_the_others() -> None:
    approvals = Approvals(limit=3, per_caller=2)
    for n in (1, 2):
        approvals.request(f"a{n}", f"b{n}", AGENT, "s", "/s", "t", {"n": n}, "c", 60)
    with pytest.raises(ApprovalsFull) as mine:
        approvals.request("a3", "b3", AGENT, "s", "/s", "t", {"n": 3}, "c", 60)
    assert mine.value.limit == "max_pending_approvals_per_caller"
    # The same call again is the one waiting, not a new one.
    assert approvals.request("a1", "b1", AGENT, "s", "/s", "t", {"n": 1}, "c", 60).arguments == {"n": 1}
    approvals.request("o1", "p1", ("token:operator",), "s", "/s", "t", {}, "c", 60)
    with pytest.raises(ApprovalsFull) as full:
        approvals.request("o2", "p2", ("token:operator",), "s", "/s", "t", {}, "c", 60)
    assert full.value.limit == "max_pending_approvals"


def test_a_denied_call_gives_way_at_a_bound() -> None:
    approvals = Approvals(limit=3, per_caller=2)
    first, second = (approvals.request(f"a{n}", f"b{n}", AGENT, "s", "/s", "t", {"n": n}, "c", 60) for n in (1, 2))
    approvals.decide(first.id, False, "token:boss")
    approvals.decide(second.id, False, "token:boss")
    # Denying the caller's flood frees its room: the oldest denial goes first, the newer one answers its retry.
    third = approvals.request("a3", "b3", AGENT, "s", "/s", "t", {"n": 3}, "c", 60)
    assert approvals.get(first.id) is None and approvals.get(second.id) is second
    # At the gateway-wide bound a denied call of any caller gives way; pending ones never do.
    approvals.request("o1", "p1", ("token:operator",), "s", "/s", "t", {}, "c", 60)
    assert approvals.get(second.id) is second
    approvals.request("o2", "p2", ("token:operator",), "s", "/s", "t", {}, "c", 60)
    assert approvals.get(second.id) is None and approvals.get(third.id) is third
    with pytest.raises(ApprovalsFull) as full:
        approvals.request("x1", "y1", ("token:other",), "s", "/s", "t", {}, "c", 60)
    assert full.value.limit == "max_pending_approvals"
