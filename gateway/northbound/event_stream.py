"""Server-sent events on aiohttp: open a stream, write JSON-RPC messages as events, keep it alive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import orjson
from aiohttp import web

from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue
from gateway.http_answers import JSON_TYPE, STREAMED_STATUS_KEY, encode_refused
from gateway.northbound.credential_watch import CredentialWatch
from gateway.policy.connection_limits import STREAM_WRITE_TIMEOUT
from gateway.policy.verifier import AuthFailure
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.northbound.http")

SSE_TYPE = "text/event-stream"
SSE_HEADERS = {
    "Content-Type": SSE_TYPE,
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def encode_data(message: JsonObject) -> bytes | None:
    """`message` as JSON; an answer the encoder refuses becomes its -32603 error, and a notification or
    request that cannot be encoded is None (http_io.encode_refused)."""
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        return encode_refused(message, exc)


def as_event(data: bytes, event: str = "message") -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def encode_event(message: JsonObject, event: str = "message") -> bytes:
    """One SSE event; b"" for a notification or request that cannot be encoded."""
    data = encode_data(message)
    return b"" if data is None else as_event(data, event)


KEEPALIVE = b": keepalive\n\n"


def accepts(request: web.Request) -> tuple[bool, bool]:
    """(accepts JSON, accepts SSE); a missing Accept header accepts both."""
    accept = request.headers.get("Accept", "")
    if not accept or "*/*" in accept:
        return True, True
    return (JSON_TYPE in accept or "application/*" in accept), (SSE_TYPE in accept or "text/*" in accept)


def lists_sse(request: web.Request) -> bool:
    """Whether the client's Accept names text/event-stream itself (what every MCP client sends); a
    client that accepts anything (`*/*`, no Accept) or only JSON gets JSON answers."""
    return SSE_TYPE in request.headers.get("Accept", "")


def one_event(message: JsonObject, extra_headers: Mapping[str, str], status: int = 200) -> web.Response:
    """A whole SSE answer of one `message` event: a plain response with a Content-Length, so aiohttp
    sends the headers and the event in one write, and a client that reads the body to its end can
    send its next request on the same connection. `status`: a stateless-era error's HTTP status."""
    return web.Response(body=encode_event(message), status=status, headers={**SSE_HEADERS, **extra_headers})


async def open_stream(request: web.Request, extra_headers: Mapping[str, str] | None = None) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(extra_headers or {})})
    await response.prepare(request)
    request[STREAMED_STATUS_KEY] = 200  # counted as answered, however the stream ends
    return response


def client_gone(what: str, exc: ConnectionError) -> web.Response:
    """The end of a stream handler whose client hung up (before its headers went out, or while it was
    written): a hang-up is what clients do, not a fault, so it is logged at debug only (an ERROR with a
    traceback per dropped connection would fill an SD card). Nobody reads the returned answer; aiohttp
    drops it quietly."""
    log.debug("%s: the client went away: %s", what, exc)
    return web.Response(status=200)


WRITE_HEADROOM = 16 * 1024
"""Bytes a write may add beyond its data (chunk framing, headers still unsent) in `write`'s fast path."""


class StreamStalled(ConnectionError):
    """A write to a client stream did not complete within limits.stream_write_timeout_s."""


async def write(
    request: web.Request,
    response: web.StreamResponse,
    data: bytes,
    timeout_s: float,
    metrics: Metrics,
    *,
    eof: bool = False,
) -> None:
    """Write `data` (and end the response: `eof`), waiting at most `timeout_s` for a client that does
    not read. A stalled write aborts the connection (dropping what its buffers hold), is counted, and
    raises StreamStalled."""
    transport = request.transport
    if transport is not None:
        # A write waits only while the transport's buffer is over its high-water mark; one that cannot
        # get there needs no timer (the common case, and the relay's hot path).
        high = transport.get_write_buffer_limits()[1]
        if transport.get_write_buffer_size() + len(data) + WRITE_HEADROOM <= high:
            await (response.write_eof(data) if eof else response.write(data))
            return
    try:
        async with asyncio.timeout(timeout_s):
            await (response.write_eof(data) if eof else response.write(data))
    except TimeoutError:
        metrics.connection_cuts.labels(STREAM_WRITE_TIMEOUT).inc()
        metrics.limit_hit("stream_write_timeout_s")
        if transport is not None:
            transport.abort()
        raise StreamStalled(f"Client did not read for {timeout_s:g} s (limits.stream_write_timeout_s)") from None


async def pump(
    request: web.Request,
    response: web.StreamResponse,
    queue: MessageQueue,
    keepalive_s: float,
    write_timeout_s: float,
    metrics: Metrics,
    watch: CredentialWatch | None = None,
    encode: Callable[[JsonObject], bytes | None] = encode_data,
) -> AuthFailure | None:
    """Write queued messages as events until the queue closes; comment lines keep idle streams open.
    A message that cannot be encoded is dropped (counted), the stream goes on. A client that stops
    reading ends the stream once a write (a message or a keepalive) waits `write_timeout_s`: the
    queue is closed and the connection aborted, so neither keeps the messages.

    `watch`: the caller's credential is judged before a write, at most once per RECHECK_EVERY_S (a
    keepalive is a write, so an idle stream is judged at least every `keepalive_s`). When it no longer
    stands the queue is closed with what it holds dropped, nothing more is written, and the failure
    is returned for the caller to end the stream with.

    `encode`: a message's JSON (None: dropped), e.g. the encoding the queue made when it took it."""
    try:
        while True:
            message = await queue.get(timeout=keepalive_s)
            if message is None and queue.closed:
                return None
            if watch is not None and watch.due() and (failure := await watch.failure()) is not None:
                queue.close(drop=True)
                return failure
            if message is None:
                await write(request, response, KEEPALIVE, write_timeout_s, metrics)
                continue
            data = encode(message)
            if data is None:
                metrics.unencodable.inc()
                continue
            await write(request, response, as_event(data), write_timeout_s, metrics)
    except StreamStalled:
        queue.close(drop=True)
    return None
