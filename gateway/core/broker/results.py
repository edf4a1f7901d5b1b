"""The shapes of `_broker`'s tool results: a JSON value (as text and as structuredContent), or a text."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.jsonrpc import JsonObject


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def json_result(value: JsonObject) -> JsonObject:
    return {"content": [{"type": "text", "text": dumps(value)}], "structuredContent": value, "isError": False}


def text_result(text: str, *, is_error: bool = False) -> JsonObject:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}
