"""What the gateway writes to and reads from a remote MCP server over HTTP, as pure functions.

The core speaks the session era to every provider. A remote link translates: for a 2026-07-28
(stateless) server it answers the core's initialize from `server/discover`, wraps each request in
the `_meta` envelope and the routing headers; for any server it turns an HTTP failure into a
JSON-RPC error the core can hand to the caller. Nothing here does I/O.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.routing import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
)
from gateway.core.stateless import NAME_PARAM, PARAM_HEADER_PREFIX, header_annotations
from gateway.core.versions import HANDSHAKE_VERSIONS, LATEST_HANDSHAKE, LATEST_STATELESS, STATELESS_VERSIONS

SESSION_ID = "Mcp-Session-Id"
PROTOCOL_VERSION = "MCP-Protocol-Version"
METHOD = "Mcp-Method"
NAME = "Mcp-Name"
LAST_EVENT_ID = "Last-Event-ID"
ACCEPT_BOTH = "application/json, text/event-stream"
UNSUPPORTED_PROTOCOL_VERSION = -32022

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


def envelope(client_capabilities: JsonObject, client_info: JsonObject, log_level: str | None) -> JsonObject:
    """The `_meta` keys every 2026-07-28 request carries, describing the gateway as the client."""
    meta: JsonObject = {
        META_PROTOCOL_VERSION: LATEST_STATELESS,
        META_CLIENT_CAPABILITIES: client_capabilities,
        META_CLIENT_INFO: client_info,
    }
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    return meta


def stateless_request(message: JsonObject, meta: JsonObject) -> JsonObject:
    """The request with the envelope merged into its params._meta (the caller's own _meta keys kept)."""
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    own = params.get("_meta")
    params["_meta"] = {**(own if isinstance(own, dict) else {}), **meta}
    return {**message, "params": params}


def stateless_headers(message: JsonObject, input_schema: Any = None) -> dict[str, str]:
    """MCP-Protocol-Version, Mcp-Method, Mcp-Name (and Mcp-Param-* for a tools/call) for one request."""
    method = str(message.get("method", ""))
    headers = {PROTOCOL_VERSION: LATEST_STATELESS, METHOD: method}
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    name_key = NAME_PARAM.get(method)
    if name_key is not None and isinstance(params.get(name_key), str):
        headers[NAME] = encode_header_value(params[name_key])
    if method == "tools/call" and input_schema is not None:
        headers.update(param_headers(input_schema, params.get("arguments")))
    return headers


def discover_verdict(reply: JsonObject) -> JsonObject | None:
    """The discover result when it is positive evidence of a 2026-07-28 server, else None (fall back).

    Mirrors the SDK's rule: anything but a result naming a stateless version we speak falls back to
    initialize; only a -32022 whose `supported` list holds no version we speak at all is a real
    incompatibility (raised as ValueError)."""
    error = reply.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        known = HANDSHAKE_VERSIONS + STATELESS_VERSIONS
        if (
            error.get("code") == UNSUPPORTED_PROTOCOL_VERSION
            and isinstance(supported, list)
            and not any(version in known for version in supported)
        ):
            raise ValueError(f"the server speaks only protocol versions {supported}, none of which this gateway does")
        return None
    result = reply.get("result")
    if not isinstance(result, dict):
        return None
    versions = result.get("supportedVersions")
    if not isinstance(versions, list) or LATEST_STATELESS not in versions:
        return None
    if not isinstance(result.get("capabilities"), dict):
        return None
    return result


def server_info_of(result: JsonObject, fallback_name: str) -> JsonObject:
    """serverInfo of a 2026-07-28 result (stamped into its _meta), or a stand-in naming the upstream."""
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return info
    info = result.get("serverInfo")
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return info
    return {"name": fallback_name, "version": ""}


def initialize_from_discover(request_id: Any, discovered: JsonObject, fallback_name: str) -> JsonObject:
    """Answer the core's initialize for a 2026-07-28 server from what server/discover said.

    The protocol version is the newest handshake version: the core's conversation with the link is in
    the session era; the link, not the core, speaks 2026-07-28 to the server (status shows both)."""
    result: JsonObject = {
        "protocolVersion": LATEST_HANDSHAKE,
        "capabilities": discovered.get("capabilities") or {},
        "serverInfo": server_info_of(discovered, fallback_name),
    }
    instructions = discovered.get("instructions")
    if isinstance(instructions, str) and instructions:
        result["instructions"] = instructions
    return jsonrpc.result_response(request_id, result)


def listen_filter(capabilities: JsonObject, resource_uris: list[str]) -> JsonObject:
    """What a subscriptions/listen stream asks for: every list change the server advertises, and updates
    of the resources clients subscribed to."""
    wanted: JsonObject = {}
    for kind, key in (
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ):
        caps = capabilities.get(kind)
        if isinstance(caps, dict) and caps.get("listChanged"):
            wanted[key] = True
    if resource_uris:
        wanted["resourceSubscriptions"] = list(resource_uris)
    return wanted


def without_subscription_id(message: JsonObject) -> JsonObject:
    """A notification from a listen stream without the subscription id (the gateway's own business)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(meta, dict) or META_SUBSCRIPTION_ID not in meta:
        return message
    rest = {key: value for key, value in meta.items() if key != META_SUBSCRIPTION_ID}
    cleaned = {key: value for key, value in params.items() if key != "_meta"}
    if rest:
        cleaned["_meta"] = rest
    return {**message, "params": cleaned}


# -- failures -----------------------------------------------------------------------------------


def snippet(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if len(text) <= MAX_ERROR_SNIPPET else text[: MAX_ERROR_SNIPPET - 3] + "..."


def http_failure(request_id: Any, upstream: str, status: int, body: bytes) -> JsonObject:
    """The JSON-RPC answer to a request the server refused at the HTTP level.

    A JSON-RPC error for this request in the body (what MCP servers send with 4xx) is kept as it is;
    anything else becomes a named -32000 error with the status and the start of the body."""
    parsed = jsonrpc.parse(body) if body else None
    if parsed is not None and parsed.kind is jsonrpc.Kind.RESPONSE and "error" in parsed.body:
        error = jsonrpc.normalize_error(parsed.body["error"])
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    detail = f": {snippet(body)}" if body else ""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Upstream "{upstream}" answered HTTP {status}{detail}',
        {"slot": upstream, "reason": "upstream_http", "status": status},
    )


def stream_broken(request_id: Any, upstream: str, why: str) -> JsonObject:
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Upstream "{upstream}" ended the answer before it was complete: {why}',
        {"slot": upstream, "reason": "upstream_stream"},
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
