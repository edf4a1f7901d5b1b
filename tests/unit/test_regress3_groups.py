"""`search` and stop words, and `guidance` asked for a tool named like a topic (docs/groups.md): a stop word
that is a word of a tool's name counts only for a tool the query's other words found or whose exact name
the query is; the whole-name bonus holds with or without the stop words typed around the name; the tool
form of guidance on a group or built-in topic says there is no such tool and how to ask for the topic."""

from __future__ import annotations

import pytest

from gateway.core.groups import builtin_tools
from gateway.core.groups.search import Candidate, rank
from tests.unit.test_search import view

PUMP = [
    ("start", "Start the motor and ramp it to speed_rpm."),
    ("stop", "Stop the motor."),
    ("get_status", "State, speed, flow, pressure and motor temperature."),
    ("is_running", "True while the motor turns."),
    ("do_self_test", "Run the built-in self test (takes 30 s)."),
    ("go_to_home", "Move the valve to its home position."),
    ("set_speed", "Change the speed of a running pump."),
]
LAMP = [
    ("switch_off", "Switch the lamp off."),
    ("switch_on", "Switch the lamp on."),
    ("get_state", "Read whether the lamp is on."),
]


def scores(query: str, tools: list[tuple[str, str]] = PUMP, slot: str = "pump-1") -> dict[str, int]:
    matches, _ = rank(query, [Candidate(slot, name, text) for name, text in tools], 10)
    return {match.candidate.tool: match.score for match in matches}


def test_a_stop_word_in_a_name_adds_nothing_to_a_tool_no_other_word_found() -> None:
    # "do" of do_self_test and "is" of is_running: the tools match nothing the agent asked about.
    found = scores("how do I start the pump")
    assert next(iter(found)) == "start"
    assert found["do_self_test"] == 2  # the slot's "pump" only
    assert found["do_self_test"] < found["set_speed"]
    assert scores("what is the status") == {"get_status": 10}


def test_the_whole_name_bonus_counts_without_the_stop_words_around_it() -> None:
    # stop (10), "Stop the motor." (+1), the query read without stop words is the name stop (5).
    assert scores("can you stop it") == {"stop": 16}
    assert scores("can you stop it") == scores("stop")


def test_a_stop_word_still_counts_where_the_other_words_or_the_exact_name_found_the_tool() -> None:
    assert scores("is it running")["is_running"] == 20  # running (10), is (10)
    assert scores("do self test")["do_self_test"] > 30
    for query in ("switch on", "switch_on"):
        found = scores(query, LAMP, "lamp")
        assert next(iter(found)) == "switch_on"
        assert found["switch_on"] > found["switch_off"]


@pytest.mark.parametrize(("name", "kind"), [("overview", "a built-in topic"), ("pumps", "a group")])
def test_guidance_for_a_tool_named_like_a_topic_says_no_tool_and_how_to_ask_for_the_topic(name: str, kind: str) -> None:
    result = builtin_tools.call("guidance", {"topic": "tool", "tool_name": name}, view())
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text == f'No tool named {name!r}; `{name}` is {kind}: ask `guidance` with {{"topic": "{name}"}}.'
    assert "Unknown guidance topic" not in text
    # Asked as a topic, the same name gives its page.
    assert builtin_tools.call("guidance", {"topic": name}, view())["isError"] is False


def test_guidance_for_an_unknown_tool_says_no_tool_and_lists_the_topics() -> None:
    result = builtin_tools.call("guidance", {"topic": "tool", "tool_name": "nosuch"}, view())
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("No tool named 'nosuch'. Topics: overview, groups, a group name")
