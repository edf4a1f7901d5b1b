"""The one gate every HTTP and WebSocket request passes before any handler: counted, then checked.

Checks are policy decisions (gateway/policy/) applied in order; the first refusal answers the request.
Adding a check (authentication, rate limits) means adding one step here, so no way in can miss it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from gateway.core import jsonrpc
from gateway.core.groups.views import is_bridge_path
from gateway.core.principal import ANONYMOUS
from gateway.core.routing import SlotTarget, Target
from gateway.http_answers import STREAMED_STATUS_KEY, http_error
from gateway.northbound.http_io import Admission, Refusal
from gateway.policy.origin import OriginPolicy
from gateway.policy.rate_limit import RateLimiter
from gateway.policy.request_principal import PRINCIPAL_KEY, request_principal
from gateway.telemetry.hot_metrics import Count
from gateway.telemetry.metrics import Metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Check = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
"""A policy step: None lets the request through; a response refuses it."""

CORS_ALLOW_HEADERS = (
    "Content-Type, Accept, Authorization, Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID"
)
CORS_HEADERS_KEY = web.RequestKey("cors_headers", dict[str, str])
CLIENT_CLOSED = 499
"""The status mcpgw_http_requests_total counts a request under when its client left before the answer
(nginx's "client closed request"): no answer was sent, but the request is counted all the same."""


@functools.lru_cache(maxsize=256)  # clients use a few paths; any may arrive, so the memo is bounded
def endpoint_kind(path: str) -> str:
    """A bounded label for /metrics: which kind of endpoint a request went to."""
    if path in ("/healthz", "/readyz", "/metrics"):
        return path[1:]
    if path == "/providers" or path.startswith("/provider/") or path == "/provider":
        return "provider"
    if path == "/_broker/mcp":
        return "broker"
    if path == "/_all/mcp":
        return "all"
    if is_bridge_path(path):
        return "groups"  # /mcp, /mcp/<group>, /groups, /mcp-servers
    if path.endswith("/mcp") and path.count("/") == 2:
        return "slot"
    if path.count("/") == 2 and (path.endswith("/sse") or path.endswith("/messages")):
        return "sse"
    return "other"


class RequestCounter:
    """mcpgw_http_requests children, looked up once per (endpoint kind, status)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.children: dict[tuple[str, int], Count] = {}

    def count(self, kind: str, status: int) -> None:
        child = self.children.get((kind, status))
        if child is None:
            child = self.metrics.http_requests.labels(kind, str(status))
            self.children[(kind, status)] = child
        child.value += 1


def origin_check(policy: OriginPolicy, metrics: Metrics) -> Check:
    """Origin and Host (DNS rebinding) on every entry; CORS for allowed browser origins."""

    async def check(request: web.Request) -> web.StreamResponse | None:
        headers = request.headers
        # Every value, not the first (a second Origin or Host must not ride along unchecked), and the
        # target as sent: aiohttp's request.host and request.url take an absolute-form target's
        # authority, or the socket's own address when there is no Host, which would check nothing.
        origins = headers.getall("Origin", ())
        refusal = policy.check_request(origins, headers.getall("Host", ()), request.raw_path)
        if refusal is not None:
            metrics.refusals.labels(refusal.error).inc()
            return http_error(refusal.status, refusal.error, refusal.description)
        if not origins:
            return None
        origin = origins[0]
        cors = {
            "Access-Control-Allow-Origin": origin,
            # WWW-Authenticate: a browser client finds the OAuth metadata through it on a 401;
            # Retry-After: when to try again after a 429 (rate limit).
            "Access-Control-Expose-Headers": "Mcp-Session-Id, WWW-Authenticate, Retry-After",
            "Vary": "Origin",
        }
        if request.method == "OPTIONS":
            cors["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
            cors["Access-Control-Allow-Headers"] = request.headers.get(
                "Access-Control-Request-Headers", CORS_ALLOW_HEADERS
            )
            return web.Response(status=204, headers=cors)
        # Added when the response is prepared, so streamed answers (SSE) that a handler starts itself
        # carry them too; a browser hides a stream without them.
        request[CORS_HEADERS_KEY] = cors
        return None

    return check


def rate_limit_admission(limiter: RateLimiter, metrics: Metrics) -> Admission:
    """Token buckets on each client request: the caller's, and the slot's when the path names one.

    `/_all/mcp` learns the slot only when it routes a tools/call; the aggregate charges it then.
    A refusal is HTTP 429 with Retry-After (whole seconds, rounded up) and a JSON-RPC -32029 body
    whose data.retryAfterMs is exact, carrying the request's id. Legacy SSE and raw WebSocket
    clients get that JSON-RPC answer on their stream, since their request was already accepted."""

    def admit(request: web.Request, target: Target, message: jsonrpc.Message) -> Refusal | None:
        slot = target.name if isinstance(target, SlotTarget) else None
        limited = limiter.admit(request_principal(request), slot)
        if limited is None:
            return None
        metrics.rate_limited.labels(limited.scope).inc()
        metrics.limit_hit(limited.limit)
        body = jsonrpc.error_response(message.id, jsonrpc.RATE_LIMITED, limited.message(), limited.data())
        return Refusal(429, body, {"Retry-After": str(limited.retry_after_header)})

    return admit


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the CORS headers the origin check granted this request, if any."""
    cors = request.get(CORS_HEADERS_KEY)
    if cors is not None:
        response.headers.update(cors)


Gate = Callable[[Handler], Handler]
"""Wraps one route's handler in the entry gate."""


def entry_gate(metrics: Metrics, checks: list[Check]) -> Gate:
    """The gate, put around each route's handler as the route is added (`gated_routes`).

    A wrapper per handler rather than an aiohttp middleware: with any middleware at all, aiohttp puts
    a coroutine of its own (`_fix_request_current_app`) and a cached-chain lookup around every
    request, work every relayed call would pay for. `tests/unit/test_entry_gate.py` walks the built
    application's router, so a route added without the gate fails a test."""
    counter = RequestCounter(metrics)

    def gated(handler: Handler) -> Handler:
        async def gate(request: web.Request) -> web.StreamResponse:
            kind = endpoint_kind(request.rel_url.raw_path)
            if kind == "other" and request.headers.get("Upgrade", "").lower() == "websocket":
                kind = "websocket"  # a raw WebSocket client at /<slot>
            request[PRINCIPAL_KEY] = ANONYMOUS  # until client authentication, when configured, says who it is
            try:
                for check in checks:
                    refusal = await check(request)
                    if refusal is not None:
                        counter.count(kind, refusal.status)
                        return _closing_refused_upgrade(request, refusal)
                response = await handler(request)
            except web.HTTPException as exc:
                counter.count(kind, exc.status)
                raise
            except BaseException as exc:
                # A WebSocket or event stream whose connection was lost ends its handler with an
                # exception: it was answered (101, 200) all the same.
                streamed = request.get(STREAMED_STATUS_KEY)
                if streamed is not None:
                    counter.count(kind, streamed)
                elif isinstance(exc, asyncio.CancelledError | ConnectionError):
                    counter.count(kind, CLIENT_CLOSED)  # the client left before its answer (aiohttp cancels)
                elif isinstance(exc, Exception):
                    counter.count(kind, 500)  # what aiohttp answers for a handler's unexpected error
                raise
            counter.count(kind, response.status)
            return _closing_refused_upgrade(request, response) if response.status >= 400 else response

        return gate

    return gated


def _closing_refused_upgrade(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """A refused WebSocket upgrade ends its connection: the client took the answer as the end of
    the handshake, and whatever it sends next (a board's close frame, say) is not HTTP."""
    if request.headers.get("Upgrade", "").lower() == "websocket" and not response.prepared:
        response.force_close()
    return response


def gated_routes(gate: Gate, routes: Iterable[web.RouteDef]) -> list[web.RouteDef]:
    """The same routes, each handler behind `gate`."""
    return [web.RouteDef(route.method, route.path, gate(route.handler), route.kwargs) for route in routes]
