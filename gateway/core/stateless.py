"""The stateless era's (2026-07-28) request checks: envelope, headers agreeing with the body, version.

Pure: a decoded body and the request's headers in, a verdict out. The HTTP adapter maps the error
code of a rejection to its status with `http_status`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core import jsonrpc
from gateway.core.routing import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
)
from gateway.core.versions import STATELESS_VERSIONS

HEADER_VERSION = "mcp-protocol-version"
HEADER_METHOD = "mcp-method"
HEADER_NAME = "mcp-name"
ROUTING_HEADERS = frozenset({HEADER_VERSION, HEADER_METHOD, HEADER_NAME})
NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

HTTP_STATUS = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.INVALID_PARAMS: 400,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}

_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def http_status(code: int) -> int:
    return HTTP_STATUS.get(code, 200)


@dataclass(frozen=True)
class Envelope:
    protocol_version: str
    client_capabilities: Any
    client_info: Any
    log_level: str | None


@dataclass(frozen=True)
class Rejection:
    code: int
    message: str
    data: Any = None


def decode_header_value(value: str | None) -> str | None:
    """Header values that are not plain ASCII travel as =?base64?...?=; anything malformed is None."""
    if value is None:
        return None
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def duplicated_routing_header(raw_headers: Iterable[tuple[str, str]]) -> str | None:
    seen: set[str] = set()
    for name, _ in raw_headers:
        key = name.lower()
        if key in ROUTING_HEADERS:
            if key in seen:
                return key
            seen.add(key)
    return None


def unsupported_version(requested: Any) -> Rejection:
    return Rejection(
        jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": list(STATELESS_VERSIONS), "requested": requested},
    )


def check_request(body: Mapping[str, Any], headers: Mapping[str, str]) -> Envelope | Rejection:
    """Check one stateless-era request; `headers` are keyed by lower-case name."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return Rejection(
            jsonrpc.INVALID_PARAMS,
            f"params._meta must be an object carrying {META_PROTOCOL_VERSION!r} and {META_CLIENT_CAPABILITIES!r}",
        )
    missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
    if missing:
        return Rejection(jsonrpc.INVALID_PARAMS, f"params._meta is missing: {', '.join(missing)}")
    version = meta[META_PROTOCOL_VERSION]
    header_version = headers.get(HEADER_VERSION)
    if header_version is None or header_version != version:
        return Rejection(
            jsonrpc.HEADER_MISMATCH,
            f"{HEADER_VERSION} header does not match params._meta[{META_PROTOCOL_VERSION!r}]",
        )
    method = body.get("method")
    if headers.get(HEADER_METHOD) != method:
        return Rejection(jsonrpc.HEADER_MISMATCH, f"{HEADER_METHOD} header does not match the body's method")
    name_key = NAME_PARAM.get(method) if isinstance(method, str) else None
    if name_key is not None and isinstance(params, dict):
        body_value = params.get(name_key)
        if body_value is not None and decode_header_value(headers.get(HEADER_NAME)) != body_value:
            return Rejection(jsonrpc.HEADER_MISMATCH, f"{HEADER_NAME} header does not match the body's {name_key!r}")
    if not isinstance(version, str):
        return Rejection(jsonrpc.INVALID_PARAMS, "the protocol version in params._meta must be a string")
    if version not in STATELESS_VERSIONS:
        return unsupported_version(version)
    level = meta.get(META_LOG_LEVEL)
    return Envelope(
        protocol_version=version,
        client_capabilities=meta[META_CLIENT_CAPABILITIES],
        client_info=meta.get(META_CLIENT_INFO),
        log_level=level if isinstance(level, str) else None,
    )
