"""JSON values named in words, for messages that tell a sender what it sent."""

from __future__ import annotations

from typing import Any


def json_type(value: Any) -> str:
    """The JSON type of `value`, with its article: "a boolean", "an integer", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
