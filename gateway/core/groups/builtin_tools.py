"""The built-in tools of /mcp and /mcp/<group>: `guidance` and `search`, answered from the live catalog.

Their names hold no separator (`_` and `-` only make up a separator), so they never collide with a
`<slot>__<tool>` name. A bad argument is a tool error (isError: true) whose text says what to pass,
so an agent reads it and corrects itself. Both answer from a CatalogView: only tools of slots the
caller may call, so neither reveals a tool its caller could not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from gateway.core.groups import guidance, search
from gateway.core.jsonrpc import JsonObject

if TYPE_CHECKING:
    from gateway.core.groups.views import CatalogTool, CatalogView

GUIDANCE = "guidance"
SEARCH = "search"
NAMES = frozenset({GUIDANCE, SEARCH})

DEFAULT_LIMIT = 10
MAX_LIMIT = 50
MAX_QUERY_CHARS = 500
MAX_TOPIC_CHARS = 200
"""guidance's topic and tool_name: a group or tool name is at most 64 characters; longer text names nothing."""
MAX_DESCRIPTION_CHARS = 400
"""Search results carry a description cut to this; guidance with the tool's name gives all of it."""

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}

SEARCH_RESULT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The name to call: as listed at /mcp, or the slot's own tool name"},
        "endpoint": {"type": "string", "description": "The URL where that name is called"},
        "callable_here": {"type": "boolean", "description": "The name is listed on the endpoint you are using"},
        "slot": {"type": "string"},
        "tool": {"type": "string", "description": "The tool's own name on its slot"},
        "groups": {"type": "array", "items": {"type": "string"}, "description": "Enabled groups that include it"},
        "description": {"type": "string"},
        "score": {"type": "integer"},
    },
    "required": ["name", "endpoint", "callable_here", "slot", "tool", "groups", "description", "score"],
}

SEARCH_OUTPUT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "words": {"type": "array", "items": {"type": "string"}, "description": "The words searched for"},
        "matches": {"type": "integer", "description": "Tools that matched at all (results holds the best)"},
        "results": {"type": "array", "items": SEARCH_RESULT_SCHEMA},
    },
    "required": ["query", "words", "matches", "results"],
}

TOOLS: list[JsonObject] = [
    {
        "name": GUIDANCE,
        "title": "Which tool for which job",
        "description": "Explains, from the live catalog, what this endpoint offers and when to use which tool. "
        "Call it first when unsure which tool fits. topic: overview (default: groups, what each is for, how "
        "tools are named), groups (every tool group with its state and members), a group name (its tools "
        "and when to use each), or a tool name as listed (its description, arguments and when to use it).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "topic": {
                    "type": "string",
                    "description": "overview, groups, a group name, or a tool name (e.g. pump-1__set_speed); "
                    f"at most {MAX_TOPIC_CHARS} characters",
                },
                "tool_name": {
                    "type": "string",
                    "description": "With topic 'tool' (the original MCP bridge's form): the tool to explain; "
                    f"at most {MAX_TOPIC_CHARS} characters",
                },
            },
            "additionalProperties": False,
        },
        "annotations": READ_ONLY,
    },
    {
        "name": SEARCH,
        "title": "Find tools by words",
        "description": "Finds tools of every slot you may use by words in their names and descriptions, best "
        "first (a word in a tool's name counts more than one in its description). Each result gives the name "
        "to call and the endpoint to call it at: tools in an enabled group are called here by their listed "
        'name; others on their slot\'s own endpoint. Example: {"query": "pump speed"}.',
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "A few words, e.g. 'set speed' or 'read temperature' (at most "
                    f"{MAX_QUERY_CHARS} characters; the first {search.MAX_QUERY_WORDS} distinct words count)",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": f"Most results to return (default {DEFAULT_LIMIT})",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "outputSchema": SEARCH_OUTPUT_SCHEMA,
        "annotations": READ_ONLY,
    },
]
ARGUMENTS = {tool["name"]: set(tool["inputSchema"]["properties"]) for tool in TOOLS}


def text_result(text: str, *, is_error: bool = False) -> JsonObject:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def call(name: str, arguments: Any, view: CatalogView) -> JsonObject:
    """Answer a tools/call of a built-in tool (`name` is in NAMES)."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return text_result(f'{name}: "arguments" must be an object, e.g. {_example(name)}', is_error=True)
    unexpected = sorted(set(arguments) - ARGUMENTS[name])
    if unexpected:
        allowed = ", ".join(sorted(ARGUMENTS[name]))
        return text_result(
            f"{name}: unexpected argument(s) {', '.join(unexpected)}; allowed: {allowed}. Example: {_example(name)}",
            is_error=True,
        )
    if name == GUIDANCE:
        return call_guidance(arguments, view)
    return call_search(arguments, view)


def _example(name: str) -> str:
    return '{"topic": "overview"}' if name == GUIDANCE else '{"query": "pump speed"}'


def call_guidance(arguments: JsonObject, view: CatalogView) -> JsonObject:
    topic = arguments.get("topic", guidance.OVERVIEW)
    tool_name = arguments.get("tool_name")
    if not isinstance(topic, str) or (tool_name is not None and not isinstance(tool_name, str)):
        return text_result(
            'guidance: "topic" and "tool_name" must be strings, e.g. {"topic": "overview"}', is_error=True
        )
    for argument, value in (("topic", topic), ("tool_name", tool_name)):
        if value is not None and len(value) > MAX_TOPIC_CHARS:
            return text_result(
                f'guidance: "{argument}" is {len(value)} characters; use at most {MAX_TOPIC_CHARS} (a group or '
                'tool name, e.g. {"topic": "pump-1__set_speed"})',
                is_error=True,
            )
    as_tool = topic == guidance.TOOL_TOPIC or tool_name is not None
    if as_tool:
        # The original bridge asked {"topic": "tool", "tool_name": X}; both forms work, and this one always
        # means the tool, also when a group or a built-in topic has its name.
        if not tool_name:
            return text_result('guidance: topic "tool" needs "tool_name", the tool to explain', is_error=True)
        topic = tool_name
    topic = topic.strip() or guidance.OVERVIEW
    if topic in NAMES and not as_tool:
        return text_result(builtin_page(topic) + guidance.also_a_tool(topic, view))
    page = guidance.render(topic, view, as_tool=as_tool)
    if topic in NAMES:
        page = builtin_page(topic) if page is None else page + guidance.also_a_topic(topic)
    if page is None:
        unknown = guidance.unknown_topic(topic, view, suggestions(topic, view), as_tool=as_tool)
        return text_result(unknown, is_error=True)
    return text_result(page)


def builtin_page(name: str) -> str:
    tool = next(tool for tool in TOOLS if tool["name"] == name)
    return "\n".join(
        [
            f"# `{name}` (built into this endpoint)",
            "",
            tool["description"],
            "",
            "## Arguments",
            "",
            *guidance.arguments_summary(tool["inputSchema"]),
            "",
            f"Example: {_example(name)}",
        ]
    )


def suggestions(text: str, view: CatalogView, limit: int = 5) -> list[str]:
    """Names to call that look like `text` (for an unknown guidance topic)."""
    return [name_to_call(tool, view)[0] for tool, _ in view.search(text, limit)[0]]


def name_to_call(tool: CatalogTool, view: CatalogView) -> tuple[str, str]:
    """(the name to call, the endpoint URL to call it at) for a tool of the catalog."""
    if view.callable_here(tool):
        assert tool.name is not None
        return tool.name, view.endpoint_url
    if tool.name is not None:
        return tool.name, view.group_url(None)
    return tool.original, view.slot_url(tool.slot)


def _whole_number(value: object) -> int | None:
    """`value` as an int when JSON Schema counts it an integer (5, and 5.0 as a client's JSON may write it);
    None for anything else (True, 5.5, a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def call_search(arguments: JsonObject, view: CatalogView) -> JsonObject:
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return text_result(
            'search needs "query": a few words that describe what you want to do, e.g. {"query": "pump speed"}',
            is_error=True,
        )
    if len(query) > MAX_QUERY_CHARS:
        return text_result(
            f"search: the query is {len(query)} characters; use at most {MAX_QUERY_CHARS}", is_error=True
        )
    limit = _whole_number(arguments.get("limit", DEFAULT_LIMIT))
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        return text_result(f'search: "limit" must be an integer from 1 to {MAX_LIMIT}', is_error=True)
    matches, total = view.search(query, limit)
    results: list[JsonObject] = []
    for tool, match in matches:
        name, endpoint = name_to_call(tool, view)
        description = tool.description
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[: MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"
        results.append(
            {
                "name": name,
                "endpoint": endpoint,
                "callable_here": view.callable_here(tool),
                "slot": tool.slot,
                "tool": tool.original,
                "groups": list(tool.enabled_groups),
                "description": description,
                "score": match.score,
            }
        )
    found: JsonObject = {
        "query": query,
        "words": search.query_words(query),
        "matches": total,
        "results": results,
    }
    content: list[JsonObject] = [{"type": "text", "text": orjson.dumps(found, option=orjson.OPT_INDENT_2).decode()}]
    if not results:
        hint = (
            "No tool matched. Try other words (a verb or the quantity: start, speed, temperature), "
            'or call guidance with {"topic": "overview"} to see what is available.'
        )
        content.append({"type": "text", "text": hint})
    return {"content": content, "structuredContent": found, "isError": False}
