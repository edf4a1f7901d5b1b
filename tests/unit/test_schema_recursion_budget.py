"""A tool's inputSchema whose definitions refer to themselves from two branches (gateway/policy/schemas.py,
gateway/policy/arguments.py): the check through its `$ref`s ends at limits.max_pattern_ms and refuses
the call, where it used to take 2^depth steps on the event loop (263 bytes of arguments: 43 s), and
an ordinary recursive argument is checked as before.

Each hostile check runs in a thread joined with a generous timeout: without the bound the join times
out instead of the test hanging for hours."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gateway.policy.arguments import ArgumentRefused, Checked, check_arguments
from gateway.policy.schemas import SchemaCache, compile_schema

JOIN_S = 20.0
"""How long a hostile check may take before the test calls it unbounded (the bound is 50 ms)."""
NODE = {"$ref": "#/definitions/node"}
REVIEWED = {
    "type": "object",
    "properties": {"filter": NODE},
    "definitions": {"node": {"type": "object", "oneOf": [{"properties": {"c": NODE}}, {"properties": {"c": NODE}}]}},
}
"""The schema of the finding: both branches of `oneOf` recurse, so each level checks the next twice."""
FILTER = {
    "type": "object",
    "properties": {"filter": {"$ref": "#/definitions/expr"}},
    "required": ["filter"],
    "definitions": {
        "expr": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"and": {"type": "array", "items": {"$ref": "#/definitions/expr"}}},
                    "required": ["and"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"not": {"$ref": "#/definitions/expr"}},
                    "required": ["not"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"field": {"type": "string", "pattern": "^[a-z_]+$"}, "equals": {}},
                    "required": ["field", "equals"],
                    "additionalProperties": False,
                },
            ]
        }
    },
}
"""A recursive filter as query tools publish it: each branch requires its own key, so one matches."""


def nested(depth: int, key: str = "c", leaf: Any = None) -> Any:
    value: Any = {} if leaf is None else leaf
    for _ in range(depth):
        value = {key: value}
    return value


def checked_in_thread(schema: dict[str, Any], arguments: dict[str, Any]) -> Checked | ArgumentRefused:
    """check_arguments's outcome, run on a daemon thread; fails the test when it is not back in JOIN_S."""
    outcome: list[Checked | ArgumentRefused] = []

    def check() -> None:
        try:
            outcome.append(check_arguments({"name": "query", "inputSchema": schema}, arguments, [], SchemaCache()))
        except ArgumentRefused as exc:
            outcome.append(exc)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    assert not thread.is_alive(), f"the check was still running after {JOIN_S} s: the recursion is unbounded"
    return outcome[0]


def test_the_reviewed_schema_at_depth_22_is_refused_within_the_bound() -> None:
    refused = checked_in_thread(REVIEWED, {"filter": nested(22)})
    assert isinstance(refused, ArgumentRefused)
    assert not refused.malformed_request  # a tool error the caller reads, not a protocol error
    data = refused.data
    assert (data["reason"], data["rule"], data["source"]) == ("pattern_timeout", "$ref", "inputSchema")
    assert (data["limit"], data["setting"]) == (50, "limits.max_pattern_ms")
    assert data["argument"].startswith("filter.c")
    assert refused.message.startswith('Argument "filter.c')
    assert (
        "could not be checked against the tool's inputSchema within limits.max_pattern_ms (50 ms), so the call "
        "is refused: its definitions ($ref) check a value again at each level of nesting" in refused.message
    )


TWICE = [{"properties": {"c": NODE}}, {"properties": {"c": NODE}}]


@pytest.mark.parametrize(
    ("node", "leaf"),
    [
        ({"type": "object", "anyOf": TWICE}, 1),  # tries the second branch when the first fails: the leaf fails both
        ({"type": "object", "oneOf": TWICE}, 1),
        ({"type": "object", "allOf": TWICE}, {}),  # checks both branches of valid arguments (it stops at a failure)
    ],
    ids=["anyOf", "oneOf", "allOf"],
)
def test_every_way_of_recursing_twice_is_refused_within_the_bound(node: dict[str, Any], leaf: Any) -> None:
    schema = {"type": "object", "properties": {"filter": NODE}, "definitions": {"node": node}}
    refused = checked_in_thread(schema, {"filter": nested(30, leaf=leaf)})
    assert isinstance(refused, ArgumentRefused)
    assert (refused.data["reason"], refused.data["rule"]) == ("pattern_timeout", "$ref")


def test_a_schema_recursing_through_its_root_is_refused_within_the_bound() -> None:
    schema = {"type": "object", "oneOf": [{"properties": {"c": {"$ref": "#"}}}, {"properties": {"c": {"$ref": "#"}}}]}
    refused = checked_in_thread(schema, nested(30, leaf=1))
    assert isinstance(refused, ArgumentRefused)
    assert refused.data["rule"] == "$ref"


def test_an_ordinary_recursive_argument_is_checked_as_before() -> None:
    arguments = {
        "filter": {
            "and": [
                {"not": {"not": {"and": [{"not": {"field": "pump", "equals": 1}}]}}},
                {"field": "line", "equals": "l2"},
            ]
        }
    }
    checked = checked_in_thread(FILTER, arguments)
    assert isinstance(checked, Checked)
    assert checked.arguments is arguments  # forwarded as the caller sent it
    # The schema still refuses what it refuses, naming the argument.
    refused = checked_in_thread(FILTER, {"filter": {"not": {"not": {"field": "Pump!", "equals": 1}}}})
    assert isinstance(refused, ArgumentRefused)
    assert refused.data["reason"] == "invalid_arguments"
    # The reviewed shape with `anyOf` (the first branch that matches ends it), nested 5 deep: valid.
    any_of = {"type": "object", "properties": {"filter": NODE}, "definitions": {"node": {"anyOf": TWICE}}}
    assert isinstance(checked_in_thread(any_of, {"filter": nested(5)}), Checked)
    # The reviewed schema itself refuses every value (both branches match `{}`), as before: at once.
    refused = checked_in_thread(REVIEWED, {"filter": nested(5)})
    assert isinstance(refused, ArgumentRefused)
    assert refused.data["reason"] == "invalid_arguments"


def test_many_ref_checked_items_within_the_bound_pass() -> None:
    schema = {
        "type": "object",
        "properties": {"rows": {"type": "array", "items": {"$ref": "#/definitions/row"}}},
        "definitions": {"row": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
    }
    arguments = {"rows": [{"a": index} for index in range(2000)]}
    checked = checked_in_thread(schema, arguments)
    assert isinstance(checked, Checked)


def test_a_pattern_inside_a_recursive_definition_is_still_bounded_by_itself() -> None:
    schema = {
        "type": "object",
        "properties": {"filter": NODE},
        "definitions": {"node": {"properties": {"s": {"pattern": "(a|a)+$"}, "c": NODE}}},
    }
    refused = checked_in_thread(schema, {"filter": {"c": {"s": "a" * 40 + "!"}}})
    assert isinstance(refused, ArgumentRefused)
    assert (refused.data["reason"], refused.data["pattern"], refused.data["argument"]) == (
        "pattern_timeout",
        "(a|a)+$",
        "filter.c.s",
    )


def test_the_bound_starts_afresh_at_each_check() -> None:
    validator = compile_schema(REVIEWED).validator
    assert validator is not None
    for _ in range(3):  # each check has its own 50 ms, not what the one before left
        with pytest.raises(Exception, match="took longer than 50 ms"):
            validator({"filter": nested(22)})
        with pytest.raises(Exception, match="exactly by one definition"):
            validator({"filter": nested(3)})
