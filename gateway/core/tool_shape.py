"""Whether a tool of a provider's tools/list has the shape MCP's Tool type gives it, so that any client
that follows the specification can read the list it is served in (one unreadable tool makes an SDK
client refuse the whole list)."""

from __future__ import annotations

from typing import Any

from gateway.core.json_words import json_type

STRING_MEMBERS = ("title", "description")
OBJECT_MEMBERS = ("outputSchema", "annotations", "_meta", "execution")
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
TASK_SUPPORT = ("forbidden", "optional", "required")
ICON_THEMES = ("light", "dark")


def tool_problem(tool: Any) -> str | None:
    """What keeps a client from reading `tool`, or None when it has the shape MCP's Tool type gives it.

    Only the members the type defines are checked; any other member is the provider's and passes."""
    if not isinstance(tool, dict):
        return f"the tool is {json_type(tool)}, not an object"
    if tool.get("name") == "":
        return '"name" is an empty string'
    if not isinstance(tool.get("name"), str):
        return _wrong(tool, "name", "a string")
    if not isinstance(tool.get("inputSchema"), dict):
        return _wrong(tool, "inputSchema", "an object")
    for member in STRING_MEMBERS:
        if member in tool and not isinstance(tool[member], str):
            return _wrong(tool, member, "a string")
    for member in OBJECT_MEMBERS:
        if member in tool and not isinstance(tool[member], dict):
            return _wrong(tool, member, "an object")
    return (
        _annotations_problem(tool.get("annotations"))
        or _execution_problem(tool.get("execution"))
        or _icons_problem(tool)
    )


def _wrong(holder: dict[str, Any], member: str, expected: str, label: str = "") -> str:
    """`member` of `holder` (shown as `label`) is missing, or not of the `expected` type."""
    shown = label or member
    if member not in holder:
        return f'"{shown}" is missing'
    return f'"{shown}" is {json_type(holder[member])}, not {expected}'


def _annotations_problem(annotations: dict[str, Any] | None) -> str | None:
    if annotations is None:
        return None
    if "title" in annotations and not isinstance(annotations["title"], str):
        return _wrong(annotations, "title", "a string", "annotations.title")
    for hint in ANNOTATION_HINTS:
        if hint in annotations and not isinstance(annotations[hint], bool):
            return _wrong(annotations, hint, "a boolean", f"annotations.{hint}")
    return None


def _execution_problem(execution: dict[str, Any] | None) -> str | None:
    if execution is None or "taskSupport" not in execution or execution["taskSupport"] in TASK_SUPPORT:
        return None
    return f'"execution.taskSupport" is not one of {", ".join(TASK_SUPPORT)}'


def _icons_problem(tool: dict[str, Any]) -> str | None:
    if "icons" not in tool:
        return None
    icons = tool["icons"]
    if not isinstance(icons, list):
        return _wrong(tool, "icons", "an array")
    for index, icon in enumerate(icons):
        where = f"icons[{index}]"
        if not isinstance(icon, dict):
            return f'"{where}" is {json_type(icon)}, not an object'
        if not isinstance(icon.get("src"), str):
            return _wrong(icon, "src", "a string", f"{where}.src")
        if "mimeType" in icon and not isinstance(icon["mimeType"], str):
            return _wrong(icon, "mimeType", "a string", f"{where}.mimeType")
        sizes = icon.get("sizes")
        if "sizes" in icon and not (isinstance(sizes, list) and all(isinstance(size, str) for size in sizes)):
            return f'"{where}.sizes" is not an array of strings'
        if "theme" in icon and icon["theme"] not in ICON_THEMES:
            return f'"{where}.theme" is not one of {", ".join(ICON_THEMES)}'
    return None
