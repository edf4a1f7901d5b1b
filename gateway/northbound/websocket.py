"""Raw WebSocket clients at `ws[s]://HOST:PORT/<slot>`: one JSON-RPC message per text frame.

The socket is one session-era session (gateway/northbound/channel.py): the client sends initialize
first and the gateway answers it from the provider's cached description; every answer carries the
client's own id; the slot's notifications, and the progress and log notifications of the client's
requests, are pushed on the socket. Closing the socket ends the session and cancels what is still in
flight (providers get notifications/cancelled).

The upgrade request passes the entry gate like every request (Origin/Host, client authentication,
the slot's required scopes); a slot nobody may use, or a session limit, is refused with an HTTP
answer before the upgrade. After it: a frame over limits.max_frame_bytes closes with 1009, bad JSON
is answered with a JSON-RPC parse error (id null), a batch with -32600 unless the session negotiated
2025-03-26 (then each of its messages is taken as if sent alone), JSON nested deeper than
limits.max_json_depth with -32600 (and the message's id), a rate-limited request with its -32029
answer. Binary frames are read as UTF-8 text, as mcp-broker does. A message for the client that cannot
be encoded as JSON never ends the write loop: an answer becomes its -32603 error, anything else is
dropped and counted (mcpgw_unencodable_messages_total).

A client that does not read is bounded two ways, whether or not it keeps sending (aiohttp's heartbeat
pings only a quiet socket). A frame, the close frame included, that waits limits.stream_write_timeout_s
aborts the connection. A client limits.notification_queue messages behind ends its session at once
(counted then, its requests cancelled, further requests dropped unanswered) and gets 1008 once the frame
being written is out, within the same write bound.

The credential the upgrade carried is judged again while the socket is open (CredentialWatch,
gateway/northbound/credential_watch.py): before a request and before a frame the gateway writes, at
most once per RECHECK_EVERY_S, the entry gate's own check runs on the upgrade request with the
verifiers and required scopes in force now; a socket with nothing to send is judged each time
limits.sse_keepalive_s passes, so one that only listens is not kept by its silence. A revoked static
token, an expired access token or a scope a reload took away closes the socket with 1008 and ends
the session: a request being read, or an answer being written, is answered with a -32001 error that
says why; what else is queued is dropped. An HMAC-signed upgrade is not judged again: a signature
vouches for one request (its nonce cannot be presented twice), so the socket keeps it until it closes.

Route: `/<slot>` is a catch-all for one-segment paths, so it never sees the gateway's own one-segment
routes (/healthz, /readyz, /metrics, /provider, /providers, /mcp, /groups, /mcp-servers): slots with
those names are reachable over Streamable HTTP and SSE, but not over a raw WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import orjson
from aiohttp import WSMsgType, web

from gateway.core import jsonrpc
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.link import CLOSE_GOING_AWAY, CLOSE_NORMAL, CLOSE_POLICY, close_reason
from gateway.core.names import SlotNameError, decode_path_segment
from gateway.core.routing import Target
from gateway.core.slots import SlotRefused
from gateway.core.versions import DEFAULT_HEADERLESS_VERSION
from gateway.http_answers import http_error
from gateway.northbound import session_era
from gateway.northbound.channel import ClientChannel, ResponseHandler, bind_admission
from gateway.northbound.credential_watch import CredentialWatch, credential_gone, credential_gone_close_reason
from gateway.northbound.event_stream import WRITE_HEADROOM, StreamStalled
from gateway.northbound.http_io import NO_SUCH_ENDPOINT, Admission, Refusal
from gateway.policy.connection_limits import STREAM_WRITE_TIMEOUT
from gateway.policy.request_principal import request_principal
from gateway.policy.verifier import AuthFailure
from gateway.websocket_limits import CappedWebSocketResponse, handshake_deadline, is_too_big, peer_left

log = logging.getLogger("gateway.northbound.websocket")

TRANSPORT = "websocket"
SUBPROTOCOL = "mcp"
"""Echoed when a client asks for it (a browser closes a socket whose asked-for protocol is not echoed)."""
HOW_TO_END = "close WebSocket connections you no longer use"
WRITER_GRACE_S = 2.0


def is_upgrade(request: web.Request) -> bool:
    return request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket"


class ClientWebSockets:
    def __init__(
        self,
        gateway: Gateway,
        admission: Admission | None = None,
        on_response: ResponseHandler | None = None,
    ) -> None:
        self.gateway = gateway
        self.limits = gateway.config.limits
        self.admission = admission
        self.on_response = on_response

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/{slot}", self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not is_upgrade(request):
            return http_error(404, "not_found", NO_SUCH_ENDPOINT)
        name = decode_path_segment(request.rel_url.raw_path[1:])
        try:
            target = self.gateway.target(name)
        except SlotNameError as exc:
            return http_error(404, "unknown_slot", str(exc))
        except SlotRefused as exc:
            return http_error(404 if exc.kind == "undeclared" else 503, "slot_refused", exc.reason)
        return await self.serve(request, target)

    async def serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        """One client socket on `target` (a slot, `_all`, `_broker`, or any other target a route names)."""
        ws = CappedWebSocketResponse(
            self.limits.max_frame_bytes, heartbeat=self.limits.sse_keepalive_s, protocols=(SUBPROTOCOL,)
        )
        if not ws.can_prepare(request).ok:
            return http_error(400, "bad_upgrade", "Not a valid WebSocket upgrade request (RFC 6455 handshake)")
        session = session_era.create_session(
            self.gateway,
            target,
            request_principal(request),
            None,
            HOW_TO_END,
            DEFAULT_HEADERLESS_VERSION,
            peer=request.remote,
        )
        if isinstance(session, Refusal):
            return session.response()
        admit = bind_admission(self.admission, request, target)
        channel = ClientChannel(self.gateway, target, session, TRANSPORT, admit, self.on_response)
        metrics = self.gateway.metrics.streams.labels(TRANSPORT)
        metrics.inc()
        writer: asyncio.Task[None] | None = None
        deadline: asyncio.TimerHandle | None = None
        watch = CredentialWatch.of(request, "WebSocket")
        watch.adopt = session.adopt
        ending: tuple[int, str] | None = None
        gone: JsonObject | None = None  # the -32001 answer to a request that met a failed credential
        ender: asyncio.Task[None] | None = None

        def overflowed() -> None:
            # Counted and ended now: the writer may be stalled on a client that does not read, and a
            # session that cannot answer must not keep running (or taking) requests meanwhile. The
            # writer closes with 1008 once its current frame is out, or aborts at stream_write_timeout_s.
            nonlocal ender
            self.gateway.metrics.stream_overflows.labels(TRANSPORT).inc()
            self.gateway.metrics.limit_hit(channel.outbox.overflow_limit)
            ender = asyncio.get_running_loop().create_task(channel.close())

        channel.outbox.on_overflow = overflowed
        try:
            if not await ws.upgrade(request):
                return peer_left()
            timeout_s = self.limits.connections.handshake_timeout_s
            deadline = handshake_deadline(
                ws,
                timeout_s,
                lambda: channel.handshaken,
                f"No initialize within {timeout_s:g} s (limits.connections.handshake_timeout_s): send initialize first",
                self.gateway.metrics,
            )
            writer = asyncio.get_running_loop().create_task(self.write_loop(request, ws, channel, watch))
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    message = jsonrpc.parse_client(msg.data, self.limits.max_json_depth)
                    del msg  # a client's last message (up to max_frame_bytes) is not kept while it idles
                    # A batch may carry requests (gateway/northbound/batches.py): judged like one.
                    asks = message.kind is Kind.REQUEST or message.kind is Kind.BATCH
                    if asks and (failure := await watch.failure()) is not None:
                        # What is queued was meant for a credential that no longer stands: dropped.
                        channel.outbox.close(drop=True)
                        gone = credential_gone(message.id, failure)
                        ending = (CLOSE_POLICY, credential_gone_close_reason(failure))
                        break
                    channel.receive(message)
                    del message
                elif msg.type is WSMsgType.ERROR:
                    # aiohttp has closed the socket already (1009, with our reason, for a frame over the cap).
                    if is_too_big(msg.data):
                        self.gateway.metrics.limit_hit("max_frame_bytes")
                    log.debug("client socket of session %s... closed: %s", channel.id[:6], msg.data)
                    break
        finally:
            if deadline is not None:
                deadline.cancel()
            metrics.dec()
            await channel.close()
            if ender is not None:
                await ender
            if writer is not None:
                # Closing the channel closed its outbox, so the writer ends by itself once it has
                # finished a close handshake it started; only a peer that stopped reading keeps it.
                await asyncio.wait({writer}, timeout=WRITER_GRACE_S)
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            if not ws.closed and ws.prepared:
                with contextlib.suppress(Exception):
                    if gone is not None:
                        await self.send(request, ws, orjson.dumps(gone))
                    if ending is None:
                        await self.close(request, ws, CLOSE_NORMAL, "")
                    else:
                        await self.close(request, ws, *ending)
        return ws

    async def write_loop(
        self, request: web.Request, ws: web.WebSocketResponse, channel: ClientChannel, watch: CredentialWatch
    ) -> None:
        """Send the session's messages in order; when the gateway ends the session, close the socket
        with a reason (the client fell too far behind, the gateway is shutting down, or the caller's
        credential no longer stands). A frame that waits limits.stream_write_timeout_s for a client
        that does not read aborts the connection.

        The credential is judged before a frame, at most once per RECHECK_EVERY_S (between judgements a
        frame costs one time comparison), and each time limits.sse_keepalive_s passes with nothing to
        send, so a socket that only listens is judged too."""
        outbox = channel.outbox
        idle_s = self.limits.sse_keepalive_s
        try:
            while True:
                message = await outbox.get(timeout=idle_s)
                if message is None and outbox.closed:
                    break
                # A failure the read path found is answered there, once this loop has ended.
                if watch.failed is None and watch.due() and (failure := await watch.failure()) is not None:
                    await self.end_for_credential(request, ws, channel, message, failure)
                    return
                if message is None:
                    continue  # idle: judged above, nothing to write
                data = outbox.encoded(message)
                if data is None:
                    self.gateway.metrics.unencodable.inc()
                    continue
                await self.send(request, ws, data)
            if ws.closed:
                return
            if outbox.overflowed:  # counted as it happened (serve)
                code, reason = CLOSE_POLICY, outbox.overflow_reason
            elif channel.closed:
                return  # the read side ended the session and closes the socket itself
            elif not self.gateway.listening:
                code, reason = CLOSE_GOING_AWAY, "Gateway shutting down"
            else:
                code, reason = CLOSE_GOING_AWAY, "Session ended by the gateway"
            await self.close(request, ws, code, reason)
        except ConnectionError:
            return  # the client left, or a write stalled and its connection was aborted

    async def send(self, request: web.Request, ws: web.WebSocketResponse, data: bytes) -> None:
        """Write one text frame, waiting at most limits.stream_write_timeout_s for a client that does
        not read; then the connection is aborted (what its buffers hold is freed), the cut is counted
        as on an SSE stream, and StreamStalled is raised."""
        transport = request.transport
        if transport is not None:
            # aiohttp waits only while the transport's buffer is over its high-water mark; a frame that
            # cannot take it there needs no timer (the common case, and the relay's hot path).
            high = transport.get_write_buffer_limits()[1]
            if transport.get_write_buffer_size() + len(data) + WRITE_HEADROOM <= high:
                await ws.send_frame(data, WSMsgType.TEXT)
                return
        timeout_s = self.limits.stream_write_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await ws.send_frame(data, WSMsgType.TEXT)
        except TimeoutError:
            self.stalled(request)
            raise StreamStalled(f"Client did not read for {timeout_s:g} s (limits.stream_write_timeout_s)") from None

    async def close(self, request: web.Request, ws: web.WebSocketResponse, code: int, reason: str) -> None:
        """Close with `code` and `reason`, the close frame bounded like any frame: a client that does not
        read it (or answer it) within limits.stream_write_timeout_s has its connection aborted."""
        try:
            async with asyncio.timeout(self.limits.stream_write_timeout_s):
                await ws.close(code=code, message=close_reason(reason).encode())
        except TimeoutError:
            transport = request.transport
            if transport is not None and transport.get_write_buffer_size():
                self.stalled(request)  # bytes still unsent: the client stopped reading
            elif transport is not None:
                transport.abort()  # sent, but never answered: no need to wait for the peer's close
        except Exception as exc:  # a socket that fails while closing is closed all the same
            log.debug("closing the client socket failed: %s", exc)

    def stalled(self, request: web.Request) -> None:
        """Cut a connection whose client stopped reading: abort it and count it (as event_stream.write)."""
        self.gateway.metrics.connection_cuts.labels(STREAM_WRITE_TIMEOUT).inc()
        self.gateway.metrics.limit_hit("stream_write_timeout_s")
        if request.transport is not None:
            request.transport.abort()

    async def end_for_credential(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        channel: ClientChannel,
        message: JsonObject | None,
        failure: AuthFailure,
    ) -> None:
        """End a socket whose credential no longer stands: drop what is queued, end the session (its
        requests cancelled upstream), answer the request whose answer was about to go out with the
        -32001 error the read path sends, and close with 1008."""
        channel.outbox.close(drop=True)
        await channel.close()
        if message is not None and "id" in message and "method" not in message:
            await self.send(request, ws, orjson.dumps(credential_gone(message["id"], failure)))
        await self.close(request, ws, CLOSE_POLICY, credential_gone_close_reason(failure))
