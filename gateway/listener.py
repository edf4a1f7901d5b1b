"""The listener's connections: caps in total and per peer address, and the deadlines before a request.

aiohttp bounds header sizes and closes a keep-alive connection idle for `keepalive_timeout`
(limits.connections.idle_timeout_s); this module adds what it lacks, on its own request handler:

- the caps (gateway/policy/connection_limits.py decides): a connection over one has its request read
  and answered 503 with a JSON body, then closed; with `max_refusing` such answers under way, it is
  closed at once;
- a header deadline: a request's headers must be complete `header_timeout_s` after the connection
  opened (its first request) or after the request's first byte, else 408 (or a plain close when not a
  byte of it came) and close;
- a TLS handshake deadline (asyncio's `ssl_handshake_timeout`);
- a bound on draining: a request answered before its body was read whole (a 413, a 401) is answered
  with `Connection: close`, and the rest of its body is read and discarded for `body_timeout_s` at
  most (aiohttp's lingering) and for at most DRAIN_FACTOR times the request's max_body_bytes more
  bytes, after which the connection closes;
- the descriptor limit raised from soft to hard at start, and the cap lowered to what it leaves.

A connection's request being answered, and an open stream (SSE, WebSocket), are never idle: aiohttp's
idle timer and the header deadline run only while the connection waits for a request. Bodies keep to
their pace in gateway/policy/request_body.py. The handler reads aiohttp's `_waiter` (pending while the
connection waits for a request), `_request_count` (requests parsed), replaces `_request_handler`
for a refused connection and extends `finish_response` (the answer written, before the drain);
tests/integration/test_connection_limits.py and test_refused_body_drain.py fail if aiohttp changes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from gateway.config import ConnectionLimitsConfig
from gateway.policy.connection_limits import (
    CUT_LIMIT_KEYS,
    CUT_REASONS,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    KEY,
    MAX_CONNECTIONS,
    MAX_REFUSING,
    REFUSAL_REASONS,
    Admission,
    ConnectionLimiter,
    FdLimit,
    Verdict,
    peer_key,
)
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.listener")

SETTINGS = f"limits.{KEY}"
"""How a refusal names the section its bound is set in."""
DRAIN_FACTOR = 16
"""How many times max_body_bytes of an unread body is drained after an early answer (413, 401)
before the connection is closed: 64 MiB at the default, a fraction of a second of reading."""

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def json_error(error: str, description: str) -> bytes:
    return orjson.dumps({"error": error, "error_description": description})


def raw_answer(status: int, phrase: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written straight to the transport (used when
    no handler runs: a request whose headers never completed)."""
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class ListenerGuard:
    """What every connection's handler shares: the limiter, the settings, the counters, the answers."""

    def __init__(self, limiter: ConnectionLimiter, settings: ConnectionLimitsConfig, metrics: Metrics) -> None:
        self.limiter = limiter
        self.settings = settings
        self.metrics = metrics
        self.cuts = {reason: metrics.connection_cuts.labels(reason) for reason in CUT_REASONS}
        self.refusals = {reason: metrics.connection_refusals.labels(reason) for reason in REFUSAL_REASONS}
        self.header_timeout_answer = raw_answer(
            408,
            "Request Timeout",
            json_error(
                HEADER_TIMEOUT,
                f"The request's headers did not arrive within {settings.header_timeout_s:g} s "
                f"({SETTINGS}.header_timeout_s); send the whole request at once",
            ),
        )

    def cut(self, reason: str) -> None:
        self.cuts[reason].inc()
        key = CUT_LIMIT_KEYS.get(reason)
        if key is not None:
            self.metrics.limit_hit(key)

    def refused(self, admission: Admission) -> None:
        reason = admission.reason if admission.verdict is Verdict.REFUSE else MAX_REFUSING
        assert reason is not None
        self.refusals[reason].inc()
        self.metrics.limit_hit(f"{KEY}.{reason}")

    def refusal_handler(self, admission: Admission, peer: str | None) -> Handler:
        """Answers the request of a connection over a cap: 503, a JSON body naming the cap, close."""
        limiter = self.limiter
        if admission.reason == MAX_CONNECTIONS:
            body = json_error(
                "too_many_connections",
                f"The gateway holds {admission.held} connections, its limit ({limiter.cap_words()}); "
                "try again shortly, and close connections you no longer use",
            )
        else:
            body = json_error(
                "too_many_connections_from_peer",
                f"Address {peer} holds {admission.held} connections, the limit per address "
                f"({SETTINGS}.max_per_peer); close connections you no longer use, or list a proxy's address "
                f"in {SETTINGS}.per_peer_exempt",
            )

        async def refuse(_: web.BaseRequest) -> web.StreamResponse:
            response = web.Response(body=body, status=503, content_type="application/json")
            response.force_close()
            return response

        return refuse

    def protocol_factory(self, server: web.Server) -> Callable[[], RequestHandler]:
        """What the listening socket makes for each connection: aiohttp's handler with the guard on it."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        options: dict[str, Any] = {
            "keepalive_timeout": settings.idle_timeout_s,
            # An answer given before the body was read (413, 408) drains what the client still sends,
            # so it reads the answer rather than a reset; for as long as a body may pause, no longer,
            # and no more than the request's max_body_bytes (GuardedRequestHandler.finish_response).
            "lingering_time": settings.body_timeout_s,
            "max_line_size": settings.max_header_bytes,
            "max_field_size": settings.max_header_bytes,
            "max_headers": settings.max_headers,
            "access_log": None,
        }

        def make() -> RequestHandler:
            return GuardedRequestHandler(server, self, loop=loop, **options)

        return make


class GuardedRequestHandler(RequestHandler):
    """aiohttp's request handler, counted against the caps and with a header deadline."""

    __slots__ = ("_admission", "_drain_left", "_draining", "_guard", "_header_bytes", "_header_count", "_header_timer")

    def __init__(self, manager: web.Server, guard: ListenerGuard, *, loop: asyncio.AbstractEventLoop, **options: Any):
        super().__init__(manager, loop=loop, **options)
        self._guard = guard
        self._admission: Admission | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_count = 0
        """The request the header deadline is for (requests parsed when it was armed)."""
        self._header_bytes = False
        """Whether a byte of that request has come: a 408 makes sense to it only then."""
        self._draining: StreamReader | None = None
        """The body of a request answered before it was read whole, while aiohttp drains it."""
        self._drain_left = 0
        """Bytes the drain may still read before the connection is closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        peer = peer_key(transport.get_extra_info("peername"))
        admission = guard.limiter.open(peer)
        if admission.verdict is Verdict.CLOSE:
            guard.refused(admission)
            transport.close()  # never handed to aiohttp: no task, no timer, nothing to release
            return
        self._admission = admission
        super().connection_made(transport)
        if admission.verdict is Verdict.REFUSE:
            guard.refused(admission)
            self._request_handler = guard.refusal_handler(admission, peer)
        self._arm_header_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        admission, self._admission = self._admission, None
        if admission is not None:
            self._guard.limiter.close(admission)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._draining is not None:
            self._drain(len(data))
        waiter = self._waiter  # pending while the connection waits for a request; None while one runs
        if waiter is None or not data:
            return
        if waiter.done():
            # A request's headers are complete (or the connection is closing): its deadline is met.
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            return
        # Part of a request whose headers have not all come.
        if self._header_timer is None or self._header_count != self._request_count:
            self._arm_header_deadline()
        self._header_bytes = True

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        body = request.content
        if not body.is_eof() and not resp.prepared:
            resp.force_close()  # answered before its body was read: the client must not send on this connection
        answered = await super().finish_response(request, resp, start_time)
        if not body.is_eof() and self.transport is not None:
            # aiohttp reads what is left of the body for lingering_time, at whatever rate it comes (an
            # endless chunked body: gigabytes). A client that sends its whole body before it reads (as
            # http.client does) reads its answer if the rest fits DRAIN_FACTOR bodies; past that the
            # connection is closed.
            self._draining = body
            self._drain_left = request.client_max_size * DRAIN_FACTOR
        return answered

    def _drain(self, received: int) -> None:
        """Count bytes read while an answered request's body is drained; close past the budget."""
        body = self._draining
        if body is None or body.is_eof() or self.transport is None:
            self._draining = None  # drained whole: the connection goes on (keep-alive) or closes as aiohttp says
            return
        self._drain_left -= received
        if self._drain_left < 0:
            self._draining = None
            log.debug("closing a connection whose unread request body passed its drain budget after its answer")
            body.feed_eof()  # ends aiohttp's drain as a finished one: no "Connection closed." error logged
            self.force_close()

    def _arm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_count = self._request_count
        self._header_bytes = False
        self._header_timer = self._loop.call_later(self._guard.settings.header_timeout_s, self._header_deadline)

    def _header_deadline(self) -> None:
        self._header_timer = None
        waiter = self._waiter
        transport = self.transport
        if transport is None or waiter is None or waiter.done() or self._request_count != self._header_count:
            return  # the request came (a later one arms its own deadline with its first byte)
        self._guard.cut(HEADER_TIMEOUT)
        if self._header_bytes:
            transport.write(self._guard.header_timeout_answer)
        self.force_close()

    def _process_keepalive(self) -> None:
        # aiohttp's idle timer: it closes the connection when it is still waiting for a request.
        was_open = self.transport is not None
        super()._process_keepalive()
        if was_open and self.transport is None:
            self._guard.cut(IDLE_TIMEOUT)


class GuardedSite(web.BaseSite):
    """A TCP site whose connections get `protocols()` (the guarded handler) and whose TLS handshakes end
    after `handshake_timeout_s`."""

    __slots__ = ("_handshake_timeout_s", "_host", "_port", "_protocols")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        protocols: Callable[[], RequestHandler],
        *,
        ssl_context: Any = None,
        handshake_timeout_s: float,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._protocols = protocols
        self._handshake_timeout_s = handshake_timeout_s

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        tls = self._ssl_context is not None
        self._server = await loop.create_server(
            self._protocols,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            ssl_handshake_timeout=self._handshake_timeout_s if tls else None,
        )


def open_fd_count() -> int:
    """Descriptors open in this process now (0 where the system does not list them)."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(directory))
    return 0


def raise_fd_limit() -> FdLimit | None:
    """Raise RLIMIT_NOFILE's soft limit to the hard one where the system allows; what it is now.

    None where the system has no such limit (no `resource` module)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    raised_from: int | None = None
    if soft not in (hard, unlimited):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. macOS, whose unlimited hard limit is no valid soft one
            log.debug("descriptor limit stays at %d (raising it to %d failed: %s)", soft, hard, exc)
        else:
            raised_from, soft = soft, hard
    return FdLimit(
        soft=None if soft == unlimited else soft,
        hard=None if hard == unlimited else hard,
        raised_from=raised_from,
        open_at_start=open_fd_count(),
    )
