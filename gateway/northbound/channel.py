"""A session-era client on one message channel: legacy HTTP+SSE and raw WebSocket clients.

Streamable HTTP answers each request on its own HTTP exchange. These two transports instead carry
the client's messages in one at a time (POSTs to `/<slot>/messages`, or text frames) and every
message for the client out on one ordered stream (the SSE stream, or the socket): answers, the
progress and log notifications of a request, list changes, resource updates, and requests a
provider sends to the client. The channel is the session: it opens with the stream and ends when
the stream closes, which cancels what the client still has in flight (its providers get
notifications/cancelled).

The outgoing stream is the session's `stream` queue: the core reaches the client with
`session.deliver()` or the request's `ClientContext.sink`, and the server-to-client relay
(gateway/core/relay.py) sends a provider's sampling, elicitation or roots request on it through the
request's `ClientContext.requester`; the client's answer comes back through `receive()` like any
other message and goes to `session.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.core import jsonrpc
from gateway.core.client_context import SESSION, ClientContext
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.routing import Target
from gateway.core.sessions import ClientSession
from gateway.core.streams import MessageQueue
from gateway.http_answers import encode_refused
from gateway.northbound import batches, session_era
from gateway.northbound.http_io import Admission, Refusal
from gateway.telemetry.trace_context import combined_header

Admit = Callable[[jsonrpc.Message], Refusal | None]
"""The admission step (rate limits) bound to the request that opened the channel."""

ResponseHandler = Callable[[ClientSession, jsonrpc.Message], None]
"""Takes a client's answer to a request the gateway sent it (server-to-client relay)."""


def bind_admission(admission: Admission | None, request: web.Request, target: Target) -> Admit | None:
    """The admission step for every request on a channel: charged to the caller and the slot that
    the request opening the channel (GET /<slot>/sse, the WebSocket upgrade) named."""
    if admission is None:
        return None
    step = admission

    def admit(message: jsonrpc.Message) -> Refusal | None:
        return step(request, target, message)

    return admit


class Outbox(MessageQueue):
    """The channel's outgoing queue, bounded in messages (limits.notification_queue) and in the bytes of
    their JSON encodings (`max_bytes`, limits.max_outbox_bytes), so a client that does not read holds
    at most that much: passing either bound closes it as an overflow, `overflow_limit` naming which.
    One message over `max_bytes` passes when nothing is queued (the client may be reading; the largest
    message is bounded where it comes in). Each message is encoded once, at `put`; `encoded` hands the
    writer the encoding of the message `get` returned last.

    `on_overflow` runs once, inside the put that passed a bound, so a transport can end the session
    then instead of when its writer, perhaps stalled on a client that does not read, next looks at the
    queue."""

    on_overflow: Callable[[], None] | None = None

    def __init__(self, limit: int, max_bytes: int) -> None:
        super().__init__(limit)
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self.overflow_limit = "notification_queue"
        self._encodings: deque[bytes | None] = deque()
        self._last: tuple[JsonObject, bytes | None] | None = None

    def put(self, message: JsonObject) -> bool:
        if self.closed:
            return False
        try:
            data: bytes | None = orjson.dumps(message)
        except orjson.JSONEncodeError:
            data = None  # `encoded` makes the writer's -32603 answer of it, or drops it
        size = 0 if data is None else len(data)
        if self._encodings and self.queued_bytes + size > self.max_bytes:
            self.overflow_limit = "max_outbox_bytes"
            self.overflowed = True
            self.close(drop=True)
            return False
        if not super().put(message):
            return False
        self._encodings.append(data)
        self.queued_bytes += size
        return True

    def _taken(self, message: JsonObject | None) -> JsonObject | None:
        if message is not None:
            data = self._encodings.popleft()
            self.queued_bytes -= 0 if data is None else len(data)
            self._last = (message, data)
        return message

    async def get(self, timeout: float | None = None) -> JsonObject | None:
        return self._taken(await super().get(timeout))

    def get_nowait(self) -> JsonObject | None:
        return self._taken(super().get_nowait())

    def encoded(self, message: JsonObject) -> bytes | None:
        """`message` as JSON: the encoding `put` made when it is the message taken last, else a new one.
        One the encoder refuses is an answer's -32603 error, or None for a notification or request
        (http_answers.encode_refused): the writer counts and drops it."""
        last = self._last
        self._last = None
        if last is not None and last[0] is message and last[1] is not None:
            return last[1]
        try:
            return orjson.dumps(message)
        except orjson.JSONEncodeError as exc:
            return encode_refused(message, exc)

    def close(self, drop: bool = False) -> None:
        fresh = not self.closed
        super().close(drop)
        if drop:
            self._encodings.clear()
            self.queued_bytes = 0
            self._last = None
        if fresh and self.overflowed and self.on_overflow is not None:
            self.on_overflow()

    @property
    def overflow_reason(self) -> str:
        """Why the outbox overflowed: a close reason, or a stream's last comment."""
        if self.overflow_limit == "max_outbox_bytes":
            return f"Client too slow: more than {self.max_bytes} bytes waiting (limits.max_outbox_bytes)"
        return f"Client too slow: more than {self.limit} messages waiting (limits.notification_queue)"


def _client_id(value: Any) -> Any:
    """The id to answer an unusable message with: its own when valid, else null (JSON-RPC 2.0 §5)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


class ClientChannel:
    """One client session whose messages all travel on one channel (see the module docstring)."""

    def __init__(
        self,
        gateway: Gateway,
        target: Target,
        session: ClientSession,
        transport: str,
        admit: Admit | None = None,
        on_response: ResponseHandler | None = None,
    ) -> None:
        self.gateway = gateway
        self.target = target
        self.session = session
        self.admit = admit
        self.on_response = on_response
        limits = gateway.config.limits
        self.outbox = Outbox(limits.notification_queue, limits.max_outbox_bytes)
        session.stream = self.outbox
        session.transport = transport
        gateway.client_streams.add(self.outbox)
        self.handshaken = False
        """True once initialize was answered: requests other than ping wait for it."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.active: set[Any] = set()
        """Ids of the client's requests not answered yet, held from the moment a request is read
        (the session's in_flight map learns them only once their task runs)."""
        self.closed = False

    @property
    def id(self) -> str:
        return self.session.id

    def send(self, message: JsonObject) -> None:
        """Queue one message for the client (dropped once the channel is closed)."""
        self.outbox.put(message)

    def refuse(self, request_id: Any, code: int, text: str, data: Any = None) -> None:
        self.send(jsonrpc.error_response(request_id, code, text, data))

    # -- messages from the client -------------------------------------------------------------

    def receive(self, message: jsonrpc.Message, headers: Mapping[str, str] | None = None) -> None:
        """Take one message from the client; everything it causes goes out on the outbox. `headers`: the
        HTTP headers it came with, where its way in has them (a legacy SSE POST), for its trace context.

        Once the outbox is closed (overflowed, the gateway shutting down, a credential gone) nothing can
        be answered any more: the message is dropped, so a client that does not read cannot keep
        starting provider work whose answers would be thrown away."""
        if self.closed or self.outbox.closed:
            return
        self.session.touch()
        if message.kind is Kind.INVALID:
            self.gateway.metrics.unparsable.labels("client").inc()
            if message.limit:
                self.gateway.metrics.limit_hit(message.limit)
            code = jsonrpc.PARSE_ERROR if message.body is None else jsonrpc.INVALID_REQUEST
            self.refuse(_client_id(message.id), code, f"Invalid JSON-RPC: {message.problem}")
            return
        if message.kind is Kind.BATCH:
            self.receive_batch(message, headers)
            return
        if message.kind is Kind.NOTIFICATION:
            session_era.client_notification(self.session, message)
            return
        if message.kind is Kind.RESPONSE:
            if self.on_response is not None:
                self.on_response(self.session, message)
            else:
                # The client's answer to a request its provider sent it (gateway/core/relay.py).
                self.session.requests.resolve(message.body)
            return
        self.request(message, headers)

    @property
    def takes_batches(self) -> bool:
        """Whether the session may send batches: initialized, and with 2025-03-26 negotiated."""
        return self.handshaken and batches.accepts_batches(self.session)

    def receive_batch(self, batch: jsonrpc.Message, headers: Mapping[str, str] | None = None) -> None:
        """A JSON-RPC batch, from a session that negotiated 2025-03-26 only (gateway/northbound/batches.py):
        each member is taken as if it came alone, and each answer goes out on the stream by itself
        as it is ready (MCP lets a server send the answers to a batch unbatched)."""
        if not self.takes_batches:
            self.send(batches.not_accepted())
            return
        members = batches.unpack(batch, self.gateway.config.limits.max_batch_messages, self.gateway.metrics)
        if isinstance(members, dict):
            self.send(members)
            return
        for member in members:
            if member.kind is Kind.REQUEST and member.method == "initialize":
                self.send(batches.initialize_refused(member.id))
            else:
                self.receive(member, headers)

    def request(self, message: jsonrpc.Message, headers: Mapping[str, str] | None = None) -> None:
        body: JsonObject = message.body
        request_id = body["id"]
        if self.admit is not None:
            refusal = self.admit(message)
            if refusal is not None:
                self.send(refusal.error)
                return
        method = message.method
        if method == "initialize":
            self.initialize(body)
            return
        if method == "server/discover":
            # A client probing for the stateless era falls back to initialize on any error.
            self.refuse(
                request_id,
                jsonrpc.METHOD_NOT_FOUND,
                "Method not found: server/discover; this endpoint speaks the session era, send initialize",
            )
            return
        if not self.handshaken and method != "ping":
            self.refuse(
                request_id,
                jsonrpc.INVALID_REQUEST,
                f"Send initialize first: {method} is not answered before the session's initialize",
            )
            return
        refused = session_era.not_runnable(self.gateway, self.active, request_id)
        if refused is not None:
            self.send(refused)
            return
        self.active.add(request_id)
        task = asyncio.get_running_loop().create_task(self.answer(body, headers))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def initialize(self, body: JsonObject) -> None:
        """Answer initialize from the gateway's cache; the provider session is the gateway's own."""
        if self.handshaken:
            self.refuse(
                body["id"],
                jsonrpc.INVALID_REQUEST,
                "initialize was already answered on this session; open a new connection for a new session",
            )
            return
        refused = session_era.initialize_refusal(body)
        if refused is not None:
            self.send(refused)
            return
        params = body["params"]
        result = self.target.initialize_result(params["protocolVersion"])
        session = self.session
        session.protocol_version = result["protocolVersion"]
        client_info = params.get("clientInfo")
        session.client_info = client_info if isinstance(client_info, dict) else {}
        capabilities = params.get("capabilities")
        session.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.handshaken = True
        self.send(jsonrpc.result_response(body["id"], result))

    async def answer(self, body: JsonObject, headers: Mapping[str, str] | None = None) -> None:
        session = self.session
        headers = headers or {}
        ctx = ClientContext(
            era=SESSION,
            protocol_version=session.protocol_version,
            listener=session,
            sink=self.send,
            principal=session.principal,
            client_capabilities=session.capabilities,
            client_info=session.client_info,
            # Requests from the provider to this client go out on the channel, like everything else.
            requester=session.requests.via(self.outbox.put),
            transport=session.transport,
            tracing=self.gateway.telemetry.tracing,
            traceparent=headers.get("traceparent"),
            tracestate=combined_header(headers, "tracestate"),
            baggage=combined_header(headers, "baggage"),
        )
        try:
            self.send(await session_era.run_request(session, self.target, ctx, body))
        finally:
            self.active.discard(body["id"])

    # -- the end ------------------------------------------------------------------------------

    async def close(self) -> None:
        """End the session: stop its notifications, cancel its requests (upstream too)."""
        if self.closed:
            return
        self.closed = True
        self.gateway.sessions.close(self.session.id)
        self.outbox.close()
        self.gateway.client_streams.discard(self.outbox)
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
