"""Which client request a provider's notification belongs to: progress and log messages go to the
stream of the request they are tied to (docs/upstreams.md, "Log messages"; docs/protocol-clients.md,
"Request-tied notifications"); what belongs to no request is left to the session and the slot.

MCP sends each message on exactly one stream, never across streams: a log message written while a
client's call runs may hold that call's data, so it reaches that client only, or nobody when the
gateway cannot tell whose it is. A call the gateway gave up (its client cancelled it or went away, or
its deadline passed) may still be running in the provider, so it counts as a possible owner until the
provider answers it or a bound passes (`GivenUpRequests`). A notification tagged with an id of the
gateway's form that names no pending request (given up, answered, never sent) is dropped for the
same reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable, Mapping
from typing import Protocol

from gateway.core import jsonrpc
from gateway.core.cancelled_requests import MAX_CANCELLED_REMEMBERED
from gateway.core.client_context import ClientContext
from gateway.core.due import DueQueue
from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.provider_state import LISTEN_METHODS, Pending, is_gateway_id
from gateway.core.relay import RELATED_REQUEST_KEY
from gateway.core.request_ids import ID_CEILING

log = logging.getLogger("gateway.provider")

UNATTRIBUTED_LOG = "unattributed_log"
"""The kind of the one debug line per slot about log messages nobody could be given."""
STALE_TAG = "stale_related_request"
"""The kind of the one debug line per slot about notifications tagged with a request not pending."""
_GATEWAY_FORM = re.compile(r"brk-([1-9][0-9]{0,9})")
"""The string ids the gateway gives its requests (gateway/core/provider_session.py, `_new_id`)."""


class GivenUpRequests:
    """The client requests of one provider session the gateway gave up (the client cancelled or went
    away, the deadline passed, the call failed) and the provider has not answered: it got
    notifications/cancelled, but may still be running them and logging. Each is held until the
    provider answers it, at most `hold_ms` (the slot's request_timeout_ms: an SDK server never answers
    a cancelled request, and a provider that ignores the cancel must not withhold log lines forever),
    and at most `max_held` at once, the oldest released first."""

    def __init__(self, hold_ms: int, max_held: int = MAX_CANCELLED_REMEMBERED) -> None:
        self.max_held = max_held
        self.clients: dict[Hashable, int] = {}
        """Whose requests are held, with how many each: what routing a log line reads."""
        self._held: dict[JsonId, Hashable] = {}
        self._due: DueQueue[JsonId] = DueQueue(hold_ms / 1000, self._release)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, entry: Pending) -> None:
        if entry.relay is None:
            return  # the gateway's own request (a listing, a heartbeat): no client's data in its logs
        if len(self._held) >= self.max_held:
            oldest = next(iter(self._held))
            self._due.forget(oldest)
            self._release(oldest)
        client = client_of(entry)
        self._held[entry.request_id] = client
        self.clients[client] = self.clients.get(client, 0) + 1
        self._due.watch(entry.request_id)

    def answered(self, request_id: JsonId) -> None:
        """The provider answered `request_id`: it no longer works on it."""
        if request_id in self._held:
            self._due.forget(request_id)
            self._release(request_id)

    def close(self) -> None:
        self._due.close()
        self._held.clear()
        self.clients.clear()

    def _release(self, request_id: JsonId) -> None:
        client = self._held.pop(request_id, None)
        if client is None:
            return
        left = self.clients[client] - 1
        if left:
            self.clients[client] = left
        else:
            del self.clients[client]


class NoticeSession(Protocol):
    """What routing needs of a provider session (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def pending(self) -> Mapping[JsonId, Pending]: ...

    @property
    def warned_faults(self) -> set[str]: ...

    @property
    def given_up(self) -> GivenUpRequests: ...


def route(
    session: NoticeSession, body: JsonObject, method: str, params: JsonObject, *, numeric_ids: bool = False
) -> JsonObject | None:
    """Deliver `body` to the client request it belongs to. Returns the notification (without the
    gateway's own tag) when it belongs to no request, for the session and the slot's listeners; None
    when it was delivered, or dropped as nobody's to have. `numeric_ids`: the session's requests have
    integer ids (ProviderSession.numeric_ids)."""
    if method == "notifications/progress":
        token = params.get("progressToken")
        entry = session.pending.get(token) if is_gateway_id(token) else None
        # A client that asked for no progress gets none: a token of null is no token (MCP).
        if entry is not None and entry.sink is not None and entry.client_progress_token is not None:
            entry.sink(jsonrpc.notification(method, {**params, "progressToken": entry.client_progress_token}))
        return None
    meta = params.get("_meta")
    if isinstance(meta, dict) and RELATED_REQUEST_KEY in meta:
        related = meta[RELATED_REQUEST_KEY]
        entry = session.pending.get(related) if is_gateway_id(related) else None
        rest = {key: value for key, value in meta.items() if key != RELATED_REQUEST_KEY}
        params = {**params, "_meta": rest} if rest else {k: v for k, v in params.items() if k != "_meta"}
        body = jsonrpc.notification(method, params)
        if entry is not None:
            if entry.sink is not None:
                entry.sink(body)
                return None
            # A client's request whose way in gave it no stream: nobody's; the gateway's own
            # request (a listing) carries no client's data: the server's, for the slot.
            return None if entry.relay is not None else body
        if has_gateway_form(related, numeric_ids) and method not in LISTEN_METHODS:
            # A request the gateway gave up, answered, or never sent: maybe a caller's data, for nobody.
            # A list change or resource update tells of the server's state and is routed as untagged.
            _stale_tag(session, related)
            return None
        # A tag the gateway cannot have made names no request of its own: routed as if untagged.
    if method == "notifications/message":
        return _untagged_log(session, body)
    return body


def _untagged_log(session: NoticeSession, body: JsonObject) -> JsonObject | None:
    """A log message that names no request (a stdio child cannot: the SDK writes `ctx.info(...)` as a
    plain notifications/message). With no client request pending and none given up still held it is
    the server's own, for the slot's listeners. While the client requests pending are all one client's,
    and any held given-up ones too, it is that client's, on the stream of its request, filtered by the
    level that client asked for (ClientContext.emit). Otherwise (several clients' requests, or only
    given-up ones whose caller ended its call) it cannot be given to anyone, and goes to nobody."""
    owners = [entry for entry in session.pending.values() if entry.relay is not None]
    held = session.given_up.clients
    if not owners:
        if not held:
            return body
        _unattributed(session, len(held))
        return None
    owner = owners[0]
    if len(owners) > 1 or held:
        client = client_of(owner)
        if any(client_of(entry) != client for entry in owners[1:]) or any(other != client for other in held):
            _unattributed(session, len({client_of(entry) for entry in owners} | held.keys()))
            return None
    if owner.sink is not None:
        owner.sink(body)
    return None


def has_gateway_form(value: object, numeric_ids: bool) -> bool:
    """Is `value` shaped like the ids a provider session gives its requests (`ProviderSession._new_id`):
    "brk-<n>", or an integer when the session numbers them (`numeric_ids`), n from 1 to below ID_CEILING?"""
    if isinstance(value, str):
        found = _GATEWAY_FORM.fullmatch(value)
        number = int(found.group(1)) if found else 0
    elif numeric_ids and isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        return False
    return 1 <= number < ID_CEILING


def _stale_tag(session: NoticeSession, related: JsonId) -> None:
    _debug_once(
        session,
        STALE_TAG,
        f"sent a notification tagged with request {related!r}, which is not pending (given up, answered or "
        "never sent); it goes to nobody",
    )


def _unattributed(session: NoticeSession, clients: int) -> None:
    _debug_once(
        session,
        UNATTRIBUTED_LOG,
        f"sent a log message naming no request while requests of {clients} clients were pending or given up "
        "but unanswered; it goes to none of them",
    )


def _debug_once(session: NoticeSession, fault: str, what: str) -> None:
    """One debug line per slot and kind: a provider that does it once usually does it for every message."""
    if fault not in session.warned_faults:
        session.warned_faults.add(fault)
        log.debug(
            "provider for slot %s %s (said once per slot)",
            session.slot,
            what,
            extra={"slot": session.slot, "fault": fault},
        )


def client_of(entry: Pending) -> Hashable:
    """Who `entry` was sent for: the client session whose call it serves (the session or stream that
    holds its upstream state), else the request alone (a 2026-07-28 caller has no session)."""
    context = getattr(entry.sink, "__self__", None)  # the sink is the caller's ClientContext.emit
    listener = context.listener if isinstance(context, ClientContext) else None
    return listener if listener is not None else entry.request_id
