"""What the stdio bridge answers a host's request with when it has no answer of the gateway's to relay:
the gateway fell silent (the read timeout), or the host's line could not be read as the gateway reads
JSON. In both cases the host gets an error under its request's own id, so it never waits for ever."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.northbound.bridge_errors import BridgeError

DEFAULT_READ_TIMEOUT_S = 90.0
"""The longest silence of the gateway the bridge waits through on a request (--read-timeout): six of
the gateway's default keepalive intervals (limits.sse_keepalive_s, 15 s). A gateway at work on a call
sends its answer's headers and then a keepalive every interval, so a long call is waited for as long
as the gateway keeps it (its request_timeout_ms ends it); a gateway that took the connection and then
stopped (frozen, stuck, a black-holing middlebox, not a gateway at all) is named instead."""


class GatewaySilent(BridgeError):
    """The gateway took the request and then sent nothing for the read timeout: the request may have
    reached it, so the host is told to check its effect before sending it again."""

    code = jsonrpc.UNAVAILABLE

    def __init__(self, read_timeout_s: float) -> None:
        self.read_timeout_s = read_timeout_s
        super().__init__(f"nothing came from it for {read_timeout_s:g} s (--read-timeout)")

    def log_text(self, method: str | None, url: str) -> str:
        return f"no answer from the gateway at {url} to {method}: {self}"

    def host_error(self, url: str) -> tuple[str, Any]:
        return (
            f"No answer from the MCP gateway at {url}: {self}. The request may have reached the gateway and "
            "may be carried out: check its effect (a device's status, say) before sending it again. A gateway "
            "at work on a request sends a keepalive every limits.sse_keepalive_s (15 s by default), so this "
            "silence means a stopped or stuck gateway, or something else at that address; for a gateway "
            "with a longer keepalive interval give --read-timeout more than it (0 waits without limit).",
            {"reason": "gateway_silent", "url": url, "readTimeoutS": self.read_timeout_s},
        )


class StdinClosed:
    """The answer of a request given up at EOF on stdin: the bridge stopped waiting after --read-timeout
    (`read_timeout_s`; None: a signal ended the wait) while the request had no answer. The gateway may
    have been sending meanwhile (progress), so this names the bridge's own stop, not a silence."""

    def __init__(self, read_timeout_s: float | None, *, sent: bool) -> None:
        self.read_timeout_s = read_timeout_s
        self.sent = sent

    def host_error(self, url: str) -> tuple[str, JsonObject]:
        waited = (
            f"stopped waiting {self.read_timeout_s:g} s (--read-timeout) after stdin closed"
            if self.read_timeout_s is not None
            else "was stopped by a signal after stdin closed"
        )
        if self.sent:
            text = (
                f"The bridge to the MCP gateway at {url} {waited}, and this request had no answer by then. "
                "It reached the gateway and may be carried out: check its effect (a device's status, say) "
                "before sending it again."
            )
        else:
            text = (
                f"The bridge to the MCP gateway at {url} {waited}, before it sent this request to the gateway: "
                "it was not carried out."
            )
        return text, {"reason": "stdin_closed", "url": url, "readTimeoutS": self.read_timeout_s, "sent": self.sent}


def too_deep(max_depth: int) -> tuple[str, JsonObject]:
    """The refusal of a host line nested deeper than the bridge's own cap (text, data)."""
    return (
        f"Invalid JSON-RPC: JSON nested more than {max_depth} levels deep (objects and arrays within each "
        f"other), over this bridge's own cap of {max_depth} levels; send flatter JSON. The gateway applies "
        "its limits.max_json_depth, which may be lower, to what the bridge passes on",
        {"reason": "too_deep", "maxDepth": max_depth},
    )


# -- a line orjson refused ---------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_PATH_CHARS = 200
"""How much of the path to a bad string an error quotes."""


def unreadable_line(line: bytes, problem: str) -> tuple[Any, int, str, JsonObject]:
    """For a host line the bridge's JSON reader refused (`problem` is its words): the id to answer it
    under, the error code, the message and data. Only on this failure path the line is read again with
    Python's json module, which takes lone surrogate escapes and bytes that are not UTF-8 (as surrogate
    escapes), to find the request's id and to name where the fault is. The id is null only when none
    can be read. Nothing is mended: the host's data is never passed on changed."""
    not_utf8: UnicodeDecodeError | None = None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        not_utf8 = exc
        text = line.decode("utf-8", "surrogateescape")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    request_id = _usable_id(value)
    where = _first_surrogate(value, ())
    if not_utf8 is not None:
        byte = line[not_utf8.start]
        shown = f" in the string at {_path(where[0])}" if where is not None else ""
        return (
            request_id,
            jsonrpc.PARSE_ERROR,
            f"Invalid JSON-RPC: the line is not UTF-8 (byte 0x{byte:02x} at offset {not_utf8.start}{shown}); "
            "JSON text must be UTF-8: send the text as UTF-8",
            {"reason": "not_utf8", "offset": not_utf8.start},
        )
    if where is not None:
        path, char = where
        escape = f"\\u{ord(char):04x}"
        in_params = bool(path) and path[0] == "params"
        return (
            request_id,
            jsonrpc.INVALID_PARAMS if in_params else jsonrpc.PARSE_ERROR,
            f"Invalid JSON-RPC: the string at {_path(path)} holds a lone UTF-16 surrogate escape ({escape}), "
            "half of a character (an emoji cut in two, say), which is not Unicode text; send the character "
            "whole, or leave it out",
            {"reason": "lone_surrogate", "path": _path(path), "escape": escape},
        )
    return request_id, jsonrpc.PARSE_ERROR, f"Invalid JSON-RPC: {problem}", {"reason": "parse_error"}


def _usable_id(value: Any) -> Any:
    """The id of a request, when it is one the answer can carry back (a string of whole characters)."""
    if not isinstance(value, dict) or not isinstance(value.get("method"), str):
        return None
    return answerable_id(value.get("id"))


def answerable_id(request_id: Any) -> str | int | None:
    """`request_id` when an answer can carry it back (a string of whole characters, an integer of at most
    64 bits), else None: JSON-RPC answers a request whose id cannot be read under id null."""
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    try:
        orjson.dumps(request_id)
    except orjson.JSONEncodeError:  # a lone surrogate in the id itself, or an integer over 64 bits
        return None
    return request_id


def _first_surrogate(value: Any, path: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str] | None:
    """Where the first string holding a surrogate code point is (a key's place is its member's)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            found = _surrogate_in(item)
            if found is not None:
                return at, found
        elif isinstance(item, dict):
            for key, member in reversed(item.items()):
                stack += [(member, (*at, key)), (key, (*at, key))]  # the key is looked at before its value
        elif isinstance(item, list):
            stack.extend((member, (*at, index)) for index, member in reversed(list(enumerate(item))))
    return None


def _surrogate_in(text: str) -> str | None:
    return next((char for char in text if "\ud800" <= char <= "\udfff"), None)


def _path(path: tuple[str | int, ...]) -> str:
    """`params.arguments.text`, `params.items[2]`; a key of other characters JSON-escaped."""
    shown = ""
    for step in path:
        if isinstance(step, int):
            shown += f"[{step}]"
        elif _PLAIN_KEY.fullmatch(step):
            shown += f".{step}" if shown else step
        else:
            shown += f"[{json.dumps(step)}]"  # ASCII: a surrogate in a key stays an escape
    shown = shown or "the top level"
    return shown if len(shown) <= MAX_PATH_CHARS else shown[: MAX_PATH_CHARS - 1] + "…"
