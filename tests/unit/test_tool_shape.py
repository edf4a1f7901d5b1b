"""Which tools of a provider's list clients can read (gateway/core/tool_shape.py; docs/protocol.md,
"Tools clients cannot read"), checked against the `mcp` SDK's own Tool model: every tool the
gateway keeps is one an SDK client reads."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from pydantic import ValidationError

from gateway.core.tool_shape import tool_problem

SCHEMA = {"type": "object"}

READABLE: list[dict[str, Any]] = [
    {"name": "a", "inputSchema": SCHEMA},
    {"name": "a", "inputSchema": {}},  # any JSON Schema object (2026-07-28 allows any)
    {
        "name": "full",
        "title": "Full",
        "description": "Every member MCP's Tool type has.",
        "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
        "outputSchema": {"type": "object"},
        "annotations": {"title": "F", "readOnlyHint": True, "destructiveHint": False, "openWorldHint": False},
        "execution": {"taskSupport": "optional"},
        "icons": [{"src": "data:image/png;base64,AA==", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}],
        "_meta": {"vendor/x": 1},
    },
    {"name": "extra", "inputSchema": SCHEMA, "x-vendor": [1, 2], "annotations": {"x-hint": "kept"}},
]

UNREADABLE: list[tuple[Any, str]] = [
    ({"name": "noschema"}, '"inputSchema" is missing'),
    ({"name": "s", "inputSchema": "nope"}, '"inputSchema" is a string, not an object'),
    ({"name": "s", "inputSchema": ["object"]}, '"inputSchema" is an array, not an object'),
    ({"inputSchema": SCHEMA}, '"name" is missing'),
    ({"name": 7, "inputSchema": SCHEMA}, '"name" is an integer, not a string'),
    ({"name": "", "inputSchema": SCHEMA}, '"name" is an empty string'),
    ({"name": "d", "inputSchema": SCHEMA, "description": 5}, '"description" is an integer, not a string'),
    ({"name": "d", "inputSchema": SCHEMA, "description": None}, '"description" is null, not a string'),
    ({"name": "t", "inputSchema": SCHEMA, "title": ["T"]}, '"title" is an array, not a string'),
    ({"name": "o", "inputSchema": SCHEMA, "outputSchema": "x"}, '"outputSchema" is a string, not an object'),
    ({"name": "n", "inputSchema": SCHEMA, "annotations": []}, '"annotations" is an array, not an object'),
    ({"name": "m", "inputSchema": SCHEMA, "_meta": "x"}, '"_meta" is a string, not an object'),
    (
        {"name": "h", "inputSchema": SCHEMA, "annotations": {"readOnlyHint": "maybe"}},
        '"annotations.readOnlyHint" is a string, not a boolean',
    ),
    (
        {"name": "h", "inputSchema": SCHEMA, "annotations": {"title": 1}},
        '"annotations.title" is an integer, not a string',
    ),
    (
        {"name": "e", "inputSchema": SCHEMA, "execution": {"taskSupport": "always"}},
        '"execution.taskSupport" is not one of forbidden, optional, required',
    ),
    ({"name": "i", "inputSchema": SCHEMA, "icons": {"src": "x"}}, '"icons" is an object, not an array'),
    ({"name": "i", "inputSchema": SCHEMA, "icons": [{}]}, '"icons[0].src" is missing'),
    (
        {"name": "i", "inputSchema": SCHEMA, "icons": [{"src": "x", "theme": "blue"}]},
        '"icons[0].theme" is not one of light, dark',
    ),
    (
        {"name": "i", "inputSchema": SCHEMA, "icons": [{"src": "x", "sizes": "48x48"}]},
        '"icons[0].sizes" is not an array of strings',
    ),
    ("tool", "the tool is a string, not an object"),
    (None, "the tool is null, not an object"),
]


@pytest.mark.parametrize("tool", READABLE)
def test_tools_of_mcps_shape_are_kept_and_an_sdk_client_reads_them(tool: dict[str, Any]) -> None:
    assert tool_problem(tool) is None
    mcp_types.Tool.model_validate(tool)


@pytest.mark.parametrize(("tool", "problem"), UNREADABLE)
def test_each_unreadable_tool_is_named_for_what_is_wrong(tool: Any, problem: str) -> None:
    assert tool_problem(tool) == problem


@pytest.mark.parametrize(
    "tool",
    [
        {"name": "noschema"},
        {"name": "s", "inputSchema": "nope"},
        {"name": "d", "inputSchema": SCHEMA, "description": 5},
    ],
)
def test_what_is_left_out_is_what_an_sdk_client_refuses(tool: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        mcp_types.Tool.model_validate(tool)
