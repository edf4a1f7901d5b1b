"""The budget ledger's room (settled and expired records make way; one caller holds a bounded share),
reservations kept inside the provider's declaration, the throttled log lines naming the caller, and
broker_diagnose's limits.ledger_full (gateway/policy/execution/ledger.py, wire.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from gateway.core.broker.diagnose import diagnose
from gateway.core.errors import RpcError
from gateway.policy.execution.admission import ExecutionLimits
from gateway.policy.execution.ledger import LOG_REPEAT_S
from gateway.policy.execution.wire import CallerOfRef, Declared, reserve_budget, settle_budget
from tests.unit.test_diagnose import view as diagnosis_view
from tests.unit.test_execution_limits import Clock
from tests.unit.test_execution_limits_budget import LAN, engine, params

CALLERS = {
    f"ref-{name}": CallerOfRef(frozenset({f"token:{name}"}), "scanner", "/site/network", f"corr-{name}")
    for name in ("a", "b", "c", "d")
}
DECLARED = Declared(frozenset({"network.active"}), frozenset({"network-operation"}), "/site/network/lan")
ROOMY = {**LAN, "budget": {**LAN["budget"], "max": 1000}}


def reserve(limits: ExecutionLimits, ref: str, key: str, declared: Declared | None = None, **changes: Any) -> str:
    body = params(principal={"type": "caller-ref", "ref": ref}, idempotencyKey=key, **changes)
    if declared is not None:
        body["resourcePath"] = changes.get("resourcePath", "/site/network/lan")
    answer = reserve_budget(body, "scanner", CALLERS.get, limits.budget, declared)
    return str(answer["reservationId"])


def refused(limits: ExecutionLimits, ref: str, key: str, declared: Declared | None = None, **changes: Any) -> RpcError:
    with pytest.raises(RpcError) as caught:
        reserve(limits, ref, key, declared, **changes)
    assert caught.value.code == -32029
    return caught.value


def settle(limits: ExecutionLimits, reservation: str) -> dict[str, Any]:
    return settle_budget({"reservationId": reservation, "used": 1, "result": "success"}, "scanner", limits.budget)


def test_a_full_ledger_drops_its_oldest_settled_record_to_make_room() -> None:
    limits = engine(ROOMY, max_reservations=3)
    first, second, third = (reserve(limits, ref, "k") for ref in ("ref-a", "ref-b", "ref-c"))
    settle(limits, second)
    settle(limits, first)
    # Full of records, two of them settled: the oldest settled one (first) goes, not the live one.
    reserve(limits, "ref-d", "k")
    with pytest.raises(RpcError) as late:
        settle(limits, first)
    assert late.value.data == {"reason": "unknown_reservation"}
    assert settle(limits, second)["replayed"] is True
    assert settle(limits, third)["replayed"] is False
    assert limits.budget.status()["held"] == 3


def test_a_full_ledger_drops_expired_grants_and_refuses_only_when_every_record_is_live() -> None:
    clock = Clock()
    limits = engine(ROOMY, clock=clock, max_reservations=2)
    reserve(limits, "ref-a", "k")
    clock.advance_ms(4000)
    reserve(limits, "ref-b", "k")
    full = refused(limits, "ref-c", "k")
    # Every record is a live grant: room comes when the oldest expires (10 s window, 6 s from now).
    assert full.data == {"reason": "ledger_full", "retryAfterMs": 6000}
    clock.advance_ms(6000)
    reserve(limits, "ref-c", "k")
    assert limits.budget.status()["held"] == 2


def test_one_caller_holds_a_bounded_share_of_live_reservations() -> None:
    clock = Clock()
    limits = engine(ROOMY, clock=clock, max_reservations=100)
    limits.budget.max_live_per_caller = 2
    held = reserve(limits, "ref-a", "k1")
    clock.advance_ms(1000)
    reserve(limits, "ref-a", "k2")
    bounded = refused(limits, "ref-a", "k3")
    assert bounded.data == {"reason": "caller_reservations_full", "retryAfterMs": 9000}
    assert "(limits.max_budget_reservations_per_caller 2)" in bounded.message
    reserve(limits, "ref-b", "k1")  # another caller is not locked out
    settle(limits, held)
    reserve(limits, "ref-a", "k3")  # a settled reservation is no longer live
    clock.advance_ms(10_000)  # the rest expire: live no more
    reserve(limits, "ref-a", "k4")
    reserve(limits, "ref-a", "k5")


def test_a_reservation_stays_inside_the_providers_declaration() -> None:
    limits = engine(ROOMY)
    capability = refused(limits, "ref-a", "k1", DECLARED, capability="lab.active")
    assert capability.data == {"reason": "undeclared-capability"}
    assert 'Capability "lab.active" is not among' in capability.message
    unit = refused(limits, "ref-a", "k2", DECLARED, unit="kwh")
    assert unit.data == {"reason": "undeclared-unit"}
    path = refused(limits, "ref-a", "k3", DECLARED, resourcePath="/site/network/wan")
    assert path.data == {"reason": "undeclared-resource"}
    assert '"/site/network/lan"' in path.message
    reserve(limits, "ref-a", "k4", DECLARED, resourcePath="/site/network/lan/vlan-7")
    # Without a resourcePath the reservation is for the slot's resource path, as for a provider without a namespace.
    default = params(principal={"type": "caller-ref", "ref": "ref-a"}, idempotencyKey="k5", resourcePath=None)
    assert reserve_budget(default, "scanner", CALLERS.get, limits.budget, DECLARED)["quantity"] == 1
    recent = limits.status()["refusals"]["recent"]
    assert [entry["reason"] for entry in recent] == ["undeclared-capability", "undeclared-unit", "undeclared-resource"]
    assert recent[0]["subject"] == "token:a"


def test_reserved_and_settled_lines_name_the_caller_and_are_throttled(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limits = engine(ROOMY, clock=clock)
    caplog.set_level(logging.INFO, logger="gateway.policy.limits")
    first = reserve(limits, "ref-a", "k1")
    reserve(limits, "ref-a", "k2")
    reserve(limits, "ref-b", "k1")
    settle(limits, first)
    clock.advance_ms(LOG_REPEAT_S * 1000)
    reserve(limits, "ref-b", "k2")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("budget reserved for token:a (correlationId corr-a): 1 network-operation on scanner")
    assert lines[1].startswith("budget settled for token:a: reservation")
    assert lines[2].startswith("budget reserved for token:b (correlationId corr-b)")
    assert lines[2].endswith("(2 more reserved on this slot not logged)")


def test_the_diagnosis_warns_when_the_ledger_had_no_room() -> None:
    limits = engine(ROOMY, max_reservations=1)
    reserve(limits, "ref-a", "k1")
    refused(limits, "ref-b", "k1")
    problems = {
        problem.id: problem for problem in diagnose(replace(diagnosis_view(), governance={"limits": limits.status()}))
    }
    full = problems["limits.ledger_full"]
    assert full.severity == "warning"
    assert "1 reservation among the recent refusals (ledger_full)" in full.evidence
    assert "the ledger holds 1 records of at most 1, 1 unsettled" in full.evidence
    assert "broker/budget/settle" in full.fix
    quiet = engine(ROOMY)
    assert "limits.ledger_full" not in {
        problem.id for problem in diagnose(replace(diagnosis_view(), governance={"limits": quiet.status()}))
    }
