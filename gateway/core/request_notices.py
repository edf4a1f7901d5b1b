"""Which client request a provider's notification belongs to: progress and log messages go to the
stream of the request they are tied to (docs/upstreams.md, "Log messages"; docs/protocol-clients.md,
"Request-tied notifications"); what belongs to no request is left to the session and the slot.

MCP sends each message on exactly one stream, never across streams: a log message written while a
client's call runs may hold that call's data, so it reaches that client only, or nobody when the
gateway cannot tell whose it is.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Protocol

from gateway.core import jsonrpc
from gateway.core.client_context import ClientContext
from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.provider_state import Pending, is_gateway_id
from gateway.core.relay import RELATED_REQUEST_KEY

log = logging.getLogger("gateway.provider")

UNATTRIBUTED_LOG = "unattributed_log"
"""The kind of the one debug line per slot about log messages nobody could be given."""


class NoticeSession(Protocol):
    """What routing needs of a provider session (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def pending(self) -> Mapping[JsonId, Pending]: ...

    @property
    def warned_faults(self) -> set[str]: ...


def route(session: NoticeSession, body: JsonObject, method: str, params: JsonObject) -> JsonObject | None:
    """Deliver `body` to the client request it belongs to. Returns the notification (without the
    gateway's own tag) when it belongs to no request, for the session and the slot's listeners; None
    when it was delivered, or dropped as nobody's to have."""
    if method == "notifications/progress":
        token = params.get("progressToken")
        entry = session.pending.get(token) if is_gateway_id(token) else None
        if entry is not None and entry.sink is not None:
            entry.sink(jsonrpc.notification(method, {**params, "progressToken": entry.client_progress_token}))
        return None
    meta = params.get("_meta")
    if isinstance(meta, dict) and RELATED_REQUEST_KEY in meta:
        related = meta[RELATED_REQUEST_KEY]
        entry = session.pending.get(related) if is_gateway_id(related) else None
        rest = {key: value for key, value in meta.items() if key != RELATED_REQUEST_KEY}
        params = {**params, "_meta": rest} if rest else {k: v for k, v in params.items() if k != "_meta"}
        if entry is not None and entry.sink is not None:
            entry.sink(jsonrpc.notification(method, params))
            return None
        return jsonrpc.notification(method, params)
    if method == "notifications/message":
        return _untagged_log(session, body)
    return body


def _untagged_log(session: NoticeSession, body: JsonObject) -> JsonObject | None:
    """A log message that names no request (a stdio child cannot: the SDK writes `ctx.info(...)` as a
    plain notifications/message). With no client request pending it is the server's own, for the
    slot's listeners. While the client requests pending are all one client's, it is that client's, on
    the stream of its request, filtered by the level that client asked for (ClientContext.emit). With
    several clients' requests pending it cannot be told whose it is, and goes to nobody."""
    owners = [entry for entry in session.pending.values() if entry.relay is not None]
    if not owners:
        return body
    owner = owners[0]
    if len(owners) > 1:
        client = client_of(owner)
        if any(client_of(entry) != client for entry in owners[1:]):
            if UNATTRIBUTED_LOG not in session.warned_faults:
                session.warned_faults.add(UNATTRIBUTED_LOG)
                log.debug(
                    "provider for slot %s sent a log message naming no request while %d clients' requests "
                    "were pending; it goes to none of them (said once per slot)",
                    session.slot,
                    len({client_of(entry) for entry in owners}),
                    extra={"slot": session.slot, "fault": UNATTRIBUTED_LOG},
                )
            return None
    if owner.sink is not None:
        owner.sink(body)
    return None


def client_of(entry: Pending) -> Hashable:
    """Who `entry` was sent for: the client session whose call it serves (the session or stream that
    holds its upstream state), else the request alone (a 2026-07-28 caller has no session)."""
    context = getattr(entry.sink, "__self__", None)  # the sink is the caller's ClientContext.emit
    listener = context.listener if isinstance(context, ClientContext) else None
    return listener if listener is not None else entry.request_id
