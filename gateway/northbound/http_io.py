"""HTTP pieces every client endpoint shares: JSON answers, the request-body cap, the admission step.

Used by Streamable HTTP (`/<slot>/mcp`), legacy HTTP+SSE (`/<slot>/sse`, `/<slot>/messages`) and the
raw WebSocket upgrade (`/<slot>`), so a limit or a refusal reads the same on every way in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from gateway.config import LimitsConfig
from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.routing import Target
from gateway.telemetry.metrics import Metrics

JSON_TYPE = "application/json"
WELL_KNOWN_SEGMENT = ".well-known"
"""Paths under /.well-known/ are metadata documents that client authentication lets through
(gateway/policy/client_auth.py), so no client way in serves a slot from one."""
NO_SUCH_ENDPOINT = (
    "No such endpoint. Clients use /<slot>/mcp (Streamable HTTP; also /_all/mcp, /_broker/mcp), "
    "GET /<slot>/sse (legacy HTTP+SSE) or a WebSocket upgrade at /<slot>; providers use /provider/<slot> "
    "or /providers."
)


def json_response(message: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    # aiohttp copies `headers` into the response's own header map: no copy of ours is needed.
    return web.Response(body=orjson.dumps(message), status=status, content_type=JSON_TYPE, headers=headers or None)


def rpc_error(status: int, code: int, message: str, request_id: Any = None, data: Any = None) -> web.Response:
    return json_response(jsonrpc.error_response(request_id, code, message, data), status=status)


def http_error(status: int, error: str, description: str) -> web.Response:
    return json_response({"error": error, "error_description": description}, status=status)


@dataclass(frozen=True)
class Refusal:
    """A client request refused before it reached the core: the JSON-RPC error answer (with the
    request's id), and the HTTP status and headers to send it with where HTTP answers it directly.

    Channel transports (legacy SSE, raw WebSocket) deliver `error` on the client's stream instead."""

    status: int
    error: JsonObject
    headers: Mapping[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        return json_response(self.error, status=self.status, headers=self.headers)


Admission = Callable[[web.Request, Target, jsonrpc.Message], Refusal | None]
"""A policy step run on every client JSON-RPC request once it is parsed (rate limits): None admits
it, a Refusal refuses it. Built by the composition root, so the transports hold no policy. For a
WebSocket the request is the upgrade request (who the caller is, which slot it named)."""


async def read_message(request: web.Request, limits: LimitsConfig, metrics: Metrics) -> jsonrpc.Message | web.Response:
    """The one JSON-RPC message of a POST body, or the HTTP answer refusing it (too large, not
    JSON-RPC, a batch)."""
    length = request.content_length
    if length is not None and length > limits.max_body_bytes:
        metrics.limit_hit("max_body_bytes")
        return http_error(
            413,
            "body_too_large",
            f"Request body is {length} bytes; the limit is {limits.max_body_bytes} (limits.max_body_bytes)",
        )
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        metrics.limit_hit("max_body_bytes")
        return http_error(
            413,
            "body_too_large",
            f"Request body exceeds {limits.max_body_bytes} bytes (limits.max_body_bytes)",
        )
    message = jsonrpc.parse(body)
    if message.kind is Kind.INVALID:
        metrics.unparsable.labels("client").inc()
        code = jsonrpc.PARSE_ERROR if message.body is None else jsonrpc.INVALID_REQUEST
        return rpc_error(400, code, f"Invalid JSON-RPC: {message.problem}")
    if message.kind is Kind.BATCH:
        return rpc_error(400, jsonrpc.INVALID_REQUEST, "JSON-RPC batches are not supported; send one message per POST")
    return message
