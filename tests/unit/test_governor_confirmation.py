"""The Governor around a person's confirmation (gateway/policy/governor.py): a reload while the person is
asked decides the call again, an approval or a requestState is used up by the attempt that matches it
whatever follows, `by = "another"` never asks the caller's own client, and every attempt is recorded:
the input_required question, the question nobody answered, the unknown tool."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from gateway.core import errors
from gateway.core.policy_interface import REFUSED_META_KEY, AnswerInstead, CallVerdict, Confirmer, ConfirmRetry
from gateway.core.principal import Principal
from gateway.policy.audit.errors import AuditUnavailable
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.governor import Governor
from gateway.policy.rules import Policy
from gateway.policy.rules.checking import check_policy
from tests.conftest import wait_for
from tests.unit.test_execution_limits_governor import Trail

AGENT = Principal("agent", kind="token")
BOSS = Principal("boss", kind="token")
START = {"name": "start", "inputSchema": {"type": "object"}}
LIMIT = {"resources": ["/**"], "tool": "start", "argument": "speed_rpm", "min": 300, "max": 2000, "action": "clamp"}
POLICY: dict[str, Any] = {
    "roles": {
        "observer": {"capabilities": ["mcp.tools.call", "tool.observe"]},
        "operator": {"inherits": ["observer"], "capabilities": ["tool.control"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "operator", "resources": ["/**"]},
        {"principal": "token:boss", "role": "operator", "resources": ["/**"]},
    ],
    "limits": [LIMIT],
    "confirm": [{"principal": "token:agent", "capabilities": ["tool.control"], "resources": ["/**"]}],
}
REVOKED = {**POLICY, "assign": [{**POLICY["assign"][0], "role": "observer"}, POLICY["assign"][1]]}
TIGHTER = {**POLICY, "limits": [{**LIMIT, "max": 1400, "action": "refuse"}]}
CLAMPS_LOWER = {**POLICY, "limits": [{**LIMIT, "max": 1400}]}
YES = {"action": "accept", "content": {"approve": True}}


def rules(document: dict[str, Any]) -> Policy:
    return Policy(check_policy(document))


def governor(trail: Trail, document: dict[str, Any] = POLICY) -> Governor:
    return Governor(rules(document), cast(AuditTrail, trail))


class Asked:
    """A session-era caller asked on its own stream: `during` runs while the person reads, then it answers."""

    way = "elicit"
    retry = None

    def __init__(self, answer: dict[str, Any] | None = None, during: Any = None) -> None:
        self.answer = answer
        self.during = during
        self.asked: list[dict[str, Any]] = []

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        if self.during is not None:
            self.during()
        if self.answer is None:
            await asyncio.Event().wait()  # nobody answers
        assert self.answer is not None
        return self.answer

    async def device_state(self) -> object:
        return None


class Stateless:
    """A 2026-07-28 caller that declared elicitation; `retry` carries its answer."""

    way = "input"

    def __init__(self, retry: ConfirmRetry | None = None) -> None:
        self.retry = retry

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a stateless caller is never sent a request")

    async def device_state(self) -> object:
        return None


async def start(
    governing: Governor, speed: int, confirmer: Confirmer | None = None, who: Principal = AGENT
) -> CallVerdict:
    return await governing.admit_call(who, "pump-1", START, "start", {"speed_rpm": speed}, "streamable-http", confirmer)


def waiting_of(verdict: CallVerdict) -> tuple[str, dict[str, Any]]:
    """The text and data of the tool error that says a call waits for an operator's approval."""
    assert not verdict.allowed and verdict.effect == "wait-confirmation"
    assert verdict.answer is not None and verdict.answer["isError"] is True
    data = verdict.answer["_meta"][REFUSED_META_KEY]
    assert data["reason"] == "confirmation_required"
    return verdict.answer["content"][0]["text"], data


async def waits(governing: Governor, speed: int) -> str:
    """A start by a caller that cannot be asked: the id of the approval it waits for."""
    return str(waiting_of(await start(governing, speed))[1]["approval"])


# -- a reload while the person is asked --------------------------------------------------------------


@pytest.mark.parametrize(
    ("reloaded", "speed", "effect", "code"),
    [
        (REVOKED, 1500, "deny", 0),
        (TIGHTER, 1500, "refuse-arguments", 0),
        (CLAMPS_LOWER, 2500, "refuse-confirmation", 0),
    ],
    ids=["right-revoked", "limit-tightened", "clamp-changed"],
)
async def test_a_reload_while_the_person_is_asked_decides_the_call_again(
    reloaded: dict[str, Any], speed: int, effect: str, code: int
) -> None:
    trail = Trail()
    governing = governor(trail)
    person = Asked(YES, during=lambda: governing.swap(rules(reloaded)))
    verdict = await start(governing, speed, person)
    assert len(person.asked) == 1
    assert not verdict.allowed and verdict.code == code
    refused = trail.decisions[-1]
    assert refused.effect == effect
    assert refused.confirmed_by == "token:agent via elicitation"  # the person's yes is on record with it
    if effect == "deny":
        assert not verdict.visible  # the tool is no longer the caller's: answered as any unknown tool
    if effect == "refuse-arguments":  # answered with a tool error the agent reads
        assert verdict.answer is not None and verdict.answer["isError"] is True
        assert "limit 1400" in verdict.answer["content"][0]["text"] and "limits[0]" in refused.rules
    if effect == "refuse-confirmation":
        assert verdict.data == {"reason": "confirmation_changed"}
        assert '{"speed_rpm":1400}, not the {"speed_rpm":2000} that was confirmed' in verdict.reason
    assert len(trail.decisions) == 1  # nothing recorded as forwarded


async def test_a_reload_that_keeps_the_call_allowed_forwards_what_the_person_saw() -> None:
    trail = Trail()
    governing = governor(trail)
    person = Asked(YES, during=lambda: governing.swap(rules(POLICY)))
    verdict = await start(governing, 2500, person)
    assert verdict.allowed and verdict.arguments == {"speed_rpm": 2000}
    assert trail.decisions[-1].effect == "clamp"
    assert list(trail.decisions[-1].rules) == ["assign[0]", "limits[0]", "confirm[0]"]


# -- an approval or a requestState is used up by the attempt matching it --------------------------------


async def test_a_retry_matching_an_approval_uses_it_up_even_when_it_is_refused() -> None:
    trail = Trail()
    governing = governor(trail)
    approval = await waits(governing, 1500)
    governing.decide_approval(BOSS, approval, True)
    governing.swap(rules(TIGHTER))
    refused = await start(governing, 1500)
    assert not refused.allowed and refused.answer is not None and refused.answer["isError"] is True
    governing.swap(rules(POLICY))
    assert await waits(governing, 1500) != approval  # asked again: the approval was used by the refused retry
    assert [record.effect for record in trail.decisions] == [
        "wait-confirmation",
        "refuse-arguments",
        "wait-confirmation",
    ]


async def test_an_approval_for_other_forwarded_arguments_is_refused_and_used_up() -> None:
    trail = Trail()
    governing = governor(trail)
    approval = await waits(governing, 2500)  # clamped: the approver sees 2000
    assert governing.approvals()[0]["arguments"] == {"speed_rpm": 2000}
    governing.decide_approval(BOSS, approval, True)
    governing.swap(rules(CLAMPS_LOWER))
    with pytest.raises(errors.RpcError) as changed:
        await start(governing, 2500)
    assert isinstance(changed.value.data, dict) and changed.value.data["reason"] == "approval_changed"
    assert trail.decisions[-1].effect == "refuse-confirmation"
    assert await waits(governing, 2500) != approval


async def test_a_request_state_is_used_up_by_a_retry_that_is_refused() -> None:
    trail = Trail()
    governing = governor(trail)
    with pytest.raises(AnswerInstead) as asked:
        await start(governing, 1500, Stateless())
    state = asked.value.result["requestState"]
    governing.swap(rules(TIGHTER))
    assert not (await start(governing, 1500, Stateless(ConfirmRetry(state, YES)))).allowed
    governing.swap(rules(POLICY))
    with pytest.raises(errors.RpcError) as used:
        await start(governing, 1500, Stateless(ConfirmRetry(state, YES)))
    assert used.value.data == {"reason": "used"}


async def test_a_request_state_for_other_forwarded_arguments_does_not_hold() -> None:
    governing = governor(Trail())
    with pytest.raises(AnswerInstead) as asked:
        await start(governing, 2500, Stateless())
    governing.swap(rules(CLAMPS_LOWER))
    with pytest.raises(errors.RpcError) as changed:
        await start(governing, 2500, Stateless(ConfirmRetry(asked.value.result["requestState"], YES)))
    assert isinstance(changed.value.data, dict) and changed.value.data["reason"] == "changed"


# -- by = "another" ---------------------------------------------------------------------------------


async def test_by_another_never_asks_the_callers_client_and_only_another_principal_approves() -> None:
    trail = Trail()
    another = {**POLICY, "confirm": [{**POLICY["confirm"][0], "by": "another"}]}
    governing = governor(trail, another)
    person = Asked(YES)
    text, data = waiting_of(await start(governing, 1500, person))
    assert person.asked == []
    assert "another principal approves it (the caller's own client is never asked)" in text
    with pytest.raises(errors.RpcError) as own:
        governing.decide_approval(AGENT, data["approval"], True)
    assert isinstance(own.value.data, dict) and own.value.data["reason"] == "own_call"
    # A requestState the caller's client brings (from before a reload to by = "another") answers nothing.
    waiting_of(await start(governing, 1500, Stateless(ConfirmRetry("mcpgwc1.0.0.0.0", YES))))
    governing.decide_approval(BOSS, data["approval"], True)
    allowed = await start(governing, 1500, person)
    assert allowed.allowed and person.asked == []
    assert trail.decisions[-1].confirmed_by == "token:boss"


# -- every attempt is recorded ----------------------------------------------------------------------


async def test_the_input_required_question_is_recorded_as_waiting() -> None:
    trail = Trail()
    with pytest.raises(AnswerInstead):
        await start(governor(trail), 1500, Stateless())
    [waiting] = trail.decisions
    assert waiting.effect == "wait-confirmation"
    assert waiting.reason is not None and "asked with input_required" in waiting.reason


async def test_a_question_nobody_answers_before_the_call_ends_is_recorded_as_declined() -> None:
    trail = Trail()
    person = Asked(None)
    call = asyncio.ensure_future(start(governor(trail), 1500, person))
    # The tool's schema is compiled on a thread first: wait for the question, not a number of loop turns.
    await wait_for(lambda: bool(person.asked), what="the question")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    [unanswered] = trail.decisions
    assert (unanswered.effect, unanswered.confirmed_by) == ("declined", "nobody")
    assert unanswered.reason is not None and "nobody answered the question of confirm[0]" in unanswered.reason


async def test_an_unknown_tool_is_recorded_as_a_deny_naming_it() -> None:
    trail = Trail()
    governing = governor(trail)
    for name in ("Start", "start ", "x" * 1000):
        verdict = await governing.admit_call(AGENT, "pump-1", None, name, {"speed_rpm": 1}, "streamable-http")
        assert (verdict.allowed, verdict.visible) == (False, False)
    first, spaced, long = trail.decisions
    assert (first.effect, first.tool, first.capability, list(first.rules)) == ("deny", "Start", "mcp.tools.call", [])
    assert first.reason == (
        'Unknown tool: "Start" is not offered by "pump-1" (its provider lists no tool of that name); call tools/list'
    )
    assert spaced.reason is not None and '"start "' in spaced.reason
    assert long.tool is not None and len(long.tool) == 128


async def test_clamp_and_refuse_arguments_records_name_the_limit_rule() -> None:
    trail = Trail()
    governing = governor(trail, TIGHTER)
    assert not (await start(governing, 1500, who=BOSS)).allowed
    governing.swap(rules(POLICY))
    assert (await start(governing, 2500, who=BOSS)).allowed
    refused, clamped = trail.decisions
    assert (refused.effect, list(refused.rules)) == ("refuse-arguments", ["assign[1]", "limits[0]"])
    assert (clamped.effect, list(clamped.rules)) == ("clamp", ["assign[1]", "limits[0]"])


# -- an attempt the trail cannot record uses nothing up ----------------------------------------------


async def test_an_attempt_the_trail_cannot_record_leaves_its_approval_usable() -> None:
    trail = Trail()
    governing = governor(trail)
    approval = await waits(governing, 1500)
    governing.decide_approval(BOSS, approval, True)
    trail.failing = AuditUnavailable("database or disk is full")
    refused = await start(governing, 1500)
    assert not refused.allowed and refused.data == {"reason": "audit_unavailable"}
    allowed = await start(governing, 1500)  # the disk has room again: the approval still counts
    assert allowed.allowed and trail.decisions[-1].confirmed_by == "token:boss"


async def test_an_attempt_the_trail_cannot_record_leaves_its_request_state_usable() -> None:
    trail = Trail()
    governing = governor(trail)
    with pytest.raises(AnswerInstead) as asked:
        await start(governing, 1500, Stateless())
    state = asked.value.result["requestState"]
    trail.failing = AuditUnavailable("database or disk is full")
    refused = await start(governing, 1500, Stateless(ConfirmRetry(state, YES)))
    assert not refused.allowed and refused.data == {"reason": "audit_unavailable"}
    assert (await start(governing, 1500, Stateless(ConfirmRetry(state, YES)))).allowed


async def test_calls_refused_while_the_trail_fails_are_warned_of_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each refusal would write a line on the very storage that is failing (a full SD card).
    caplog.set_level(logging.WARNING, logger="gateway.policy")
    trail = Trail()
    governing = governor(trail)
    for _ in range(3):
        trail.failing = AuditUnavailable("database or disk is full")
        assert not (await start(governing, 1500, who=Principal("stranger", kind="token"))).allowed
    unrecorded = [r.getMessage() for r in caplog.records if "was not recorded" in r.getMessage()]
    assert len(unrecorded) == 1, unrecorded
    governing.repeat_interval_s = 0
    trail.failing = AuditUnavailable("database or disk is full")
    await start(governing, 1500, who=Principal("stranger", kind="token"))
    unrecorded = [r.getMessage() for r in caplog.records if "was not recorded" in r.getMessage()]
    assert unrecorded[-1].endswith("(2 more calls without a record since the last line)"), unrecorded
