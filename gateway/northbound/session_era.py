"""What every session-era way in does alike, whatever carries the messages.

Streamable HTTP (`/<slot>/mcp` with `Mcp-Session-Id`), legacy HTTP+SSE and raw WebSocket clients all
hold a ClientSession of the core: opened within the session limits, bound to the caller that opened
it, told apart by the client's own request ids, and ended when the client goes. This module holds
those rules once; the transports only move bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.client_context import ClientContext
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.core.routing import Target
from gateway.core.sessions import ClientSession, InFlight, SessionLimitReached
from gateway.northbound.http_io import Refusal
from gateway.policy.caller_pending import caller_key, describe
from gateway.policy.client_auth import count_refusal


def create_session(
    gateway: Gateway,
    target: Target,
    principal: Principal,
    request_id: Any,
    how_to_end: str,
    protocol_version: str,
    client_info: Any = None,
    capabilities: Any = None,
    peer: str | None = None,
) -> ClientSession | Refusal:
    """A new session for `principal` on `target`, or the refusal naming the limit that stopped it.

    `how_to_end` tells the caller how its transport ends a session it no longer uses. An anonymous
    caller's sessions count per `peer` address, as its stateless requests do (caller_pending.py)."""
    limits = gateway.config.limits
    owner = caller_key(principal, peer)
    try:
        return gateway.sessions.create(
            target, protocol_version, client_info, capabilities, principal=principal, owner=owner
        )
    except SessionLimitReached as exc:
        gateway.metrics.limit_hit(exc.limit)
        if exc.limit == "max_sessions_per_principal":
            # The caller's own quota (others still get sessions): 429, like a rate limit, but
            # without Retry-After; sessions free up when their owner ends them or they idle out.
            held = streamed_sessions(gateway, owner)
            if held is None:
                advice = f"{how_to_end}, or wait: one idle for {limits.session_idle_when_full_s:g} s makes room"
            else:
                advice = f"held by sessions with open streams, which never idle out: {held}"
            return Refusal(
                429,
                jsonrpc.error_response(
                    request_id,
                    jsonrpc.UNAVAILABLE,
                    f"Too many sessions for {describe(owner)} (limit {exc.value}, "
                    f"limits.max_sessions_per_principal); {advice}",
                    {"reason": "session_limit", "limit": "max_sessions_per_principal", "value": exc.value},
                ),
            )
        return Refusal(
            503,
            jsonrpc.error_response(
                request_id,
                jsonrpc.UNAVAILABLE,
                f"Too many client sessions (limit {limits.max_sessions}); {how_to_end}, or raise limits.max_sessions",
                {"reason": "session_limit", "limit": "max_sessions", "value": exc.value},
            ),
        )


STREAM_KINDS = {
    "websocket": ("open WebSocket session", "open WebSocket sessions", "close WebSocket connections you no longer use"),
    "sse": ("open legacy SSE session", "open legacy SSE sessions", "close SSE streams you no longer use"),
    "streamable-http": (
        "Streamable HTTP session with an open GET stream",
        "Streamable HTTP sessions with an open GET stream",
        "end sessions you no longer use with DELETE on their endpoint (Mcp-Session-Id header)",
    ),
}
"""How a 429 at max_sessions_per_principal names the sessions of each transport holding the cap, and
how the caller ends one (each transport's own HOW_TO_END)."""


def streamed_sessions(gateway: Gateway, owner: Any) -> str | None:
    """When every session of `owner` has an open stream, and so never idles out: which kinds hold the
    cap, counted, and how to end one (`1 open WebSocket session: close WebSocket connections ...`).
    None when one of them can idle (no open stream), so waiting helps."""
    counts: dict[str, int] = {}
    for session in gateway.sessions.sessions.values():
        if session.owner != owner:
            continue
        stream = session.stream
        if stream is None or stream.closed:
            return None
        counts[session.transport] = counts.get(session.transport, 0) + 1
    if not counts:
        return None
    kinds = []
    endings = []
    for transport, count in sorted(counts.items(), key=lambda item: -item[1]):
        one, many, ending = STREAM_KINDS.get(
            transport, (f"open {transport} session", f"open {transport} sessions", f"close {transport} sessions")
        )
        kinds.append(f"{count} {one if count == 1 else many}")
        endings.append(ending)
    return f"{' and '.join(kinds)}: {'; '.join(endings)}"


def claims_session(session: ClientSession, principal: Principal, gateway: Gateway, path: str, peer: str | None) -> bool:
    """True when `principal` is the caller that opened `session`; the session then takes `principal` as
    this request's credential grants it now, so scopes a reload or a refreshed access token changed hold
    from this request on (_all and the tool groups filter by them). A session id is not a credential:
    knowing another caller's id opens nothing (False, counted and logged as an authentication failure
    of the request to `path` from `peer`, as the entry gate's refusals are)."""
    if session.principal.key == principal.key:
        session.adopt(principal)
        return True
    count_refusal(gateway.metrics, "session_owner", path, peer)
    return False


OWNER_MISMATCH = "This session belongs to another caller. Open a session of your own."


def client_notification(session: ClientSession, message: jsonrpc.Message) -> None:
    """A notification from the client: `initialized` marks the session, `cancelled` cancels the
    named request (its provider gets notifications/cancelled). Others (roots/list_changed, progress
    of client work) have no receiver behind a gateway-owned provider session; they are dropped."""
    method = message.method
    if method == "notifications/initialized":
        session.initialized = True
    elif method == "notifications/cancelled":
        params = message.params or {}
        session.cancel(params.get("requestId"), params.get("reason"))


def initialize_refusal(body: JsonObject) -> JsonObject | None:
    """-32602 for an initialize without the params MCP requires, or with members of the wrong type;
    None when it may open a session. capabilities and clientInfo only inform the gateway, so a
    client that leaves them out is taken as declaring none."""
    params = body.get("params")
    if not isinstance(params, dict):
        problem = "initialize needs params: protocolVersion, capabilities and clientInfo"
    elif not isinstance(params.get("protocolVersion"), str):
        problem = 'params.protocolVersion must be a string, e.g. "2025-11-25"'
    elif not isinstance(params.get("capabilities", {}), dict):
        problem = "params.capabilities must be an object"
    elif not isinstance(params.get("clientInfo", {}), dict):
        problem = "params.clientInfo must be an object with name and version"
    else:
        return None
    return jsonrpc.error_response(body["id"], jsonrpc.INVALID_PARAMS, f"Invalid params: {problem}")


def id_in_flight(request_id: Any) -> JsonObject:
    """The error for a request reusing the id of one still unanswered on its session: MCP forbids
    it, and a notifications/cancelled naming that id could only reach one of the two."""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.INVALID_REQUEST,
        f"Request id {request_id!r} is already in flight on this session; use a new id for each request",
    )


def not_runnable(gateway: Gateway, in_flight: Collection[Any], request_id: Any) -> JsonObject | None:
    """The error for a request the session cannot run now (its id still in flight, or
    limits.max_pending_per_client reached with `in_flight` unanswered), or None when it may run."""
    if request_id in in_flight:
        return id_in_flight(request_id)
    return too_many_pending(gateway, len(in_flight), request_id)


def too_many_pending(gateway: Gateway, in_flight: int, request_id: Any) -> JsonObject | None:
    """The error for a request over limits.max_pending_per_client while the session has `in_flight`
    requests unanswered, or None when it may run."""
    limit = gateway.config.limits.max_pending_per_client
    if in_flight < limit:
        return None
    gateway.metrics.limit_hit("max_pending_per_client")
    return errors.too_many_pending("this client session", limit).response(request_id)


async def run_request(session: ClientSession, target: Target, ctx: ClientContext, body: JsonObject) -> JsonObject:
    """Answer one request of `session`, always with a response carrying the client's id.

    The work runs in the calling task, registered in the session under the client's id: the client's
    notifications/cancelled (or its session ending) cancels it through that entry, and the request
    is still answered, with "Request cancelled" as the SDK's own servers send it. Any other
    cancellation of the caller (the client went away) goes on up. Run in the caller rather than a
    task of its own, a call is two loop turns shorter."""
    request_id = body.get("id")
    caller = asyncio.current_task()
    assert caller is not None, "run_request runs in a task"
    entry = InFlight(caller)
    session.in_flight[request_id] = entry
    client_gone = False
    try:
        answer = await target.handle(ctx, body)
    except asyncio.CancelledError:
        # Ours alone (the entry's, counted once) is answered; with any other it goes on up.
        if entry.cancelled and caller.cancelling() == 1:
            caller.uncancel()
            return jsonrpc.error_response(request_id, jsonrpc.REQUEST_CANCELLED, "Request cancelled")
        client_gone = True
        raise
    else:
        if entry.cancelled:  # the work let the cancellation pass without raising: balance its count
            caller.uncancel()
        return answer
    finally:
        # Requests the provider sent the client for this one ended with it (deadline, cancel,
        # answer): the client hears so on this request's stream, before its answer (on the
        # session's stream when it hung up on this one).
        session.requests.withdraw_ended(client_gone)
        if session.in_flight.get(request_id) is entry:
            del session.in_flight[request_id]
            session.touch()
