"""Budgets: reservations against [[execution_limits]] budget rules (gateway/policy/execution/ledger.py)
and broker/budget/reserve and broker/budget/settle on the wire (gateway/policy/execution/wire.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.errors import RpcError
from gateway.policy.execution.admission import ExecutionLimits
from gateway.policy.execution.ledger import Grant, Settlement
from gateway.policy.execution.refusals import LimitRefusal
from gateway.policy.execution.wire import CallerOfRef, reserve_budget, settle_budget
from gateway.policy.rules.checking import check_policy
from tests.unit.test_execution_limits import Clock

AGENT = frozenset({"token:agent"})
CALLERS = {
    "ref-agent": CallerOfRef(AGENT, "scanner", "/site/network"),
    "ref-other": CallerOfRef(frozenset({"token:other"}), "scanner", "/site/network"),
    "ref-elsewhere": CallerOfRef(AGENT, "pump-1", "/plant/pump-1"),
}
LAN: dict[str, Any] = {
    "id": "lan-operations",
    "match": {"provider": "scanner"},
    "group_by": ["subject"],
    "budget": {"unit": "network-operation", "max": 5, "window_ms": 10_000},
}
WALL_S = 1_700_000_000.0


def engine(*rules: dict[str, Any], clock: Clock | None = None, **options: Any) -> ExecutionLimits:
    document = check_policy({"execution_limits": list(rules)})
    return ExecutionLimits(document.execution_limits, clock=clock or Clock(), wall_clock=lambda: WALL_S, **options)


def params(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "principal": {"type": "caller-ref", "ref": "ref-agent"},
        "capability": "network.active",
        "resource": "scanner",
        "resourcePath": "/site/network",
        "unit": "network-operation",
        "quantity": 1,
        "idempotencyKey": "k1",
    }
    base.update(changes)
    return {key: value for key, value in base.items() if value is not None}


def reserve(limits: ExecutionLimits, slot: str = "scanner", **changes: Any) -> dict[str, Any]:
    return reserve_budget(params(**changes), slot, CALLERS.get, limits.budget)


def refusal_of(limits: ExecutionLimits, slot: str = "scanner", **changes: Any) -> RpcError:
    with pytest.raises(RpcError) as caught:
        reserve(limits, slot, **changes)
    return caught.value


def test_a_budget_is_exhausted_then_refilled_as_its_window_passes() -> None:
    clock = Clock()
    limits = engine(LAN, clock=clock)
    first = reserve(limits, quantity=3, idempotencyKey="a")
    assert first["quantity"] == 3 and first["replayed"] is False
    assert first["expiresAt"] == int(WALL_S * 1000) + 10_000  # the shortest window, under 60 s
    clock.advance_ms(2000)
    reserve(limits, quantity=2, idempotencyKey="b")
    refused = refusal_of(limits, idempotencyKey="c")
    assert refused.code == -32029
    assert refused.data == {
        "reason": "limit_exceeded",
        "ruleId": "lan-operations",
        "retryAfterMs": 8000,
        "kind": "budget",
    }
    assert "at most 5 network-operation per 10 s" in refused.message
    clock.advance_ms(8000)  # the first reservation's 3 units leave the window
    assert reserve(limits, quantity=3, idempotencyKey="c")["quantity"] == 3
    assert refusal_of(limits, idempotencyKey="d").data["retryAfterMs"] == 2000
    # Another caller has its own budget (group_by subject).
    reserve(limits, principal={"type": "caller-ref", "ref": "ref-other"}, quantity=5)


def test_a_retried_key_gets_the_same_grant_and_a_changed_one_is_refused() -> None:
    limits = engine({**LAN, "budget": {**LAN["budget"], "max": 2}})
    grant = reserve(limits)
    again = reserve(limits)
    assert again == {**grant, "replayed": True}
    reserve(limits, idempotencyKey="k2")  # the retry took nothing: one unit is still there
    conflict = refusal_of(limits, quantity=2)
    assert conflict.data == {"reason": "idempotency_conflict"}
    assert refusal_of(limits, capability="network.passive").data == {"reason": "idempotency_conflict"}
    # The key belongs to the caller reference: another caller's key "k1" is another reservation.
    reserve(limits, principal={"type": "caller-ref", "ref": "ref-other"})


def test_a_grant_expires_after_at_most_60_s_and_its_key_cannot_open_new_work() -> None:
    clock = Clock()
    limits = engine({**LAN, "budget": {**LAN["budget"], "window_ms": 3_600_000}}, clock=clock)
    grant = reserve(limits)
    assert grant["expiresAt"] == int(WALL_S * 1000) + 60_000
    clock.advance_ms(59_999)
    assert reserve(limits)["replayed"] is True
    clock.advance_ms(1)
    assert refusal_of(limits).data == {"reason": "reservation_expired_or_settled"}
    # Settling stays possible after expiry: expiry only bounds when native work may start.
    settled = settle_budget(
        {"reservationId": grant["reservationId"], "used": 1, "result": "success"}, "scanner", limits.budget
    )
    assert settled == {"settled": True, "reservationId": grant["reservationId"], "replayed": False}


def test_a_settlement_may_come_long_after_the_window_within_the_retention() -> None:
    clock = Clock()
    limits = engine(LAN, clock=clock)
    grant = reserve(limits)
    clock.advance_ms(599_999)
    settle = {"reservationId": grant["reservationId"], "used": 1, "result": "success"}
    assert settle_budget(settle, "scanner", limits.budget)["settled"] is True
    clock.advance_ms(1)
    with pytest.raises(RpcError) as gone:
        settle_budget(settle, "scanner", limits.budget)
    assert gone.value.data == {"reason": "unknown_reservation"}


def test_settling_is_for_the_reserving_slot_idempotent_and_refunds_nothing() -> None:
    limits = engine({**LAN, "budget": {**LAN["budget"], "max": 2}})
    grant = reserve(limits, quantity=2)
    settle = {"reservationId": grant["reservationId"], "used": 0, "result": "failure"}
    with pytest.raises(RpcError) as other_slot:
        settle_budget(settle, "pump-1", limits.budget)
    with pytest.raises(RpcError) as unknown:
        settle_budget({**settle, "reservationId": "nope"}, "scanner", limits.budget)
    assert other_slot.value.code == unknown.value.code == -32029
    assert other_slot.value.data == unknown.value.data == {"reason": "unknown_reservation"}
    assert settle_budget(settle, "scanner", limits.budget)["replayed"] is False
    assert settle_budget(settle, "scanner", limits.budget)["replayed"] is True
    with pytest.raises(RpcError) as conflict:
        settle_budget({**settle, "used": 1}, "scanner", limits.budget)
    assert conflict.value.data == {"reason": "settlement_conflict"}
    with pytest.raises(RpcError) as settled_key:
        reserve(limits, quantity=2)
    assert settled_key.value.data == {"reason": "reservation_expired_or_settled"}
    # used 0 gave nothing back: the window still holds both units.
    assert refusal_of(limits, idempotencyKey="k2").data["reason"] == "limit_exceeded"


def test_more_than_a_settlement_can_report_is_refused() -> None:
    limits = engine(LAN)
    grant = reserve(limits, quantity=2)
    with pytest.raises(RpcError) as caught:
        settle_budget(
            {"reservationId": grant["reservationId"], "used": 3, "result": "success"}, "scanner", limits.budget
        )
    assert caught.value.code == -32029 and caught.value.data == {"reason": "invalid_usage"}


def test_every_matching_budget_is_debited_or_none() -> None:
    site = {"id": "site", "budget": {"unit": "network-operation", "max": 10, "window_ms": 10_000}}
    limits = engine(LAN, site, {"id": "other-unit", "budget": {"unit": "scan", "max": 1, "window_ms": 10_000}})
    reserve(limits, quantity=4, idempotencyKey="a")
    refused = refusal_of(limits, quantity=2, idempotencyKey="b")
    assert refused.data["ruleId"] == "lan-operations"
    reserve(limits, principal={"type": "caller-ref", "ref": "ref-other"}, quantity=5, idempotencyKey="c")
    # "site" holds 9 of 10: the refused reservation took nothing from it.
    reserve(limits, quantity=1, idempotencyKey="d")
    site_status = next(rule for rule in limits.status()["rules"] if rule["id"] == "site")
    assert site_status["busiest"] == [{"group": {}, "budget": 10}]


def test_a_quantity_over_the_budget_or_a_unit_without_one_can_never_pass() -> None:
    limits = engine(LAN)
    too_much = refusal_of(limits, quantity=6)
    assert too_much.data == {"reason": "quantity_exceeds_limit", "ruleId": "lan-operations", "kind": "budget"}
    assert refusal_of(limits, unit="scan").data == {"reason": "no_budget_rule"}


def test_calls_never_touch_a_budget_and_reservations_never_touch_call_limits() -> None:
    limits = engine({**LAN, "calls": {"max": 1, "window_ms": 10_000}})
    reserve(limits, quantity=5)
    assert not isinstance(limits.admit_call(AGENT, "scanner", "scan", None, "/site/network"), LimitRefusal)
    assert isinstance(limits.admit_call(AGENT, "scanner", "scan", None, "/site/network"), LimitRefusal)


def test_a_full_ledger_refuses_until_its_oldest_record_ages_out() -> None:
    clock = Clock()
    # A record is kept for the retention or its longest window, whichever is longer: here the window.
    limits = engine(
        {**LAN, "budget": {**LAN["budget"], "max": 100}},
        clock=clock,
        max_reservations=2,
        reservation_retention_ms=5000,
    )
    reserve(limits, idempotencyKey="a")
    reserve(limits, idempotencyKey="b")
    full = refusal_of(limits, idempotencyKey="c")
    assert full.data == {"reason": "ledger_full", "retryAfterMs": 10_000}
    clock.advance_ms(10_000)
    reserve(limits, idempotencyKey="c")
    assert limits.status()["reservations"] == {"held": 1, "max_reservations": 2, "unsettled": 1, "expired_unsettled": 0}


def test_the_ledger_api_returns_grants_and_settlements() -> None:
    limits = engine(LAN)
    grant = limits.budget.reserve(
        subjects=AGENT,
        slot="scanner",
        caller_ref="ref-agent",
        capability="network.active",
        resource_path="/site/network",
        unit="network-operation",
        quantity=1,
        idempotency_key="x",
    )
    assert isinstance(grant, Grant)
    settled = limits.budget.settle(grant.reservation_id, "scanner", 1, "success")
    assert isinstance(settled, Settlement) and not settled.replayed


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"principal": None}, "principal"),
        ({"principal": {"type": "provider", "ref": "x"}}, "principal.type"),
        ({"principal": {"type": "caller-ref", "ref": ""}}, "principal.ref"),
        ({"principal": {"type": "caller-ref", "ref": "gone"}}, "principal.ref"),
        ({"principal": {"type": "caller-ref", "ref": "ref-elsewhere"}}, "principal.ref"),
        ({"capability": None}, "capability"),
        ({"capability": "two words"}, "capability"),
        ({"unit": "Network Ops"}, "unit"),
        ({"quantity": 0}, "quantity"),
        ({"quantity": "1"}, "quantity"),
        ({"quantity": True}, "quantity"),
        ({"quantity": 1.5}, "quantity"),
        ({"quantity": 2**53}, "quantity"),
        ({"idempotencyKey": None}, "idempotencyKey"),
        ({"idempotencyKey": "k" * 129}, "idempotencyKey"),
        ({"resource": "pump-1"}, "resource"),
        ({"resourcePath": "/plant/pump-1"}, "resourcePath"),
        ({"resourcePath": "/site/networks"}, "resourcePath"),
        ({"resourcePath": "site/network"}, "resourcePath"),
        ({"resourcePath": 7}, "resourcePath"),
    ],
)
def test_malformed_reserve_params_are_invalid_params_naming_the_field(changes: dict[str, Any], field: str) -> None:
    error = refusal_of(engine(LAN), **changes)
    assert error.code == -32602
    assert error.data == {"field": field}
    assert error.message.startswith(f"Invalid params: {field} ")


def test_reserve_takes_a_path_below_the_slots_resource_and_defaults_to_it() -> None:
    limits = engine({**LAN, "match": {"resource": "/site/network/vlan-*"}})
    reserve(limits, resourcePath="/site/network/vlan-7", resource="/site/network")
    assert refusal_of(limits, resourcePath=None, idempotencyKey="k2").data == {"reason": "no_budget_rule"}


@pytest.mark.parametrize(
    ("settle", "field"),
    [
        ("not an object", "params"),
        ({"used": 1, "result": "success"}, "reservationId"),
        ({"reservationId": "r", "used": -1, "result": "success"}, "used"),
        ({"reservationId": "r", "used": 1, "result": "ok"}, "result"),
    ],
)
def test_malformed_settle_params_are_invalid_params_naming_the_field(settle: object, field: str) -> None:
    with pytest.raises(RpcError) as caught:
        settle_budget(settle, "scanner", engine(LAN).budget)
    assert (caught.value.code, caught.value.data) == (-32602, {"field": field})
