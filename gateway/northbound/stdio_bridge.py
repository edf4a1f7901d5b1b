"""`mcp-gateway stdio`: a stdio MCP server that forwards to a running gateway's `/<slot>/mcp`.

For hosts that can only launch a command (desktop MCP hosts, IDE plugins): the host writes
newline-delimited JSON-RPC to stdin and reads it from stdout; the bridge speaks the session era to
the gateway over HTTP (its requests: stdio_gateway.py). Every client message becomes one POST, sent in
stdin order (stdio_order.py: each once the one before it went out; answers come back as JSON or SSE
and are written out as they arrive); after `notifications/initialized` the bridge holds the session's
GET stream open and relays its notifications (list_changed, resource updates). At EOF on stdin it
waits for the answers on their way (up to --read-timeout; an answer that came but waits for room on
stdout is the request's answer: await_answers), answers each request left without one (`stdin_closed`,
also those never sent) and names them on stderr (exit status 1), and ends the gateway session with
DELETE. SIGTERM or SIGINT ends it at once, with exit status 128 + the signal's number.

stdout carries JSON-RPC and nothing else, one message per line; logs go to stderr.

When the gateway cannot be reached, a request is answered at once with a JSON-RPC error that says
so, and the next message tries again. A gateway that sends nothing for --read-timeout (a working one
sends keepalives) is named in the request's error too (bridge_wait.py). When the gateway forgot the
session (it restarted, or the session idled out) the bridge opens a new one with the client's own
initialize parameters, resends the message, and tells the client `notifications/tools/list_changed`
(the tools may differ now).

A host pinned to the stateless era (2026-07-28: its requests carry the protocol version in
params._meta, and it sends no initialize) is passed through: each request becomes a stateless-era
POST with the routing headers that era needs (Mcp-Method, Mcp-Name, and Mcp-Param-* from the input
schemas of the tools/list answers the bridge relayed or, for a call before any, made itself:
stdio_stateless.py), no session is opened, and the host's
notifications/cancelled closes the request's HTTP answer, which cancels it upstream. A host that
probes with server/discover is answered -32601 and speaks the session era: hosts on stdio expect
list changes, resource subscriptions and log levels, which only a session carries.

Authentication: a bearer token, or HMAC-SHA256 request signing (gateway/policy/bridge_credentials.py);
a refusal the credentials can answer (signed before the gateway started, a rotated secret) is sent
again, signed afresh.

The bridge follows no redirect (what the host sends and the credentials go to --url only), and of the
gateway's responses passes on only the first to each of the host's requests (bridge_relay.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from typing import Any, BinaryIO
from urllib.parse import quote

import aiohttp
import orjson
from yarl import URL

from gateway.core import jsonrpc, stateless
from gateway.core.answer_head import message_head
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.northbound.bridge_errors import MAX_LINE_BYTES, BridgeError, RedirectRefused, SessionRefused
from gateway.northbound.bridge_relay import EXIT_FLUSH_S, Relay, Stdout, answers_request, id_key, is_response
from gateway.northbound.bridge_stdin import TooLong, stdin_lines
from gateway.northbound.bridge_wait import (
    DEFAULT_READ_TIMEOUT_S,
    GatewaySilent,
    StdinClosed,
    answerable_id,
    too_deep,
    unreadable_line,
)
from gateway.northbound.stdio_gateway import Answer, GatewayHttp, describe, is_jsonrpc, keeper
from gateway.northbound.stdio_order import SENDING, InOrder, Sending, after_previous
from gateway.northbound.stdio_stateless import (
    MAX_LIST_PAGES,
    learn_tools,
    list_request,
    stateless_headers,
    unknown_tool,
)
from gateway.policy.bridge_credentials import BearerToken, Credentials, HmacKey, NoCredentials

log = logging.getLogger("gateway.stdio")
__all__ = ["BearerToken", "Credentials", "HmacKey", "NoCredentials", "StdioBridge", "main"]

CONNECT_TIMEOUT_S = 5.0
STREAM_RETRY_S = (0.25, 5.0)
"""First and longest pause before the GET stream is opened again after it ended."""
EOF_POLL_S = 0.05
"""How often the wait for answers at EOF looks at the messages still on their way and at stdout."""


# -- the gateway side -------------------------------------------------------------------------------


def _rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> JsonObject:
    return jsonrpc.error_response(request_id, code, message, data)


RELAYS: contextvars.ContextVar[list[Relay] | None] = contextvars.ContextVar("stdio_relays", default=None)
"""The relays of the host's message the running task forwards: once one wrote the request's answer, a
fault after it goes to stderr only (each request gets one answer)."""

SESSION_STATE_METHODS = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
"""Requests whose effect lasts as long as the session: the bridge makes them again on a new one."""


def endpoint_path(slot: str, group: str | None = None) -> str:
    """`/<slot>/mcp`, or for a tool group `/mcp/<group>` (`/mcp`, every enabled group, for "")."""
    if group is not None:
        return f"/mcp/{quote(group, safe='')}" if group else "/mcp"
    return f"/{quote(slot, safe='')}/mcp"


class StdioBridge(GatewayHttp):
    def __init__(
        self,
        base_url: str,
        slot: str,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        *,
        group: str | None = None,
        read_timeout_s: float | None = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        url = URL(base_url.rstrip("/") + endpoint_path(slot, group), encoded=True)
        super().__init__(url, credentials, ssl_context, read_timeout_s)
        self.slot = slot
        self.init_params: JsonObject | None = None
        """The client's own initialize params, replayed when the gateway lost the session."""
        self.session_lock = asyncio.Lock()
        self.out: Stdout | None = None
        self.order = InOrder(self.handle_line)
        self.silent_upto = 0
        """The stdin lines taken before an open of the session last met a silent gateway (by seq)."""
        self.session_lost = False
        """The gateway forgot the session and the host has not yet been told of the one replacing it."""
        self.stream_task: asyncio.Task[None] | None = None
        self.tool_schemas: dict[str, Any] = {}
        """Input schemas from the tools/list answers relayed so far, by tool name."""
        self.tools_listed = False
        """Whether the bridge listed the tools on its own (for a stateless call before any tools/list)."""
        self.listing_lock = asyncio.Lock()
        self.stateless_calls: dict[Any, asyncio.Task[Any]] = {}
        """Stateless-era requests in flight by the host's id (id_key; notifications/cancelled cancels one)."""
        self.log_level: JsonObject | None = None
        """The params of the host's last accepted logging/setLevel, set again on a new session."""
        self.subscriptions: dict[str, JsonObject] = {}
        """The host's accepted resources/subscribe params by URI, made again on a new session."""
        self.held: dict[int, JsonObject] = {}
        """Answers that came from the gateway and wait for room on stdout, by their message's seq: at EOF
        they are written whatever the room (they are the answer)."""

    # -- plumbing ---------------------------------------------------------------------------

    async def emit(self, message: Any, sending: Sending | None = None) -> None:
        """Write one message from the gateway to the client; anything that is not a JSON object is dropped.
        A response written for a message (`sending`, else the running task's) marks it answered; while it
        waits for room on stdout it is held (`held`): it came, whatever the host reads."""
        if not isinstance(message, dict):
            log.warning("dropped a non-object message from the gateway")
            return
        assert self.out is not None
        sending = sending or SENDING.get()
        answer = sending is not None and is_response(message)
        if sending is not None and answer:
            self.held[sending.seq] = message  # before the wait: a cancel there leaves it to give_up_unanswered
        if await self.out.write(message) and sending is not None and answer:
            sending.answered = True  # no await since it was queued: a cancel cannot come between
        if sending is not None and answer:
            self.held.pop(sending.seq, None)

    # -- session ----------------------------------------------------------------------------

    async def _open_session(self) -> None:
        """initialize + notifications/initialized with the client's parameters (session lock held)."""
        assert self.init_params is not None
        request = {"jsonrpc": "2.0", "id": self._next_internal_id(), "method": "initialize", "params": self.init_params}
        results: list[Any] = []
        keep = keeper(results)
        answer = await self.post(request, None, keep)
        result = results[-1].get("result") if results and isinstance(results[-1], dict) else None
        if answer.status != 200 or not isinstance(result, dict) or answer.session_id is None:
            refused: JsonObject = {"reason": "session_refused", "httpStatus": answer.status}
            if answer.retry_after_s is not None:
                refused["retryAfterMs"] = answer.retry_after_s * 1000
            raise SessionRefused(
                f"The gateway at {self.url} would not open a session for this client "
                f"(HTTP {answer.status}): {describe(answer.body)}",
                refused,
            )
        self.session_id = answer.session_id
        self.protocol_version = result.get("protocolVersion")
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, self.session_id, keep)
        log.info("opened a new gateway session on %s", self.url)
        # What the host set on the session it had: it is told only of changed tools, so it would not set
        # them again. Each is asked once; a refusal now leaves it unset, as on the gateway itself.
        replayed = [("logging/setLevel", self.log_level)] if self.log_level is not None else []
        replayed += [("resources/subscribe", params) for params in self.subscriptions.values()]
        for method, params in replayed:
            request = {"jsonrpc": "2.0", "id": self._next_internal_id(), "method": method, "params": params}
            await self.post(request, self.session_id, keep)

    async def renew(self, stale: str | None) -> None:
        """The gateway no longer knows session `stale`: open a new one (once, however many notice)."""
        async with self.session_lock:
            if self.session_id != stale or self.init_params is None:
                return
            self.session_id = None
            self.session_lost = True
            await self._open_session()
        await self.tell_if_renewed()

    async def tell_if_renewed(self) -> None:
        """Once a session replaces one the gateway forgot (whichever attempt opened it: the first may
        have been refused, a gateway still starting), the host hears `notifications/tools/list_changed`:
        the new session may see other tools (a restarted gateway, providers that came or went)."""
        if self.session_lost and self.session_id is not None:
            self.session_lost = False  # before the await: told once, however many tasks get here
            await self.emit(jsonrpc.notification("notifications/tools/list_changed"))

    async def current_session(self) -> tuple[str | None, bool]:
        """The session to use, and whether it was opened just now: when the client sent initialize
        but has no session (the gateway was down then, or forgot it), one is opened for it."""
        async with self.session_lock:
            if self.session_id is None and self.init_params is not None:
                self._refuse_if_silent_before()
                try:
                    await self._open_session()
                except GatewaySilent:
                    self.silent_upto = self.order.taken
                    raise
                self.start_stream()
                session_id = self.session_id
            else:
                return self.session_id, False
        await self.tell_if_renewed()
        return session_id, True

    def _refuse_if_silent_before(self) -> None:
        """A message taken from stdin before an open of the session met a silent gateway is answered at
        once: waiting through the silence again for each message already queued helps nobody."""
        sending = SENDING.get()
        if sending is not None and sending.seq <= self.silent_upto and self.read_timeout_s is not None:
            raise GatewaySilent(self.read_timeout_s)

    # -- one client message -----------------------------------------------------------------

    async def handle_line(self, line: bytes) -> None:
        request_id: Any = None
        relays: list[Relay] = []
        token = RELAYS.set(relays)
        try:
            if isinstance(line, TooLong):
                request_id = answerable_id(message_head(line.head).get("id"))
                text = f"Message longer than {MAX_LINE_BYTES} bytes, the longest this bridge relays"
                await self.emit(_rpc_error(request_id, jsonrpc.INVALID_REQUEST, text, {"maxBytes": MAX_LINE_BYTES}))
                return
            # Bounded only by the ceiling of limits.max_json_depth: the gateway applies its own bound to what
            # is forwarded, and anything deeper could not be encoded again to forward it.
            message = jsonrpc.parse(line, jsonrpc.MAX_DEPTH_CEILING)
            if message.kind is Kind.INVALID and message.body is None:
                # Not JSON to orjson; a lone surrogate escape (Node writes one for a cut emoji) still has an id.
                await self.emit(_rpc_error(*unreadable_line(line, message.problem)))
                return
            if message.kind is Kind.INVALID:
                refusal = (
                    too_deep(jsonrpc.MAX_DEPTH_CEILING)
                    if message.limit == jsonrpc.DEPTH_LIMIT
                    else (f"Invalid JSON-RPC: {message.problem}", None)
                )
                # JSON-RPC: an id that cannot be one (an object, true, 1.5, past 64 bits) is answered as null.
                await self.emit(_rpc_error(answerable_id(message.id), jsonrpc.INVALID_REQUEST, *refusal))
                return
            if message.kind is Kind.BATCH:
                await self.emit(_rpc_error(None, jsonrpc.INVALID_REQUEST, "JSON-RPC batches are not supported"))
                return
            if message.kind is Kind.REQUEST:
                request_id = answerable_id(message.id)
            sending = SENDING.get()
            if sending is not None:
                sending.body, sending.request_id = message.body, request_id
                if message.kind is not Kind.REQUEST or message.method == "logging/setLevel":
                    await after_previous(sending)  # it acts on an earlier message: that one goes first
            await self.forward(message)
        except BridgeError as exc:
            url = str(self.url)
            await exc.probe(url)
            log.warning("%s", exc.log_text(message.method, url))
            if message.kind is Kind.REQUEST and not _relayed(relays):
                text, data = exc.host_error(url)
                await self.emit(_rpc_error(request_id, exc.code, text, data))
        except Exception as exc:  # a fault of the bridge's own: the host still gets an answer
            if _relayed(relays):
                log.exception("the bridge failed on a message from the host after relaying its answer")
                return
            log.exception("the bridge failed on a message from the host")
            if request_id is not None:
                text = f"Internal error of the bridge: {type(exc).__name__}: {exc}"[:500]
                await self.emit(_rpc_error(request_id, jsonrpc.INTERNAL_ERROR, text))
        finally:
            RELAYS.reset(token)

    async def forward(self, message: jsonrpc.Message) -> None:
        body: JsonObject = message.body
        if message.kind is Kind.REQUEST and message.method == "server/discover":
            # This bridge speaks the session era; a client probing for 2026-07-28 falls back to initialize.
            await self.emit(
                _rpc_error(
                    message.id,
                    jsonrpc.METHOD_NOT_FOUND,
                    "Method not found: server/discover; this bridge speaks the session era, send initialize",
                )
            )
            return
        if message.kind is Kind.REQUEST and message.method == "initialize":
            await self.initialize(body)
            return
        if message.kind is Kind.REQUEST and stateless.carries_envelope(body):
            await self.forward_stateless(message)
            return
        cancelled = message.kind is Kind.NOTIFICATION and message.method == "notifications/cancelled"
        if cancelled and self.cancel_stateless(message):
            return
        relay = self.relay_for(message)
        initialized = message.kind is Kind.NOTIFICATION and message.method == "notifications/initialized"
        session_id, opened = await self.current_session()
        if initialized and opened:
            return  # opening the session sent notifications/initialized already
        answer = await self.post(body, session_id, relay)
        if answer.status == 404 and session_id is not None and is_jsonrpc(answer.body):
            # The gateway forgot the session (restart, idle expiry): a new one, then the message again.
            log.info("gateway session %s... is gone; opening a new one", session_id[:6])
            await self.renew(session_id)
            answer = await self.post(body, self.session_id, relay)
        if initialized and answer.status < 400:
            self.start_stream()
        await self.finish(message, answer, relay)

    def cancel_stateless(self, message: jsonrpc.Message) -> bool:
        """Carry out a host's notifications/cancelled of a stateless-era request; False when it is one
        for the session (or for no request: the host never opened a session, so there is none to tell)."""
        request_id = (message.params or {}).get("requestId")
        key = id_key(request_id) if not isinstance(request_id, bool) else None
        if key is None:
            log.warning("ignored a notifications/cancelled whose requestId is no request id: %.80r", request_id)
            return True
        call = self.stateless_calls.get(key)
        if call is not None:
            call.cancel()  # closing its HTTP answer is how the stateless era cancels upstream
            return True
        if self.init_params is None and self.session_id is None:
            log.debug("dropped a notifications/cancelled for %.80r: no request of that id is in flight", request_id)
            return True
        return False

    def relay_for(self, message: jsonrpc.Message) -> Relay:
        """What writes the gateway's messages for one client message out, noting its answer (and the
        tools' input schemas in a tools/list answer, for the stateless era's Mcp-Param-* headers; the
        session state a new session must be given again)."""
        sending = SENDING.get()

        async def emit(reply: JsonObject) -> None:
            await self.emit(reply, sending)  # also from the GET stream's task, which has no SENDING

        relay = Relay(emit, message.id if message.kind is Kind.REQUEST else None, self.drops)
        relays = RELAYS.get()
        if relays is not None:
            relays.append(relay)
        if message.method == "tools/list":
            relay.on_answer = self.learn_tools
        elif message.method in SESSION_STATE_METHODS:
            params = message.params or {}
            relay.on_answer = lambda reply: self.learn_session_state(message.method, params, reply)
        return relay

    def learn_session_state(self, method: str, params: JsonObject, reply: JsonObject) -> None:
        if "result" not in reply:
            return
        uri = params.get("uri")
        if method == "logging/setLevel":
            self.log_level = params
        elif method == "resources/subscribe" and isinstance(uri, str):
            self.subscriptions[uri] = params
        elif method == "resources/unsubscribe" and isinstance(uri, str):
            self.subscriptions.pop(uri, None)

    def learn_tools(self, reply: JsonObject) -> None:
        learn_tools(self.tool_schemas, reply)

    async def finish(self, message: jsonrpc.Message, answer: Answer, relay: Relay) -> None:
        if message.kind is Kind.REQUEST and answer.status == 200 and not relay.answered:
            # An SSE answer cut short (the gateway closes a stream its reader falls far behind on), or
            # one whose only responses were for other ids. The request may have run all the same.
            await self.emit(
                _rpc_error(
                    message.id,
                    jsonrpc.UNAVAILABLE,
                    "The gateway's answer stream ended without a response; the request may have been carried "
                    "out: check its effect before sending it again",
                    {"reason": "stream_ended"},
                )
            )
        elif message.kind is Kind.REQUEST and 200 < answer.status < 300 and not relay.answered:
            # Taken with no answer (202, 204: what a notification gets): without this the host waits for ever.
            await self.emit(
                _rpc_error(
                    message.id,
                    jsonrpc.UNAVAILABLE,
                    f"The gateway at {self.url} took the request (HTTP {answer.status}) without answering it; "
                    "it may have been carried out: check its effect before sending it again",
                    {"reason": "no_response", "httpStatus": answer.status},
                )
            )
        await self.relay_refusal(message, answer)

    async def forward_stateless(self, message: jsonrpc.Message) -> None:
        """A 2026-07-28 request (it carries its protocol version in params._meta): passed through as
        a stateless-era POST, with the routing headers that era needs, outside any session."""
        body: JsonObject = message.body
        relay = self.relay_for(message)
        task = asyncio.current_task()
        key = id_key(message.id)
        if task is not None and key is not None:
            self.stateless_calls[key] = task
        try:
            unknown = unknown_tool(body, self.tool_schemas)
            answer = await self.post(body, None, relay, stateless_headers(body, self.tool_schemas))
            if unknown is not None and _header_missing(answer) and await self.learn_schema(body, unknown):
                # Refused before it ran, for want of the Mcp-Param-* headers its schema names: sent again.
                answer = await self.post(body, None, relay, stateless_headers(body, self.tool_schemas))
        finally:
            if key is not None and self.stateless_calls.get(key) is task:
                del self.stateless_calls[key]
        await self.finish(message, answer, relay)

    async def learn_schema(self, call: JsonObject, name: str) -> bool:
        """For a tools/call of a tool whose input schema the bridge has not seen, refused for a missing
        header: the tools, listed once on the bridge's own (the host may call before it lists them);
        whether the tool's schema is known now."""
        async with self.listing_lock:
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES if not self.tools_listed else 0):
                request = list_request(call, self._next_internal_id(), cursor)
                replies: list[Any] = []
                headers = stateless_headers(request, self.tool_schemas)
                answer = await self.post(request, None, keeper(replies), headers)
                answered = [reply for reply in replies if isinstance(reply, dict) and reply.get("id") == request["id"]]
                if answer.status != 200 or not answered:
                    log.info("listing the tools for %s failed (HTTP %d)", name, answer.status)
                    break
                cursor = learn_tools(self.tool_schemas, answered[0])
                self.tools_listed = True
                if cursor is None or name in self.tool_schemas:
                    break
        return name in self.tool_schemas

    async def initialize(self, body: JsonObject) -> None:
        params = body.get("params")
        async with self.session_lock:
            self.init_params = params if isinstance(params, dict) else {}
            self.session_lost = False  # a host starting afresh lists its tools anyway
            if self.session_id is not None:
                await self.end_session()
            message = jsonrpc.Message(Kind.REQUEST, body)
            relay = self.relay_for(message)
            agreed: list[Any] = []
            # The answer's protocolVersion, from the answer as relayed (an SSE answer has no body).
            relay.on_answer = lambda reply: agreed.append(reply.get("result"))
            try:
                answer = await self.post(body, None, relay)
            except GatewaySilent:
                self.silent_upto = self.order.taken
                raise
            if answer.status == 200 and answer.session_id is not None and relay.answered:
                self.session_id = answer.session_id
                version = agreed[0].get("protocolVersion") if agreed and isinstance(agreed[0], dict) else None
                self.protocol_version = version if isinstance(version, str) else None
        await self.finish(message, answer, relay)

    async def relay_refusal(self, message: jsonrpc.Message, answer: Answer) -> None:
        """An HTTP refusal (4xx/5xx) of a request becomes the request's JSON-RPC error."""
        if answer.status < 400:
            return
        if message.kind is not Kind.REQUEST:
            log.warning("the gateway refused a %s (HTTP %d): %s", message.method, answer.status, describe(answer.body))
            return
        if is_jsonrpc(answer.body) and isinstance(answer.body.get("error"), dict):
            await self.emit({**answer.body, "id": message.id})
            return
        code = jsonrpc.FORBIDDEN if answer.status in (401, 403) else jsonrpc.UNAVAILABLE
        if answer.status in (400, 404, 405, 406, 413):
            code = jsonrpc.INVALID_REQUEST
        data = {"httpStatus": answer.status, **(answer.body if isinstance(answer.body, dict) else {})}
        if answer.retry_after_s is not None:
            data["retryAfterMs"] = answer.retry_after_s * 1000  # as the gateway's own 429 says it
        await self.emit(
            _rpc_error(
                message.id,
                code,
                f"The gateway refused the request (HTTP {answer.status}): {describe(answer.body)}",
                data,
            )
        )

    # -- the GET stream ---------------------------------------------------------------------

    def start_stream(self) -> None:
        if self.stream_task is None or self.stream_task.done():
            # A context of its own: the stream is no part of the message whose task starts it (SENDING).
            self.stream_task = asyncio.get_running_loop().create_task(self.stream_loop(), context=contextvars.Context())

    async def stream_loop(self) -> None:
        """Hold the session's GET stream open and relay what comes on it, reopening it when it ends."""
        pause = STREAM_RETRY_S[0]
        refused: int | None = None  # the refusal last named on stderr, named again only when it changes
        signed_again = 0  # refusals in a row the credentials answered by signing afresh
        while True:
            try:
                session_id, _ = await self.current_session()
                if session_id is None:
                    return
                answer = await self.listen(session_id)
                status = answer.status
                if status == 404:
                    await self.renew(session_id)
                    continue
                if status in (405, 406):
                    log.info("the gateway offers no GET stream (HTTP %d); notifications come with answers only", status)
                    return
                if status == 200 and answer.body is None:
                    if refused is not None:
                        log.warning("the gateway accepts the session's GET stream again")
                    pause, refused, signed_again = STREAM_RETRY_S[0], None, 0
                elif self.credentials.resend_after(status, answer.body, signed_again) is not None:
                    # Signed before a restarted gateway started, a rotated secret: the next attempt signs afresh
                    # (as often as a POST is sent again; a refusal after that is named below).
                    signed_again += 1
                    log.debug("GET stream refused (HTTP %d), to be signed again: %s", status, describe(answer.body))
                elif status != refused:
                    # A revoked token, a quota, a page that is no stream: the host hears no list change
                    # nor resource update meanwhile.
                    refused = status
                    log.warning(
                        "the gateway did not open the session's GET stream (HTTP %d), so the host hears no "
                        "notification of the gateway's (list changes, resource updates) until it accepts it "
                        "(asked again every %g s at most). The gateway said: %s",
                        status,
                        STREAM_RETRY_S[1],
                        describe(answer.body),
                    )
            except RedirectRefused as exc:
                log.warning("%s; the bridge holds no GET stream on this session", exc.log_text("GET", str(self.url)))
                return
            except BridgeError as exc:
                log.debug("GET stream: %s", exc)
            except Exception:  # a fault of the bridge's own: named, where it would pass unseen in a task
                log.exception("the GET stream failed; the bridge holds none on this session")
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, STREAM_RETRY_S[1])

    # -- life cycle -------------------------------------------------------------------------

    async def run(self, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """Serve until EOF on stdin, a signal, or the host closing stdout; the exit status (1 when
        requests were left unanswered at EOF or answers left unwritten on stdout at exit, 128 + the
        signal's number when a signal stopped it, as a shell reports a process a signal ended, so a
        host's process manager tells a stop from a clean end)."""
        self.out = Stdout(stdout)
        # sock_read: the longest silence between two reads of an answer (headers, body, SSE keepalives),
        # so a gateway that took a request and then stopped is named, while a long call it keeps alive runs on.
        timeout = aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=self.read_timeout_s
        )
        stop = asyncio.Event()
        stopped_by: list[int] = []  # the signal that stopped the bridge: its exit status

        def on_signal(signum: int) -> None:
            stopped_by.append(signum)
            stop.set()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, on_signal, signum)
        status = 0
        # Room for every message the order lets be in flight, and the GET stream, DELETE and an open.
        connector = aiohttp.TCPConnector(limit=self.order.max_messages + 8)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            self.http = http
            reading = loop.create_task(self.order.read(_host_lines(stdin), len))
            sender = loop.create_task(self.order.send())
            stopping = loop.create_task(stop.wait())
            gone = loop.create_task(self.out.gone.wait())
            await asyncio.wait({reading, stopping, gone}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done() and not stop.is_set() and not self.out.gone.is_set():
                # EOF: what the host sent is still forwarded and answered, for as long as a request may
                # take (--read-timeout); what is left then is named.
                await self.await_answers(sender, {stopping, gone})
                status = await self.give_up_unanswered(sender, signalled=stop.is_set())
            gone.cancel()
            tasks = [reading, sender, stopping, *self.order.cancel(), *([self.stream_task] if self.stream_task else [])]
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            self.queue_held()  # stopped by a signal (or stdout gone): they are answers all the same
            await self.end_session()
        self.out.close()
        if not await self.out.flush_at_exit(EXIT_FLUSH_S):
            status = 1  # answers the host never got: not a clean end
        self.drops.summary()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        return 128 + stopped_by[0] if stopped_by else status

    async def await_answers(self, sender: asyncio.Task[None], stops: set[asyncio.Task[Any]]) -> None:
        """At EOF: until every message taken is done or one of `stops` ends, for up to --read-timeout
        while a message waits on the gateway. Once none does (every request has its answer), answers held
        for room on stdout wait for the host only: until it has read nothing for EXIT_FLUSH_S (counted
        from EOF), since stdout's back-pressure is the host's, never a silence of the gateway."""
        assert self.out is not None
        loop = asyncio.get_running_loop()
        eof = loop.time()
        settled = loop.create_task(self.order.settled(sender))
        try:
            while not settled.done() and not any(task.done() for task in stops):
                on_gateway = not sender.done() or any(
                    not s.answered and s.seq not in self.held for s in self.order.tasks.values()
                )
                if on_gateway and self.read_timeout_s is not None and loop.time() - eof >= self.read_timeout_s:
                    return
                if not on_gateway and (not self.held or self.out.unread_for(eof) >= EXIT_FLUSH_S):
                    return
                await asyncio.wait({settled, *stops}, timeout=EOF_POLL_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            settled.cancel()

    def queue_held(self) -> set[int]:
        """Queue the answers that came from the gateway and waited for room on stdout, whatever the room
        (they are their requests' answers: EXIT_FLUSH_S bounds the wait for the host to read them); the
        seqs of their messages."""
        assert self.out is not None
        for seq in sorted(self.held):
            self.out.put(orjson.dumps(self.held[seq]) + b"\n", answer=answers_request(self.held[seq]))
        delivered, self.held = set(self.held), {}
        return delivered

    async def give_up_unanswered(self, sender: asyncio.Task[None], *, signalled: bool) -> int:
        """At EOF, once the wait for answers ended: stop forwarding, write the answers held for room,
        answer the requests still without one (stdout may still be read) and name them on stderr; the
        exit status (1 when there are any)."""
        sender.cancel()
        sendings = self.order.stop()
        stream = [self.stream_task] if self.stream_task is not None else []
        for task in stream:
            task.cancel()  # it may hold an answer too
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(sender, *sendings, *stream, return_exceptions=True)  # no task answers after this
        delivered = self.queue_held()
        assert self.out is not None
        left = [s for s in sendings.values() if s.request_id is not None and not s.answered and s.seq not in delivered]
        ids = [s.request_id for s in left]
        unsent = [_line_request_id(line) for line in self.order.unsent()]
        if not ids and not unsent:
            return 0
        timeout = None if signalled else self.read_timeout_s
        # Its POST's body went out (a resend, after a 404 or 401, clears it: the first was not carried out).
        answers = [(s.request_id, s.written.is_set()) for s in left]
        answers += [(request_id, False) for request_id in unsent if request_id is not None]
        for request_id, sent in answers:
            text, data = StdinClosed(timeout, sent=sent).host_error(str(self.url))
            self.out.put(orjson.dumps(_rpc_error(request_id, jsonrpc.UNAVAILABLE, text, data)) + b"\n", answer=True)
        waited = f"{timeout:g} s (--read-timeout)" if timeout is not None else "a signal"
        shown = ", ".join(orjson.dumps(request_id).decode()[:80] for request_id in ids[:50])
        more = f" and {len(ids) - 50} more" if len(ids) > 50 else ""
        never = f"; {len(unsent)} more message(s) were never sent" if unsent else ""
        log.error(
            "stdin closed; gave up after %s on %d request(s) still without an answer: id %s%s%s",
            waited,
            len(ids),
            shown or "none",
            more,
            never,
        )
        return 1


# -- helpers ---------------------------------------------------------------------------------------


def _relayed(relays: list[Relay]) -> bool:
    """Whether the message's answer was written out (the gateway's, through one of its relays)."""
    return any(relay.relayed for relay in relays)


def _line_request_id(line: bytes) -> Any:
    """The id of the request a stdin line holds (None for a notification, a response, or no id)."""
    if isinstance(line, TooLong):
        return answerable_id(message_head(line.head).get("id"))
    message = jsonrpc.parse(line, jsonrpc.MAX_DEPTH_CEILING)
    return answerable_id(message.id) if message.kind is Kind.REQUEST else None


def _header_missing(answer: Answer) -> bool:
    """Whether the gateway refused a stateless-era request for a routing header (-32020)."""
    error = answer.body.get("error") if answer.status == 400 and isinstance(answer.body, dict) else None
    return isinstance(error, dict) and error.get("code") == jsonrpc.HEADER_MISMATCH


async def _host_lines(stdin: BinaryIO) -> AsyncIterator[bytes]:
    async for line in stdin_lines(stdin):
        if line.strip():
            yield line


def main(bridge: StdioBridge) -> int:
    status = asyncio.run(bridge.run(sys.stdin.buffer, sys.stdout.buffer))
    if bridge.out is not None and not bridge.out.finished.is_set():
        # The writer thread is stuck on a host that reads no more: the interpreter's own exit would
        # flush stdout behind it and wait for ever.
        sys.stderr.flush()
        os._exit(status)
    return status
