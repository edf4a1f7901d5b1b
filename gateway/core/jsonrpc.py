"""JSON-RPC 2.0 parsing and classification: bytes in, one typed view out, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from gateway.core.answer_head import HEAD_BYTES, message_head

# Standard JSON-RPC codes and the MCP additions the gateway emits.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Gateway codes shared with mcp-broker: unavailable (not connected, disconnected, deadline, held)
# and forbidden.
UNAVAILABLE = -32000
FORBIDDEN = -32001
# A rate limit ([limits.rate], data.reason "rate_limited") or an execution limit (docs/governance-limits.md)
# refused the request; data.retryAfterMs says when to try again, when time alone helps (mcp-broker's code).
RATE_LIMITED = -32029
# Stateless-era (2026-07-28) codes.
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Session-era answer to a request the client cancelled (LSP's RequestCancelled, as the SDK sends it).
REQUEST_CANCELLED = -32800

JsonId = str | int
JsonObject = dict[str, Any]

MAX_DEPTH_CEILING = 200
"""The highest `limits.max_json_depth`. orjson reads JSON nested up to 1024 levels but writes at most
254, and the gateway wraps what it relays a few levels deeper (an envelope, an `input_required`
request, a status page quoting a provider's hello): under this ceiling all of them stay writable."""
DEPTH_LIMIT = "max_json_depth"
"""The [limits] key of the nesting bound, as a refusal names it and `mcpgw_limit_hits_total` counts it."""
ORJSON_DEPTH_ERROR = "depth limit exceeded"
"""What orjson says of JSON nested past the 1024 levels it reads: the nesting bound's refusal too."""
EncodeError = orjson.JSONEncodeError
"""What `dumps` raises for a value JSON has no form for, or one nested deeper than orjson writes."""


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"  # result or error
    BATCH = "batch"
    INVALID = "invalid"


@dataclass(slots=True)
class Message:
    """One decoded JSON-RPC message and what the gateway needs to route it."""

    kind: Kind
    body: Any  # the decoded JSON value; a dict for every kind except BATCH and INVALID
    problem: str = ""  # for INVALID: what is wrong, in words a sender can act on
    limit: str = ""
    """For INVALID: the [limits] key of the bound the message exceeds (`max_json_depth`), else empty.
    Such a message was valid JSON, and its body keeps only its id and method (see `parse`)."""
    unparsed: bytes | str = b""
    """For INVALID because the text is not JSON: that text, so that the id at its head can still name
    the request a provider's broken answer belongs to (gateway/core/refused_answers.py); else empty."""

    @property
    def id(self) -> Any:
        return self.body.get("id") if isinstance(self.body, dict) else None

    @property
    def method(self) -> str:
        return self.body.get("method", "") if isinstance(self.body, dict) else ""

    @property
    def params(self) -> JsonObject | None:
        params = self.body.get("params") if isinstance(self.body, dict) else None
        return params if isinstance(params, dict) else None


class ParseError(ValueError):
    """The bytes are not JSON at all."""


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ParseError(str(exc)) from exc


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _valid_id(value: Any) -> bool:
    # bool is an int subclass but never a valid id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


INTEGER_BOUND = "integers from -2^63 to 2^64-1 (64 bits)"
"""The integers the JSON parser (orjson) reads exactly; a longer one comes back as a float."""


def _past_64_bits(value: Any) -> bool:
    # What orjson made of an integer literal it cannot hold (or a float that large): echoed back it
    # would no longer be the number the sender wrote.
    return type(value) is float and abs(value) >= 2**63


def classify(value: Any) -> Message:
    """Classify an already-decoded JSON value as one JSON-RPC message."""
    if isinstance(value, list):
        return Message(Kind.BATCH, value, "JSON-RPC batches are not supported; send one message at a time")
    if not isinstance(value, dict):
        return Message(Kind.INVALID, value, "a JSON-RPC message must be a JSON object")
    method = value.get("method")
    has_id = "id" in value
    if method is not None:
        if not isinstance(method, str) or not method:
            return Message(Kind.INVALID, value, '"method" must be a non-empty string')
        params = value.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return Message(Kind.INVALID, value, '"params" must be an object')
        if not has_id:
            return Message(Kind.NOTIFICATION, value)
        if not _valid_id(value["id"]):
            if _past_64_bits(value["id"]):
                return Message(Kind.INVALID, value, f'"id" must be a string or an integer, one of {INTEGER_BOUND}')
            return Message(Kind.INVALID, value, '"id" must be a string or an integer')
        return Message(Kind.REQUEST, value)
    if has_id and ("result" in value or "error" in value):
        return Message(Kind.RESPONSE, value)
    return Message(Kind.INVALID, value, 'not a request, notification or response (no "method", no "result")')


def parse(data: bytes | str, max_depth: int | None = None) -> Message:
    """Decode and classify; malformed JSON, and JSON nested more than `max_depth` levels (when given:
    wherever JSON enters the gateway), become an INVALID message instead of an exception."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if max_depth is not None and exc.msg == ORJSON_DEPTH_ERROR:
            return _too_deep(_head_of(data), max_depth)
        return Message(Kind.INVALID, None, f"malformed JSON: {exc}", unparsed=data)
    # Each level takes two brackets, so text up to twice the bound (a ping, a short answer) is not even counted.
    if max_depth is not None and len(data) > 2 * max_depth and nested_deeper(data, value, max_depth):
        return _too_deep(value, max_depth)
    return classify(value)


def parse_client(data: bytes | str, max_depth: int | None = None) -> Message:
    """`parse` for what a client sends, which must also carry `"jsonrpc": "2.0"` as JSON-RPC 2.0
    requires and the SDK's servers insist. Providers are not held to it: a board that leaves the
    member out is answered and relayed as before."""
    return _held_to_version(parse(data, max_depth))


def classify_client(value: Any) -> Message:
    """`classify` for one decoded value a client sent (a member of its batch), held to `"jsonrpc":
    "2.0"` as `parse_client` holds a whole body."""
    return _held_to_version(classify(value))


def _held_to_version(message: Message) -> Message:
    if message.kind in (Kind.REQUEST, Kind.NOTIFICATION, Kind.RESPONSE) and message.body.get("jsonrpc") != "2.0":
        return Message(Kind.INVALID, message.body, 'the "jsonrpc" member must be "2.0"')
    if message.kind is Kind.REQUEST:
        meta = (message.params or {}).get("_meta")
        if isinstance(meta, dict) and _past_64_bits(meta.get("progressToken")):
            token = f'"params._meta.progressToken" must be a string or an integer, one of {INTEGER_BOUND}'
            return Message(Kind.INVALID, message.body, token)
    if message.kind is Kind.RESPONSE:
        problem = response_shape_problem(message.body)
        if problem is not None:
            # Refused under id null: a response's id is one the gateway minted for its request to the
            # client, and an error under it would read as the answer to the client's own request
            # of that id (JSON-RPC 2.0 §5: null when the id cannot be used).
            head = {key: value for key, value in message.body.items() if key != "id"}
            return Message(Kind.INVALID, head, problem)
    return message


def response_shape_problem(body: JsonObject) -> str | None:
    """What makes `body` (a message with an id and `result` or `error`) no JSON-RPC 2.0 response, or
    None: exactly one of `result` and `error`, an error an object with an integer `code` and a string
    `message`. Held against clients, whose answers go to providers as they are; a provider's loose
    error is mended instead (`normalize_error`), as boards send them."""
    if "result" in body and "error" in body:
        return 'a response has "result" or "error", not both'
    if "result" in body:
        return None
    error = body["error"]
    if not isinstance(error, dict):
        return 'the "error" member must be an object with an integer "code" and a string "message"'
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return '"error.code" must be an integer'
    if not isinstance(error.get("message"), str):
        return '"error.message" must be a string'
    return None


def nested_deeper(data: bytes | str, value: Any, max_depth: int) -> bool:
    """Whether `value`, decoded from `data`, nests objects and arrays more than `max_depth` levels deep.

    Each object or array of `value` opens with a bracket in `data`, so a text with at most `max_depth`
    of them passes at C speed (every ordinary message). Otherwise the containers are walked level by
    level, which stops as soon as too few brackets are left for a deeper path (usually at the widest
    level, before its items are looked at) or a level lies past the bound."""
    containers = data.count("{") + data.count("[") if isinstance(data, str) else data.count(b"{") + data.count(b"[")
    if containers <= max_depth or not isinstance(value, dict | list):
        return False
    level: list[Any] = [value]
    depth = 1
    unseen = containers - 1  # at most this many containers lie below `level`
    while depth <= max_depth:
        if depth + unseen <= max_depth:
            return False
        level = [
            item
            for container in level
            for item in (container.values() if type(container) is dict else container)
            if type(item) is dict or type(item) is list
        ]
        if not level:
            return False
        depth += 1
        unseen -= len(level)
    return True


def _head_of(data: bytes | str) -> JsonObject:
    """The id and method at the head of a text too deep for orjson to decode at all."""
    head = data[:HEAD_BYTES]
    return message_head(head if isinstance(head, bytes) else head.encode("utf-8", errors="replace"))


def _too_deep(value: Any, max_depth: int) -> Message:
    # Only what names the message is kept, so its sender can still be answered: its id (when valid)
    # and method, which tell a request from an answer. Nothing nested: that is what was refused.
    head: JsonObject = {}
    if isinstance(value, dict):
        if _valid_id(value.get("id")):
            head["id"] = value["id"]
        if isinstance(value.get("method"), str):
            head["method"] = value["method"]
    problem = (
        f"JSON nested more than {max_depth} levels deep (objects and arrays within each other), over the "
        f"gateway's limit limits.{DEPTH_LIMIT}; send flatter JSON"
    )
    return Message(Kind.INVALID, head, problem, DEPTH_LIMIT)


def unencodable_answer(message: Any, why: str) -> JsonObject:
    """The -32603 error a client gets, under the answer's own id, instead of an answer `dumps` refused."""
    request_id = message.get("id") if isinstance(message, dict) else None
    return error_response(
        request_id if _valid_id(request_id) else None,
        INTERNAL_ERROR,
        f"The gateway could not encode this answer as JSON ({why}) and sends this error instead; "
        "the gateway's log has the details",
        {"reason": "unencodable"},
    )


def error_object(code: int, message: str, data: Any = None) -> JsonObject:
    error: JsonObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(code, message, data)}


def result_response(request_id: Any, result: Any) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def notification(method: str, params: JsonObject | None = None) -> JsonObject:
    message: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def normalize_error(error: Any) -> JsonObject:
    """Accept what real boards send: an error without a numeric code becomes -32603, message kept."""
    if not isinstance(error, dict):
        return error_object(INTERNAL_ERROR, str(error) if error is not None else "Provider returned an error")
    code = error.get("code")
    message = error.get("message")
    if isinstance(code, int) and not isinstance(code, bool) and isinstance(message, str):
        return error
    fixed: JsonObject = {
        "code": code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
        "message": message if isinstance(message, str) else "Provider returned an error without a message",
    }
    if "data" in error:
        fixed["data"] = error["data"]
    return fixed


def without_meta_keys(params: JsonObject | None, keys: frozenset[str]) -> JsonObject | None:
    """`params` without `keys` in its _meta (and without _meta when nothing else is left in it):
    `params` itself when none of them is there, else a copy (params and _meta copied once each)."""
    if params is None:
        return None
    meta = params.get("_meta")
    if not isinstance(meta, dict) or keys.isdisjoint(meta):
        return params
    rest = {key: value for key, value in meta.items() if key not in keys}
    cleaned = {key: value for key, value in params.items() if key != "_meta"}
    if rest:
        cleaned["_meta"] = rest
    return cleaned
