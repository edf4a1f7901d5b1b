"""The pages of the built-in `guidance` tool: Markdown for an agent, written from the live catalog.

Pure: a CatalogView in (what one caller may see at one endpoint), one page out. Topics: overview
(what is here, which group for which job, how names work), groups (every configured group and its
state), a group name (its tools and when to use each), a tool name (its description, arguments,
result and when to use it; for an own name that different tools of several slots share, each of them
with the names to call it by). Identical tools of several slots (ten pumps) are described once, with
every name they can be called by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gateway.core.jsonrpc import JsonObject

if TYPE_CHECKING:
    from gateway.core.groups.views import CatalogTool, CatalogView, GroupView

OVERVIEW = "overview"
GROUPS = "groups"
TOOL_TOPIC = "tool"
MAX_LISTED = 40
"""Overview lists at most this many distinct tools; more are found with search or a group's page."""
MAX_GROUP_LISTED = 200
"""A group's page lists at most this many distinct tools (the page stays readable for an agent)."""
MAX_SENTENCE = 240

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])|(?<=[\u3002\uff01\uff1f])")
"""A sentence ends at . ! ? followed by a space and a capital letter ("e.g. 'set speed'" does not end
one), or right after an ideographic full stop, exclamation or question mark (U+3002, U+FF01, U+FF1F: Chinese
and Japanese put no space after them)."""


def first_sentence(text: str) -> str:
    """The first sentence (or line) of a description, cut to a readable length."""
    text = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0].rstrip()
    if len(sentence) > MAX_SENTENCE:
        sentence = sentence[: MAX_SENTENCE - 1].rstrip() + "…"
    return sentence


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def code_list(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


# -- tools ---------------------------------------------------------------------------------------


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "one of " + ", ".join(repr(value) for value in schema["enum"][:12])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = " or ".join(str(k) for k in kind)
    if kind == "array":
        return f"array of {_type_of(schema.get('items'))}"
    if kind is None:
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return " or ".join(_type_of(option) for option in options[:4])
        return "any"
    return str(kind)


def _bounds(schema: JsonObject) -> list[str]:
    notes: list[str] = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        notes.append(f"{low} to {high}")
    elif low is not None:
        notes.append(f"at least {low}")
    elif high is not None:
        notes.append(f"at most {high}")
    if "default" in schema:
        notes.append(f"default {schema['default']!r}")
    return notes


def arguments_summary(schema: Any) -> list[str]:
    """One Markdown line per argument: name, type, required, bounds, description."""
    if not isinstance(schema, dict):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    lines = []
    for name, value in properties.items():
        prop: JsonObject = value if isinstance(value, dict) else {}
        notes = [_type_of(prop), "required" if name in required else "optional", *_bounds(prop)]
        description = prop.get("description")
        text = f": {first_sentence(description)}" if isinstance(description, str) and description.strip() else ""
        lines.append(f"- `{name}` ({', '.join(notes)}){text}")
    return lines


def short_arguments(schema: Any) -> str:
    """`speed_rpm` (required), `ramp` — or "no arguments"."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        return "no arguments"
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    return ", ".join(f"`{name}`" + (" (required)" if name in required else "") for name in schema["properties"])


def usage_hint(tool: JsonObject) -> str:
    """What the tool's annotations say about calling it (providers may omit them: then be careful)."""
    annotations = tool.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    if annotations.get("readOnlyHint") is True:
        return "It only reads: safe to call at any time, as often as needed."
    if annotations.get("destructiveHint") is True:
        return (
            "It changes the equipment's state and may not be undone: read the current state first, call it "
            "only when the user asked for this change, then read again to confirm."
        )
    if annotations.get("idempotentHint") is True:
        return "It changes state; repeating the same call has no further effect. Read the state after calling it."
    return (
        "Its provider does not mark it read-only: treat it as changing the device's state unless its "
        "description says it only reads; read the state before and after."
    )


def _result_summary(tool: JsonObject) -> str:
    schema = tool.get("outputSchema")
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict) and schema["properties"]:
        return "A structured result (structuredContent) with: " + code_list(schema["properties"]) + "."
    return "Content blocks (usually text); no output schema is declared."


def _siblings(tool: CatalogTool, view: CatalogView) -> list[CatalogTool]:
    """The same tool (same own name and description) on other slots the caller may use."""
    return [
        other
        for other in view.tools
        if other is not tool and other.original == tool.original and other.description == tool.description
    ]


def how_to_call(tool: CatalogTool, view: CatalogView) -> str:
    if view.callable_here(tool):
        return f"Call it here as `{tool.name}`."
    if tool.name is not None:
        return f"Call it as `{tool.name}` at {view.group_url(None)} (it is not in this group)."
    where = view.slot_url(tool.slot)
    return f"It is in no enabled group: call it as `{tool.original}` on its slot's own endpoint {where}."


def page_tool(tool: CatalogTool, view: CatalogView) -> str:
    title = tool.name or tool.original
    groups = code_list(tool.enabled_groups) or "none enabled"
    lines = [
        f"# `{title}`",
        "",
        f"Tool `{tool.original}` of slot `{tool.slot}` (groups: {groups}). {how_to_call(tool, view)}",
        "",
        "## What it does",
        "",
        tool.description.strip() or "Its provider gives no description; rely on its name and arguments.",
        "",
        "## Arguments",
        "",
        *(arguments_summary(tool.tool.get("inputSchema")) or ["None: call it with `{}`."]),
        "",
        "## Result",
        "",
        _result_summary(tool.tool),
        "",
        "## When to use it",
        "",
        (first_sentence(tool.description) + " " if tool.description.strip() else "") + usage_hint(tool.tool),
    ]
    siblings = _siblings(tool, view)
    if siblings:
        lines += ["", "## The same tool on other slots", ""]
        for other in siblings:
            lines.append(f"- `{other.slot}`: {how_to_call(other, view)}")
    return "\n".join(lines)


# -- groups and the overview ---------------------------------------------------------------------


def _distinct(tools: Iterable[CatalogTool]) -> list[list[CatalogTool]]:
    """Tools bunched by (own name, description): one entry for the same tool on many slots."""
    bunches: dict[tuple[str, str], list[CatalogTool]] = {}
    for tool in tools:
        bunches.setdefault((tool.original, tool.description), []).append(tool)
    return list(bunches.values())


MORE_ON_OVERVIEW = "use `search`, or `guidance` with a group name."


def _tool_entries(
    tools: Iterable[CatalogTool], view: CatalogView, limit: int | None = None, more: str = MORE_ON_OVERVIEW
) -> list[str]:
    """One line per distinct tool, at most `limit`; then how many more, and `more`: where to find them."""
    lines: list[str] = []
    bunches = _distinct(tools)
    for bunch in bunches[:limit]:
        first = bunch[0]
        slots = ", ".join(tool.slot for tool in bunch)
        names = [
            f"`{tool.name}`" if tool.name is not None else f"`{tool.original}` at /{tool.slot}/mcp" for tool in bunch
        ]
        summary = first_sentence(first.description) or "no description."
        arguments = short_arguments(first.tool.get("inputSchema"))
        lines.append(
            f"- **{first.original}** on {slots}: {summary} Arguments: {arguments}. Call as {', '.join(names)}."
        )
    if limit is not None and len(bunches) > limit:
        lines.append(f"- … and {len(bunches) - limit} more: {more}")
    return lines


def _state(group: GroupView) -> str:
    spec = group.spec
    if spec.enabled:
        return "enabled" + (f" ({spec.enabled_by})" if spec.enabled_by != "config" else "")
    if spec.enabled_by == "config":
        how = (
            f"enabled = true under [groups.{spec.name}], then `mcp-gateway reload`; or {spec.toggle}=true in the "
            "gateway's environment, then a restart"
        )
    else:
        # The variable wins over the file at every reload, and a reload keeps the environment the gateway started with.
        how = f"by {spec.enabled_by}: unset it or set it to true, then restart the gateway"
    return f"disabled ({how})"


def page_groups(view: CatalogView) -> str:
    lines = [
        "# Tool groups",
        "",
        f"Every enabled group is served at {view.group_url(None)} and on its own at {view.group_url('<group>')}. "
        "Members are the ready slots whose names match the group's slot patterns; its tools are theirs whose "
        "names start with one of its prefixes (all, when it has none).",
        "",
    ]
    if not view.groups:
        lines.append(
            "No group is configured: /mcp serves only `guidance` and `search`. `search` still finds every slot's "
            "tools; each slot is also its own MCP server at " + view.slot_url("<slot>") + "."
        )
        return "\n".join(lines)
    lines += [
        "| Group | State | Slots now | Tools | Slot patterns | Tool prefixes | What it is for |",
        "|---|---|---|---|---|---|---|",
    ]
    for group in view.groups:
        spec = group.spec
        lines.append(
            f"| `{spec.name}` | {cell(_state(group))} | {cell(group.members_text())} | "
            f"{len(group.tools)} | {cell(code_list(spec.slot_patterns))} | "
            f"{cell(code_list(spec.prefixes) or 'all tools')} | {cell(spec.description or '(no description)')} |"
        )
    lines += ["", "Call `guidance` with a group's name for its tools and when to use each."]
    return "\n".join(lines)


def page_group(group: GroupView, view: CatalogView) -> str:
    spec = group.spec
    lines = [f"# Group `{spec.name}`", ""]
    if spec.description:
        lines += [spec.description, ""]
    if spec.enabled:
        lines.append(
            f"Served at {view.group_url(spec.name)} and, with the other enabled groups, at {view.group_url(None)}."
        )
    else:
        lines.append(
            f"Not served now: {_state(group)}. Until then its tools are reachable on their slots' own endpoints."
        )
    prefixes = code_list(spec.prefixes) or "all tools"
    lines += [
        "",
        f"Slot patterns: {code_list(spec.slot_patterns)}; members now: {group.members_text()}. "
        f"Tool prefixes: {prefixes}.",
        "",
        f"## Tools ({len(group.tools)})",
        "",
    ]
    if not group.tools:
        slots = ", ".join(view.slots)
        if view.slots_withheld:
            lines.append(
                "None now: no ready slot you may call matches the patterns, or no tool name starts with a prefix. "
                f"Slots you may call: {slots or 'none'}; slots outside your access are not shown."
            )
        else:
            lines.append(
                "None now: no ready slot matches the patterns, or no tool name starts with a prefix. "
                f"Slots ready now: {slots or 'none'}."
            )
        return "\n".join(lines)
    # This is the group's page already: the rest are found by search, or by name in tools/list.
    where = f"tools/list at {view.group_url(spec.name)}" if spec.enabled else "tools/list on their slots"
    more = f"use `search` with words of what you need, or {where} for every name."
    lines += _tool_entries(group.tools, view, MAX_GROUP_LISTED, more)
    lines += ["", "For one tool's arguments and result, call `guidance` with its name."]
    return "\n".join(lines)


def page_overview(view: CatalogView) -> str:
    here = [tool for tool in view.tools if view.callable_here(tool)]
    slots_here = sorted({tool.slot for tool in here})
    endpoint = view.group(view.endpoint_group) if view.endpoint_group else None
    if view.endpoint_group is not None and (endpoint is None or not endpoint.spec.enabled):
        offers = _group_off(view.endpoint_group, endpoint, view)
    else:
        if endpoint is not None:
            what = f"the tool group `{endpoint.spec.name}`" + (
                f": {endpoint.spec.description}" if endpoint.spec.description else ""
            )
        else:
            what = "every enabled tool group"
        offers = (
            f"You are connected to {view.endpoint_url}, {what}. It offers {plural(len(here), 'tool')} of "
            f"{plural(len(slots_here), 'slot')} ({', '.join(slots_here) or view.none_here()}), plus `guidance` "
            "and `search`."
        )
    lines = [
        "# What this endpoint offers",
        "",
        offers,
        "",
        f"Tool names are `<slot>{view.separator}<tool>`: the slot (a device or an MCP server behind this gateway), "
        "then the tool's own name. Call a tool by its name exactly as tools/list gives it.",
        "",
    ]
    enabled = [group for group in view.groups if group.spec.enabled]
    disabled = [group for group in view.groups if not group.spec.enabled]
    if enabled:
        lines += [
            "## Which group for which job",
            "",
            "| Group | What it is for | Slots now | Tools | Endpoint |",
            "|---|---|---|---|---|",
        ]
        for group in enabled:
            spec = group.spec
            lines.append(
                f"| `{spec.name}` | {cell(spec.description or '(no description)')} | "
                f"{cell(group.members_text())} | {len(group.tools)} | {view.group_url(spec.name)} |"
            )
        lines.append("")
    else:
        lines += ["No tool group is enabled, so no device tool is listed here; `search` still finds them.", ""]
    if disabled:
        lines += [
            "Disabled groups (not served): "
            + ", ".join(f"`{group.spec.name}`" for group in disabled)
            + ". An operator enables one with enabled = true under [groups.<name>] and `mcp-gateway reload` (no "
            "restart), or with MCP_GROUP_<NAME>=true in the gateway's environment and a restart; `guidance` with "
            "topic groups says which applies to each.",
            "",
        ]
    if here:
        lines += ["## Tools here", "", *_tool_entries(here, view, MAX_LISTED), ""]
    lines += _outside_groups(view)
    lines += [
        "## How to work",
        "",
        '1. Unsure which tool fits? Call `search` with a few words (`{"query": "pump speed"}`), or `guidance` '
        "with a group's or a tool's name.",
        "2. Before a tool that changes equipment (start, stop, set, write), read the current state with the "
        "slot's read tool; afterwards read it again to confirm the change.",
        "3. Devices come and go: after notifications/tools/list_changed call tools/list again. "
        '`Provider "<slot>" not connected` means that device is offline now.',
    ]
    return "\n".join(lines)


def _group_off(name: str, group: GroupView | None, view: CatalogView) -> str:
    """The overview's first words on a session still open on a group a reload disabled or removed."""
    state = "was removed from the gateway's configuration" if group is None else f"is {_state(group)}"
    return (
        f"You are connected to {view.endpoint_url}, the tool group `{name}`, which {state}. This endpoint "
        "offers no tool until a reload enables the group again (this session then hears "
        "notifications/tools/list_changed); only `guidance` and `search` answer here. Every enabled group's "
        f"tools are at {view.group_url(None)}."
    )


def _outside_groups(view: CatalogView) -> list[str]:
    """The slots none of whose tools an enabled group lists, then those only some of whose tools it lists."""
    totals: dict[str, int] = {}
    outside: dict[str, int] = {}
    for tool in view.tools:
        totals[tool.slot] = totals.get(tool.slot, 0) + 1
        if tool.name is None:
            outside[tool.slot] = outside.get(tool.slot, 0) + 1
    nowhere = sorted(slot for slot, count in outside.items() if count == totals[slot])
    partly = sorted(slot for slot, count in outside.items() if count < totals[slot])
    lines: list[str] = []
    if nowhere:
        lines += [
            "## Slots in no enabled group",
            "",
            "Their tools are not listed here; `search` finds them, and each slot is its own MCP server:",
            "",
            *(f"- `{slot}`: {view.slot_url(slot)}" for slot in nowhere),
            "",
        ]
    if partly:
        lines += [
            "## Slots with some tools outside every enabled group",
            "",
            "Some tools of these slots are in no enabled group, so no group endpoint lists them; `search` finds "
            "them, and each slot's own MCP server has all its tools:",
            "",
            *(
                f"- `{slot}`: {outside[slot]} of {plural(totals[slot], 'tool')} outside, at {view.slot_url(slot)}"
                for slot in partly
            ),
            "",
        ]
    return lines


def page_same_name(topic: str, bunches: list[list[CatalogTool]], view: CatalogView) -> str:
    """Several slots have different tools called `topic`: each with its names, to pick one by."""
    lines = [
        f"# `{topic}`: several different tools",
        "",
        f"Tools named `{topic}` on {plural(len({tool.slot for bunch in bunches for tool in bunch}), 'slot')} are "
        "not the same tool. Call the one you mean by its full name; `guidance` with that name gives its "
        "arguments and result.",
        "",
    ]
    for bunch in bunches:
        slots = ", ".join(tool.slot for tool in bunch)
        summary = first_sentence(bunch[0].description) or "no description."
        lines.append(f"- on {slots}: {summary} Call as {', '.join(_name_to_call(tool, view) for tool in bunch)}.")
    return "\n".join(lines)


def _name_to_call(tool: CatalogTool, view: CatalogView) -> str:
    if view.callable_here(tool):
        return f"`{tool.name}`"
    if tool.name is not None:
        return f"`{tool.name}` at {view.group_url(None)}"
    return f"`{tool.original}` at {view.slot_url(tool.slot)}"


# -- dispatch ------------------------------------------------------------------------------------


def find_tool(topic: str, view: CatalogView) -> CatalogTool | list[list[CatalogTool]] | None:
    """A tool by its /mcp name, else by its own name (preferring one callable at this endpoint); when
    different tools of several slots have that own name, every one of them, bunched by description."""
    for tool in view.tools:
        if tool.name == topic:
            return tool
    named = [tool for tool in view.tools if tool.original == topic]
    bunches = _distinct(named)
    if len(bunches) > 1:
        return bunches
    here = [tool for tool in named if view.callable_here(tool)]
    candidates = here or named
    return candidates[0] if candidates else None


def render(topic: str, view: CatalogView, *, as_tool: bool = False) -> str | None:
    """The page for `topic`, or None when it names nothing the caller may see. `overview` and `groups` come
    first, then a group, then a tool; `as_tool` (the form {"topic": "tool", "tool_name": X}) asks for the
    tool only. A page whose name is also another topic's says how to reach that one."""
    if as_tool:
        page = tool_page(topic, view)
        if page is not None and (topic in (OVERVIEW, GROUPS) or view.group(topic) is not None):
            page += also_a_topic(topic)
        return page
    if topic == OVERVIEW:
        page = page_overview(view)
    elif topic == GROUPS:
        page = page_groups(view)
    elif (group := view.group(topic)) is not None:
        page = page_group(group, view)
    else:
        return tool_page(topic, view)
    return page + also_a_tool(topic, view)


def tool_page(topic: str, view: CatalogView) -> str | None:
    """The page of the tool (or the tools) named `topic`; None when the caller may see none."""
    found = find_tool(topic, view)
    if isinstance(found, list):
        return page_same_name(topic, found, view)
    if found is not None:
        return page_tool(found, view)
    return None


def also_a_topic(topic: str) -> str:
    """For a tool's page asked for by the tool form, when its name is also another topic's: how to reach that."""
    return f'\n\n`{topic}` is also a topic of its own: `guidance` with {{"topic": "{topic}"}} gives it.'


def also_a_tool(topic: str, view: CatalogView) -> str:
    """For a page of another kind (a group, a built-in topic) named like a tool: how to reach the tool's page."""
    if find_tool(topic, view) is None:
        return ""
    return (
        f'\n\n`{topic}` is also the name of a tool: `guidance` with {{"topic": "tool", "tool_name": "{topic}"}} '
        "explains that tool."
    )


def unknown_topic(topic: str, view: CatalogView, suggestions: list[str], *, as_tool: bool = False) -> str:
    """`as_tool`: asked as {"topic": "tool", "tool_name": X}, so X names no tool; when X is a built-in topic
    or a group, say how to ask for that instead of calling X unknown."""
    groups = ", ".join(group.spec.name for group in view.groups) or "none configured"
    if as_tool and topic in (OVERVIEW, GROUPS):
        return f'No tool named {topic!r}; `{topic}` is a built-in topic: ask `guidance` with {{"topic": "{topic}"}}.'
    if as_tool and view.group(topic) is not None:
        return f'No tool named {topic!r}; `{topic}` is a group: ask `guidance` with {{"topic": "{topic}"}}.'
    text = f"No tool named {topic[:80]!r}." if as_tool else f"Unknown guidance topic {topic[:80]!r}."
    text += f" Topics: overview, groups, a group name ({groups}), or a tool name as tools/list gives it."
    if suggestions:
        text += " Tools whose names or descriptions share words with it: " + code_list(suggestions) + "."
    return text
