"""A tools/call's arguments against the tool's inputSchema and the operator's limits
(gateway/policy/arguments.py, gateway/policy/schemas.py), on pump-1's real tool list."""

from __future__ import annotations

import builtins
import contextlib
import socket
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.policy import schemas
from gateway.policy.arguments import ArgumentLimit, ArgumentRefused, Checked, check_arguments
from gateway.policy.schemas import SchemaCache

PUMP_1 = Path(__file__).resolve().parents[2] / "device" / "schemas" / "pump-1.json"
TOOLS: dict[str, dict[str, Any]] = {tool["name"]: tool for tool in orjson.loads(PUMP_1.read_bytes())}
RESOURCE = "/site1/line2/pump-1"
REFUSE = ArgumentLimit("speed_rpm", 300, 2000, None, "refuse", "policy limits[0]")
CLAMP = ArgumentLimit("speed_rpm", 300, 2000, None, "clamp", "policy limits[0]")
NO_SCHEMA = {"name": "set_speed"}  # a board whose firmware declares nothing


def check(
    tool: dict[str, Any], arguments: Any, limits: list[ArgumentLimit], cache: SchemaCache | None = None
) -> Checked:
    return check_arguments(tool, arguments, limits, cache if cache is not None else SchemaCache(), resource=RESOURCE)


def refusal(tool: dict[str, Any], arguments: Any, limits: list[ArgumentLimit]) -> ArgumentRefused:
    with pytest.raises(ArgumentRefused) as caught:
        check(tool, arguments, limits)
    assert caught.value.code == -32602
    assert str(caught.value) == caught.value.message
    return caught.value


def test_pump_1_lists_the_tools_these_tests_use() -> None:
    assert set(TOOLS) == {"get_status", "start", "set_speed", "stop", "reset_fault"}
    speed = TOOLS["set_speed"]["inputSchema"]["properties"]["speed_rpm"]
    assert (speed["type"], speed["minimum"], speed["maximum"]) == ("integer", 300, 2900)


# --- Valid arguments pass untouched ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_status", {}),
        ("start", {"speed_rpm": 1500}),
        ("set_speed", {"speed_rpm": 300}),
        ("set_speed", {"speed_rpm": 2000}),
        ("set_speed", {"speed_rpm": 1200.0}),  # a whole number, as the device accepts it too
        ("stop", {}),
        ("reset_fault", {}),
    ],
)
@pytest.mark.parametrize("limits", [[], [REFUSE], [CLAMP]])
def test_valid_arguments_pass_as_the_same_object(
    tool: str, arguments: dict[str, Any], limits: list[ArgumentLimit]
) -> None:
    before = dict(arguments)
    # As the policy gives them: a limit on speed_rpm goes with the tools that take it. (start {} with
    # one is refused: tests/unit/test_limits_fix_arguments.py.)
    limits = [limit for limit in limits if limit.argument in TOOLS[tool]["inputSchema"].get("properties", {})]
    checked = check(TOOLS[tool], arguments, limits)
    assert checked.arguments is arguments
    assert checked.arguments == before
    assert checked.clamped == []
    assert checked.schema_error is None


def test_a_default_in_the_schema_is_not_filled_in() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "default": 5}}}}
    arguments: dict[str, Any] = {}
    assert check(tool, arguments, []).arguments is arguments
    assert arguments == {}


def test_format_is_an_annotation_not_an_assertion() -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}},
    }
    assert check(tool, {"mail": "not an address"}, []).schema_error is None


# --- Schema violations, named ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "message", "argument", "rule"),
    [
        ("set_speed", {"speed_rpm": 3000}, 'Argument "speed_rpm" must be <= 2900', "speed_rpm", "maximum"),
        ("set_speed", {"speed_rpm": 299}, 'Argument "speed_rpm" must be >= 300', "speed_rpm", "minimum"),
        ("set_speed", {}, 'Argument "speed_rpm" is required', "speed_rpm", "required"),
        ("set_speed", None, 'Argument "speed_rpm" is required', "speed_rpm", "required"),
        (
            "set_speed",
            {"speed_rpm": 1200.5},
            'Argument "speed_rpm" must be an integer, not a number',
            "speed_rpm",
            "type",
        ),
        (
            "set_speed",
            {"speed_rpm": "1200"},
            'Argument "speed_rpm" must be an integer, not a string',
            "speed_rpm",
            "type",
        ),
        (
            "set_speed",
            {"speed_rpm": True},
            'Argument "speed_rpm" must be an integer, not a boolean',
            "speed_rpm",
            "type",
        ),
        ("start", {"speed_rpm": None}, 'Argument "speed_rpm" must be an integer, not null', "speed_rpm", "type"),
        (
            "stop",
            {"force": True},
            'Argument "force" is not one this tool takes; it takes no arguments',
            "force",
            "additionalProperties",
        ),
        (
            "set_speed",
            {"speed_rpm": 500, "ramp": 1},
            'Argument "ramp" is not one this tool takes; it takes only speed_rpm',
            "ramp",
            "additionalProperties",
        ),
    ],
)
def test_a_schema_violation_names_the_argument_and_what_is_wrong(
    tool: str, arguments: Any, message: str, argument: str, rule: str
) -> None:
    refused = refusal(TOOLS[tool], arguments, [REFUSE])
    assert refused.message == f"{message} (the tool's inputSchema)"
    assert refused.data == {"reason": "invalid_arguments", "argument": argument, "source": "inputSchema", "rule": rule}


NESTED = {
    "name": "configure",
    "inputSchema": {
        "type": "object",
        "properties": {
            "mode": {"enum": ["low", "high"]},
            "curve": {
                "type": "object",
                "properties": {"points": {"type": "array", "items": {"type": "number"}, "maxItems": 3}},
                "required": ["points", "unit"],
            },
            "label": {"type": "string", "maxLength": 4},
        },
    },
}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"mode": "turbo"}, 'Argument "mode" must be one of "low", "high"'),
        ({"curve": {}}, 'Argument "curve.points" is required (so is "curve.unit")'),
        ({"curve": {"points": [1, "x"], "unit": "s"}}, 'Argument "curve.points[1]" must be a number, not a string'),
        ({"curve": {"points": [1, 2, 3, 4], "unit": "s"}}, 'Argument "curve.points" must have at most 3 items'),
        ({"label": "longer"}, 'Argument "label" must be at most 4 characters long'),
    ],
)
def test_nested_arguments_are_named_by_their_path(arguments: dict[str, Any], message: str) -> None:
    assert refusal(NESTED, arguments, []).message == f"{message} (the tool's inputSchema)"


def test_true_is_not_1_in_the_schema_either() -> None:
    # fastjsonschema 2.22 compares enum and const as JSON does (pyproject.toml's floor).
    tool = {"name": "t", "inputSchema": {"properties": {"level": {"enum": [0, 1, 2]}, "off": {"const": 0}}}}
    assert refusal(tool, {"level": True}, []).message.startswith('Argument "level" must be one of 0, 1, 2 (')
    assert refusal(tool, {"off": False}, []).message.startswith('Argument "off" must be 0 (')


@pytest.mark.parametrize(("arguments", "kind"), [([1, 2], "an array"), ("speed", "a string"), (7, "an integer")])
def test_arguments_that_are_not_an_object_are_refused(arguments: Any, kind: str) -> None:
    refused = refusal(TOOLS["start"], arguments, [REFUSE])
    assert refused.message == f"The arguments must be an object (argument names and their values), not {kind}"
    assert refused.data == {"reason": "invalid_arguments", "argument": None, "source": "tools/call"}


def test_absent_arguments_are_an_empty_object() -> None:
    checked = check(TOOLS["start"], None, [replace(REFUSE, missing="allow")])
    assert checked.arguments == {}
    assert checked.clamped == []


# --- Operator limits ---------------------------------------------------------------------------------------


def limit_data(
    value: Any, minimum: Any = 300, maximum: Any = 2000, allowed: Any = None, by: str = "policy limits[0]"
) -> dict[str, Any]:
    limit = {"min": minimum, "max": maximum, "allowed": allowed}
    return {"reason": "argument_limit", "argument": "speed_rpm", "value": value, "limit": limit, "setBy": by}


def test_a_number_above_the_limit_is_refused() -> None:
    refused = refusal(TOOLS["set_speed"], {"speed_rpm": 2500}, [REFUSE])
    assert refused.message == (
        'Argument "speed_rpm" = 2500 is above the limit 2000 set by policy limits[0] for /site1/line2/pump-1; '
        "use a value from 300 to 2000"
    )
    assert refused.data == limit_data(2500)


def test_a_number_below_the_limit_is_refused() -> None:
    limit = ArgumentLimit("speed_rpm", 800, None, None, "refuse", "policy limits[4]")
    refused = refusal(TOOLS["start"], {"speed_rpm": 500}, [limit])
    assert refused.message == (
        'Argument "speed_rpm" = 500 is below the limit 800 set by policy limits[4] for /site1/line2/pump-1; '
        "use a value of at least 800"
    )
    assert refused.data == limit_data(500, 800, None, by="policy limits[4]")


def test_the_limit_applies_without_a_schema_and_without_a_resource() -> None:
    limit = ArgumentLimit("speed_rpm", None, 2000.0, None, "refuse", "policy limits[1]")
    with pytest.raises(ArgumentRefused) as caught:
        check_arguments(NO_SCHEMA, {"speed_rpm": 99999}, [limit], SchemaCache())
    assert caught.value.message == (
        'Argument "speed_rpm" = 99999 is above the limit 2000 set by policy limits[1]; use a value of at most 2000'
    )
    assert caught.value.data["limit"] == {"min": None, "max": 2000, "allowed": None}


def test_clamping_returns_a_new_dict_and_says_what_it_changed() -> None:
    arguments = {"speed_rpm": 2500}
    checked = check(TOOLS["set_speed"], arguments, [CLAMP])
    assert checked.arguments == {"speed_rpm": 2000}
    assert checked.arguments is not arguments
    assert arguments == {"speed_rpm": 2500}  # the caller's own is untouched
    assert checked.clamped == ["speed_rpm 2500 -> 2000 (policy limits[0])"]


def test_clamping_up_to_the_minimum_keeps_a_whole_number_whole() -> None:
    limit = ArgumentLimit("speed_rpm", 450.5, 2000, None, "clamp", "policy limits[2]")
    checked = check(TOOLS["start"], {"speed_rpm": 400}, [limit])
    assert checked.arguments == {"speed_rpm": 451}
    assert type(checked.arguments["speed_rpm"]) is int
    assert checked.clamped == ["speed_rpm 400 -> 451 (policy limits[2])"]


def test_other_arguments_come_along_unchanged_when_one_is_clamped() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object"}}
    checked = check(tool, {"speed_rpm": 9000, "note": {"a": [1]}}, [CLAMP])
    assert checked.arguments == {"speed_rpm": 2000, "note": {"a": [1]}}


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "true"), (False, "false"), ("2500", '"2500"'), (None, "null"), ([2500], "[2500]"), (float("nan"), "NaN")],
)
def test_only_numbers_meet_a_numeric_limit_and_a_boolean_is_no_number(value: Any, shown: str) -> None:
    for limit in (REFUSE, CLAMP):
        refused = refusal(NO_SCHEMA, {"speed_rpm": value}, [limit])
        assert refused.message == (
            f'Argument "speed_rpm" = {shown} is not a number; use a number from 300 to 2000 '
            "(the limit set by policy limits[0] for /site1/line2/pump-1)"
        )
        assert refused.data["reason"] == "argument_limit"


def test_a_limit_on_a_missing_argument_refuses_the_call_unless_it_allows_that() -> None:
    # The device would run at a value of its own (pump-1's stored setpoint), which no limit checks.
    for limits in ([REFUSE], [CLAMP], [REFUSE, CLAMP]):
        assert refusal(TOOLS["start"], {}, limits).data["reason"] == "argument_required_by_limit"
    assert refusal(NO_SCHEMA, {}, [REFUSE]).data["reason"] == "argument_required_by_limit"
    arguments: dict[str, Any] = {}
    allow = [replace(REFUSE, missing="allow"), replace(CLAMP, missing="allow")]
    assert check(TOOLS["start"], arguments, allow).arguments is arguments
    assert check(NO_SCHEMA, arguments, allow[:1]).arguments is arguments


MODE_TOOL = {"name": "set_mode", "inputSchema": {"type": "object", "properties": {"mode": {"type": "string"}}}}
MODES = ArgumentLimit("mode", None, None, ("low", "high"), "refuse", "policy limits[1]")


def test_a_value_outside_the_allowed_list_is_refused() -> None:
    arguments = {"mode": "low"}
    assert check(MODE_TOOL, arguments, [MODES]).arguments is arguments
    refused = refusal(MODE_TOOL, {"mode": "turbo"}, [MODES])
    assert refused.message == (
        'Argument "mode" = "turbo" is not allowed by the limit set by policy limits[1] for /site1/line2/pump-1; '
        'use one of "low", "high"'
    )
    assert refused.data == {
        "reason": "argument_limit",
        "argument": "mode",
        "value": "turbo",
        "limit": {"min": None, "max": None, "allowed": ["low", "high"]},
        "setBy": "policy limits[1]",
    }


def test_an_allowed_list_is_never_clamped() -> None:
    limit = ArgumentLimit("speed_rpm", 300, 2000, (1000, 1500), "clamp", "policy limits[3]")
    refused = refusal(TOOLS["set_speed"], {"speed_rpm": 2500}, [limit])
    assert refused.message.endswith("use one of 1000, 1500")


@pytest.mark.parametrize(
    ("value", "allowed", "passes"),
    [(True, (1, 2), False), (1, (True,), False), (2.0, (2,), True), (True, (True,), True), (0, (False,), False)],
)
def test_allowed_values_compare_as_json_does(value: Any, allowed: tuple[Any, ...], passes: bool) -> None:
    limit = ArgumentLimit("flag", None, None, allowed, "refuse", "policy limits[0]")
    if passes:
        check(NO_SCHEMA, {"flag": value}, [limit])
    else:
        with pytest.raises(ArgumentRefused):
            check(NO_SCHEMA, {"flag": value}, [limit])


def test_a_long_value_is_cut_in_the_message() -> None:
    refused = refusal(MODE_TOOL, {"mode": "x" * 10_000}, [MODES])
    assert len(refused.message) < 250
    assert "…" in refused.message
    assert len(refused.data["value"]) < 100


def test_the_schema_decides_before_the_limits_on_the_original_arguments() -> None:
    # 5000 would clamp to 2000, but the caller sent a value the tool itself refuses: that is said first.
    refused = refusal(TOOLS["set_speed"], {"speed_rpm": 5000}, [CLAMP])
    assert refused.message == 'Argument "speed_rpm" must be <= 2900 (the tool\'s inputSchema)'


def test_a_clamp_the_schema_would_refuse_is_refused_as_a_contradiction() -> None:
    limit = ArgumentLimit("speed_rpm", 100, 200, None, "clamp", "policy limits[0]")
    refused = refusal(TOOLS["set_speed"], {"speed_rpm": 2500}, [limit])
    assert refused.message == (
        'Argument "speed_rpm" = 2500 is above the limit 200 set by policy limits[0] for /site1/line2/pump-1; '
        "clamped to 200 it would break the tool's inputSchema (must be >= 300): "
        "the limit contradicts the tool's schema, so the call is refused instead"
    )
    assert refused.data == limit_data(2500, 100, 200) | {"clampedTo": 200, "conflict": "inputSchema"}


def test_a_clamp_another_limit_refuses_is_refused_as_a_contradiction() -> None:
    low = ArgumentLimit("speed_rpm", 1000, 2000, None, "clamp", "policy limits[0]")
    high = ArgumentLimit("speed_rpm", 300, 800, None, "refuse", "policy limits[1]")
    for limits in ([low, high], [high, low]):
        refused = refusal(TOOLS["set_speed"], {"speed_rpm": 500}, limits)
        assert refused.message == (
            'Argument "speed_rpm" = 500 is below the limit 1000 set by policy limits[0] for /site1/line2/pump-1; '
            "clamped to 1000 it would break the limit set by policy limits[1] for /site1/line2/pump-1: "
            "the limits contradict each other, so the call is refused instead"
        )
        assert refused.data["conflict"] == "limits"


def test_two_clamps_on_one_argument_end_within_both() -> None:
    tighter = ArgumentLimit("speed_rpm", 300, 1500, None, "clamp", "policy limits[1]")
    checked = check(TOOLS["set_speed"], {"speed_rpm": 2500}, [CLAMP, tighter])
    assert checked.arguments == {"speed_rpm": 1500}
    assert checked.clamped == ["speed_rpm 2500 -> 2000 (policy limits[0])", "speed_rpm 2000 -> 1500 (policy limits[1])"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (("x", 1, 2, None, "round"), "action"),
        (("x", 5, 1, None, "refuse"), "above maximum"),
        (("x", None, None, ("a",), "clamp"), "clamp needs"),
        (("x", float("nan"), None, None, "refuse"), "must be a number"),
    ],
)
def test_a_limit_that_makes_no_sense_is_refused_when_built(fields: tuple[Any, ...], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ArgumentLimit(*fields)


def test_an_allowed_list_becomes_a_tuple() -> None:
    limit = ArgumentLimit("mode", None, None, ["low"], "refuse", "policy limits[0]")  # type: ignore[arg-type]
    assert limit.allowed == ("low",)
    assert hash(limit)


# --- Schemas that do not compile ---------------------------------------------------------------------------


BROKEN = {
    "name": "set_speed",
    "inputSchema": {"type": "object", "properties": {"speed_rpm": {"type": "integer", "maximum": "fast"}}},
}


def test_a_broken_schema_leaves_the_limits_and_is_compiled_once() -> None:
    cache = SchemaCache()
    for _ in range(3):
        checked = check(BROKEN, {"speed_rpm": 1500}, [REFUSE], cache)
        assert checked.schema_error is not None
        assert "does not compile" in checked.schema_error
        assert "maximum must be a number" in checked.schema_error
        with pytest.raises(ArgumentRefused, match="is above the limit 2000"):
            check(BROKEN, {"speed_rpm": 2500}, [REFUSE], cache)
    copy = {"name": "set_speed", "inputSchema": orjson.loads(orjson.dumps(BROKEN["inputSchema"]))}
    assert cache.error(copy) == checked.schema_error  # remembered by content, with its reason
    assert cache.validator(copy) is None
    assert cache.compiles == 1


@pytest.mark.parametrize(
    "schema",
    [
        "not a schema",
        {"type": "object", "required": "speed_rpm"},
        {"type": "object", "properties": {"speed_rpm": {"type": "integer", "pattern": "("}}},
        {"type": "object", "properties": {"x": {"$ref": "#/definitions/missing"}}},
    ],
)
def test_any_schema_that_does_not_compile_is_no_error_of_the_call(schema: Any) -> None:
    checked = check({"name": "t", "inputSchema": schema}, {"speed_rpm": 1500}, [REFUSE])
    assert checked.schema_error
    assert checked.arguments == {"speed_rpm": 1500}


def test_a_tool_without_an_input_schema_is_checked_against_the_limits_only() -> None:
    cache = SchemaCache()
    assert cache.validator(NO_SCHEMA) is None
    assert check(NO_SCHEMA, {"speed_rpm": 1500}, [REFUSE], cache).schema_error == "the tool lists no inputSchema"
    with pytest.raises(ArgumentRefused, match="above the limit 2000"):
        check(NO_SCHEMA, {"speed_rpm": 2500}, [REFUSE], cache)


def test_a_tool_its_provider_does_not_list_meets_the_limits_alone() -> None:
    cache = SchemaCache()
    arguments = {"speed_rpm": 1500}
    checked = check_arguments(None, arguments, [REFUSE], cache)
    assert (checked.arguments, checked.schema_error) == (arguments, "the provider does not list the tool")
    assert check_arguments(None, {"speed_rpm": 2500}, [CLAMP], cache).arguments == {"speed_rpm": 2000}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    attempts: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(repr(args))
        raise AssertionError("the schema cache opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return attempts


@pytest.mark.parametrize(
    "ref",
    [
        "http://127.0.0.1:9/speed.json",
        "https://schemas.example.com/speed.json#/defs/speed",
        "file:///etc/passwd",
        "speed.json",
        "//example.com/speed.json",
    ],
)
def test_a_remote_ref_is_refused_without_touching_the_network(no_network: list[str], ref: str) -> None:
    tool = {"name": "set_speed", "inputSchema": {"type": "object", "properties": {"speed_rpm": {"$ref": ref}}}}
    cache = SchemaCache()
    checked = check(tool, {"speed_rpm": 1500}, [REFUSE], cache)
    assert checked.schema_error is not None
    assert checked.schema_error.startswith("remote reference refused: $ref ")
    assert "the gateway fetches no schema" in checked.schema_error
    with pytest.raises(ArgumentRefused, match="above the limit 2000"):
        check(tool, {"speed_rpm": 2500}, [REFUSE], cache)
    assert cache.compiles == 1
    assert no_network == []


def test_a_ref_to_the_same_id_is_refused_only_when_remote(no_network: list[str]) -> None:
    schema = {
        "$id": "https://example.com/pump.json",
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/speed"}, "b": {"$ref": "https://example.com/pump.json#/$defs/speed"}},
        "$defs": {"speed": {"type": "integer", "maximum": 10}},
    }
    with pytest.raises(ArgumentRefused, match='Argument "b" must be <= 10'):
        check({"name": "t", "inputSchema": schema}, {"a": 1, "b": 11}, [])
    assert no_network == []


def test_local_refs_are_followed() -> None:
    schema = {
        "type": "object",
        "properties": {"speed_rpm": {"$ref": "#/$defs/speed"}},
        "$defs": {"speed": {"type": "integer", "minimum": 300, "maximum": 2900}},
    }
    tool = {"name": "set_speed", "inputSchema": schema}
    before = orjson.dumps(schema)
    with pytest.raises(ArgumentRefused, match='Argument "speed_rpm" must be <= 2900'):
        check(tool, {"speed_rpm": 3000}, [])
    assert orjson.dumps(schema) == before  # fastjsonschema rewrote refs in its own copy


def test_arguments_too_deep_for_a_recursive_schema_are_refused_not_crashed() -> None:
    tool = {"name": "tree", "inputSchema": {"type": "object", "properties": {"child": {"$ref": "#"}}}}
    arguments: dict[str, Any] = {}
    for _ in range(5000):
        arguments = {"child": arguments}
    refused = refusal(tool, arguments, [])
    assert (
        refused.message
        == "The arguments could not be checked against the tool's inputSchema (RecursionError), so the call is refused"
    )


def test_a_hostile_schema_runs_no_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # fastjsonschema writes Python from the schema: the provider's strings must stay strings.
    payload = "__import__('builtins').__setattr__('HOSTILE_SCHEMA_RAN', 1)"
    for quote in ("", '"', "'", '")+', "\\", "\n", "{0}", "{variable}"):
        for text in (quote + payload, quote + ") or " + payload + " or (", quote + "\n" + payload + "\n#"):
            schema = {
                "type": "object",
                "properties": {text: {"type": "integer", "enum": [text], "pattern": "x"}, "a": {"const": text}},
                "patternProperties": {"^" + text.replace("(", r"\(").replace(")", r"\)"): {"type": "string"}},
                "required": [text],
                "additionalProperties": False,
            }
            cache = SchemaCache()
            for arguments in ({text: text}, {"a": text}, {text: 1, "b": 2}):
                with contextlib.suppress(ArgumentRefused):
                    check({"name": "t", "inputSchema": schema}, arguments, [], cache)
            assert not hasattr(builtins, "HOSTILE_SCHEMA_RAN"), text


# --- The cache ---------------------------------------------------------------------------------------------


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every schema fastjsonschema really compiles (through the gateway's bounded-pattern generator)."""
    calls: list[Any] = []
    real = schemas.generated_validator

    def counting(definition: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(definition)
        return real(definition, *args, **kwargs)

    monkeypatch.setattr(schemas, "generated_validator", counting)
    return calls


def test_equal_schemas_share_one_compiled_validator(compiled: list[Any]) -> None:
    cache = SchemaCache()
    pumps = [orjson.loads(PUMP_1.read_bytes()) for _ in range(100)]  # a hundred pumps, their own dicts each
    validators = {id(cache.validator(tool)) for tools in pumps for tool in tools if tool["name"] == "set_speed"}
    assert len(validators) == 1
    reordered = {"name": "set_speed", "inputSchema": dict(reversed(TOOLS["set_speed"]["inputSchema"].items()))}
    assert cache.validator(reordered) is cache.validator(pumps[0][2])  # the key is canonical: key order aside
    assert len(compiled) == 1
    assert cache.compiles == 1
    for tools in pumps:
        for tool in tools:
            cache.validator(tool)
    assert len(compiled) == 3  # the other tools' schemas: one with speed_rpm optional, one without arguments
    assert cache.size == 3


def test_a_schema_seen_again_costs_no_key_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SchemaCache()
    tool = TOOLS["set_speed"]
    cache.validator(tool)
    monkeypatch.setattr(schemas, "blake2b", None)  # the content key is not computed again for the same object
    assert cache.validator(tool) is not None


def test_the_cache_is_bounded_and_drops_the_least_recently_used(compiled: list[Any]) -> None:
    cache = SchemaCache(max_entries=2)
    tools: list[dict[str, Any]] = [
        {"name": f"t{n}", "inputSchema": {"type": "object", "maxProperties": n}} for n in range(3)
    ]
    cache.validator(tools[0])
    cache.validator(tools[1])
    cache.validator(tools[0])  # used again: t1 is now the oldest
    cache.validator(tools[2])
    assert cache.size == 2
    assert len(compiled) == 3
    fresh = [{"name": tool["name"], "inputSchema": dict(tool["inputSchema"])} for tool in tools]
    cache.validator(fresh[0])
    cache.validator(fresh[2])
    assert len(compiled) == 3  # both still cached by content
    cache.validator(fresh[1])
    assert len(compiled) == 4  # dropped, so compiled again
    assert cache.compiles == 4
    assert cache.size == 2


def test_the_default_bound() -> None:
    assert SchemaCache().max_entries == 4096
    with pytest.raises(ValueError, match="at least 1"):
        SchemaCache(max_entries=0)
