"""The simulator's control endpoint: a small JSON API on 127.0.0.1, never part of the MCP surface.

    GET  /pumps                    {"pumps": [state, ...]}
    GET  /pumps/<slot>             one pump's state
    POST /pumps/<slot>/faults      {"fault": "dry_run"|"overtemp"|"sensor_failure"|"reboot"|"link_drop",
                                    "clear": false, "seconds": N (link_drop only)}  -> the pump's state

A state is {slot, device_id, link: {url, connected, links, offline_for_s, last_down_reason},
injected: [conditions], boots, status: <the get_status object>, requests: {requests, duplicates,
errors}, telemetry: {queued, dropped} or null}. Errors are JSON
{"error": code, "error_description": text}: 404 unknown_pump / not_found, 405 method_not_allowed,
413 request_too_large (a body over 64 KiB), 400 unknown_fault / bad_request,
403 when a browser's Origin is not a loopback page or the Host is not a loopback name (a page from
another machine must not be able to inject faults, also not through DNS rebinding; a test bench's
dashboard served from this machine may).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway.policy.origin import OriginPolicy

if TYPE_CHECKING:
    from sim.simulator import Simulator

LOOPBACK_ORIGINS = [
    f"{scheme}://{host}:*" for scheme in ("http", "https") for host in ("127.0.0.1", "localhost", "[::1]")
]
LOOPBACK_ORIGINS += [origin.removesuffix(":*") for origin in LOOPBACK_ORIGINS]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n", status=status, content_type="application/json"
    )


def _error(status: int, error: str, description: str, **extra: Any) -> web.Response:
    return _json({"error": error, "error_description": description, **extra}, status)


MAX_BODY_BYTES = 64 * 1024
"""The largest request body; a fault request is a small JSON object."""
ROUTES = "GET /pumps, GET /pumps/<slot>, POST /pumps/<slot>/faults"


def _http_error(exc: web.HTTPException, request: web.Request) -> web.Response:
    """aiohttp's own refusals (no such path, a method the path does not take, a body too big) as the
    JSON error every other answer uses, with aiohttp's headers (Allow) kept."""
    if exc.status == 404:
        error, description = "not_found", f"No such path {request.path}; the endpoint serves {ROUTES}."
    elif isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        error = "method_not_allowed"
        description = f"{request.method} is not taken on {request.path}; it takes {allowed}."
    elif exc.status == 413:
        error = "request_too_large"
        description = f"The body is over {MAX_BODY_BYTES} bytes; a fault request is a small JSON object."
    else:
        error = (exc.reason or "error").lower().replace(" ", "_")
        description = f"{exc.reason}: {exc.text}" if exc.text else str(exc.reason)
    response = _error(exc.status, error, description)
    for name, value in exc.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            response.headers[name] = value
    return response


def control_app(simulator: Simulator) -> web.Application:
    from sim.simulator import FAULTS, BadFault, UnknownPump

    policy = OriginPolicy(LOOPBACK_ORIGINS, True, [], "127.0.0.1")

    @web.middleware
    async def loopback_only(request: web.Request, handler: Any) -> web.StreamResponse:
        refusal = policy.check(request.headers.get("Origin"), request.headers.get("Host"))
        if refusal is not None:
            return _error(
                403,
                refusal.error,
                "The simulator's control endpoint takes requests from this machine only: "
                "no browser page from elsewhere, no other host name.",
            )
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _http_error(exc, request)
        return response

    async def list_pumps(_: web.Request) -> web.Response:
        return _json({"pumps": simulator.states()})

    async def one_pump(request: web.Request) -> web.Response:
        try:
            return _json(simulator.state(request.match_info["slot"]))
        except UnknownPump as exc:
            return _error(404, "unknown_pump", str(exc), pumps=list(simulator.pumps))

    async def fault(request: web.Request) -> web.Response:
        slot = request.match_info["slot"]
        try:
            simulator.pump(slot)
        except UnknownPump as exc:
            return _error(404, "unknown_pump", str(exc), pumps=list(simulator.pumps))
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "bad_request", 'The body must be JSON, e.g. {"fault": "dry_run"}.')
        if not isinstance(body, dict) or not isinstance(body.get("fault"), str):
            return _error(400, "bad_request", 'The body must be an object with "fault", e.g. {"fault": "dry_run"}.')
        unknown = sorted(set(body) - {"fault", "clear", "seconds"})
        if unknown:
            return _error(400, "bad_request", f"Unknown field(s) {', '.join(unknown)}; use fault, clear, seconds.")
        clear = body.get("clear", False)
        seconds = body.get("seconds")
        if not isinstance(clear, bool):
            return _error(400, "bad_request", '"clear" must be true or false.')
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
            return _error(400, "bad_request", '"seconds" must be a number.')
        if body["fault"] not in FAULTS:
            return _error(
                400,
                "unknown_fault",
                f"Unknown fault {body['fault']!r}; valid faults: {', '.join(FAULTS)}.",
                faults=list(FAULTS),
            )
        try:
            return _json(simulator.apply(slot, body["fault"], clear, None if seconds is None else float(seconds)))
        except BadFault as exc:
            return _error(400, "bad_request", str(exc))

    app = web.Application(middlewares=[loopback_only], client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/pumps", list_pumps)
    app.router.add_get("/pumps/{slot}", one_pump)
    app.router.add_post("/pumps/{slot}/faults", fault)
    return app
