"""MCP Streamable HTTP for clients at `/<slot>/mcp`, both protocol eras on one endpoint
(docs/protocol-clients.md, "Streamable HTTP").

The MCP-Protocol-Version header picks the era: a stateless-era version goes to the stateless
handler; none, or a session-era version, to the session handler. A session-era answer is one SSE
event when the client lists text/event-stream (as the SDK's own server answers; `session_answers`),
else JSON, and JSON too when that event would be over limits.max_sse_answer_bytes (whole_answers.py); a
stateless-era answer is JSON. A client that takes no JSON gets one SSE event in either
era. Any of them becomes a streamed SSE response as soon as a request-tied notification (progress, a
log message) arrives or the answer takes longer than the keepalive interval.

A session that negotiated 2025-03-26 may POST a JSON-RPC batch (gateway/northbound/batches.py): its
requests run side by side, and their responses make one answer by the same rules (`BatchStream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web

from gateway.core import errors, jsonrpc, stateless, subscription_bounds
from gateway.core.client_context import SESSION, STATELESS, TRANSPORT_HEADER, ClientContext, http_transport
from gateway.core.due import DueQueue
from gateway.core.eras import META_SUBSCRIPTION_ID
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.names import SlotNameError, decode_path_segment
from gateway.core.principal import Principal
from gateway.core.routing import SlotTarget, Target
from gateway.core.sessions import ClientSession
from gateway.core.slots import SlotRefused
from gateway.core.stateless import Rejection
from gateway.core.streams import MessageQueue
from gateway.core.versions import DEFAULT_HEADERLESS_VERSION, HANDSHAKE_VERSIONS, STATELESS_VERSIONS, is_known
from gateway.http_answers import http_error, json_response, rpc_error
from gateway.northbound import batches, event_stream, http_io, session_era
from gateway.northbound.credential_watch import CredentialWatch, credential_gone, credential_gone_comment
from gateway.northbound.event_stream import accepts, lists_sse
from gateway.northbound.http_io import NO_SUCH_ENDPOINT, WELL_KNOWN_SEGMENT, Admission, Refusal
from gateway.northbound.listen_quota import ListenQuota
from gateway.northbound.listen_stream import SubscriptionStream
from gateway.northbound.request_stream import BatchStream, RequestStream, SwitchClock
from gateway.policy.caller_pending import CallerPending, caller_key
from gateway.policy.request_principal import request_principal
from gateway.policy.verifier import AuthFailure
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.trace_context import combined_header

log = logging.getLogger("gateway.northbound.http")

SESSION_HEADER = "Mcp-Session-Id"
CAPABILITY_METHODS = {"completion/complete": "completions"}
"""Stateless-era methods a slot answers only when its provider declares the capability named."""
HOW_TO_END = "end sessions you no longer use with DELETE on their endpoint (Mcp-Session-Id header)"

__all__ = ["Admission", "StreamableHttpEndpoint", "http_error", "json_response", "rpc_error"]
"""Admission and the JSON answers are defined in http_io.py and importable from here too."""


Stream = TypeVar("Stream", bound=RequestStream)


class StreamableHttpEndpoint:
    def __init__(self, gateway: Gateway, admission: Admission | None = None) -> None:
        self.gateway = gateway
        self.limits = gateway.config.limits
        self.admission = admission
        self.clock: SwitchClock = DueQueue(self.limits.sse_keepalive_s, RequestStream.start_sse)
        self.sse_answers = gateway.config.session_answers == "sse"
        self.pending = CallerPending(gateway)
        self.listens = ListenQuota(gateway)

    # -- entry --------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve `/<slot>/mcp`; anything else under the catch-all route is a 404 with directions."""
        parts = request.rel_url.raw_path.split("/")
        if len(parts) != 3 or parts[2] != "mcp" or not parts[1] or parts[1] == WELL_KNOWN_SEGMENT:
            return http_error(404, "not_found", NO_SUCH_ENDPOINT)
        name = decode_path_segment(parts[1])
        try:
            target = self.gateway.target(name)
        except SlotNameError as exc:
            return http_error(404, "unknown_slot", str(exc))
        except SlotRefused as exc:
            return http_error(404 if exc.kind == "undeclared" else 503, "slot_refused", exc.reason)
        return await self.serve(request, target)

    async def serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        """Serve one request to `target` in the era its headers pick. Targets that are not slots (the
        tool-group endpoints /mcp and /mcp/<group>) come here directly: each target object lives as
        long as the gateway, so a session opened on it is bound to it like a slot's."""
        version = request.headers.get("MCP-Protocol-Version")
        if version in STATELESS_VERSIONS:
            return await self.stateless(request, target)
        if version is not None and not is_known(version):
            return await self.unknown_version(request, target, version)
        if request.method == "POST":
            return await self.session_post(request, target, version)
        if request.method == "GET":
            return await self.session_get(request, target)
        if request.method == "DELETE":
            return self.session_delete(request, target)
        return web.Response(status=405, headers={"Allow": "GET, POST, DELETE"})

    async def unknown_version(self, request: web.Request, target: Target, version: str) -> web.StreamResponse:
        """A version this gateway does not speak. A request shaped for the stateless era goes through
        its ladder, which answers -32022 listing the stateless versions (a stateless client retries
        with one of those); anything else gets every version this endpoint speaks. Either way the
        error carries the request's id when the body has one."""
        request_id = None
        if request.method == "POST":
            message = await self.read_message(request)
            if not isinstance(message, jsonrpc.Message):
                return message
            if message.kind is Kind.REQUEST and stateless.carries_envelope(message.body):
                return await self.stateless(request, target)
            request_id = message.body.get("id") if message.kind is Kind.REQUEST else None
        shown = http_io.surrogates_replaced(version[:40])
        return rpc_error(
            400,
            jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported MCP-Protocol-Version {shown!r}",
            request_id,
            data={"supported": list(HANDSHAKE_VERSIONS + STATELESS_VERSIONS), "requested": shown},
        )

    def read_message(
        self, request: web.Request, with_batches: bool = False
    ) -> Awaitable[jsonrpc.Message | web.Response]:
        # Hands back http_io's coroutine rather than awaiting it: one coroutine frame less per request.
        return http_io.read_message(request, self.limits, self.gateway.metrics, batches=with_batches)

    def context_headers(self, session: ClientSession | None) -> dict[str, str]:
        return {SESSION_HEADER: session.id} if session is not None else {}

    async def exchange(
        self,
        request: web.Request,
        target: Target,
        ctx: ClientContext,
        body: JsonObject,
        session: ClientSession | None,
        sse_ok: bool,
        sse_answer: bool,
    ) -> web.StreamResponse:
        """Run one request through the core and answer it as JSON or SSE (`sse_answer`: one event
        from the start)."""
        request_id = body.get("id")
        if session is None:
            # Stateless era: nothing but a disconnect can cancel the request, and a disconnect
            # cancels this handler, so the work needs no task of its own.
            caller = caller_key(ctx.principal, request.remote)
            crowded = self.pending.enter(caller, request_id)
            if crowded is not None:
                return json_response(crowded)
            try:
                stream = self.request_stream(RequestStream, request, {}, sse_ok, sse_answer)
                ctx.sink = stream.sink
                try:
                    answer = await target.handle(ctx, body)
                except BaseException:
                    stream.abort()
                    raise
            finally:
                self.pending.leave(caller)
            status = stateless.http_status(answer["error"]["code"]) if "error" in answer else 200
            return await stream.finish(answer, status)
        # Session era: answered as one SSE event when the client lists text/event-stream, as the
        # SDK's own server answers (unless session_answers = "json").
        stream = self.request_stream(RequestStream, request, self.context_headers(session), sse_ok, sse_answer)
        ctx.sink = stream.sink
        # A provider's sampling, elicitation or roots request for this call goes out on this
        # call's own stream, never on another one (docs/protocol-clients.md, "Session era: on the
        # request's stream").
        ctx.requester = session.requests.via(stream.send_request)
        refused = session_era.not_runnable(self.gateway, session.in_flight, request_id)
        if refused is not None:
            return await stream.finish(refused)
        # The client's notifications/cancelled (or its session ending) cancels only the work, and
        # this exchange still ends with an answer; a client disconnect cancels this handler, and
        # that cancellation reaches the work (session_era.run_request).
        try:
            answer = await session_era.run_request(session, target, ctx, body)
        except BaseException:
            stream.abort()
            raise
        return await stream.finish(answer)

    def write_bound(self) -> tuple[float, Metrics]:
        """`event_stream.write`'s bound and where it counts a stalled write."""
        return self.limits.stream_write_timeout_s, self.gateway.metrics

    async def pump(
        self,
        request: web.Request,
        response: web.StreamResponse,
        queue: MessageQueue,
        kind: str,
        watch: CredentialWatch | None = None,
    ) -> AuthFailure | None:
        """Write a stream the client holds open (`kind`, for the log); why its credential no longer stands, if
        so. `watch`: the stream's own (default: one made here)."""
        watch = watch or CredentialWatch.of(request, kind)
        return await event_stream.pump(
            request, response, queue, self.limits.sse_keepalive_s, *self.write_bound(), watch
        )

    def counted(self, response: web.StreamResponse, queue: MessageQueue, kind: str) -> web.StreamResponse:
        """Count a stream that notification_queue cut off (the client fell too far behind); a request's
        answer stream counts its own overflow as it happens (request_stream.py)."""
        if queue.overflowed:
            self.gateway.metrics.stream_overflows.labels(kind).inc()
            self.gateway.metrics.limit_hit("notification_queue")
        return response

    def admit(self, request: web.Request, target: Target, message: jsonrpc.Message) -> web.Response | None:
        """Run the admission step on a client request (notifications and responses are not counted)."""
        if self.admission is None or message.kind is not Kind.REQUEST:
            return None
        refusal: Refusal | None = self.admission(request, target, message)
        return refusal.response() if refusal is not None else None

    # -- session era --------------------------------------------------------------------------

    def find_session(
        self, request: web.Request, target: Target, request_id: Any = None
    ) -> ClientSession | web.Response:
        """The request's session, or the refusal; `request_id` is the id of the request refused, if any."""
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            return rpc_error(
                400, jsonrpc.INVALID_REQUEST, "Missing Mcp-Session-Id header; send initialize first", request_id
            )
        session = self.gateway.sessions.get(session_id)
        if session is None or session.target is not target or session.transport != "streamable-http":
            return rpc_error(
                404,
                jsonrpc.INVALID_REQUEST,
                "Unknown or expired session; send initialize to start a new one",
                request_id,
            )
        if not session_era.claims_session(
            session, request_principal(request), self.gateway, request.rel_url.raw_path, request.remote
        ):
            return http_error(403, "forbidden", session_era.OWNER_MISMATCH)
        session.touch()  # only now: a refused request keeps nobody's session alive
        return session

    async def session_post(self, request: web.Request, target: Target, version: str | None) -> web.StreamResponse:
        message = await self.read_message(request, with_batches=True)
        if not isinstance(message, jsonrpc.Message):  # the refusal (a plain class check, not ABCMeta's)
            return message
        if message.kind is Kind.BATCH:
            return await self.session_batch(request, target, message, version)
        refusal = self.admit(request, target, message)
        if refusal is not None:
            return refusal
        body = message.body
        if message.kind is Kind.REQUEST and message.method == "initialize":
            sse = self.answers_as_sse(request, *accepts(request))
            return self.initialize(target, body, request_principal(request), sse, request.remote)
        if (
            message.kind is Kind.REQUEST
            and message.method == "server/discover"
            and SESSION_HEADER not in request.headers
        ):
            # Lets a probing client learn that this endpoint also speaks the stateless era.
            result = target.stamp_stateless("server/discover", target.discover_result())
            return json_response(jsonrpc.result_response(body["id"], result))
        found = self.find_session(request, target, body.get("id") if message.kind is Kind.REQUEST else None)
        if isinstance(found, web.Response):
            return found
        session = found
        if message.kind is Kind.NOTIFICATION:
            session_era.client_notification(session, message)
            return web.Response(status=202, headers=self.context_headers(session))
        if message.kind is Kind.RESPONSE:
            # The client's answer to a request a provider sent it through the gateway; one nobody
            # waits for (late, or after its call ended) is acknowledged and dropped.
            session.requests.resolve(body)
            return web.Response(status=202, headers=self.context_headers(session))
        ctx = self.session_context(request, session, version)
        json_ok, sse_ok = accepts(request)
        return await self.exchange(
            request, target, ctx, body, session, sse_ok, self.answers_as_sse(request, json_ok, sse_ok)
        )

    async def session_batch(
        self, request: web.Request, target: Target, batch: jsonrpc.Message, version: str | None
    ) -> web.StreamResponse:
        """A JSON-RPC batch: only from a 2025-03-26 session (gateway/northbound/batches.py), each
        member handled as it would be alone, the responses in one answer (docs/protocol-clients.md,
        "Batches (2025-03-26)")."""
        if SESSION_HEADER not in request.headers:
            return json_response(batches.not_accepted(), status=400)
        found = self.find_session(request, target)
        if isinstance(found, web.Response):
            return found
        session = found
        if not batches.accepts_batches(session):
            return json_response(batches.not_accepted(), status=400)
        members = batches.unpack(batch, self.limits.max_batch_messages, self.gateway.metrics)
        if isinstance(members, dict):
            return json_response(members, status=400)
        session.touch()
        metrics = self.gateway.metrics
        json_ok, sse_ok = accepts(request)
        stream = self.request_stream(
            BatchStream,
            request,
            self.context_headers(session),
            sse_ok,
            self.answers_as_sse(request, json_ok, sse_ok),
            room=len(members),  # every response of the batch, on top of the notifications a stream may buffer
        )
        requests: list[JsonObject] = []
        ids: set[Any] = set()  # the batch's own ids: a later duplicate is refused before any member runs
        answered = False
        for member in members:
            kind = member.kind
            if kind is Kind.NOTIFICATION:
                session_era.client_notification(session, member)
            elif kind is Kind.RESPONSE:
                session.requests.resolve(member.body)
            elif kind is Kind.INVALID:
                stream.answer(batches.invalid_member(member, metrics))
                answered = True
            else:
                answered = True
                refusal = self.admission(request, target, member) if self.admission is not None else None
                if refusal is not None:
                    stream.answer(refusal.error)
                elif member.method == "initialize":
                    stream.answer(batches.initialize_refused(member.id))
                elif member.id in ids:
                    stream.answer(session_era.id_in_flight(member.id))
                else:
                    ids.add(member.id)
                    requests.append(member.body)
        if not answered:
            stream.abort()
            return web.Response(status=202, headers=self.context_headers(session))
        try:
            # One task per request: notifications/cancelled cancels that one alone (session_era.run_request),
            # and a client that goes away cancels this handler and with it every task.
            async with asyncio.TaskGroup() as group:
                for body in requests:
                    group.create_task(self.batch_member(request, target, session, body, version, stream))
        except BaseException:
            stream.abort()
            raise
        return await stream.finish_all()

    async def batch_member(
        self,
        request: web.Request,
        target: Target,
        session: ClientSession,
        body: JsonObject,
        version: str | None,
        stream: BatchStream,
    ) -> None:
        """Answer one request of a batch on the batch's stream, checked as a request alone is."""
        request_id = body["id"]
        # Checked in the task, right before run_request registers the id (the batch's own duplicates
        # were refused before any member started).
        refused = session_era.not_runnable(self.gateway, session.in_flight, request_id)
        if refused is not None:
            stream.answer(refused)
            return
        ctx = self.session_context(request, session, version)
        ctx.sink = stream.sink
        ctx.requester = session.requests.via(stream.send_request)
        stream.answer(await session_era.run_request(session, target, ctx, body))

    def session_context(self, request: web.Request, session: ClientSession, version: str | None) -> ClientContext:
        return ClientContext(
            era=SESSION,
            protocol_version=version or DEFAULT_HEADERLESS_VERSION,
            listener=session,
            principal=session.principal,
            client_capabilities=session.capabilities,
            client_info=session.client_info,
            transport=http_transport(request.headers.get(TRANSPORT_HEADER)),
            tracing=self.gateway.telemetry.tracing,
            traceparent=request.headers.get("traceparent"),
            tracestate=combined_header(request.headers, "tracestate"),
            baggage=combined_header(request.headers, "baggage"),
        )

    def request_stream(
        self,
        kind: type[Stream],
        request: web.Request,
        headers: dict[str, str],
        sse_ok: bool,
        sse_answer: bool,
        room: int = 0,
    ) -> Stream:
        """The answer stream of one POST, with this endpoint's bounds (`room`: messages beyond
        limits.notification_queue it must hold)."""
        return kind(
            request,
            headers,
            self.limits.notification_queue + room,
            self.limits.stream_write_timeout_s,
            self.clock,
            self.gateway.metrics,
            sse_ok,
            sse_answer,
            self.limits.max_sse_answer_bytes,
            self.limits.notification_queue,
        )

    def answers_as_sse(self, request: web.Request, json_ok: bool, sse_ok: bool) -> bool:
        """Whether a session-era answer is SSE from the start: for a client that lists
        text/event-stream (unless session_answers = "json"), and for one that cannot take JSON."""
        return sse_ok and (not json_ok or (self.sse_answers and lists_sse(request)))

    def initialize(
        self, target: Target, body: JsonObject, principal: Principal, sse: bool, peer: str | None = None
    ) -> web.Response:
        refused = session_era.initialize_refusal(body)
        if refused is not None:
            return json_response(refused, status=400)
        params = body["params"]
        result = target.initialize_result(params["protocolVersion"])
        session = session_era.create_session(
            self.gateway,
            target,
            principal,
            body.get("id"),
            HOW_TO_END,
            result["protocolVersion"],
            params.get("clientInfo"),
            params.get("capabilities"),
            peer,
        )
        if isinstance(session, Refusal):
            return session.response()
        answer = jsonrpc.result_response(body["id"], result)
        if sse:
            return event_stream.one_event(answer, {SESSION_HEADER: session.id})
        return json_response(answer, headers={SESSION_HEADER: session.id})

    async def session_get(self, request: web.Request, target: Target) -> web.StreamResponse:
        found = self.find_session(request, target)
        if isinstance(found, web.Response):
            return found
        session = found
        _, sse_ok = accepts(request)
        if not sse_ok:
            return http_error(406, "not_acceptable", "The GET stream is text/event-stream; accept it")
        if session.stream is not None and not session.stream.closed:
            return http_error(409, "stream_open", "This session already has a GET stream open; use that one")
        queue = MessageQueue(self.limits.notification_queue)
        session.stream = queue
        self.gateway.client_streams.add(queue)
        metrics = self.gateway.metrics.streams.labels("get")
        metrics.inc()
        try:
            response = await event_stream.open_stream(request, self.context_headers(session))
            failure = await self.pump(request, response, queue, "GET stream")
            end = b"" if failure is None else credential_gone_comment(failure)
            with contextlib.suppress(ConnectionError):
                await event_stream.write(request, response, end, *self.write_bound(), eof=True)
            return self.counted(response, queue, "get")
        except ConnectionError as exc:
            return event_stream.client_gone("GET stream", exc)
        finally:
            metrics.dec()
            queue.close()
            self.gateway.client_streams.discard(queue)
            if session.stream is queue:
                session.stream = None
            session.touch()

    def session_delete(self, request: web.Request, target: Target) -> web.Response:
        found = self.find_session(request, target)
        if isinstance(found, web.Response):
            return found
        self.gateway.sessions.close(found.id)
        return web.Response(status=200)

    # -- stateless era ------------------------------------------------------------------------

    async def stateless(self, request: web.Request, target: Target) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST"})
        json_ok, sse_ok = accepts(request)
        if not json_ok and not sse_ok:
            return http_error(
                406,
                "not_acceptable",
                "Accept application/json or text/event-stream (MCP clients list both); answers come as one of them",
            )
        message = await self.read_message(request)
        if not isinstance(message, jsonrpc.Message):
            return message
        if self.admission is not None:  # admit() asks too; asked here it spares every request the call
            refusal = self.admit(request, target, message)
            if refusal is not None:
                return refusal
        body = message.body
        method = message.method
        if message.kind is Kind.NOTIFICATION or message.kind is Kind.RESPONSE:
            # No client-to-server notifications exist in this era; cancellation is closing the stream.
            return web.Response(status=202)
        # aiohttp's header view keeps repeated headers and looks names up case-insensitively.
        repeated = stateless.repeated_routing_header(request.headers)
        verdict = stateless.check_request(body, request.headers, repeated)
        if isinstance(verdict, Rejection):
            return self.rejection(body, verdict)
        if method == "tools/call":
            params = body.get("params") or {}
            annotated = target.tool_schema_view(params.get("name"), stateless.header_annotations)
            if annotated:
                arguments = params.get("arguments")
                mismatch = stateless.check_annotated_headers(annotated, arguments, request.headers.items())
                if mismatch is not None:
                    return self.rejection(body, mismatch)
        if method == "initialize":
            return self.rejection(
                body,
                Rejection(jsonrpc.METHOD_NOT_FOUND, "initialize does not exist in 2026-07-28; just send requests"),
            )
        undeclared = self.undeclared(target, method)
        if undeclared is not None:
            return self.rejection(body, Rejection(undeclared.code, undeclared.message))
        ctx = ClientContext(
            era=STATELESS,
            protocol_version=verdict.protocol_version,
            log_level=verdict.log_level,
            principal=request_principal(request),
            peer=request.remote,
            client_capabilities=verdict.client_capabilities if isinstance(verdict.client_capabilities, dict) else {},
            input_required=self.gateway.input_required,
            transport=http_transport(request.headers.get(TRANSPORT_HEADER)),
            tracing=self.gateway.telemetry.tracing,
            traceparent=request.headers.get("traceparent"),
            tracestate=combined_header(request.headers, "tracestate"),
            baggage=combined_header(request.headers, "baggage"),
        )
        if method == "subscriptions/listen":
            if not sse_ok:
                return http_error(406, "not_acceptable", "subscriptions/listen answers with text/event-stream")
            return await self.listen(request, target, ctx, body)
        # A client that takes no JSON gets its answer as SSE, one event.
        return await self.exchange(request, target, ctx, body, None, sse_ok, not json_ok)

    @staticmethod
    def undeclared(target: Target, method: str) -> errors.RpcError | None:
        """-32601 for a method of an MCP capability the slot's provider does not declare: relayed, a
        board's own not-found text would name its session-era methods (initialize, ping) to a
        2026-07-28 caller. prompts/* and resources/* are checked so at the slot (routing.py)."""
        capability = CAPABILITY_METHODS.get(method)
        if capability is None or not isinstance(target, SlotTarget):
            return None
        session = target.slot.session
        if session is None or not session.ready or capability in session.capabilities:
            return None  # relayed: an offline slot answers that it is not connected
        return errors.method_not_found(method, f'"{target.name}" (its provider declares no {capability} capability)')

    def rejection(self, body: JsonObject, rejection: Rejection) -> web.Response:
        return rpc_error(
            stateless.http_status(rejection.code),
            rejection.code,
            rejection.message,
            body.get("id"),
            rejection.data,
        )

    async def listen(
        self, request: web.Request, target: Target, ctx: ClientContext, body: JsonObject
    ) -> web.StreamResponse:
        request_id = body["id"]
        params = body.get("params") or {}
        wanted = params.get("notifications")
        if not isinstance(wanted, dict):
            return self.rejection(
                body,
                Rejection(jsonrpc.INVALID_PARAMS, 'subscriptions/listen needs "notifications"'),
            )
        honored = self.honored_filter(target, wanted)
        uris = honored.get("resourceSubscriptions")
        if uris and isinstance(target, SlotTarget):
            subscribed = target.slot.upstream.subscribers
            try:  # refused whole, before anything is subscribed
                subscription_bounds.admit(self.limits, self.gateway.metrics, target.name, subscribed, uris)
            except errors.RpcError as exc:
                return json_response(exc.response(request_id))
        caller = caller_key(ctx.principal, request.remote)
        crowded = self.listens.enter(caller, request_id)
        if crowded is not None:
            return json_response(crowded)
        stream = SubscriptionStream(request_id, honored, self.limits.notification_queue, ctx.principal)
        watch = CredentialWatch.of(request, "subscriptions/listen stream")
        stream.watched_by(watch)
        ctx.listener = stream
        target.attach(stream)
        self.gateway.client_streams.add(stream.queue)
        metrics = self.gateway.metrics.streams.labels("listen")
        metrics.inc()
        try:
            refused = [uri for uri in list(stream.uris) if not await target.listen_subscribe(ctx, uri)]
            if refused:  # the acknowledgement names only what this stream will get (a policy may refuse)
                stream.uris.difference_update(refused)
                honored["resourceSubscriptions"] = [uri for uri in uris or () if uri in stream.uris]
            response = await event_stream.open_stream(request)
            ack = jsonrpc.notification(
                "notifications/subscriptions/acknowledged",
                {"notifications": honored, "_meta": {META_SUBSCRIPTION_ID: request_id}},
            )
            await event_stream.write(request, response, event_stream.encode_event(ack), *self.write_bound())
            kind = "subscriptions/listen stream"
            failure = await self.pump(request, response, stream.queue, kind, watch) or watch.failed
            end = b""
            if failure is not None:  # the listen request's own answer says why
                end = event_stream.encode_event(credential_gone(request_id, failure))
            elif not stream.queue.overflowed:
                # Graceful end (gateway shutdown): the listen result tells the client it was deliberate.
                final = jsonrpc.result_response(
                    request_id,
                    target.stamp_stateless("subscriptions/listen", {"_meta": {META_SUBSCRIPTION_ID: request_id}}),
                )
                end = event_stream.encode_event(final)
            with contextlib.suppress(ConnectionError):
                await event_stream.write(request, response, end, *self.write_bound(), eof=True)
            return self.counted(response, stream.queue, "listen")
        except ConnectionError as exc:
            return event_stream.client_gone("subscriptions/listen stream", exc)
        finally:
            metrics.dec()
            self.listens.leave(caller)
            target.detach(stream)
            stream.close()
            self.gateway.client_streams.discard(stream.queue)

    @staticmethod
    def honored_filter(target: Target, wanted: JsonObject) -> JsonObject:
        """The part of `wanted` this endpoint delivers: a list-change kind only where its capability
        says `listChanged: true` (not `_broker`'s without a policy, for one), resource updates only
        where `resources.subscribe` is true."""
        caps = target.capabilities()
        honored: JsonObject = {}
        for kind, capability in (
            ("toolsListChanged", "tools"),
            ("promptsListChanged", "prompts"),
            ("resourcesListChanged", "resources"),
        ):
            section = caps.get(capability)
            if wanted.get(kind) and isinstance(section, dict) and section.get("listChanged") is True:
                honored[kind] = True
        uris = wanted.get("resourceSubscriptions")
        resources = caps.get("resources")
        if isinstance(uris, list) and isinstance(resources, dict) and resources.get("subscribe"):
            honored["resourceSubscriptions"] = [uri for uri in uris if isinstance(uri, str)]
        return honored
