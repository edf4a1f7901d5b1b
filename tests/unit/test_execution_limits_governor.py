"""The Governor with execution limits: a refusal is -32029 and recorded, a call that is not forwarded
gives its place back, a reload keeps unchanged rules' counters (gateway/policy/governor.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gateway.core.policy_interface import CallVerdict
from gateway.core.principal import Principal
from gateway.policy.audit.errors import AuditUnavailable
from gateway.policy.audit.records import DecisionRecord
from gateway.policy.audit.trail import AuditTrail
from gateway.policy.governor import Governor
from gateway.policy.rules import Policy
from gateway.policy.rules.checking import check_policy

AGENT = Principal("agent", kind="token")
START = {"name": "start", "inputSchema": {"type": "object"}}
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.call", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/**"]}],
    "execution_limits": [{"id": "one-start", "match": {"capability": "tool:start"}, "concurrency": 1}],
}


class Trail:
    """Records decisions in a list; `failing` makes the next write raise, as a full disk would."""

    def __init__(self) -> None:
        self.decisions: list[DecisionRecord] = []
        self.failing: BaseException | None = None

    async def decision(self, record: DecisionRecord, *, forwarding: bool = False) -> int:
        if self.failing is not None:
            failure, self.failing = self.failing, None
            raise failure
        self.decisions.append(record)
        return len(self.decisions)

    def result(self, decision_id: int, status: str, latency_ms: float, error: str | None = None) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"healthy": True}


def governor(trail: Trail, policy: dict[str, Any] = POLICY) -> Governor:
    return Governor(Policy(check_policy(policy)), cast(AuditTrail, trail))


async def start(governing: Governor) -> CallVerdict:
    return await governing.admit_call(AGENT, "pump-1", START, "start", {}, "streamable-http")


async def test_a_refusal_is_32029_with_the_rule_and_is_recorded() -> None:
    trail = Trail()
    governing = governor(trail)
    first = await start(governing)
    assert first.allowed
    second = await start(governing)
    assert (second.allowed, second.code) == (False, -32029)
    assert second.data == {"reason": "concurrency_exceeded", "ruleId": "one-start", "kind": "concurrency"}
    refused = trail.decisions[-1]
    assert (refused.effect, refused.rules[-1], refused.constraints) == ("refuse-limit", "one-start", second.data)
    governing.call_ended(first, "ok", 1.0)
    assert (await start(governing)).allowed
    assert governing.status()["limits"]["refusals"]["total"] == 1


@pytest.mark.parametrize("failure", [AuditUnavailable("disk full"), asyncio.CancelledError()])
async def test_a_call_the_trail_did_not_record_gives_its_place_back(failure: BaseException) -> None:
    trail = Trail()
    governing = governor(trail)
    trail.failing = failure
    if isinstance(failure, AuditUnavailable):
        verdict = await start(governing)
        assert verdict.data == {"reason": "audit_unavailable"}
    else:
        with pytest.raises(asyncio.CancelledError):
            await start(governing)
    assert (await start(governing)).allowed  # the place was free again


async def test_a_reload_keeps_the_counters_of_an_unchanged_rule() -> None:
    trail = Trail()
    governing = governor(trail)
    held = await start(governing)
    governing.swap(Policy(check_policy(POLICY)))
    assert not (await start(governing)).allowed
    changed = {**POLICY, "execution_limits": [{**POLICY["execution_limits"][0], "concurrency": 2}]}
    governing.swap(Policy(check_policy(changed)))
    assert (await start(governing)).allowed  # a changed rule counts from zero
    governing.call_ended(held, "ok", 1.0)
