"""Bounds and names of tool groups, `search` and `guidance` (gateway/core/groups/, gateway/config/groups.py):
the work one search costs, guidance's topic bound, stop words that are words of a tool's name, group names
checked whole, reserved names, a group named like a tool, and MCP_GROUP_* toggles across a reload."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.core.groups import builtin_tools
from gateway.core.groups.search import Candidate, query_words, rank
from gateway.core.groups.views import CatalogTool, CatalogView, GroupSpec, GroupView

BASE = "http://gw.plant.lan:3000"
CJK_500 = "".join(chr(0x4E00 + i) for i in range(500))
LATIN_500 = " ".join(f"q{i:02d}x" for i in range(100))[:500]


def catalog_tool(slot: str, tool: dict[str, Any], groups: tuple[str, ...] = ("all",)) -> CatalogTool:
    name = f"{slot}__{tool['name']}"
    return CatalogTool(slot, tool, groups, groups, name, {**tool, "name": name})


def big_view() -> CatalogView:
    """1000 tools of 1 KB descriptions each, as many providers could list them."""
    chooser = random.Random(7)
    vocabulary = ["".join(chooser.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(3000)]
    tools = []
    for number in range(1000):
        description = " ".join(chooser.choice(vocabulary) for _ in range(130))[:1024]
        tool = {"name": f"tool_{number}_{chooser.choice(vocabulary)}", "description": description}
        tools.append(catalog_tool(f"pump-{number % 10}", tool))
    return CatalogView(BASE, "__", None, [], tools, sorted({tool.slot for tool in tools}))


class TooMuchWork(Exception):
    pass


@contextmanager
def counted_calls(budget: int) -> Iterator[Callable[[], int]]:
    """Counts Python and C function calls while the block runs; past `budget` it stops the block."""
    calls = 0

    def profile(_frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1
            if calls > budget:
                sys.setprofile(None)
                raise TooMuchWork(f"more than {budget} calls")

    sys.setprofile(profile)
    try:
        yield lambda: calls
    finally:
        sys.setprofile(None)


# -- search: bounded work ------------------------------------------------------------------------


@pytest.mark.parametrize("query", [CJK_500, LATIN_500], ids=["cjk", "latin"])
def test_a_500_character_query_over_1000_tools_costs_a_bounded_number_of_calls(query: str) -> None:
    view = big_view()
    assert not builtin_tools.call("search", {"query": "pump"}, view)["isError"]  # the index is built once
    # The search splits the query once and looks each of its (at most 32) words up: a few thousand calls.
    # Scanning every description word for every query word takes hundreds of millions.
    with counted_calls(20_000) as calls:
        result = builtin_tools.call("search", {"query": query}, view)
    assert not result["isError"]
    assert calls() < 20_000
    assert len(result["structuredContent"]["words"]) == 32


def test_only_the_first_32_distinct_query_words_count() -> None:
    assert len(query_words(CJK_500)) == 32
    assert query_words(CJK_500)[:2] == [CJK_500[0:2], CJK_500[1:3]]
    assert len(query_words(LATIN_500)) == 32


# -- search: stop words that are words of a tool's name ------------------------------------------

LAMP = [
    Candidate("lamp", "switch_off", "Switch the lamp off."),
    Candidate("lamp", "switch_on", "Switch the lamp on."),
    Candidate("lamp", "get_state", "Read whether the lamp is on."),
]


@pytest.mark.parametrize("query", ["switch_on", "switch on", "lamp switch on", "turn the lamp on"])
def test_a_stop_word_that_is_a_word_of_a_tools_name_counts_there(query: str) -> None:
    matches, _ = rank(query, LAMP, 5)
    assert matches[0].candidate.tool == "switch_on"
    assert matches[0].score > matches[1].score


def test_the_exact_tool_name_gets_the_whole_name_bonus_with_its_stop_word() -> None:
    exact = rank("switch_on", LAMP, 1)[0][0]
    assert exact.candidate.tool == "switch_on"
    # switch (10, +1 in the description), on (10), the whole name (5).
    assert exact.score == 26
    assert rank("switch off", LAMP, 1)[0][0].candidate.tool == "switch_off"


def test_stop_words_still_add_nothing_outside_names() -> None:
    assert query_words("set the speed of the pump") == ["set", "speed", "pump"]
    # "the" is in every description but in no name: it changes no score.
    with_the = {m.candidate.tool: m.score for m in rank("the lamp", LAMP, 5)[0]}
    assert with_the == {m.candidate.tool: m.score for m in rank("lamp", LAMP, 5)[0]}


# -- guidance: the topic's bound -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [({"topic": "w" * 201}, "topic"), ({"topic": "tool", "tool_name": "w" * 2000}, "tool_name")],
)
def test_a_topic_over_200_characters_is_a_tool_error_naming_the_argument(
    arguments: dict[str, Any], argument: str
) -> None:
    view = big_view()
    with counted_calls(5_000):
        result = builtin_tools.call("guidance", arguments, view)
    assert result["isError"] is True
    length = len(arguments[argument])
    assert result["content"][0]["text"].startswith(
        f'guidance: "{argument}" is {length} characters; use at most {builtin_tools.MAX_TOPIC_CHARS}'
    )


def test_a_topic_of_200_characters_is_still_looked_up() -> None:
    result = builtin_tools.call("guidance", {"topic": "w" * 200}, big_view())
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Unknown guidance topic 'wwww")


# -- group names ---------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "gateway.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["pumps\n", "pumps\n\n", "\npumps"])
def test_a_group_name_with_a_newline_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="a group name is 1 to 64 letters, digits, _ or -"):
        load_config(write(tmp_path, f"[groups.{name!r}]\n".replace("'", '"')), environ={})


def test_a_separator_with_a_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="groups_separator"):
        GatewayConfig.model_validate({"groups_separator": "__\n"})


@pytest.mark.parametrize("name", ["guidance", "search"])
def test_the_built_in_tools_names_are_reserved(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"group '{name}': reserved"):
        load_config(write(tmp_path, f"[groups.{name}]\n"), environ={})


# -- a group named like a tool -------------------------------------------------------------------

STATUS = {"name": "get_status", "description": "Read the pump's state.", "inputSchema": {"type": "object"}}
RESET = {"name": "reset_fault", "description": "Clear a latched fault.", "inputSchema": {"type": "object"}}


def collision_view() -> CatalogView:
    spec = GroupSpec("get_status", ("*",), ("reset_",), True, "Clearing faults")
    tools = [catalog_tool("pump-1", STATUS, ()), catalog_tool("pump-1", RESET, ("get_status",))]
    return CatalogView(BASE, "__", None, [GroupView(spec, ["pump-1"], tools[1:])], tools, ["pump-1"])


def guidance(arguments: dict[str, Any], view: CatalogView) -> str:
    result = builtin_tools.call("guidance", arguments, view)
    assert not result["isError"], result
    text: str = result["content"][0]["text"]
    return text


def test_a_group_named_like_a_tool_has_the_page_and_names_the_tools_way() -> None:
    view = collision_view()
    group = guidance({"topic": "get_status"}, view)
    assert group.startswith("# Group `get_status`")
    assert group.endswith(
        '`get_status` is also the name of a tool: `guidance` with {"topic": "tool", "tool_name": "get_status"} '
        "explains that tool."
    )
    tool = guidance({"topic": "tool", "tool_name": "get_status"}, view)
    assert tool.startswith("# `pump-1__get_status`")
    assert tool.endswith('`get_status` is also a topic of its own: `guidance` with {"topic": "get_status"} gives it.')


def test_a_tool_named_like_a_built_in_topic_is_reached_by_the_tool_form() -> None:
    search_tool = {"name": "search", "description": "Search the plant's manuals.", "inputSchema": {"type": "object"}}
    view = CatalogView(BASE, "__", None, [], [catalog_tool("docs", search_tool)], ["docs"])
    built_in = guidance({"topic": "search"}, view)
    assert built_in.startswith("# `search` (built into this endpoint)")
    assert '{"topic": "tool", "tool_name": "search"}' in built_in
    tool = guidance({"topic": "tool", "tool_name": "search"}, view)
    assert tool.startswith("# `docs__search`")
    assert tool.endswith('`search` is also a topic of its own: `guidance` with {"topic": "search"} gives it.')


# -- MCP_GROUP_* across a reload -----------------------------------------------------------------

WITH_MAINT = '[groups.pumps]\nslots = ["pump-*"]\n[groups.maint]\nslots = ["pump-*"]\nenabled = false\n'
WITHOUT_MAINT = '[groups.pumps]\nslots = ["pump-*"]\n'


def test_a_reload_that_removes_a_toggled_group_warns_and_ignores_the_toggle(tmp_path: Path) -> None:
    environ = {"MCP_GROUP_MAINT": "true"}
    path = write(tmp_path, WITH_MAINT)
    assert load_config(path, environ=environ).groups["maint"].enabled  # the start

    path.write_text(WITHOUT_MAINT, encoding="utf-8")
    config = load_config(path, environ=environ, reloading=True)
    assert list(config.groups) == ["pumps"]
    assert (
        "environment variable MCP_GROUP_MAINT: no such group in the configuration loaded now; ignored "
        "(toggles of the configured groups: MCP_GROUP_PUMPS). A restart with it set fails: define the group "
        "again under [groups.<name>], or remove the variable"
    ) in config.warnings()

    # A start from that file still stops at it: the environment is checked whole when the gateway starts.
    with pytest.raises(ConfigError, match="environment variable MCP_GROUP_MAINT: no such group; toggles"):
        load_config(path, environ=environ)
