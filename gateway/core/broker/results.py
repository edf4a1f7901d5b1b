"""The shapes of `_broker`'s tool results: a JSON value (as text and as structuredContent), or a text."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.jsonrpc import JsonObject
from gateway.core.names import BROKER_SLOT
from gateway.core.policy_interface import REFUSED_META_KEY


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def json_result(value: JsonObject) -> JsonObject:
    return {"content": [{"type": "text", "text": dumps(value)}], "structuredContent": value, "isError": False}


def text_result(text: str, *, is_error: bool = False) -> JsonObject:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


class BadArguments(Exception):
    """Arguments a `_broker` tool cannot use: answered as a tool error that says what to pass instead, as
    MCP has input validation answered, so the caller's model reads it and can retry; `data` says the same
    for programs, in the result's `_meta` (no structuredContent: it would not match the outputSchema)."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def result(self) -> JsonObject:
        refused = {"reason": "invalid_arguments", "slot": BROKER_SLOT, **self.data}
        return {**text_result(self.message, is_error=True), "_meta": {REFUSED_META_KEY: refused}}
