"""A provider link to a remote MCP server over Streamable HTTP, in either era.

The core sends its usual session messages (initialize, notifications/initialized, tools/list,
forwarded requests under `brk-<n>` ids, notifications/cancelled, ping) through `send()` and hears
everything back through `session.receive()`. This link translates:

Session era (the server answered initialize): each message is POSTed with the `Mcp-Session-Id` the
initialize response carried and the negotiated `MCP-Protocol-Version`; a JSON or event-stream answer
is fed back; a GET stream carries the server's own notifications and requests, reopened with jittered
back-off when it drops (405: the server offers none). A 404 for the session means the server forgot
it (it restarted): the link replays the gateway's initialize and initialized, the log level and
resource subscriptions, retries the request once, and asks the core to re-list tools; callers never
see the difference. DELETE ends the session when the gateway closes the link.

Stateless era (2026-07-28, found by the manager's server/discover probe): the core speaks 2026-07-28
to the server itself (gateway/core/eras.py), so every request already carries its caller's envelope;
the link POSTs it as it is, with the MCP-Protocol-Version, Mcp-Method, Mcp-Name (and Mcp-Param-*)
headers it implies, and feeds back the answer and whatever the response stream carries before it
(the core's subscriptions/listen is one such request, its stream open as long as the core keeps it).
Cancelling a request closes its response stream, which is the cancellation. A request the server
sends on a call's stream has no way back in this era: the call ends at once, closing the stream.

In either era what a request's response stream carries is that request's: an answer on it under
another id would reach another caller, so it is dropped, counted as unmatched, and ends the request.
A connection that closes after the POST began and before the answer came ends the request as lost
(the server may have carried it out); a POST that reached no server, or was refused (401, a forgotten
session that cannot be started again), leaves it not taken, and so does an HTTP error status except
500, 502 and 504, which end it as lost (gateway/southbound/remote/link.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from gateway.core import eras, jsonrpc
from gateway.core.backoff import Backoff
from gateway.core.jsonrpc import JsonId, JsonObject, Kind
from gateway.core.unmatched_answers import unmatched_answer
from gateway.http_body import BodyTooLarge, read_body, read_prefix
from gateway.southbound.remote.auth import UpstreamAuthFailed, UpstreamDropped, UpstreamError, UpstreamUnreachable
from gateway.southbound.remote.http import STREAM_CLOSED, RemoteHttp, read_failure
from gateway.southbound.remote.link import RemoteLink
from gateway.southbound.remote.sse_events import SseTooLarge, read_events
from gateway.southbound.remote.wire import (
    ACCEPT_BOTH,
    ERA_SESSION,
    ERA_STATELESS,
    LAST_EVENT_ID,
    MAX_METHOD_SHOWN,
    PROTOCOL_VERSION,
    SESSION_ID,
    answer_to_another,
    answered_another_id,
    related_to,
    request_out_of_era,
    request_to_client,
    stateless_headers,
    stream_broken,
    too_large,
    too_large_request,
    wrong_content_type,
)

log = logging.getLogger("gateway.remote")

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
TOOLS_CHANGED = jsonrpc.notification("notifications/tools/list_changed")
STREAM_RETRY_INITIAL_S = 0.5
STREAM_FAILURES_WARNED = 3
"""GET stream attempts in a row that do not open it before the link warns (once) in the log."""


class ReinitializeFailed(UpstreamError):
    pass


def content_type(response: aiohttp.ClientResponse) -> str:
    return response.headers.get("Content-Type", "").partition(";")[0].strip().lower()


class StreamableHttpLink(RemoteLink):
    transport = "remote-http"

    def __init__(
        self,
        name: str,
        url: str,
        http: RemoteHttp,
        *,
        era: str,
        max_event_bytes: int,
        timeout_s: float,
        stream_retry_max_s: float = 30.0,
    ) -> None:
        super().__init__(name, url, http, max_event_bytes, timeout_s)
        self.era = era
        self.info.era = eras.MODERN_ERA if era == ERA_STATELESS else eras.SESSION_ERA
        self.stream_retry_max_s = stream_retry_max_s
        self.inflight: dict[JsonId, asyncio.Task[None]] = {}
        # Session era
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.init_message: JsonObject | None = None
        self.initialized_message: JsonObject | None = None
        self.reinitializes = 0
        self._reinit_lock = asyncio.Lock()
        self.get_stream = "none"  # none | open | reconnecting | unsupported | refused (HTTP n)
        self.stream_opens = 0
        self.stream_drops = 0
        self.last_stream_error = ""
        self.stream_failures_in_a_row = 0
        """GET stream attempts since it last opened that did not open it (STREAM_FAILURES_WARNED warns)."""
        # State a client asked the server to keep, replayed on a new session (session era).
        self.log_level: str | None = None
        self.subscriptions: set[str] = set()

    @property
    def stateless(self) -> bool:
        return self.era == ERA_STATELESS

    # -- from the core ------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        if self.ending():
            raise ConnectionError(self.end_reason or "remote link closed")
        message = jsonrpc.loads(data)
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if isinstance(method, str) and "id" in message:
            if self.stateless:
                self._start_exchange(message)
            else:
                self._session_request(message, method)
        elif isinstance(method, str):
            if not self.stateless:
                await self._session_notification(message, method)
            elif method == "notifications/cancelled":
                # 2026-07-28: closing the request's response stream is its cancellation.
                self._cancel_inflight(message.get("params"))
            # No other notification to a server exists in this era.
        elif not self.stateless:
            await self._post_one_way(message)  # the core's answer to a request from the server
        # A 2026-07-28 link feeds the core no request from the server (_request_out_of_era): no answer to carry.

    def _start_exchange(self, message: JsonObject) -> None:
        request_id = message["id"]
        task = self.spawn(self._exchange(message))
        self.inflight[request_id] = task
        self.unsent.add(request_id)

        def forget(done: asyncio.Task[None]) -> None:
            self.unsent.discard(request_id)
            if self.inflight.get(request_id) is done:
                del self.inflight[request_id]

        task.add_done_callback(forget)

    def _cancel_inflight(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        task = self.inflight.pop(request_id, None) if isinstance(request_id, str | int) else None
        if task is not None:
            task.cancel()

    def _track_state(self, method: str, params: Any) -> None:
        params = params if isinstance(params, dict) else {}
        if method == "logging/setLevel" and isinstance(params.get("level"), str):
            self.log_level = params["level"]
        elif method == "resources/subscribe" and isinstance(params.get("uri"), str):
            self.subscriptions.add(params["uri"])
        elif method == "resources/unsubscribe" and isinstance(params.get("uri"), str):
            self.subscriptions.discard(params["uri"])

    # -- session era --------------------------------------------------------------------------

    def _session_request(self, message: JsonObject, method: str) -> None:
        if method == "initialize":
            self.init_message = message
        self._track_state(method, message.get("params"))
        self._start_exchange(message)

    async def _session_notification(self, message: JsonObject, method: str) -> None:
        if method == "notifications/initialized":
            self.initialized_message = message
            await self._post_one_way(message, retry_lost_session=False)
            self.spawn(self._get_stream())
            return
        await self._post_one_way(message)
        if method == "notifications/cancelled":
            # The server was told; the POST still waiting for an answer that will not come is dropped.
            self._cancel_inflight(message.get("params"))

    def _session_headers(self, method: str | None) -> dict[str, str]:
        headers = {"Accept": ACCEPT_BOTH, "Content-Type": JSON}
        if method != "initialize":
            if self.session_id is not None:
                headers[SESSION_ID] = self.session_id
            if self.protocol_version is not None:
                headers[PROTOCOL_VERSION] = self.protocol_version
        return headers

    async def _post_one_way(self, message: JsonObject, *, retry_lost_session: bool = True) -> None:
        """POST a notification or a response (202 expected); raise ConnectionError when the server is gone."""
        for attempt in range(2):
            if retry_lost_session:
                await self._settled()  # (the handshake's own initialized must not wait for itself)
            sent_session = self.session_id
            try:
                response = await self.http.open(
                    "POST",
                    self.url,
                    self._session_headers(message.get("method")),
                    jsonrpc.dumps(message),
                    aiohttp.ClientTimeout(total=self.timeout_s),
                )
            except (UpstreamUnreachable, UpstreamAuthFailed) as exc:
                self.lose(self._describe(exc), exc)
                raise ConnectionError(str(exc)) from exc
            except UpstreamDropped:
                return  # best effort: a lost notification is not worth the link
            lost_session = response.status == 404 and sent_session is not None
            response.release()
            if not (lost_session and retry_lost_session and attempt == 0):
                return
            await self._reinitialize(sent_session)
            if self.ending():
                raise ConnectionError(self.end_reason)

    async def _exchange(self, message: JsonObject) -> None:
        """POST one request and feed its answer (and whatever else its stream carries) to the core."""
        request_id = message["id"]
        method = message.get("method")
        for attempt in range(2):
            await self._settled()
            sent_session = self.session_id
            if self.stateless:
                headers = {"Accept": ACCEPT_BOTH, "Content-Type": JSON, **self._stateless_headers(message)}
            else:
                headers = self._session_headers(str(method))
            self.unsent.discard(request_id)  # from here on the server may receive it
            try:
                response = await self.http.open("POST", self.url, headers, jsonrpc.dumps(message))
            except (UpstreamUnreachable, UpstreamAuthFailed) as exc:
                self.unsent.add(request_id)  # it reached no server, or the server refused the gateway
                self.lose(self._describe(exc), exc)
                return
            except UpstreamDropped as exc:
                self.answer_lost(stream_broken(request_id, self.name, str(exc)))
                return
            try:
                lost_session = (
                    response.status == 404 and sent_session is not None and method != "initialize" and attempt == 0
                )
                if not lost_session:
                    await self._read_answer(request_id, method, response)
                    return
            finally:
                response.release()
            self.unsent.add(request_id)  # refused for its session: not taken unless the retry goes out
            await self._reinitialize(sent_session)
            if self.ending():
                return

    async def _read_answer(self, request_id: JsonId, method: Any, response: aiohttp.ClientResponse) -> None:
        status = response.status
        if status >= 300:
            self.http_refused(request_id, status, await self.http.error_body(response))
            return
        if method == "initialize" and not self.stateless:
            self.session_id = response.headers.get(SESSION_ID) or None
        kind = content_type(response)
        try:
            if kind == JSON:
                try:
                    body = await read_body(response, self.max_event_bytes)
                except BodyTooLarge:
                    raise SseTooLarge(too_large(self.max_event_bytes)) from None
                self._from_server(body, request_id, method)
                return
            if kind == EVENT_STREAM:
                events = read_events(response.content.iter_any(), self.max_event_bytes, skip_oversized=True)
                async for event in events:
                    if event.oversized:
                        # A notification over the bound is dropped and the answer still comes; an
                        # answer over it ends the call with the reason, and so does a request to the
                        # client (its answer, which the call waits for, could never come).
                        self.skipped_oversized(event.data)
                        if not self.is_pending(request_id):
                            return
                        asked = request_to_client(event.data)
                        if asked is not None:
                            why = too_large_request(asked, self.max_event_bytes)
                            self.answer_if_pending(stream_broken(request_id, self.name, why))
                            return
                    elif event.data and self._from_server(event.data.encode(), request_id, method):
                        return
                self.answer_if_pending(stream_broken(request_id, self.name, "the event stream ended without it"))
                return
        except SseTooLarge:
            self.oversized_messages += 1
            self.answer_if_pending(stream_broken(request_id, self.name, too_large(self.max_event_bytes)))
            return
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.answer_lost(stream_broken(request_id, self.name, read_failure(exc)))
            return
        if status == 202:
            self.answer_if_pending(stream_broken(request_id, self.name, "HTTP 202 without a body"))
        else:
            self.answer_if_pending(wrong_content_type(request_id, self.name, status, kind))

    def _from_server(self, data: bytes, request_id: JsonId | None, method: Any = None) -> bool:
        """Feed one message from the server; True when the call of `request_id` is answered (by the
        server, or by the link when the server broke the rules of that call's stream)."""
        parsed = jsonrpc.parse(data)
        if request_id is None:
            self.feed(data)
            return False
        if parsed.kind is Kind.RESPONSE and parsed.body.get("id") == request_id:
            result = parsed.body.get("result")
            if method == "initialize" and isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self.protocol_version = result["protocolVersion"]
            self.feed(data)
            return True
        elsewhere, answered = answer_to_another(parsed, data, request_id)
        if elsewhere:
            # What a server sends on a request's stream is that request's: an answer under another
            # id (a cache or proxy mixing streams up) would reach that id's caller, someone else.
            self._unmatched(answered)
            self.answer_if_pending(answered_another_id(request_id, self.name, answered))
            return True
        if parsed.kind is Kind.REQUEST and self.stateless:
            self._request_out_of_era(request_id, parsed.body["method"])
            return True
        if parsed.kind in (Kind.NOTIFICATION, Kind.REQUEST):
            # Sent on the stream of one request (a call's log messages, its sampling): it belongs to
            # that request, so the core gives it to that request's client only, as a tag says.
            tagged = related_to(parsed.body, request_id)
            if tagged is not None:
                self.feed_message(tagged)
                return False
        self.feed(data)
        return False

    def _unmatched(self, answered: Any) -> None:
        """An answer the link dropped: counted as the core counts answers nobody waits for."""
        if self.session is not None:
            unmatched_answer(self.session, answered)

    def _request_out_of_era(self, request_id: JsonId, method: str) -> None:
        """A 2026-07-28 server asked its client something on a call's stream. The era has no way to
        answer it (no session to POST the answer to), so the call ends now rather than at its deadline,
        and returning closes the stream, which cancels the call at the server."""
        if self.session is not None:
            self.session.counters.protocol_violations += 1
            self.session.warn_once(
                "request_out_of_era",
                "remote upstream %s sent its client a request (%s) on a call's stream, which the 2026-07-28 era "
                "does not carry (its servers ask through input_required results); the call ends with an error "
                "(protocol_violations counts them)",
                self.name,
                method[:MAX_METHOD_SHOWN],
            )
        self.answer_if_pending(request_out_of_era(request_id, self.name, method))

    async def _settled(self) -> None:
        """Wait while a new session is being started, so the next request carries its id."""
        if self._reinit_lock.locked():
            async with self._reinit_lock:
                pass

    async def _reinitialize(self, stale_session: str | None) -> None:
        """The server forgot session `stale_session`: start a new one as the gateway did the first time."""
        async with self._reinit_lock:
            if self.ending() or self.session_id != stale_session:
                return  # ended meanwhile, or another request already started the new session
            self.reinitializes += 1
            log.info(
                "remote upstream %s forgot its session (HTTP 404); initializing again",
                self.name,
                extra={"slot": self.name},
            )
            try:
                await self._handshake_again()
            except UpstreamError as exc:
                self.lose(f"initializing again after the upstream lost its session failed: {exc}", exc)
                return
        # The server may have changed (a new version after a restart): the core re-lists and tells
        # clients only if the tools differ.
        self.feed_message(TOOLS_CHANGED)

    async def _handshake_again(self) -> None:
        if self.init_message is None:
            raise ReinitializeFailed("the gateway's initialize was never sent")
        # The stale id stays until the new one is known: a request sent meanwhile meets a 404 and
        # waits for this handshake (never goes out without a session and earns a 400).
        initialize = {**self.init_message, "id": self.internal_id("initialize")}
        reply, headers = await self._call(initialize)
        result = reply.get("result")
        if not isinstance(result, dict):
            error = jsonrpc.normalize_error(reply.get("error"))
            raise ReinitializeFailed(f"initialize answered {error['code']} {error['message']}")
        self.session_id = headers.get(SESSION_ID) or None
        version = result.get("protocolVersion")
        self.protocol_version = version if isinstance(version, str) else self.protocol_version
        if self.initialized_message is not None:
            await self._post_one_way(self.initialized_message, retry_lost_session=False)
        replay: list[tuple[str, JsonObject]] = []
        if self.log_level is not None:
            replay.append(("logging/setLevel", {"level": self.log_level}))
        replay.extend(("resources/subscribe", {"uri": uri}) for uri in sorted(self.subscriptions))
        for method, params in replay:
            request = {"jsonrpc": "2.0", "id": self.internal_id("replay"), "method": method, "params": params}
            try:
                await self._call(request)
            except UpstreamDropped:
                continue

    async def _call(self, message: JsonObject) -> tuple[JsonObject, Any]:
        """One request of the link's own; returns the answer and the response headers. Other messages
        on its stream go to the core. Raises UpstreamError when there is no answer."""
        request_id = message["id"]
        headers = self._session_headers(str(message.get("method")))
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        response = await self.http.open("POST", self.url, headers, jsonrpc.dumps(message), timeout)
        try:
            kind = content_type(response)
            try:
                if kind == JSON or response.status >= 300:
                    # An error page is quoted, not parsed whole: its first bytes will do.
                    read = read_body if kind == JSON else read_prefix
                    try:
                        data = await read(response, self.max_event_bytes)
                    except BodyTooLarge:
                        raise SseTooLarge(too_large(self.max_event_bytes)) from None
                    if response.status >= 300:
                        # Parsed before anything is masked: a JSON-RPC error keeps its code and its JSON.
                        return self.http.failure(request_id, response.status, data), response.headers
                    parsed = jsonrpc.parse(data)
                    if parsed.kind is Kind.RESPONSE:
                        return parsed.body, response.headers
                    return self.http.failure(request_id, response.status, data), response.headers
                if kind == EVENT_STREAM:
                    async for event in read_events(response.content.iter_any(), self.max_event_bytes):
                        if not event.data:
                            continue
                        parsed = jsonrpc.parse(event.data)
                        if parsed.kind is Kind.RESPONSE:
                            if parsed.body.get("id") == request_id:
                                return parsed.body, response.headers
                            self._unmatched(parsed.body.get("id"))  # not fed: it would answer another caller
                            continue
                        self._from_server(event.data.encode(), None)
            except (aiohttp.ClientError, TimeoutError, SseTooLarge) as exc:
                raise UpstreamDropped(f"{message.get('method')}: {read_failure(exc)}") from exc
            raise UpstreamDropped(f"{message.get('method')}: no answer (HTTP {response.status}, {kind or 'no body'})")
        finally:
            response.release()

    async def _get_stream(self) -> None:
        """The server's own messages (session era): one GET stream, reopened with back-off when it drops.

        Its headers are awaited without a bound in time, as its events are: a proxy may hold them until the
        first event, which can come much later than connect_timeout_s (connecting itself stays bounded by
        it). A server that is gone is found by the heartbeat (a ping POSTed each
        providers.heartbeat_interval_s), which ends the link and this stream with it."""
        backoff = Backoff(STREAM_RETRY_INITIAL_S, self.stream_retry_max_s)
        last_event_id: str | None = None
        while not self.ending():
            session_id = self.session_id
            if session_id is None:
                self.get_stream = "none"  # a server without sessions has nothing to stream
                return
            headers = {"Accept": EVENT_STREAM, SESSION_ID: session_id}
            if self.protocol_version is not None:
                headers[PROTOCOL_VERSION] = self.protocol_version
            if last_event_id is not None:
                headers[LAST_EVENT_ID] = last_event_id
            opened = self.stream_opens
            try:
                response = await self.http.open("GET", self.url, headers)
            except UpstreamAuthFailed as exc:
                self.lose(self._describe(exc), exc)
                return
            except UpstreamError as exc:
                self.last_stream_error = str(exc)
            else:
                try:
                    if response.status == 405:
                        self.get_stream = "unsupported"
                        return
                    if response.status == 404:
                        response.release()
                        await self._reinitialize(session_id)
                        continue
                    if response.status != 200 or content_type(response) != EVENT_STREAM:
                        self.get_stream = f"refused (HTTP {response.status})"
                        self.last_stream_error = f"GET answered HTTP {response.status} {content_type(response)}"
                    else:
                        self.get_stream = "open"
                        self.stream_opens += 1
                        backoff.reset()
                        events = read_events(response.content.iter_any(), self.max_event_bytes, skip_oversized=True)
                        async for event in events:
                            if event.id is not None:
                                last_event_id = event.id
                            if event.oversized:
                                self.skipped_oversized(event.data)
                            elif event.data:
                                self._from_server(event.data.encode(), None)
                        self.last_stream_error = "the server ended the GET stream"
                except (aiohttp.ClientError, TimeoutError, SseTooLarge) as exc:
                    self.last_stream_error = f"GET stream broke: {read_failure(exc, STREAM_CLOSED)}"
                finally:
                    response.release()
            if self.ending():
                return
            self._count_open_failure(opened)
            self.get_stream = "reconnecting"
            self.stream_drops += 1
            await asyncio.sleep(backoff.next_delay())

    def _count_open_failure(self, opens_before: int) -> None:
        """After an attempt at the GET stream: STREAM_FAILURES_WARNED attempts in a row that never opened it
        are warned of once per link (the server's notifications are lost meanwhile); status counts the rest."""
        if self.stream_opens != opens_before:
            self.stream_failures_in_a_row = 0
            return
        self.stream_failures_in_a_row += 1
        if self.stream_failures_in_a_row != STREAM_FAILURES_WARNED:
            return
        text = (
            "remote upstream %s: the GET stream failed to open %d times in a row, last: %s; the server's "
            "notifications (list_changed) are lost until it opens (provider_status: get_stream, "
            "last_stream_error)"
        )
        args = (self.name, self.stream_failures_in_a_row, self.last_stream_error)
        if self.session is not None:
            self.session.warn_once("get_stream_failing", text, *args)
        else:
            log.warning(text, *args, extra={"slot": self.name})

    async def goodbye(self) -> None:
        if self.stateless or self.session_id is None:
            return
        headers = {SESSION_ID: self.session_id}
        if self.protocol_version is not None:
            headers[PROTOCOL_VERSION] = self.protocol_version
        response = await self.http.open("DELETE", self.url, headers, None, aiohttp.ClientTimeout(total=2.0))
        response.release()

    # -- stateless era ------------------------------------------------------------------------

    def _stateless_headers(self, message: JsonObject) -> dict[str, str]:
        schema = None
        params = message.get("params")
        if message.get("method") == "tools/call" and isinstance(params, dict) and self.session is not None:
            name = params.get("name")
            schema = next((tool.get("inputSchema") for tool in self.session.tools if tool.get("name") == name), None)
        return stateless_headers(message, schema)

    # -- status -------------------------------------------------------------------------------

    def _describe(self, exc: UpstreamError) -> str:
        if isinstance(exc, UpstreamAuthFailed):
            return f"the upstream refused the gateway's credentials: {exc}"
        return f"the upstream is unreachable: {exc}"

    def status_extra(self) -> JsonObject:
        if self.stateless:
            listen = self.session.listen.status() if self.session is not None else {}
            return {
                "era": ERA_STATELESS,
                "protocol_version": ERA_STATELESS,
                "session": False,
                "get_stream": None,
                "listen": listen.get("state"),
                "stream_opens": listen.get("opens", 0),
                "stream_drops": listen.get("drops", 0),
                "last_stream_error": listen.get("last_error"),
                "reinitializes": 0,
                "log_level": None,
                "subscriptions": len(self.session.listen_uris()) if self.session is not None else 0,
            }
        return {
            "era": ERA_SESSION,
            "protocol_version": self.protocol_version,
            "session": self.session_id is not None,
            "get_stream": self.get_stream,
            "listen": None,
            "stream_opens": self.stream_opens,
            "stream_drops": self.stream_drops,
            "last_stream_error": self.last_stream_error or None,
            "reinitializes": self.reinitializes,
            "log_level": self.log_level,
            "subscriptions": len(self.subscriptions),
        }
