"""Tool groups (gateway/core/groups/catalog.py, config [groups]): membership, prefixes, `<slot>__<tool>` names,
MCP_GROUP_<NAME> toggles, and which paths belong to the bridge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, group_env_name, load_config
from gateway.core.broker.diagnose import diagnose
from gateway.core.broker.problems import GatewayView, GroupCheck, Problem, SlotView
from gateway.core.groups.views import GroupSpec, is_bridge_path, specs_from_config
from gateway.core.naming import MAX_NAME, NameBook, base_name

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

CONFIG = """
[groups.pumps]
slots = ["pump-*"]
description = "Run the pumps"

[groups.readers]
slots = ["pump-*", "tank-1"]
tools = ["get_", "read"]

[groups.lab-bench]
enabled = false
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def spec(slots: tuple[str, ...] = ("*",), prefixes: tuple[str, ...] = (), name: str = "g") -> GroupSpec:
    return GroupSpec(name, slots, prefixes, True, "")


# -- membership and prefixes ---------------------------------------------------------------------


def test_slot_patterns_are_fnmatch_and_case_sensitive() -> None:
    group = spec(("pump-*", "tank-1"))
    assert group.has_slot("pump-1")
    assert group.has_slot("pump-12")
    assert group.has_slot("tank-1")
    assert not group.has_slot("tank-2")
    assert not group.has_slot("Pump-1")
    assert not group.has_slot("xpump-1")


def test_tool_prefixes_filter_and_none_means_every_tool() -> None:
    readers = spec(prefixes=("get_", "read"))
    assert readers.has_tool("get_status")
    assert readers.has_tool("read_pressure")
    assert readers.has_tool("readout")  # a prefix, not a word
    assert not readers.has_tool("set_speed")
    assert not readers.has_tool("forget_status")
    assert spec().has_tool("anything")


def test_groups_load_in_file_order_with_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, CONFIG), environ={})
    specs = specs_from_config(config)
    assert [s.name for s in specs] == ["pumps", "readers", "lab-bench"]
    pumps, readers, lab = specs
    assert pumps.slot_patterns == ("pump-*",)
    assert pumps.prefixes == ()
    assert pumps.enabled and pumps.description == "Run the pumps"
    assert readers.prefixes == ("get_", "read")
    assert lab.slot_patterns == ("*",)  # no slots: every slot
    assert not lab.enabled
    assert lab.toggle == "MCP_GROUP_LAB_BENCH"
    assert config.groups_separator == "__"


# -- names ---------------------------------------------------------------------------------------


def test_names_are_slot_double_underscore_tool() -> None:
    book = NameBook("__")
    names = book.names_for([("pump-1", "set_speed"), ("pump-2", "set_speed")])
    assert names == {"pump-1__set_speed": ("pump-1", "set_speed"), "pump-2__set_speed": ("pump-2", "set_speed")}


def test_colliding_names_go_to_the_slot_whose_namespace_they_lie_in() -> None:
    # "a__b" + "c" and "a" + "b__c" both read a__b__c: it is <slot>__<tool> of slot a__b, whichever comes first.
    names = NameBook("__").names_for([("a", "b__c"), ("a__b", "c")])
    assert names == {"a__b__c-2": ("a", "b__c"), "a__b__c": ("a__b", "c")}


def test_colliding_names_of_slots_written_alike_go_to_the_one_written_unchanged() -> None:
    # "a.b" and "a_b" read alike: a_b's own name is the rule's, so it owns the name though seen second.
    names = NameBook("__").names_for([("a.b", "c"), ("a_b", "c")])
    assert names == {"a_b__c": ("a_b", "c"), "a_b__c-2": ("a.b", "c")}


def test_a_group_name_held_by_a_shorter_slot_goes_to_the_slot_it_names() -> None:
    book = NameBook("__")
    assert book.names_for([("a", "b__c")]) == {"a__b__c": ("a", "b__c")}
    # Slot a__b joins with tool c: the README's name a__b__c must reach a__b, not slot a.
    assert book.names_for([("a", "b__c"), ("a__b", "c")]) == {"a__b__c-2": ("a", "b__c"), "a__b__c": ("a__b", "c")}


def test_long_names_are_cut_to_64_with_a_hash_and_stay_unique() -> None:
    slot = "s" * 60
    names = NameBook("__").names_for([(slot, "tool_one"), (slot, "tool_two")])
    assert len(names) == 2
    for name in names:
        assert SAFE_NAME.match(name) and len(name) == MAX_NAME
    assert base_name(slot, "tool_one", "__") != base_name(slot, "tool_two", "__")


def test_a_name_keeps_its_meaning_after_its_slot_left() -> None:
    book = NameBook("__")
    book.names_for([("a__b", "c")])
    book.names_for([])  # the slot left
    assert book.names_for([("a", "b__c")]) == {"a__b__c-2": ("a", "b__c")}


def test_built_in_tool_names_can_never_be_a_bridge_name() -> None:
    # Every separator allowed is made of _ and -; guidance and search contain neither.
    for separator in ("_", "__", "-", "-_-", "____"):
        GatewayConfig.model_validate({"groups_separator": separator})
        assert separator not in "guidance" and separator not in "search"


@pytest.mark.parametrize("separator", ["", ".", "::", "x", "_____", "__ "])
def test_other_separators_are_refused(separator: str) -> None:
    with pytest.raises(ValueError, match="use 1 to 4 of the characters _ and -"):
        GatewayConfig.model_validate({"groups_separator": separator})


def test_a_bad_separator_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable MCP_GATEWAY_GROUPS_SEPARATOR: setting 'groups_sep"):
        load_config(environ={"MCP_GATEWAY_GROUPS_SEPARATOR": "::"})


# -- group names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mcp", "sse", "messages", "overview", "groups", "tool"])
def test_reserved_group_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"group '{name}': reserved"):
        load_config(write(tmp_path, f"[groups.{name}]\n"), environ={})


@pytest.mark.parametrize("name", ["-pumps", "pump s", "pumps/1", "ü", "x" * 65])
def test_group_names_must_fit_a_path_segment(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="a group name is 1 to 64 letters"):
        load_config(write(tmp_path, f'[groups."{name}"]\n'), environ={})


def test_groups_sharing_a_toggle_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'line-a' and 'line_a' would share the toggle MCP_GROUP_LINE_A"):
        load_config(write(tmp_path, "[groups.line-a]\n[groups.line_a]\n"), environ={})


def test_unknown_group_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown setting 'groups.pumps.prefixes'")):
        load_config(write(tmp_path, '[groups.pumps]\nprefixes = ["get_"]\n'), environ={})


# -- MCP_GROUP_<NAME> toggles ------------------------------------------------------------------------


def test_environment_turns_groups_on_and_off(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, CONFIG),
        environ={"MCP_GROUP_PUMPS": "false", "MCP_GROUP_LAB_BENCH": "TRUE"},
    )
    assert not config.groups["pumps"].enabled
    assert config.groups["pumps"].enabled_by == "environment variable MCP_GROUP_PUMPS"
    assert config.groups["lab-bench"].enabled
    assert config.groups["readers"].enabled and config.groups["readers"].enabled_by == "config"
    assert [(s.name, s.enabled) for s in specs_from_config(config)] == [
        ("pumps", False),
        ("readers", True),
        ("lab-bench", True),
    ]


def test_toggle_names_upper_case_the_group_and_turn_dashes_into_underscores() -> None:
    assert group_env_name("lab-bench") == "MCP_GROUP_LAB_BENCH"
    assert group_env_name("Pumps2") == "MCP_GROUP_PUMPS2"


@pytest.mark.parametrize("value", ["yes", "1", "", "on", "tru"])
def test_a_toggle_that_is_not_true_or_false_stops_startup(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"environment variable MCP_GROUP_PUMPS: .* is not true or false"):
        load_config(write(tmp_path, CONFIG), environ={"MCP_GROUP_PUMPS": value})


def test_a_toggle_naming_no_group_stops_startup_and_lists_the_real_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, CONFIG), environ={"MCP_GROUP_PUMSP": "true"})
    message = str(caught.value)
    assert message.startswith("environment variable MCP_GROUP_PUMSP: no such group")
    assert "MCP_GROUP_LAB_BENCH, MCP_GROUP_PUMPS, MCP_GROUP_READERS" in message


def test_a_toggle_without_any_group_configured_is_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("no [groups.<name>] is configured")):
        load_config(environ={"MCP_GROUP_BROWSER": "true"})


def test_gateway_variables_do_not_reach_group_toggles(tmp_path: Path) -> None:
    # MCP_GATEWAY_* is another prefix: its loader refuses unknown names on its own.
    with pytest.raises(ConfigError, match="MCP_GATEWAY_GROUPS__PUMPS__ENABLED"):
        load_config(write(tmp_path, CONFIG), environ={"MCP_GATEWAY_GROUPS__PUMPS__ENABLED": "false"})


# -- which paths are the bridge's --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "bridge"),
    [
        ("/mcp", True),
        ("/mcp/pumps", True),
        ("/%6Dcp", True),  # the router decodes it to /mcp, so authentication must too
        ("/mcp/a%2Fb", True),
        ("/groups", True),
        ("/%67roups", True),
        ("/mcp-servers", True),
        ("/mcp/mcp", False),  # a slot named "mcp"
        ("/mcp/sse", False),
        ("/mcp/messages", False),
        ("/mcp/", False),
        ("/mcp/pumps/x", False),
        ("/pump-1/mcp", False),
        ("/_all/mcp", False),
        ("/groups/x", False),
    ],
)
def test_bridge_paths(path: str, bridge: bool) -> None:
    assert is_bridge_path(path) is bridge


# -- broker_diagnose on groups that serve nothing -------------------------------------------------------


def diagnosis(*groups: GroupCheck, ready: tuple[str, ...] = ("pump-1", "tank-1")) -> list[Problem]:
    slots = tuple(SlotView(name=name, connected=True, state="ready", connects=1) for name in ready)
    view = GatewayView(
        url="http://127.0.0.1:3000", host="127.0.0.1", is_loopback=True, insecure_lan=False, slots=slots, groups=groups
    )
    return [problem for problem in diagnose(view) if problem.id.startswith("group.")]


def test_a_group_whose_patterns_match_no_ready_slot_is_reported() -> None:
    (problem,) = diagnosis(GroupCheck("pumps", ("pmup-*",), (), (), 0))
    assert (problem.id, problem.severity) == ("group.no_members", "info")
    assert problem.evidence == "its slot patterns pmup-* match none of the 2 ready slots (pump-1, tank-1)"
    assert "[groups.pumps]" in problem.fix


def test_a_group_whose_prefixes_match_no_tool_is_a_warning() -> None:
    (problem,) = diagnosis(GroupCheck("readers", ("*",), ("Get_",), ("pump-1", "tank-1"), 0))
    assert (problem.id, problem.severity) == ("group.no_tools", "warning")
    assert problem.evidence == "no tool of pump-1, tank-1 starts with one of its prefixes Get_"


def test_groups_are_not_judged_before_any_provider_is_ready() -> None:
    assert diagnosis(GroupCheck("pumps", ("pump-*",), (), (), 0), ready=()) == []
    assert diagnosis(GroupCheck("pumps", ("pump-*",), (), ("pump-1",), 5)) == []
