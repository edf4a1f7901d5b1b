"""A [[limits]] bound on an argument the call leaves out (gateway/policy/arguments.py, `missing`), its
check in the policy, and declared bounds too large for a float (gateway/policy/declarations/limits.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.policy.arguments import ArgumentLimit, ArgumentRefused, check_arguments
from gateway.policy.declarations.limits import ResourceLimits, intersect, parse_limits
from gateway.policy.rules import Ask, Policy, PolicyError
from gateway.policy.rules.checking import check_policy
from gateway.policy.schemas import SchemaCache

PUMP_1 = Path(__file__).resolve().parents[2] / "device" / "schemas" / "pump-1.json"
TOOLS: dict[str, dict[str, Any]] = {tool["name"]: tool for tool in orjson.loads(PUMP_1.read_bytes())}
RESOURCE = "/plant/pump-1"
REQUIRED_BY_LIMIT = "argument_required_by_limit"
START_LIMIT = ArgumentLimit("speed_rpm", 300, 1500, None, "clamp", "policy limits[1]", "limits[1]")


def refused(tool: dict[str, Any], arguments: Any, limits: list[ArgumentLimit]) -> ArgumentRefused:
    with pytest.raises(ArgumentRefused) as caught:
        check_arguments(tool, arguments, limits, SchemaCache(), resource=RESOURCE)
    return caught.value


def test_start_without_speed_rpm_is_refused_by_the_limit_naming_the_argument_and_its_bounds() -> None:
    # pump-1's start {} runs at the stored setpoint (2000 after a set_speed 2000): past the limit of 1500.
    assert "speed_rpm" not in TOOLS["start"]["inputSchema"].get("required", [])
    nothing: list[dict[str, Any] | None] = [{}, None]
    for arguments in nothing:
        refusal = refused(TOOLS["start"], arguments, [START_LIMIT])
        assert refusal.message == (
            'Argument "speed_rpm" is left out, but the limit set by policy limits[1] for /plant/pump-1 bounds it to '
            "a number from 300 to 1500: the device would use a value of its own, which the limit cannot check, "
            'so the call is refused; pass "speed_rpm" explicitly'
        )
        assert refusal.data == {
            "reason": REQUIRED_BY_LIMIT,
            "argument": "speed_rpm",
            "limit": {"min": 300, "max": 1500, "allowed": None},
            "setBy": "policy limits[1]",
        }
        assert refusal.rules == ("limits[1]",)
        assert not refusal.malformed_request  # a tool error the agent reads and corrects


def test_an_allowed_list_left_out_names_its_values() -> None:
    modes = ArgumentLimit("mode", None, None, ("low", "high"), "refuse", "policy limits[0]")
    refusal = refused({"name": "set_mode"}, {}, [modes])
    assert 'bounds it to one of "low", "high"' in refusal.message
    assert refusal.data["reason"] == REQUIRED_BY_LIMIT


def test_missing_allow_lets_a_call_without_the_argument_through_unchanged() -> None:
    allow = ArgumentLimit("speed_rpm", 300, 1500, None, "clamp", "policy limits[1]", missing="allow")
    arguments: dict[str, Any] = {}
    checked = check_arguments(TOOLS["start"], arguments, [allow], SchemaCache(), resource=RESOURCE)
    assert checked.arguments is arguments and checked.clamped == []
    # A value it carries is still clamped.
    clamped = check_arguments(TOOLS["start"], {"speed_rpm": 2000}, [allow], SchemaCache(), resource=RESOURCE)
    assert clamped.arguments == {"speed_rpm": 1500}


def test_an_unknown_missing_value_is_a_named_mistake() -> None:
    with pytest.raises(ValueError, match='missing must be "refuse" or "allow", not \'maybe\''):
        ArgumentLimit("speed_rpm", 300, 1500, missing="maybe")
    entry = {"resources": ["/plant/**"], "tool": "start", "argument": "speed_rpm", "max": 1500}
    with pytest.raises(PolicyError) as caught:
        check_policy({"limits": [{**entry, "missing": "maybe"}, {**entry, "missing": True}]})
    assert caught.value.errors == [
        "limits[0].missing: input should be 'refuse' or 'allow', not \"maybe\"",
        "limits[1].missing: input should be 'refuse' or 'allow', not true",
    ]


def test_the_policy_carries_missing_to_the_limit_a_call_meets() -> None:
    entry = {"resources": ["/plant/**"], "tool": "start", "argument": "speed_rpm", "min": 300, "max": 1500}
    document = check_policy(
        {
            "roles": {"op": {"capabilities": ["mcp.tools.call", "tool.control"]}},
            "assign": [{"principal": "token:a", "role": "op", "resources": ["/plant/**"]}],
            "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
            "limits": [entry, {**entry, "argument": "ramp_s", "missing": "allow"}],
        }
    )
    decision = Policy(document).decide(Ask(frozenset({"token:a"}), "pump-1", "tools/call", "start", False))
    assert decision.allowed
    assert [(limit.argument, limit.missing) for limit in decision.limits] == [
        ("speed_rpm", "refuse"),
        ("ramp_s", "allow"),
    ]
    refusal = refused({"name": "start"}, {}, list(decision.limits))
    assert refusal.data["argument"] == "speed_rpm"  # ramp_s may be left out
    checked = check_arguments({"name": "start"}, {"speed_rpm": 900}, decision.limits, SchemaCache())
    assert checked.arguments == {"speed_rpm": 900}


HUGE = 10**400
"""An integer JSON allows and no float holds: math.isfinite and float() raise OverflowError on it."""


def test_a_declared_bound_too_large_for_a_float_is_a_named_mistake_not_an_overflow() -> None:
    errors: list[str] = []
    raw = {"minValue": HUGE, "maxValue": -HUGE, "allowedValues": [HUGE, 1]}
    assert parse_limits(raw, "resources[0].limits", errors, 16) is None
    assert errors == [
        "resources[0].limits.minValue must be a finite number",
        "resources[0].limits.maxValue must be a finite number",
        "resources[0].limits.allowedValues may hold only strings, finite numbers, booleans and null",
    ]


def test_intersecting_an_allowed_value_too_large_for_a_float_keeps_only_what_the_range_holds() -> None:
    limits, empty = intersect([ResourceLimits(allowed_values=(HUGE, 1)), ResourceLimits(min_value=0, max_value=5)])
    assert limits == ResourceLimits(0, 5, (1,)) and not empty
    both, _ = intersect([ResourceLimits(allowed_values=(HUGE, 1)), ResourceLimits(allowed_values=(HUGE,))])
    assert both == ResourceLimits(allowed_values=(HUGE,))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {}},  # an SDK server's start() that takes nothing
        {"type": "object", "properties": {"belt": {"type": "string"}}, "additionalProperties": False},
    ],
)
def test_a_tool_whose_schema_has_no_such_argument_is_not_refused_for_leaving_it_out(schema: dict[str, Any]) -> None:
    # The image policy bounds speed_rpm of every slot's start ("/**"): a conveyor's start has no speed_rpm,
    # so no stored value of its own can stand in for one, and its calls go through as they are.
    conveyor = {"name": "start", "inputSchema": schema}
    checked = check_arguments(conveyor, {}, [START_LIMIT], SchemaCache(), resource="/plant/conveyor")
    assert checked.arguments == {}


def test_a_tool_listed_without_properties_or_not_listed_is_refused_for_leaving_it_out() -> None:
    for tool in ({"name": "start", "inputSchema": {"type": "object"}}, None):
        assert refused(tool, {}, [START_LIMIT]).data["reason"] == REQUIRED_BY_LIMIT  # type: ignore[arg-type]
