"""What every remote link shares: binding to its provider session, feeding it, ending once.

A remote link is created by the upstream's manager (gateway/southbound/remote/upstreams.py) after it has
reached the server, attached to the slot, then bound to the session the registry made for it.
Whatever ends it (the core closing it, the server gone, credentials refused) ends it once: `ended`
is set, `end_reason` and `end_error` say why, and the manager decides when to connect again.

A request counts as sent (the server may have carried it out) once its POST has begun on a connection.
When the link ends, a pending request in `unsent` (its POST not begun, or refused: the server unreachable,
the gateway's credentials refused, the session forgotten) is answered `not_sent`, an error, before the
session hears of the end, which answers the rest `disconnected` (the trail's `lost`). (A legacy SSE
POST is awaited by the core's send, whose failure tells the core the same.)

An HTTP failure answering a POST that was sent (`http_refused`) is an error, not taken (401, 403, 404,
405, 400, 413, 429, 503: refused before anything ran), except HTTP 500, 502 and 504 without a JSON-RPC
error for the request in the body: a server that failed while handling it, or a proxy whose upstream
sent no valid answer or none in time, may have run it, so it ends `lost` (`MAYBE_RUN_STATUSES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Coroutine
from typing import Any

from gateway.core import jsonrpc
from gateway.core.answer_head import answer_id
from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.link import LinkInfo, ProviderLink
from gateway.core.provider_session import AnswerLost, ProviderSession
from gateway.southbound.remote.auth import UpstreamError
from gateway.southbound.remote.http import RemoteHttp
from gateway.southbound.remote.wire import carries_error_answer, public_url, stream_broken, too_large

log = logging.getLogger("gateway.remote")

MAYBE_RUN_STATUSES = frozenset({500, 502, 504})
"""HTTP statuses after which the request may have run behind the answering server or proxy (503, Service
Unavailable, says the request was not handled: RFC 9110, 15.6.4)."""


def not_sent(request_id: JsonId, upstream: str, reason: str) -> JsonObject:
    """The answer to a pending request the server never took, when the link ends: it did not run."""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.UNAVAILABLE,
        f'Provider "{upstream}" disconnected: {reason}; the server did not take the request',
        {"slot": upstream, "reason": "not_sent", "detail": reason},
    )


class RemoteLink(ProviderLink):
    """Base of the Streamable HTTP and legacy SSE links (gateway.core.link.ProviderLink)."""

    transport = "remote"

    def __init__(self, name: str, url: str, http: RemoteHttp, max_event_bytes: int, timeout_s: float) -> None:
        self.name = name
        self.url = url
        self.http = http
        self.max_event_bytes = max_event_bytes
        self.timeout_s = timeout_s
        self.info = LinkInfo(transport=self.transport, remote=public_url(url))
        self.session: ProviderSession | None = None
        self.closed = False
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.end_error: UpstreamError | None = None
        self.oversized_messages = 0
        """Answers and events from the server larger than `max_event_bytes`, dropped unread."""
        self._inbox: list[bytes] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self.unsent: set[JsonId] = set()
        """Requests of the core the server has not taken: their POST not begun, or refused before it ran."""

    # -- the session --------------------------------------------------------------------------

    def bind(self, session: ProviderSession) -> None:
        """The registry made `session` for this link; deliver what arrived before it existed."""
        self.session = session
        inbox, self._inbox = self._inbox, []
        for data in inbox:
            session.receive(data)

    def feed(self, data: bytes) -> None:
        """One message from the server (or answered by the link itself) to the core."""
        if self.session is None:
            self._inbox.append(data)
        else:
            self.session.receive(data)

    def feed_message(self, message: JsonObject) -> None:
        self.feed(jsonrpc.dumps(message))

    def is_pending(self, request_id: JsonId) -> bool:
        return self.session is not None and request_id in self.session.pending

    def answer_if_pending(self, reply: JsonObject) -> None:
        """Answer a request the server could not: only while the core still waits for it (a late
        answer to a request that hit its deadline would count as an unmatched response)."""
        request_id = reply.get("id")
        if isinstance(request_id, str | int) and self.is_pending(request_id):
            self.feed_message(reply)

    def http_refused(self, request_id: JsonId, status: int, body: bytes) -> None:
        """A POST of `request_id` answered with HTTP `status` >= 300: the caller gets the failure, `lost` for
        MAYBE_RUN_STATUSES unless the body is the server's own JSON-RPC error answer (see the module)."""
        reply = self.http.failure(request_id, status, body)
        if status in MAYBE_RUN_STATUSES and not carries_error_answer(body):
            self.answer_lost(reply)
        else:
            self.answer_if_pending(reply)

    def answer_lost(self, reply: JsonObject) -> None:
        """The exchange of a request the server may have received broke (the connection closed before or
        during its answer): no answer can come and the server may have carried it out, so its caller gets
        the error of `reply` as AnswerLost (the trail's `lost`); the server is told the gateway gave up."""
        request_id = reply.get("id")
        session = self.session
        entry = session.pending.get(request_id) if session is not None and isinstance(request_id, str | int) else None
        if session is not None and entry is not None:
            error = reply["error"]
            session.fail_request(entry, AnswerLost(error["code"], error["message"], error.get("data")))

    def skipped_oversized(self, head: str) -> None:
        """An event over the bound was skipped (`head`: the start of its data): when that shows it answers a
        pending call, the call ends now with the reason; anything else is only counted."""
        self.oversized_messages += 1
        request_id = answer_id(head.encode())
        if request_id is not None and self.is_pending(request_id):
            self.answer_if_pending(stream_broken(request_id, self.name, too_large(self.max_event_bytes)))
            return
        if self.oversized_messages == 1:
            log.warning(
                "remote upstream %s sent a message larger than %d bytes (limits.max_frame_bytes) that answers no "
                "pending call; dropped (upstream.oversized_messages counts them)",
                self.name,
                self.max_event_bytes,
                extra={"slot": self.name},
            )

    def internal_id(self, what: str) -> str:
        """An id for the link's own requests; never a `brk-<n>` or integer id of the core."""
        return f"gw-{what}-{next(self._ids)}"

    # -- tasks and ending ---------------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    def ending(self) -> bool:
        """The link has ended or is ending (a method, not an attribute: it changes while loops await)."""
        return self.closed

    def lose(self, reason: str, error: UpstreamError | None = None) -> None:
        """The server is gone or refuses the gateway: end the link and answer every pending call now."""
        if self.closed:
            return
        self.closed = True
        self.end_reason = reason
        self.end_error = error
        log.warning("remote upstream %s: %s", self.name, reason, extra={"slot": self.name})
        self._cancel_tasks()
        if self.session is not None:
            for request_id in sorted(self.unsent, key=str):
                self.answer_if_pending(not_sent(request_id, self.name, reason))
            self.session.link_lost(reason)
        self.ended.set()

    async def close(self, code: int, reason: str) -> None:
        """The core ends the link (shutdown, failed handshake, missed heartbeat): say goodbye, stop."""
        if self.closed:
            self.ended.set()
            return
        self.closed = True
        self.end_reason = reason
        self._cancel_tasks()
        with contextlib.suppress(Exception):
            await self.goodbye()
        self.ended.set()

    async def goodbye(self) -> None:
        """Tell the server the gateway is leaving (a session-era DELETE); nothing by default."""

    async def send(self, data: bytes) -> None:
        """One message from the core; each transport translates it."""
        raise NotImplementedError

    def send_ping(self) -> None:
        """Remote links use JSON-RPC ping (info.native_ping is false)."""

    def status_extra(self) -> JsonObject:
        return {}
