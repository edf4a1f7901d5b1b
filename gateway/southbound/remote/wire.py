"""What the gateway writes to and reads from a remote MCP server over HTTP, as pure functions.

The core speaks each server's own era (gateway/core/eras.py). A remote link adds what HTTP needs:
for a 2026-07-28 server the routing headers that each request's body implies; for any server it
turns an HTTP failure into a JSON-RPC error the core can hand to the caller. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gateway.core import jsonrpc
from gateway.core.answer_head import HEAD_BYTES, answer_id
from gateway.core.eras import META_PROTOCOL_VERSION
from gateway.core.errors import shown_id
from gateway.core.jsonrpc import JsonId, JsonObject, Kind
from gateway.core.relay import RELATED_REQUEST_KEY
from gateway.core.stateless import NAME_PARAM, PARAM_HEADER_PREFIX, header_annotations
from gateway.core.versions import LATEST_STATELESS

SESSION_ID = "Mcp-Session-Id"
PROTOCOL_VERSION = "MCP-Protocol-Version"
METHOD = "Mcp-Method"
NAME = "Mcp-Name"
LAST_EVENT_ID = "Last-Event-ID"
ACCEPT_BOTH = "application/json, text/event-stream"
ERA_SESSION = "session"
ERA_STATELESS = "2026-07-28"
ERA_LEGACY_SSE = "legacy-sse"

MAX_ERROR_SNIPPET = 200


def public_url(url: str) -> str:
    """The URL as status may show it: no user info, and the query (which may carry a key) elided."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))


def encode_header_value(value: str) -> str:
    """Header form of a value: as is when it is plain visible ASCII, else the =?base64?…?= sentinel."""
    plain = value.isascii() and value == value.strip() and all(0x20 <= ord(ch) < 0x7F for ch in value)
    if plain and not (value.startswith("=?") and value.endswith("?=")):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def _rendered(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def param_headers(input_schema: Any, arguments: Any) -> dict[str, str]:
    """The Mcp-Param-* headers a 2026-07-28 client sends for a tools/call (SEP-2243)."""
    headers: dict[str, str] = {}
    for path, token, _ in header_annotations(input_schema) or []:
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        rendered = None if value is None else _rendered(value)
        if rendered is not None:
            headers[f"{PARAM_HEADER_PREFIX}{token}"] = encode_header_value(rendered)
    return headers


# -- the stateless era --------------------------------------------------------------------------


def stateless_headers(message: JsonObject, input_schema: Any = None) -> dict[str, str]:
    """MCP-Protocol-Version, Mcp-Method, Mcp-Name (and Mcp-Param-* for a tools/call) for one request:
    what its body says, so header and body agree (the version of its envelope, else the newest)."""
    method = str(message.get("method", ""))
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    headers = {PROTOCOL_VERSION: version if isinstance(version, str) else LATEST_STATELESS, METHOD: method}
    name_key = NAME_PARAM.get(method)
    if name_key is not None and isinstance(params.get(name_key), str):
        headers[NAME] = encode_header_value(params[name_key])
    if method == "tools/call" and input_schema is not None:
        headers.update(param_headers(input_schema, params.get("arguments")))
    return headers


def related_to(message: JsonObject, request_id: JsonId) -> JsonObject | None:
    """`message` tagged as belonging to the gateway's request `request_id` (the tag the core routes a
    provider's notification or request by), or None when it cannot carry it, names a request already,
    or needs no tag: progress is routed by its progressToken, and forwarded with its `_meta` as it is."""
    if message.get("method") == "notifications/progress":
        return None
    params = message.get("params", {})
    meta = params.get("_meta", {}) if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(meta, dict) or RELATED_REQUEST_KEY in meta:
        return None
    return {**message, "params": {**params, "_meta": {**meta, RELATED_REQUEST_KEY: request_id}}}


def answer_to_another(message: jsonrpc.Message, data: bytes, request_id: JsonId) -> tuple[bool, Any]:
    """(True, its id) when `message`, read on the response stream of the gateway's request `request_id`,
    answers another id (null included), even as a malformed answer; (False, None) for its own answer,
    a request, a notification, or what names no id."""
    body = message.body
    if message.kind is Kind.RESPONSE:
        return (body.get("id") != request_id, body.get("id"))
    if message.kind is not Kind.INVALID:
        return False, None
    if isinstance(body, dict) and "method" not in body and "id" in body:
        return (body["id"] != request_id, body["id"])
    answered = answer_id(message.unparsed[:HEAD_BYTES]) if isinstance(message.unparsed, bytes) else None
    return (answered is not None and answered != request_id, answered)


# -- failures -----------------------------------------------------------------------------------


def snippet(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if len(text) <= MAX_ERROR_SNIPPET else text[: MAX_ERROR_SNIPPET - 3] + "..."


def masked_strings(value: Any, masked: Callable[[str], str]) -> Any:
    """`value` (a parsed JSON-RPC error) with `masked` applied to each string in it, keys and numbers as
    they are: a secret is masked inside the texts, the structure (and the code) stays intact."""
    if isinstance(value, str):
        return masked(value)
    if isinstance(value, dict):
        return {key: masked_strings(item, masked) for key, item in value.items()}
    if isinstance(value, list):
        return [masked_strings(item, masked) for item in value]
    return value


def unmasked(text: str) -> str:
    """No masking (a caller without secrets to hide)."""
    return text


def carries_error_answer(body: bytes) -> bool:
    """Whether an HTTP error page is a JSON-RPC error answer (the server's own, kept by http_failure)."""
    parsed = jsonrpc.parse(body, jsonrpc.MAX_DEPTH_CEILING) if body else None
    return parsed is not None and parsed.kind is jsonrpc.Kind.RESPONSE and "error" in parsed.body


def http_failure(
    request_id: Any, upstream: str, status: int, body: bytes, masked: Callable[[str], str] = unmasked
) -> JsonObject:
    """The JSON-RPC answer to a request the server refused at the HTTP level.

    A JSON-RPC error for this request in the body (what MCP servers send with 4xx) is kept, its code as
    sent and `masked` applied to its strings; anything else becomes a named -32000 error with the status
    and the start of the body, masked as text. A link passes its redaction of configured secrets as
    `masked` (RemoteHttp.failure). The body is parsed before anything is masked: masking never breaks
    its JSON."""
    # Within what the link can encode again to feed it to the core, which applies limits.max_json_depth.
    parsed = jsonrpc.parse(body, jsonrpc.MAX_DEPTH_CEILING) if body else None
    if parsed is not None and parsed.kind is jsonrpc.Kind.RESPONSE and "error" in parsed.body:
        error = masked_strings(jsonrpc.normalize_error(parsed.body["error"]), masked)
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    detail = f": {quoted_text(body, masked)}" if body else ""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Upstream "{upstream}" answered HTTP {status}{detail}',
        {"slot": upstream, "reason": "upstream_http", "status": status},
    )


def quoted_text(body: bytes, masked: Callable[[str], str]) -> str:
    """The start of an upstream's text (an error page) as the gateway quotes it: masked whole, then cut."""
    return snippet(masked(body.decode("utf-8", errors="replace")).encode())


def too_large(max_bytes: int) -> str:
    """Why an answer (or an event) from the server was not read: its size, and the setting that bounds it."""
    return f"the answer is larger than {max_bytes} bytes (limits.max_frame_bytes)"


_METHOD = re.compile(r'"method"\s*:\s*"([^"\\]{1,128})"')


def request_to_client(head: str) -> str | None:
    """The method of a server's request to the client whose first bytes are `head` (None for a
    notification, an answer, or a head that names no method)."""
    found = _METHOD.search(head)
    if found is None or found.group(1).startswith("notifications/"):
        return None
    return found.group(1)


def too_large_request(method: str, max_bytes: int) -> str:
    """Why a call ended: the server asked its client something the gateway could not pass on."""
    return (
        f"the upstream sent its client a request ({method}) larger than {max_bytes} bytes "
        "(limits.max_frame_bytes), which the gateway cannot pass on"
    )


def answered_another_id(request_id: JsonId, upstream: str, answered: Any) -> JsonObject:
    """A request's answer stream carried an answer under another id, which the link dropped: the
    request ends now, in the words of a provider's refused answer (-32603)."""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.INTERNAL_ERROR,
        f'Provider "{upstream}" answered, but the gateway refused the answer: it came on the stream of this '
        f"request (id {shown_id(request_id)}) under id {shown_id(answered)}, and was dropped and counted in "
        "unmatched_responses; the upstream must answer each request under its own id",
        {"slot": upstream, "reason": "answer_refused", "answered_id": shown_id(answered)},
    )


MAX_METHOD_SHOWN = 128


def request_out_of_era(request_id: JsonId, upstream: str, method: str) -> JsonObject:
    """A 2026-07-28 server sent a request towards the client on a call's stream, which that era does
    not carry (its servers ask through input_required results): the call ends now (-32603)."""
    shown = method[:MAX_METHOD_SHOWN]
    return jsonrpc.error_response(
        request_id,
        jsonrpc.INTERNAL_ERROR,
        f'Upstream "{upstream}" sent its client a request ({shown}) on the stream of this call, which the '
        "2026-07-28 era does not carry (a server of that era asks through an input_required result); "
        "the gateway ended the call",
        {"slot": upstream, "reason": "upstream_protocol", "method": shown},
    )


def stream_broken(request_id: Any, upstream: str, why: str) -> JsonObject:
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Upstream "{upstream}" ended the answer before it was complete: {why}',
        {"slot": upstream, "reason": "upstream_stream"},
    )


def wrong_content_type(request_id: Any, upstream: str, status: int, kind: str) -> JsonObject:
    """The server answered a request with a body that is neither JSON nor an event stream."""
    shown = repr(kind[:MAX_METHOD_SHOWN]) if kind else "none"
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Upstream "{upstream}" answered HTTP {status} with content type {shown}, not application/json or '
        "text/event-stream: not an MCP answer (is the URL the server's MCP endpoint?)",
        {"slot": upstream, "reason": "upstream_content_type", "status": status},
    )


def www_authenticate_params(header: str) -> dict[str, str]:
    """The auth-params of a `WWW-Authenticate: Bearer k="v", ...` header (RFC 9110 §11.6.1), lower-cased keys."""
    _, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    index = 0
    while index < len(rest):
        while index < len(rest) and rest[index] in " ,":
            index += 1
        equals = rest.find("=", index)
        if equals < 0:
            break
        key = rest[index:equals].strip().lower()
        index = equals + 1
        if index < len(rest) and rest[index] == '"':
            index += 1
            value_chars: list[str] = []
            while index < len(rest) and rest[index] != '"':
                if rest[index] == "\\" and index + 1 < len(rest):
                    index += 1
                value_chars.append(rest[index])
                index += 1
            index += 1
            value = "".join(value_chars)
        else:
            end = rest.find(",", index)
            end = len(rest) if end < 0 else end
            value = rest[index:end].strip()
            index = end
        if key:
            params[key] = value
    return params
