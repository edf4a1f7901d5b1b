"""Pages of the built-in `guidance` tool (gateway/core/groups/guidance.py) over a catalog with slots
partly in a group, tools of one name on several slots, and disabled groups: what the page tells an
agent must be what the catalog holds."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.groups import guidance as guidance_pages
from gateway.core.groups.views import CatalogTool, CatalogView, GroupSpec, GroupView
from tests.unit.test_search import BASE, LAB_TOOLS, PUMP_TOOLS, guidance

PUMPS = GroupSpec("pumps", ("pump-*",), (), True, "Run the circulation pumps")
READERS = GroupSpec("readers", ("*",), ("get_", "read"), True, "Read-only status of every device")
MAINTENANCE = GroupSpec("maintenance", ("pump-*",), ("reset_",), False, "Clear latched faults")
BOILER_TOOLS: list[dict[str, Any]] = [
    {"name": "get_status", "description": "Read the boiler's water temperature and burner state."},
    {"name": "set_target", "description": "Set the water temperature the burner holds."},
]


def catalog(
    specs: tuple[GroupSpec, ...] = (PUMPS, READERS, MAINTENANCE),
    endpoint_group: str | None = None,
    slots: tuple[str, ...] = ("boiler-1", "lab-1", "pump-1", "pump-2"),
) -> CatalogView:
    """The view a catalog builds: each tool's groups from the specs, named <slot>__<tool> when an enabled one has it."""
    tools: list[CatalogTool] = []
    for slot in slots:
        own = BOILER_TOOLS if slot.startswith("boiler") else LAB_TOOLS if slot.startswith("lab") else PUMP_TOOLS
        for tool in own:
            groups = tuple(spec.name for spec in specs if spec.has_slot(slot) and spec.has_tool(tool["name"]))
            enabled = tuple(spec.name for spec in specs if spec.enabled and spec.name in groups)
            name = f"{slot}__{tool['name']}" if enabled else None
            tools.append(CatalogTool(slot, tool, groups, enabled, name, {**tool, "name": name} if name else None))
    views = [
        GroupView(spec, [s for s in slots if spec.has_slot(s)], [t for t in tools if spec.name in t.groups])
        for spec in specs
    ]
    return CatalogView(BASE, "__", endpoint_group, views, tools, list(slots))


def section(page: str, title: str) -> str:
    """The text of one `## title` section of a page ("" when the page has none)."""
    head = f"## {title}\n"
    if head not in page:
        return ""
    return page.split(head, 1)[1].split("\n## ", 1)[0]


# -- slots partly in a group -----------------------------------------------------------------------


def test_overview_names_only_slots_none_of_whose_tools_is_listed_as_in_no_group() -> None:
    # readers lists boiler-1's get_status and lab-1's read_temperature: neither slot is "in no enabled group".
    page = guidance({"topic": "overview"}, catalog())
    assert "boiler-1__get_status" in page and "lab-1__read_temperature" in page
    assert section(page, "Slots in no enabled group") == ""
    partly = section(page, "Slots with some tools outside every enabled group")
    assert f"- `boiler-1`: 1 of 2 tools outside, at {BASE}/boiler-1/mcp" in partly
    assert f"- `lab-1`: 2 of 3 tools outside, at {BASE}/lab-1/mcp" in partly
    assert "pump-" not in partly  # every pump tool is in pumps


def test_overview_keeps_slots_with_no_listed_tool_in_no_group() -> None:
    page = guidance({"topic": "overview"}, catalog(specs=(PUMPS, MAINTENANCE)))
    nowhere = section(page, "Slots in no enabled group")
    assert "Their tools are not listed here" in nowhere
    assert f"- `boiler-1`: {BASE}/boiler-1/mcp" in nowhere and f"- `lab-1`: {BASE}/lab-1/mcp" in nowhere
    assert section(page, "Slots with some tools outside every enabled group") == ""


# -- one own name, several slots ---------------------------------------------------------------------


def test_a_tool_name_several_different_tools_have_lists_them_all() -> None:
    page = guidance({"topic": "get_status"}, catalog())
    assert page.startswith("# `get_status`: several different tools")
    lines = [line for line in page.splitlines() if line.startswith("- on ")]
    assert lines == [
        "- on boiler-1: Read the boiler's water temperature and burner state. Call as `boiler-1__get_status`.",
        "- on pump-1, pump-2: Read the pump's state and measurements without changing anything. "
        "Call as `pump-1__get_status`, `pump-2__get_status`.",
    ]


def test_the_disambiguation_says_where_a_tool_not_served_here_is_called() -> None:
    page = guidance({"topic": "get_status"}, catalog(specs=(PUMPS,), endpoint_group="pumps"))
    assert f"Call as `get_status` at {BASE}/boiler-1/mcp." in page
    assert "Call as `pump-1__get_status`, `pump-2__get_status`." in page


def test_a_tool_name_of_one_tool_on_many_slots_keeps_the_tool_page() -> None:
    page = guidance({"topic": "set_speed"}, catalog())
    assert page.startswith("# `pump-1__set_speed`")
    assert page == guidance({"topic": "pump-1__set_speed"}, catalog())
    # A full name is one tool, even when others share its own name.
    assert guidance({"topic": "boiler-1__get_status"}, catalog()).startswith("# `boiler-1__get_status`")


# -- how a disabled group is turned on ----------------------------------------------------------------


def test_a_group_disabled_in_the_file_is_enabled_by_a_reload() -> None:
    view = catalog()
    expected = (
        "disabled (enabled = true under [groups.maintenance], then `mcp-gateway reload`; or "
        "MCP_GROUP_MAINTENANCE=true in the gateway's environment, then a restart)"
    )
    assert expected in guidance({"topic": "groups"}, view)
    assert expected in guidance({"topic": "maintenance"}, view)
    overview = guidance({"topic": "overview"}, view)
    assert "enabled = true under [groups.<name>] and `mcp-gateway reload` (no restart)" in overview
    assert "MCP_GROUP_<NAME>=true in the gateway's environment and a restart" in overview
    assert "restarts the gateway" not in overview


def test_a_group_disabled_by_its_variable_needs_the_variable_changed_and_a_restart() -> None:
    off = GroupSpec("maintenance", ("pump-*",), ("reset_",), False, "", "environment variable MCP_GROUP_MAINTENANCE")
    page = guidance({"topic": "groups"}, catalog(specs=(PUMPS, off)))
    assert (
        "disabled (by environment variable MCP_GROUP_MAINTENANCE: unset it or set it to true, then restart the gateway)"
    ) in page


def test_a_group_page_too_long_to_list_points_to_search_and_tools_list_not_to_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guidance_pages, "MAX_GROUP_LISTED", 2)
    page = guidance({"topic": "pumps"}, catalog())
    more = [line for line in page.splitlines() if line.startswith("- … and ")]
    assert more == [
        f"- … and 3 more: use `search` with words of what you need, or tools/list at {BASE}/mcp/pumps for every name."
    ]
    assert "guidance` with a group name" not in page
