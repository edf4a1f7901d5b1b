"""The patterns of tools' inputSchemas, matched within limits.max_pattern_ms (gateway/policy/patterns.py,
gateway/policy/schemas.py, gateway/policy/arguments.py): a pattern that backtracks refuses the call
instead of holding the event loop, and every pattern `re` read keeps its meaning."""

from __future__ import annotations

import re
import time
import warnings
from typing import Any

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.policy.arguments import ArgumentLimit, ArgumentRefused, check_arguments
from gateway.policy.patterns import PatternBudget, PatternTimeout, as_re_reads
from gateway.policy.schemas import SchemaCache, compile_schema

CRAFTED = "a" * 40 + "!"
LIMIT = ArgumentLimit("speed_rpm", 300, 2000, None, "refuse", "policy limits[0]")


def tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": "t", "inputSchema": schema}


def refusal(schema: dict[str, Any], arguments: Any, cache: SchemaCache | None = None) -> ArgumentRefused:
    with pytest.raises(ArgumentRefused) as caught:
        check_arguments(tool(schema), arguments, [LIMIT], cache or SchemaCache(), resource="/plant/p")
    assert caught.value.code == -32602
    return caught.value


def test_a_backtracking_pattern_refuses_the_call_naming_the_argument_pattern_and_bound() -> None:
    schema = {"type": "object", "properties": {"config": {"properties": {"mode": {"pattern": "(a|a)+$"}}}}}
    started = time.monotonic()
    refused = refusal(schema, {"config": {"mode": CRAFTED}}, SchemaCache(max_pattern_ms=30))
    assert time.monotonic() - started < 2  # unbounded: longer than anyone waits
    assert refused.message == (
        'Argument "config.mode" could not be checked against the pattern "(a|a)+$" of the tool\'s inputSchema '
        "within limits.max_pattern_ms (30 ms), so the call is refused; send a shorter or simpler value, or have the "
        "provider's pattern fixed (it backtracks too much)"
    )
    assert refused.data == {
        "reason": "pattern_timeout",
        "argument": "config.mode",
        "pattern": "(a|a)+$",
        "source": "inputSchema",
        "limit": 30,
        "setting": "limits.max_pattern_ms",
    }
    assert refused.rules == ()


def test_a_backtracking_pattern_property_names_the_argument_by_its_name() -> None:
    schema = {"type": "object", "properties": {"items": {"items": {"patternProperties": {"(a|a)+$": {}}}}}}
    refused = refusal(schema, {"items": [{"ok": 1}, {CRAFTED: 1}]})
    assert refused.message.startswith(f'The argument name "items[1].{CRAFTED}" could not be checked')
    assert (refused.data["argument"], refused.data["pattern"]) == (f"items[1].{CRAFTED}", "(a|a)+$")


def test_the_bound_is_for_all_the_matches_of_one_check_together() -> None:
    # Each item matches (its second branch) after a millisecond or so of backtracking in the first:
    # a fraction of the bound alone, far beyond it three hundred times over.
    pattern = "(a|a)+$|^a"
    schema = {"type": "object", "properties": {"tags": {"items": {"pattern": pattern}}}}
    length = 12
    item = "a" * length + "!"
    started = time.monotonic()
    assert regex.compile(r"(a|a)+\Z|^a").search(item) is not None
    assert time.monotonic() - started < 0.025, "this machine is too slow for the premise of the test"
    tags = ["a" * length + "!" for _ in range(300)]  # each its own string, as parsed JSON holds them
    refused = refusal(schema, {"tags": tags}, SchemaCache(max_pattern_ms=50))
    assert (refused.data["reason"], refused.data["pattern"]) == ("pattern_timeout", pattern)
    index = int(refused.data["argument"].removeprefix("tags[").removesuffix("]"))
    assert 0 < index < 299  # the item being matched when the bound ran out
    assert check_arguments(tool(schema), {"tags": [item] * 3}, [], SchemaCache()).arguments == {"tags": [item] * 3}


def test_each_check_starts_with_the_whole_bound() -> None:
    schema = {"type": "object", "properties": {"s": {"pattern": "(a|a)+$"}}}
    cache = SchemaCache(max_pattern_ms=20)
    for _ in range(3):
        assert refusal(schema, {"s": CRAFTED}, cache).data["reason"] == "pattern_timeout"
    # A quick match after slow ones has its own budget, not what the slow ones left.
    assert check_arguments(tool(schema), {"s": "aaa"}, [], cache).arguments == {"s": "aaa"}
    assert cache.compiles == 1


def test_a_clamped_value_checked_again_is_bounded_too() -> None:
    schema = {
        "type": "object",
        "properties": {"speed_rpm": {"type": "integer"}, "note": {"pattern": "(a|a)+$"}},
    }
    clamp = ArgumentLimit("speed_rpm", 300, 2000, None, "clamp", "policy limits[0]")
    # The first check passes (a short note), and so does the recheck: the budget is per check.
    checked = check_arguments(tool(schema), {"speed_rpm": 2500, "note": "aaa"}, [clamp], SchemaCache())
    assert checked.arguments == {"speed_rpm": 2000, "note": "aaa"}
    with pytest.raises(ArgumentRefused) as caught:
        check_arguments(tool(schema), {"speed_rpm": 2500, "note": CRAFTED}, [clamp], SchemaCache())
    assert caught.value.data["reason"] == "pattern_timeout"


def test_a_required_name_against_a_backtracking_pattern_property_is_bounded_at_compile() -> None:
    # fastjsonschema checks at compile time that a required name matches a patternProperties pattern.
    schema = {
        "type": "object",
        "patternProperties": {"(a|a)+$": {}},
        "additionalProperties": False,
        "required": [CRAFTED],
    }
    started = time.monotonic()
    compiled = compile_schema(schema, max_pattern_ms=30)
    assert time.monotonic() - started < 2
    assert compiled.validator is None
    assert compiled.error == (
        'the inputSchema does not compile: matching its patternProperties pattern "(a|a)+$" against its required '
        f'name "{CRAFTED}" took longer than limits.max_pattern_ms (30 ms)'
    )
    # Like any schema that does not compile: the operator limits still apply.
    checked = check_arguments(tool(schema), {"speed_rpm": 1500}, [LIMIT], SchemaCache(max_pattern_ms=30))
    assert checked.schema_error == compiled.error


def test_required_names_and_pattern_properties_compile_as_before() -> None:
    allowed = {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False}
    validator = compile_schema({**allowed, "required": ["x-site"]}).validator
    assert validator is not None
    assert validator({"x-site": "s1"}) == {"x-site": "s1"}
    impossible = compile_schema({**allowed, "required": ["x-site", "mode"]})
    assert impossible.error == (
        "the inputSchema does not compile: JsonSchemaDefinitionException: data: items ['mode'] are required but not "
        "allowed"
    )
    refused = refusal({**allowed, "required": ["x-site"]}, {"x-site": "s1", "mode": "on"})
    assert (
        refused.message == 'Argument "mode" is not one this tool takes; it takes no arguments (the tool\'s inputSchema)'
    )


@pytest.mark.parametrize(
    ("pattern", "value", "passes"),
    [
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "abc\n", False),  # `$` is the end of the string, as in ECMA-262
        ("^(?=.*[0-9])(?=.*[A-Z]).{8,}$", "Passw0rdX", True),  # lookaheads
        ("^(?=.*[0-9])(?=.*[A-Z]).{8,}$", "password", False),
        ("^(ab)\\1$", "abab", True),  # a backreference
        ("^\\w+$", "héllo", True),
        ("^\\d{3}-\\d{4}$", "555-1234", True),
        ("[[:alpha:]]", "b", False),  # a set of "[:alph" followed by "]", as re and ECMA-262 read it
        ("[[:alpha:]]", ":]", True),
        ("^a{e<=1}$", "b", False),  # not a fuzzy match: the literal text
        ("^a{e<=1}$", "a{e<=1}", True),
        ("(?i)^pump-[0-9]+$", "PUMP-7", True),
        ("(a+)+$", CRAFTED, False),  # refused at once, no timeout needed
    ],
)
def test_patterns_keep_their_meaning(pattern: str, value: str, passes: bool) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re's "possible nested set" for [[:alpha:]]
        cache = SchemaCache()
        if passes:
            assert check_arguments(tool(schema), {"s": value}, [], cache).arguments == {"s": value}
        else:
            refused = refusal(schema, {"s": value}, cache)
            assert refused.data["reason"] == "invalid_arguments"
            assert refused.message == f'Argument "s" must match the pattern "{pattern}" (the tool\'s inputSchema)'


PIECES = st.sampled_from(
    ["a", "b", ":", "=", ".", "[", "]", "[:", ":]", "{", "}", "{1}", "{,2}", "{1,}", "{e<=1}", "{i}", "\\", "\\{",
     "\\[", "\\N{DIGIT ONE}", "(", ")", "(?:", "|", "*", "+", "?", "^", "$", "-", "1", "e", "<=", "x"]
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(pieces=st.lists(PIECES, max_size=8), subject=st.text(alphabet="ab:=.[]{}1e<x-", max_size=8))
def test_regex_reads_every_pattern_re_compiles_as_re_does(pieces: list[str], subject: str) -> None:
    pattern = "".join(pieces)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            expected = re.compile(pattern)
        except re.error:
            return
    found = regex.compile(as_re_reads(pattern), regex.VERSION0).search(subject, timeout=1)
    wanted = expected.search(subject)
    assert (found is None) == (wanted is None), (pattern, subject)
    if found is not None and wanted is not None:
        assert found.span() == wanted.span(), (pattern, subject)


def test_a_budget_spent_refuses_the_next_match_at_once() -> None:
    budget = PatternBudget(5)
    search = regex.compile(r"(a|a)+\Z").search
    with pytest.raises(PatternTimeout):
        budget.search(search, "(a|a)+$", CRAFTED)
    started = time.monotonic()
    with pytest.raises(PatternTimeout):
        budget.search(search, "(a|a)+$", "aaa")
    assert time.monotonic() - started < 0.005
    budget.start()
    assert budget.search(search, "(a|a)+$", "aaa") is not None


def test_the_bound_is_a_limits_key_within_its_range() -> None:
    assert GatewayConfig.model_validate({}).limits.max_pattern_ms == 50
    assert GatewayConfig.model_validate({"limits": {"max_pattern_ms": 200}}).limits.max_pattern_ms == 200
    for wrong in (0, 2001):
        with pytest.raises(ValidationError, match="max_pattern_ms"):
            GatewayConfig.model_validate({"limits": {"max_pattern_ms": wrong}})
    with pytest.raises(ValueError, match="max_pattern_ms"):
        SchemaCache(max_pattern_ms=0)


def test_a_stall_of_the_process_while_matching_is_not_counted_as_work() -> None:
    # `regex` times out by the clock; a process that waits for the CPU has done no work meanwhile.
    budget = PatternBudget(50)
    stalls = iter([True])

    def stalled_search(subject: str, timeout: float) -> str:
        if next(stalls, False):
            time.sleep(0.08)  # longer than the whole budget, without working
            raise TimeoutError("regex timed out")
        return subject

    assert budget.search(stalled_search, "^x-", "x-site") == "x-site"
    time.sleep(0.06)
    assert budget.search(lambda subject, timeout: subject, "^x-", "x-line") == "x-line"
    # Work is counted: a budget spent on matching refuses.
    budget.start()
    with pytest.raises(PatternTimeout):
        budget.search(regex.compile(r"(a|a)+\Z").search, "(a|a)+$", CRAFTED)
