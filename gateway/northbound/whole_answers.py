"""Whole answers to a Streamable HTTP POST (ready before anything else went out on it): one SSE event
per response, or application/json when an event would be larger than limits.max_sse_answer_bytes.

MCP clients bound the size of one SSE event (the `mcp` SDK refuses any over 1 MiB) but read a JSON
body of any size, and every MCP client accepts both forms on a POST; a large answer (a big catalog's
tools/list) therefore goes as JSON to a client that takes JSON (docs/protocol-clients.md, "Answers:
JSON or SSE"). Each body is encoded once, whichever form it takes.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from gateway.core.jsonrpc import JsonObject
from gateway.http_answers import JSON_TYPE
from gateway.northbound.event_stream import SSE_HEADERS, accepts, as_event, encode_data


def whole(
    request: web.Request,
    answers: list[JsonObject],
    headers: Mapping[str, str],
    max_event_bytes: int,
    *,
    batch: bool,
    status: int = 200,
) -> web.Response:
    """One SSE event per answer in one body with a Content-Length (so the client can send its next
    request on the same connection); JSON instead (one object, or an array for a `batch`) when an
    event's data is over `max_event_bytes` and the client accepts JSON."""
    bodies = [encode_data(answer) or b"{}" for answer in answers]  # an answer always encodes (its -32603)
    if any(len(body) > max_event_bytes for body in bodies) and accepts(request)[0]:
        data = b"[" + b",".join(bodies) + b"]" if batch else bodies[0]
        return web.Response(body=data, status=status, content_type=JSON_TYPE, headers=headers or None)
    return web.Response(
        body=b"".join(as_event(body) for body in bodies), status=status, headers={**SSE_HEADERS, **headers}
    )
