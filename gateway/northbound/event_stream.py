"""Server-sent events on aiohttp: open a stream, write JSON-RPC messages as events, keep it alive."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from aiohttp import web

from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue
from gateway.http_answers import STREAMED_STATUS_KEY, encode_refused
from gateway.telemetry.metrics import Metrics

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def encode_event(message: JsonObject, event: str = "message") -> bytes:
    """One SSE event; b"" for a notification or request that cannot be encoded (http_io.encode_refused)."""
    try:
        data = orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        refused = encode_refused(message, exc)
        if refused is None:
            return b""
        data = refused
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


KEEPALIVE = b": keepalive\n\n"


def one_event(message: JsonObject, extra_headers: Mapping[str, str], status: int = 200) -> web.Response:
    """A whole SSE answer of one `message` event: a plain response with a Content-Length, so aiohttp
    sends the headers and the event in one write, and a client that reads the body to its end can
    send its next request on the same connection. `status`: a stateless-era error's HTTP status."""
    return web.Response(body=encode_event(message), status=status, headers={**SSE_HEADERS, **extra_headers})


def events(messages: list[JsonObject], extra_headers: Mapping[str, str]) -> web.Response:
    """A whole SSE answer of one `message` event per message (the responses to a batch), written
    like `one_event`: one body with a Content-Length."""
    return web.Response(
        body=b"".join(encode_event(message) for message in messages), headers={**SSE_HEADERS, **extra_headers}
    )


async def open_stream(request: web.Request, extra_headers: Mapping[str, str] | None = None) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(extra_headers or {})})
    await response.prepare(request)
    request[STREAMED_STATUS_KEY] = 200  # counted as answered, however the stream ends
    return response


async def pump(response: web.StreamResponse, queue: MessageQueue, keepalive_s: float, metrics: Metrics) -> None:
    """Write queued messages as events until the queue closes; comment lines keep idle streams open.
    A message that cannot be encoded is dropped (counted), the stream goes on."""
    while True:
        message = await queue.get(timeout=keepalive_s)
        if message is None:
            if queue.closed:
                return
            await response.write(KEEPALIVE)
            continue
        event = encode_event(message)
        if not event:
            metrics.unencodable.inc()
            continue
        await response.write(event)
