"""Reading a request body within its pace: limits.connections.body_timeout_s and body_min_rate_bytes_per_s.

aiohttp waits for a body as long as its client takes, so a client that stalls, or drips a byte at a
time, would hold the connection and every byte it sent for as long as it liked. Here a watchdog timer
follows the body's bytes as aiohttp's own `request.read()` takes them in (gateway/policy/connection_limits.py
says when it is behind), and ends the read when it is: the client gets 408 with a JSON body naming the
bound, and the connection closes. `request.read()` keeps its one buffered copy, so every reader of a
request (signature verification, then the JSON-RPC reader) shares it and the first pays the wait.

A body that came with its headers (nearly every JSON-RPC message) is read with no timer at all.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web
from aiohttp.streams import StreamReader

from gateway.config import ConnectionLimitsConfig
from gateway.policy.connection_limits import BODY_TIMEOUT, CUT_LIMIT_KEYS, BodyPace
from gateway.telemetry.metrics import Metrics

SETTINGS = "limits.connections"


class BodyTooSlow(web.HTTPRequestTimeout):
    """408 with the gateway's JSON refusal; the connection closes after it."""

    def __init__(self, reason: str, description: str) -> None:
        text = orjson.dumps({"error": reason, "error_description": description}).decode()
        super().__init__(text=text, content_type="application/json")
        self.reason_key = reason
        self.force_close()


class _Watchdog:
    """Re-armed at each deadline the body's pace gives; ends the read (`scope`) once the body is behind."""

    __slots__ = ("content", "handle", "loop", "pace", "scope", "verdict")

    def __init__(
        self, content: StreamReader, pace: BodyPace, loop: asyncio.AbstractEventLoop, scope: asyncio.Timeout
    ) -> None:
        self.content = content
        self.pace = pace
        self.loop = loop
        self.scope = scope
        self.verdict: str | None = None
        self.handle = loop.call_at(pace.deadline(), self.check)

    def check(self) -> None:
        now = self.loop.time()
        self.pace.advance(now, self.content.total_bytes)
        verdict = self.pace.overdue(now)
        if verdict is None:
            self.handle = self.loop.call_at(self.pace.deadline(), self.check)
            return
        self.verdict = verdict
        self.scope.reschedule(now)


async def read_body(request: web.Request, settings: ConnectionLimitsConfig, metrics: Metrics) -> bytes:
    """The request's whole body (`request.read()`, within client_max_size), or BodyTooSlow raised when
    it pauses for body_timeout_s or falls below body_min_rate_bytes_per_s after that grace."""
    content = request.content
    if content.is_eof():
        return await request.read()
    loop = asyncio.get_running_loop()
    started = loop.time()
    pace = BodyPace(settings.body_timeout_s, settings.body_min_rate_bytes_per_s, started, content.total_bytes)
    watchdog: _Watchdog | None = None
    try:
        async with asyncio.timeout(None) as scope:
            watchdog = _Watchdog(content, pace, loop, scope)
            try:
                return await request.read()
            finally:
                watchdog.handle.cancel()
    except TimeoutError:
        if watchdog is None or watchdog.verdict is None:
            raise
        verdict = watchdog.verdict
    metrics.connection_cuts.labels(verdict).inc()
    metrics.limit_hit(CUT_LIMIT_KEYS[verdict])
    elapsed = loop.time() - started
    expected = f" of {request.content_length}" if request.content_length is not None else ""
    if verdict == BODY_TIMEOUT:
        description = (
            f"The request body stopped arriving for {settings.body_timeout_s:g} s ({SETTINGS}.body_timeout_s) "
            f"after {pace.received}{expected} bytes; send the body without pauses"
        )
    else:
        description = (
            f"The request body arrived at {pace.received / elapsed:.0f} bytes/s ({pace.received}{expected} bytes "
            f"in {elapsed:.1f} s), below the minimum of {settings.body_min_rate_bytes_per_s} bytes/s "
            f"({SETTINGS}.body_min_rate_bytes_per_s); send the body at once"
        )
    raise BodyTooSlow(verdict, description)
