"""Which tools a [[limits]] argument limit holds (gateway/policy/arguments.py `_may_take`): a tool whose
inputSchema may take the argument through more than its top-level `properties` (allOf, anyOf, oneOf,
$ref, if/then/else, dependentSchemas, patternProperties, an explicit additionalProperties) is held to
the limit: a value over the bound is refused, a call leaving it out is refused (missing = "refuse"),
and nothing is reported as not taken. Only a schema that says for certain it takes no such argument is
exempt and reported; an entry goes when a call finds its rule gone."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.policy.arguments import (
    MAX_SCHEMA_DEPTH,
    REQUIRED_BY_LIMIT,
    ArgumentLimit,
    ArgumentRefused,
    Checked,
    UntakenLimits,
    check_arguments,
)
from gateway.policy.schemas import SchemaCache

SPEED = {"type": "integer"}
LIMIT = ArgumentLimit("speed_rpm", None, 1500, None, "refuse", "policy limits[0]", "limits[0]")
SLOT = "vfd"

MAY_TAKE: dict[str, dict[str, Any]] = {
    "allOf": {"type": "object", "properties": {}, "allOf": [{"properties": {"speed_rpm": SPEED}}]},
    "anyOf": {
        "type": "object",
        "properties": {"mode": {}},
        "anyOf": [{"properties": {"mode": {"type": "string"}}}, {"properties": {"speed_rpm": SPEED}}],
    },
    "oneOf": {"type": "object", "properties": {"mode": {}}, "oneOf": [{"properties": {"speed_rpm": SPEED}}]},
    "$ref": {
        "type": "object",
        "$ref": "#/$defs/a",
        "$defs": {"a": {"type": "object", "properties": {"speed_rpm": SPEED}}},
    },
    # A draft-07 $ref sets its siblings aside, additionalProperties: false among them.
    "$ref closed": {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
        "$ref": "#/definitions/a",
        "definitions": {"a": {"properties": {"speed_rpm": SPEED}}},
    },
    "additionalProperties true": {"type": "object", "properties": {"note": {}}, "additionalProperties": True},
    "additionalProperties schema": {"type": "object", "properties": {}, "additionalProperties": SPEED},
    "patternProperties": {"type": "object", "properties": {"note": {}}, "patternProperties": {"^speed": SPEED}},
    "patternProperties closed": {
        "type": "object",
        "properties": {},
        "patternProperties": {"_rpm$": SPEED},
        "additionalProperties": False,
    },
    "if/then": {
        "type": "object",
        "properties": {"mode": {}},
        "if": {"required": ["mode"]},
        "then": {"properties": {"speed_rpm": SPEED}},
    },
    "dependentSchemas": {
        "type": "object",
        "properties": {"mode": {}},
        "dependentSchemas": {"mode": {"properties": {"speed_rpm": SPEED}}},
    },
    "nested": {
        "type": "object",
        "properties": {},
        "allOf": [{"anyOf": [{"oneOf": [{"patternProperties": {"rpm": {}}}]}]}],
    },
    "a pattern that does not compile": {"type": "object", "properties": {}, "patternProperties": {"(": {}}},
    "no properties": {"type": "object"},
}

NOT_TAKEN: dict[str, dict[str, Any]] = {
    "closed": {"type": "object", "properties": {"rpm": SPEED}, "additionalProperties": False},
    "closed, no properties": {"type": "object", "additionalProperties": False},
    "closed, a pattern that does not match": {
        "type": "object",
        "properties": {"rpm": SPEED},
        "patternProperties": {"^x-": {}},
        "additionalProperties": False,
    },
    # additionalProperties: false refuses the name whatever allOf names (the schema check refuses it).
    "closed, allOf naming it": {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
        "allOf": [{"properties": {"speed_rpm": SPEED}}],
    },
    "composed, naming others": {
        "type": "object",
        "properties": {"rpm": SPEED},
        "anyOf": [{"required": ["rpm"]}, {"properties": {"mode": {}}}],
        "dependencies": {"rpm": ["mode"]},
    },
    # As MCP SDKs write a function's parameters: these are the arguments it takes.
    "an SDK's set_speed(rpm)": {"type": "object", "properties": {"rpm": SPEED}, "title": "set_speedArguments"},
    "an SDK's start()": {"type": "object", "properties": {}},
}


def call(schema: dict[str, Any], arguments: dict[str, Any], noted: UntakenLimits, limits: Any = (LIMIT,)) -> Checked:
    tool = {"name": "set_speed", "inputSchema": schema}
    return check_arguments(tool, arguments, list(limits), SchemaCache(), resource="/vfd", untaken=(SLOT, noted))


def refusal(schema: dict[str, Any], arguments: dict[str, Any], noted: UntakenLimits) -> ArgumentRefused:
    with pytest.raises(ArgumentRefused) as caught:
        call(schema, arguments, noted)
    return caught.value


@pytest.mark.parametrize("schema", MAY_TAKE.values(), ids=MAY_TAKE.keys())
def test_a_schema_that_may_take_the_argument_is_held_to_the_limit_and_not_reported(
    schema: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy")
    noted = UntakenLimits()
    over = refusal(schema, {"speed_rpm": 2500}, noted)
    assert over.data["reason"] == "argument_limit", over.message
    assert "above the limit 1500" in over.message
    left_out = refusal(schema, {}, noted)  # missing = "refuse": the device would pick the speed
    assert left_out.data["reason"] == REQUIRED_BY_LIMIT, left_out.message
    assert noted.status() == []
    assert not [record for record in caplog.records if "does not apply to tool" in record.getMessage()]


@pytest.mark.parametrize("schema", NOT_TAKEN.values(), ids=NOT_TAKEN.keys())
def test_a_schema_that_takes_no_such_argument_passes_its_calls_and_is_reported_once(
    schema: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.policy")
    noted = UntakenLimits()
    assert call(schema, {}, noted).arguments == {}
    assert call(schema, {}, noted).arguments == {}
    [entry] = noted.status()
    assert entry == {
        "slot": SLOT,
        "tool": "set_speed",
        "rule": "limits[0]",
        "argument": "speed_rpm",
        "takes": list(schema.get("properties", {})),
    }
    warned = [record.getMessage() for record in caplog.records if "does not apply to tool" in record.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith('the limit limits[0] on argument "speed_rpm" does not apply to tool "set_speed"')


def test_allof_under_additional_properties_false_cannot_make_the_argument_acceptable() -> None:
    refused = refusal(NOT_TAKEN["closed, allOf naming it"], {"speed_rpm": 1000}, UntakenLimits())
    assert refused.data["source"] == "inputSchema", refused.message


def test_a_schema_requiring_it_is_held_to_the_limit() -> None:
    noted = UntakenLimits()
    schema = {"type": "object", "properties": {"mode": {}}, "required": ["speed_rpm"]}
    assert refusal(schema, {"speed_rpm": 2500}, noted).data["reason"] == "argument_limit"
    assert noted.status() == []


def test_nesting_past_the_bound_counts_as_taken() -> None:
    deep: dict[str, Any] = {"properties": {"mode": {}}}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        deep = {"allOf": [deep]}
    noted = UntakenLimits()
    assert (
        refusal({"type": "object", "properties": {"rpm": SPEED}, **deep}, {}, noted).data["reason"] == REQUIRED_BY_LIMIT
    )
    assert noted.status() == []


def test_an_entry_goes_when_a_call_finds_no_limit_on_its_tool_any_more() -> None:
    noted = UntakenLimits()
    closed = NOT_TAKEN["closed"]
    call(closed, {}, noted)
    assert [entry["rule"] for entry in noted.status()] == ["limits[0]"]
    call(closed, {}, noted, limits=())  # the rule was deleted by a reload: no limit applies
    assert noted.status() == []


def test_a_call_of_another_tool_or_slot_keeps_the_entry_and_clear_forgets_all() -> None:
    noted = UntakenLimits()
    call(NOT_TAKEN["closed"], {}, noted)
    check_arguments({"name": "stop", "inputSchema": {}}, {}, [], SchemaCache(), untaken=(SLOT, noted))
    check_arguments({"name": "set_speed"}, {}, [], SchemaCache(), untaken=("vfd-2", noted))
    assert len(noted.status()) == 1
    noted.clear()
    assert noted.status() == []


def test_past_its_bound_the_oldest_entry_goes_and_is_told_again() -> None:
    noted = UntakenLimits(most=2)
    tool = {"name": "set_speed", "inputSchema": NOT_TAKEN["closed"]}
    for slot in ("a", "b", "c"):
        noted.check(slot, tool, [LIMIT])
    assert [entry["slot"] for entry in noted.status()] == ["b", "c"]
    noted.check("b", tool, [])  # mended: dropped from both its indexes
    noted.check("a", tool, [LIMIT])
    assert [entry["slot"] for entry in noted.status()] == ["c", "a"]
