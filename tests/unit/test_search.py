"""Ranking tools by words (gateway/core/groups/search.py) and the built-in `search` and `guidance`
answers over a catalog (gateway/core/groups/builtin_tools.py, guidance.py), with the pump's real tool list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.groups import builtin_tools as bridge_tools
from gateway.core.groups.search import Candidate, query_words, rank, words
from gateway.core.groups.views import CatalogTool, CatalogView, GroupSpec, GroupView

PUMP_TOOLS: list[dict[str, Any]] = orjson.loads(
    (Path(__file__).resolve().parents[2] / "device" / "schemas" / "pump-1.json").read_bytes()
)
LAB_TOOLS: list[dict[str, Any]] = [
    {"name": "add", "description": "Add two integers.", "inputSchema": {"type": "object"}},
    {"name": "read_temperature", "description": "Read the bath temperature in degrees Celsius."},
    {"name": "getSpeedLimit", "description": "The fastest a stirrer may turn."},
]
BASE = "http://gw.plant.lan:3000"


def candidates() -> list[Candidate]:
    found = [Candidate(slot, t["name"], t["description"]) for slot in ("pump-2", "pump-1") for t in PUMP_TOOLS]
    return found + [Candidate("lab-1", t["name"], t["description"]) for t in LAB_TOOLS]


def names(query: str, limit: int = 50) -> list[str]:
    return [f"{m.candidate.slot}/{m.candidate.tool}" for m in rank(query, candidates(), limit)[0]]


# -- words ---------------------------------------------------------------------------------------


def test_words_split_snake_kebab_camel_and_punctuation() -> None:
    assert words("set_speed") == ["set", "speed"]
    assert words("getSpeedLimit") == ["get", "speed", "limit"]
    assert words("pump-1") == ["pump", "1"]
    assert words("Flow (L/min), pressure!") == ["flow", "l", "min", "pressure"]


def test_words_are_unicode_letters_and_digits_casefolded() -> None:
    assert words("Lüfter drehen") == ["lüfter", "drehen"]
    assert words("Straße") == ["strasse"]
    assert words("\uff30\uff35\uff2d\uff30\uff12") == ["pump2"]  # fullwidth forms read as plain letters


def test_runs_of_scripts_without_spaces_give_overlapping_two_character_words() -> None:
    assert words("设置音量") == ["设置", "置音", "音量"]
    assert words("小智-客厅") == ["小智", "客厅"]
    assert words("灯") == ["灯"]
    assert words("スピーカーの音量") == ["スピ", "ピー", "ーカ", "カー", "ーの", "の音", "音量"]
    assert words("볼륨 설정") == ["볼륨", "설정"]
    assert words("设置volume为50") == ["设置", "volume", "为", "50"]


def test_query_drops_stop_words_unless_nothing_else_is_left() -> None:
    assert query_words("set the speed of the pump") == ["set", "speed", "pump"]
    assert query_words("the") == ["the"]
    assert query_words("speed SPEED Speed") == ["speed"]


# -- ranking -------------------------------------------------------------------------------------


def test_speed_finds_set_speed_first() -> None:
    found = names("speed")
    assert found[:2] == ["pump-1/set_speed", "pump-2/set_speed"]  # equal scores: slot order
    # Then the tool with "speed" in its (camelCase) name, then those that only mention it.
    assert found[2] == "lab-1/getSpeedLimit"
    assert set(found[3:]) >= {"pump-1/start", "pump-1/get_status"}


def test_a_name_match_outranks_any_number_of_description_matches() -> None:
    matches, _ = rank("status", candidates(), 10)
    assert matches[0].candidate.tool == "get_status"
    assert all(m.candidate.tool == "get_status" for m in matches[:2])
    assert matches[0].score > matches[2].score


def test_prefixes_and_fragments_match_but_score_less_than_words() -> None:
    by_prefix = rank("temp", candidates(), 5)[0]
    assert by_prefix[0].candidate.tool == "read_temperature"
    whole = rank("temperature", candidates(), 5)[0][0]
    assert whole.candidate.tool == "read_temperature"
    assert whole.score > by_prefix[0].score
    # A longer word than the name's ("speeds") still finds it.
    assert names("speeds")[0] == "pump-1/set_speed"


def test_more_matching_words_rank_higher() -> None:
    assert names("read temperature")[0] == "lab-1/read_temperature"
    assert names("reset fault")[0] == "pump-1/reset_fault"


def test_the_slot_name_counts_a_little() -> None:
    found = names("pump start")
    assert found[:2] == ["pump-1/start", "pump-2/start"]
    assert "lab-1/add" not in found  # lab-1 is not a pump and add never mentions starting


XIAOZHI = [
    Candidate("小智-客厅", "self.audio_speaker.set_volume", "设置音量。音量范围是0到100。"),
    Candidate("小智-客厅", "self.light.set_brightness", "设置灯光亮度。"),
    Candidate("fan", "set_speed", "Stellt die Drehzahl des Lüfters ein."),
]


def test_chinese_and_other_non_ascii_words_are_found() -> None:
    def found(query: str) -> list[str]:
        return [m.candidate.tool for m in rank(query, XIAOZHI, 10)[0]]

    assert found("音量") == ["self.audio_speaker.set_volume"]
    assert found("设置音量") == ["self.audio_speaker.set_volume", "self.light.set_brightness"]
    assert found("灯") == ["self.light.set_brightness"]  # one character: any word holding it
    assert found("亮度") == ["self.light.set_brightness"]
    assert found("Lüfters") == ["set_speed"]
    assert found("客厅") == ["self.audio_speaker.set_volume", "self.light.set_brightness"]  # the slot's word


def test_a_longer_chinese_match_scores_more() -> None:
    volume, light = rank("设置音量", XIAOZHI, 10)[0]
    assert volume.score > light.score  # three two-character words against one ("设置")


def test_nothing_matching_gives_nothing() -> None:
    assert rank("xylophone", candidates(), 10) == ([], 0)
    assert rank("   ", candidates(), 10) == ([], 0)


def test_limit_cuts_the_list_but_the_total_counts_every_match() -> None:
    matches, total = rank("speed", candidates(), 2)
    assert len(matches) == 2
    assert total > 2


def test_ranking_is_deterministic_whatever_the_input_order() -> None:
    forward = [(m.candidate, m.score) for m in rank("rpm speed", candidates(), 50)[0]]
    backward = [(m.candidate, m.score) for m in rank("rpm speed", list(reversed(candidates())), 50)[0]]
    assert forward == backward


def test_equal_scores_put_tools_callable_here_first() -> None:
    here = [Candidate("b", "stop", "", here=True), Candidate("a", "stop", "", here=False)]
    assert [m.candidate.slot for m in rank("stop", here, 5)[0]] == ["b", "a"]


# -- the search and guidance tools over a catalog ---------------------------------------------------

PUMPS = GroupSpec("pumps", ("pump-*",), (), True, "Run the circulation pumps")
READERS = GroupSpec("readers", ("*",), ("get_", "read"), False, "Read-only tools")


def catalog_tool(slot: str, tool: dict[str, Any], enabled: bool) -> CatalogTool:
    groups = tuple(g.name for g in (PUMPS, READERS) if g.has_slot(slot) and g.has_tool(tool["name"]))
    in_enabled = tuple(g for g in groups if g == "pumps") if enabled else ()
    name = f"{slot}__{tool['name']}" if in_enabled else None
    return CatalogTool(slot, tool, groups, in_enabled, name, {**tool, "name": name} if name else None)


def view(endpoint_group: str | None = None, slots: tuple[str, ...] = ("lab-1", "pump-1", "pump-2")) -> CatalogView:
    tools = [
        catalog_tool(slot, tool, enabled=True)
        for slot in slots
        for tool in (LAB_TOOLS if slot.startswith("lab") else PUMP_TOOLS)
    ]
    groups = [
        GroupView(spec, [s for s in slots if spec.has_slot(s)], [t for t in tools if spec.name in t.groups])
        for spec in (PUMPS, READERS)
    ]
    return CatalogView(BASE, "__", endpoint_group, groups, tools, list(slots))


def search(arguments: Any, at: CatalogView) -> dict[str, Any]:
    result = bridge_tools.call("search", arguments, at)
    assert not result["isError"], result
    assert orjson.loads(result["content"][0]["text"]) == result["structuredContent"]
    found: dict[str, Any] = result["structuredContent"]
    return found


def test_search_gives_the_name_to_call_and_where() -> None:
    found = search({"query": "speed", "limit": 3}, view())
    first, _, third = found["results"]
    assert first == {
        "name": "pump-1__set_speed",
        "endpoint": f"{BASE}/mcp",
        "callable_here": True,
        "slot": "pump-1",
        "tool": "set_speed",
        "groups": ["pumps"],
        "description": first["description"],
        "score": first["score"],
    }
    assert first["description"].startswith("Change the speed of a running pump")
    # lab-1 is in no enabled group: its own tool name, on its own endpoint.
    assert (third["name"], third["endpoint"], third["callable_here"]) == (
        "getSpeedLimit",
        f"{BASE}/lab-1/mcp",
        False,
    )
    assert found["words"] == ["speed"]
    assert found["matches"] > 3


def test_search_on_a_group_endpoint_still_covers_every_slot() -> None:
    found = search({"query": "temperature"}, view("pumps"))
    lab = next(r for r in found["results"] if r["slot"] == "lab-1")
    assert lab["endpoint"] == f"{BASE}/lab-1/mcp"
    pump = next(r for r in found["results"] if r["slot"] == "pump-1")
    assert pump["endpoint"] == f"{BASE}/mcp/pumps" and pump["callable_here"]


def test_search_shows_only_what_the_view_holds() -> None:
    # The view of a caller who may not call lab-1 has no lab-1 tools: search cannot reveal them.
    found = search({"query": "temperature stirrer integers"}, view(slots=("pump-1",)))
    assert {r["slot"] for r in found["results"]} == {"pump-1"}


def test_search_cuts_long_descriptions() -> None:
    found = search({"query": "reset_fault"}, view())
    assert len(found["results"][0]["description"]) <= bridge_tools.MAX_DESCRIPTION_CHARS
    assert found["results"][0]["description"].endswith("…")


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({}, 'search needs "query"'),
        ({"query": "  "}, 'search needs "query"'),
        ({"query": 5}, 'search needs "query"'),
        ({"query": "x", "limit": 0}, '"limit" must be an integer from 1 to 50'),
        ({"query": "x", "limit": True}, '"limit" must be an integer from 1 to 50'),
        ({"query": "x" * 501}, "use at most 500"),
        ({"query": "x", "sort": "name"}, "unexpected argument(s) sort; allowed: limit, query"),
        ([1], '"arguments" must be an object'),
    ],
)
def test_bad_search_arguments_are_tool_errors_that_say_what_to_pass(arguments: Any, complaint: str) -> None:
    result = bridge_tools.call("search", arguments, view())
    assert result["isError"] is True
    assert complaint in result["content"][0]["text"]


def test_no_match_says_what_to_try() -> None:
    result = bridge_tools.call("search", {"query": "xylophone"}, view())
    assert not result["isError"]
    assert result["structuredContent"]["results"] == []
    assert "No tool matched" in result["content"][1]["text"]


def guidance(arguments: Any, at: CatalogView) -> str:
    result = bridge_tools.call("guidance", arguments, at)
    assert not result["isError"], result
    text: str = result["content"][0]["text"]
    return text


def test_guidance_on_a_tool_explains_arguments_and_use() -> None:
    text = guidance({"topic": "pump-1__set_speed"}, view())
    assert text.startswith("# `pump-1__set_speed`")
    assert "Call it here as `pump-1__set_speed`." in text
    assert "- `speed_rpm` (integer, required, 300 to 2900): New target speed in revolutions per minute" in text
    assert "## The same tool on other slots" in text and "`pump-2__set_speed`" in text
    # The original bridge's form, and a tool's own name, reach the same page.
    assert guidance({"topic": "tool", "tool_name": "pump-1__set_speed"}, view()) == text
    assert guidance({"topic": "set_speed"}, view()) == text


def test_guidance_on_a_group_describes_identical_tools_once() -> None:
    text = guidance({"topic": "pumps"}, view())
    assert text.startswith("# Group `pumps`\n\nRun the circulation pumps")
    assert text.count("**set_speed** on pump-1, pump-2") == 1
    assert "`pump-1__set_speed`, `pump-2__set_speed`" in text


def test_guidance_on_a_disabled_group_says_how_to_enable_it() -> None:
    text = guidance({"topic": "readers"}, view())
    assert (
        "enabled = true under [groups.readers], then `mcp-gateway reload`; or MCP_GROUP_READERS=true in the "
        "gateway's environment, then a restart"
    ) in text
    assert "`read_temperature` at /lab-1/mcp" in text


def test_unknown_topics_are_tool_errors_with_suggestions() -> None:
    result = bridge_tools.call("guidance", {"topic": "speed"}, view())
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text.startswith("Unknown guidance topic 'speed'. Topics: overview, groups, a group name (pumps, readers)")
    assert "`pump-1__set_speed`" in text


def test_guidance_never_names_a_tool_outside_the_view() -> None:
    hidden = view(slots=("pump-1",))
    for topic in ("overview", "groups", "pumps", "readers"):
        assert "lab-1" not in guidance({"topic": topic}, hidden)
    assert bridge_tools.call("guidance", {"topic": "read_temperature"}, hidden)["isError"] is True
