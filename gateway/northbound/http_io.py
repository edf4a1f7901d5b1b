"""HTTP pieces every client endpoint shares: JSON answers, the Content-Type check, the request-body
cap, the admission step.

Used by Streamable HTTP (`/<slot>/mcp`), legacy HTTP+SSE (`/<slot>/sse`, `/<slot>/messages`) and the
raw WebSocket upgrade (`/<slot>`), so a limit or a refusal reads the same on every way in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from gateway.config import LimitsConfig
from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.routing import Target
from gateway.http_answers import JSON_TYPE, http_error, json_response, rpc_error
from gateway.northbound.batches import not_accepted
from gateway.policy.request_body import read_body
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.northbound")

WELL_KNOWN_SEGMENT = ".well-known"
"""Paths under /.well-known/ are metadata documents that client authentication lets through
(gateway/policy/client_auth.py), so no client way in serves a slot from one."""
NO_SUCH_ENDPOINT = (
    "No such endpoint. Clients use /<slot>/mcp (Streamable HTTP; also /_all/mcp, /_broker/mcp), "
    "GET /<slot>/sse (legacy HTTP+SSE) or a WebSocket upgrade at /<slot>; providers use /provider/<slot> "
    "or /providers."
)


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


def surrogates_replaced(text: str) -> str:
    """Header bytes that are not UTF-8 reach aiohttp's handlers as surrogate escapes, which no JSON
    answer can hold: shown as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def json_content_type(request: web.Request) -> web.Response | None:
    """None when the request says its body is application/json (parameters such as charset allowed,
    any case), else the 415 refusing it. A body sent as text/plain or as a form is what a web page
    may POST to another origin without asking first (no CORS preflight); MCP clients send JSON."""
    # aiohttp's content_type is the media type alone, lower-cased; application/octet-stream when absent.
    if request.content_type == JSON_TYPE:
        return None
    sent = request.headers.get("Content-Type")
    shown = "no Content-Type" if sent is None else f"Content-Type {surrogates_replaced(sent[:60])!r}"
    return http_error(
        415,
        "unsupported_media_type",
        f"The request has {shown}; POST JSON-RPC with Content-Type: application/json",
    )


async def read_message(
    request: web.Request,
    limits: LimitsConfig,
    metrics: Metrics,
    *,
    stream_answers: bool = False,
    batches: bool = False,
) -> jsonrpc.Message | web.Response:
    """The one JSON-RPC message of a POST body, or the HTTP answer refusing it (not JSON, too large,
    not JSON-RPC, a batch). With `stream_answers` (legacy SSE), a message over a bound (nested too
    deep) is returned as it is, to be refused on the client's stream like any request the POST
    accepted. With `batches`, a batch is returned too, for the caller to judge by its session's
    era (gateway/northbound/batches.py)."""
    refused = json_content_type(request)
    if refused is not None:
        return refused
    length = request.content_length
    if length is not None and length > limits.max_body_bytes:
        metrics.limit_hit("max_body_bytes")
        return http_error(
            413,
            "body_too_large",
            f"Request body is {length} bytes; the limit is {limits.max_body_bytes} (limits.max_body_bytes)",
        )
    try:
        # Within its pace too: a body that stalls or drips raises BodyTooSlow, a 408 (gateway/policy/request_body.py).
        body = await read_body(request, limits.connections, metrics)
    except web.HTTPRequestEntityTooLarge:
        metrics.limit_hit("max_body_bytes")
        return http_error(
            413,
            "body_too_large",
            f"Request body exceeds {limits.max_body_bytes} bytes (limits.max_body_bytes)",
        )
    message = jsonrpc.parse_client(body, limits.max_json_depth)
    if message.kind is Kind.INVALID:
        if message.limit and stream_answers:
            return message
        metrics.unparsable.labels("client").inc()
        if message.limit:
            metrics.limit_hit(message.limit)
        code = jsonrpc.PARSE_ERROR if message.body is None else jsonrpc.INVALID_REQUEST
        # A message over a bound was valid JSON: its id (kept when valid) lets the client match the refusal.
        return rpc_error(400, code, f"Invalid JSON-RPC: {message.problem}", message.id if message.limit else None)
    if message.kind is Kind.BATCH and not batches:
        return json_response(not_accepted(), status=400)
    return message
