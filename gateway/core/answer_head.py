"""The id of a JSON-RPC answer read from its first bytes alone, for an answer too large to parse whole.

Only the top-level object's members are read, in order, up to the end of the head: the id counts
when it is whole (a string with its closing quote, an integer followed by what ends it) and a
top-level `result` or `error` member is seen as well, so that neither an `id` nested in a result nor
the id of a request (a top-level `method`) is taken for the answer's. Anything else, or the id or the
outcome lying past the head, gives None.
"""

from __future__ import annotations

from typing import Any

import orjson

# jsonrpc.JsonId and JsonObject, spelled out: jsonrpc reads the head of a text too deep to decode with
# this module, so this one imports nothing of it.
JsonId = str | int
JsonObject = dict[str, Any]

HEAD_BYTES = 256
"""How much of an oversize answer is read for its id: room for `{"jsonrpc": "2.0", "id": …, "result":`
with spaces, and for a few short members before it."""

_SPACE = b" \t\r\n"
_OUTCOMES = (b'"result"', b'"error"')


def answer_id(head: bytes) -> JsonId | None:
    """The id of the answer whose first bytes are `head`, or None when it cannot be read safely."""
    at = _skip_space(head, 0)
    if head[at : at + 1] != b"{":
        return None
    at += 1
    found: JsonId | None = None
    answer = False
    while True:
        at = _skip_space(head, at)
        key_end = _string_end(head, at)
        if key_end < 0:
            return None
        key = head[at:key_end]
        at = _skip_space(head, key_end)
        if head[at : at + 1] != b":":
            return None
        at = _skip_space(head, at + 1)
        if key == b'"method"':
            return None  # a request or a notification, not an answer
        if key == b'"id"':
            end, found = _id_value(head, at)
            if found is None or answer:
                return found
        elif key in _OUTCOMES:
            if found is not None:
                return found
            answer = True
            end = _value_end(head, at)
        else:
            end = _value_end(head, at)
        if end < 0:
            return None
        at = _skip_space(head, end)
        if head[at : at + 1] != b",":
            return None  # the object ended (or the JSON is broken) without both members
        at += 1


def message_head(head: bytes) -> JsonObject:
    """The top-level `id` and `method` among the first members of the message whose first bytes are
    `head`, for a message too deep to parse whole: `{}`, or what of them is whole before a member runs
    past the head. The id counts only beside a `method` or an outcome (`result`, `error`) member, as in
    `answer_id`, so that an id is never taken for an answer's without a sign that it is one."""
    found: JsonObject = {}
    named = False
    at = _skip_space(head, 0)
    if head[at : at + 1] != b"{":
        return found
    at += 1
    while True:
        at = _skip_space(head, at)
        key_end = _string_end(head, at)
        if key_end < 0:
            break
        key = head[at:key_end]
        at = _skip_space(head, key_end)
        if head[at : at + 1] != b":":
            break
        at = _skip_space(head, at + 1)
        if key == b'"id"':
            end, request_id = _id_value(head, at)
            if request_id is not None:
                found["id"] = request_id
        elif key == b'"method"':
            end = _string_end(head, at)
            method = _string(head[at:end]) if end > 0 else None
            if method is None:
                break
            found["method"] = method
            named = True
        else:
            named = named or key in _OUTCOMES
            end = _value_end(head, at)
        if end < 0:
            break
        at = _skip_space(head, end)
        if head[at : at + 1] != b",":
            break
        at += 1
    if not named:
        found.pop("id", None)
    return found


def _string(text: bytes) -> str | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _skip_space(head: bytes, at: int) -> int:
    while at < len(head) and head[at] in _SPACE:
        at += 1
    return at


def _string_end(head: bytes, at: int) -> int:
    """The index after the string starting at `at` (its closing quote), or -1 when it is not whole."""
    if head[at : at + 1] != b'"':
        return -1
    at += 1
    while at < len(head):
        char = head[at]
        if char == 0x5C:  # a backslash: the next byte is escaped
            at += 2
        elif char == 0x22:
            return at + 1
        else:
            at += 1
    return -1


def _id_value(head: bytes, at: int) -> tuple[int, JsonId | None]:
    """The end and value of the id starting at `at`: a whole string or integer, else (-1, None)."""
    if head[at : at + 1] == b'"':
        end = _string_end(head, at)
    else:
        end = at + 1 if head[at : at + 1] == b"-" else at
        while end < len(head) and 0x30 <= head[end] <= 0x39:
            end += 1
        if end == len(head) or head[end] not in b" \t\r\n,}":
            return -1, None  # cut off by the end of the head, a fraction or an exponent: not an id
    if end < 0:
        return -1, None
    try:
        value = orjson.loads(head[at:end])
    except orjson.JSONDecodeError:
        return -1, None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return end, value
    return -1, None


def _value_end(head: bytes, at: int) -> int:
    """The index after the JSON value starting at `at`, or -1 when it runs past the head."""
    first = head[at : at + 1]
    if first == b'"':
        return _string_end(head, at)
    if first not in (b"{", b"["):
        while at < len(head) and head[at] not in b" \t\r\n,}]":
            at += 1
        return at if at < len(head) else -1
    depth = 0
    while at < len(head):
        char = head[at]
        if char == 0x22:
            at = _string_end(head, at)
            if at < 0:
                return -1
            continue
        if char in b"{[":
            depth += 1
        elif char in b"}]":
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return -1
