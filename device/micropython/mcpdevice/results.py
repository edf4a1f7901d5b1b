"""MCP tool results: a structured object plus the same object as JSON text, or an isError text.

API: ok(obj) -> {"content": [{"type": "text", "text": <obj as JSON>}], "structuredContent": obj}
     error(text) -> {"content": [{"type": "text", "text": text}], "isError": True}
Both old clients (text) and new ones (structuredContent) read the same answer.

Every object the device writes is an OrderedDict made with keyword arguments, which keep the
order they are written in: MicroPython's dict iterates in hash order, so a plain dict would come
out of a board's json.dumps with its keys in another order than out of CPython (the simulator)
and the C board.
"""

import json
from collections import OrderedDict


def ok(obj):
    text = json.dumps(obj, separators=(",", ":"))
    return OrderedDict(content=[OrderedDict(type="text", text=text)], structuredContent=obj)


def error(text):
    return OrderedDict(content=[OrderedDict(type="text", text=text)], isError=True)
