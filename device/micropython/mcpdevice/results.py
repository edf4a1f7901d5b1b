"""MCP tool results: a structured object plus the same object as JSON text, or an isError text.

API: ok(obj) -> {"content": [{"type": "text", "text": <obj as JSON>}], "structuredContent": obj}
     error(text) -> {"content": [{"type": "text", "text": text}], "isError": True}
Both old clients (text) and new ones (structuredContent) read the same answer.
"""

import json


def ok(obj):
    return {"content": [{"type": "text", "text": json.dumps(obj, separators=(",", ":"))}], "structuredContent": obj}


def error(text):
    return {"content": [{"type": "text", "text": text}], "isError": True}
