"""Confirmation lifetimes against a wall clock that jumps (NTP setting the clock of a board without a
real-time clock, or an operator's `date -s`): approvals and requestStates expire by the monotonic clock;
the wall clock only says when (docs/governance.md#confirmation-of-device-writes)."""

from __future__ import annotations

import pytest

from gateway.cli.approve import render_approvals
from gateway.core import errors
from gateway.core.policy_interface import ConfirmRetry
from gateway.policy.approvals import Approvals, binding_of
from gateway.policy.confirmation import Confirmations
from tests.unit.test_confirmation import AGENT, Stateless, asked_state, question

DAY_S = 86_400
YES = {"action": "accept", "content": {"approve": True}}


class Clocks:
    """A wall clock someone may set, and a monotonic clock that only runs."""

    def __init__(self) -> None:
        self.wall_s = 1_800_000_000.0
        self.monotonic_s = 1000.0

    def wall(self) -> float:
        return self.wall_s

    def monotonic(self) -> float:
        return self.monotonic_s

    def run(self, seconds: float) -> None:
        self.wall_s += seconds
        self.monotonic_s += seconds


def approvals(clocks: Clocks) -> Approvals:
    return Approvals(clock=clocks.wall, monotonic=clocks.monotonic)


def waiting(found: Approvals, expires_s: int = 10) -> str:
    binding = binding_of(AGENT, "pump-1", "start", {"speed_rpm": 900})
    return found.request(binding, binding, AGENT, "pump-1", "/p", "start", {"speed_rpm": 900}, "c", expires_s).id


def test_an_approval_expires_on_time_when_the_wall_clock_is_set_back() -> None:
    clocks = Clocks()
    found = approvals(clocks)
    approval = waiting(found)
    clocks.wall_s -= 3600  # NTP sets the clock an hour back
    clocks.run(11)
    assert found.get(approval) is None and found.listed() == []


def test_a_forward_jump_of_the_wall_clock_expires_nothing() -> None:
    clocks = Clocks()
    found = approvals(clocks)
    approval = waiting(found)
    clocks.wall_s += 90 * DAY_S  # the clock of a board that booted at its last shutdown, set by NTP
    clocks.run(1)
    [listed] = found.listed()
    assert listed["id"] == approval and listed["expires_in_ms"] == 9000
    decided = found.decide(approval, True, "token:boss")
    assert decided.decided_ms == int(clocks.wall_s * 1000)  # shown and recorded on the wall clock
    clocks.run(10)
    assert found.get(approval) is None


def test_an_approval_made_while_the_clock_was_ahead_does_not_live_for_months() -> None:
    clocks = Clocks()
    clocks.wall_s += 90 * DAY_S
    found = approvals(clocks)
    approval = waiting(found)
    clocks.wall_s -= 90 * DAY_S
    clocks.run(11)
    assert found.get(approval) is None


async def test_a_request_state_lives_its_expires_s_whatever_the_wall_clock_does() -> None:
    clocks = Clocks()
    confirmations = Confirmations(approvals(clocks))
    state = await asked_state(confirmations, {"speed_rpm": 900})
    clocks.wall_s += 90 * DAY_S
    answer = await confirmations.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(state, YES)))
    assert answer.confirmed and answer.at_ms == int(clocks.wall_s * 1000)
    late = await asked_state(confirmations, {"speed_rpm": 900})
    clocks.wall_s -= 90 * DAY_S + 3600
    clocks.run(61)  # the rule's expires_s is 60
    with pytest.raises(errors.RpcError) as expired:
        await confirmations.ask(question({"speed_rpm": 900}), Stateless(ConfirmRetry(late, YES)))
    assert expired.value.data == {"reason": "expired"}


def test_mcp_gateway_approve_prints_the_time_the_gateway_gives() -> None:
    clocks = Clocks()
    found = approvals(clocks)
    waiting(found, expires_s=300)
    clocks.wall_s -= 3600  # the gateway's clock is set back; the operator's machine keeps its own
    clocks.run(13)
    listed = found.listed()
    line = render_approvals(listed, now_ms=int(clocks.wall_s * 1000) + 7 * DAY_S * 1000)
    assert line.endswith("[c, expires in 287 s]")


def test_mcp_gateway_approve_shows_the_arguments_as_written() -> None:
    # The person approving reads the value itself, not \u escapes of it.
    item = {
        "id": "2ff90e88",
        "state": "pending",
        "principal": ["token:agent"],
        "tool": "self.screen.set_theme",
        "slot": "小智-客厅",
        "resource": "/小智-客厅",
        "arguments": {"theme": "暗黑模式"},
        "rule": "confirm[0]",
        "expires_in_ms": 60_000,
    }
    line = render_approvals([item], now_ms=0)
    assert '{"theme":"暗黑模式"}' in line
