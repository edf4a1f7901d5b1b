"""Legacy HTTP+SSE for clients (the MCP 2024-11-05 transport): `GET /<slot>/sse`, `POST /<slot>/messages`.

`GET /<slot>/sse` opens the session and its stream. The first event tells the client where to post:

    event: endpoint
    data: /<percent-encoded slot>/messages?sessionId=<id>

and every message for the session follows as `event: message` (answers, notifications, requests a
provider sends the client), with `: keepalive` comments in quiet times (limits.sse_keepalive_s).
The stream's credential is judged again before a write (gateway/northbound/credential_watch.py):
when it no longer stands the stream ends with a `: credential no longer valid (<reason>)` comment,
and the session with it.
`POST /<slot>/messages?sessionId=<id>` takes one JSON-RPC message and answers 202 Accepted at once;
what the message causes comes on the stream. The session ends when its stream closes.

Refusals of the POST itself are HTTP: a missing sessionId is 400, an unknown or ended session 404
(JSON-RPC -32600 body, as Streamable HTTP answers an unknown Mcp-Session-Id; mcp-broker answers 400
text/plain "Unknown or expired session"), a session of another caller 403, a body not sent as
Content-Type: application/json 415, a body over limits.max_body_bytes 413, a body that is not one
JSON-RPC message 400, a batch 400 unless the session negotiated 2025-03-26 (then each of its
messages is taken as if posted alone; gateway/northbound/batches.py). Refusals of a request inside
an accepted POST (rate limit -32029, too many in flight, initialize not sent yet, JSON nested deeper
than limits.max_json_depth -32600) are its JSON-RPC answer on the stream, so an SDK client sees them
as the request's error.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote, urlsplit

from aiohttp import web

from gateway.core import jsonrpc
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import Kind
from gateway.core.names import SlotNameError, decode_path_segment
from gateway.core.routing import Target
from gateway.core.slots import SlotRefused
from gateway.core.versions import DEFAULT_HEADERLESS_VERSION
from gateway.http_answers import http_error, json_response, rpc_error
from gateway.northbound import batches, event_stream, http_io, session_era
from gateway.northbound.channel import ClientChannel, ResponseHandler, bind_admission
from gateway.northbound.credential_watch import CredentialWatch, credential_gone_comment
from gateway.northbound.event_stream import accepts
from gateway.northbound.http_io import NO_SUCH_ENDPOINT, WELL_KNOWN_SEGMENT, Admission, Refusal
from gateway.policy.connection_limits import CUT_LIMIT_KEYS, HANDSHAKE_TIMEOUT
from gateway.policy.request_principal import request_principal

log = logging.getLogger("gateway.northbound.sse")

STREAM_SEGMENT = "sse"
MESSAGES_SEGMENT = "messages"
SESSION_PARAM = "sessionId"
TRANSPORT = "sse"
HOW_TO_END = "close SSE streams you no longer use"


def no_initialize(timeout_s: float) -> str:
    """The last comment of a stream whose session sent no initialize in time."""
    return f"No initialize within {timeout_s:g} s (limits.connections.handshake_timeout_s): send initialize first"


def endpoint_event(slot: str, session_id: str, relative: bool = False) -> bytes:
    """The first event of a stream: where this session's messages are posted. An absolute path on this
    host; or (`relative`, when public_url has a path: a reverse proxy serves the gateway under it) a
    reference relative to the stream's URL, which resolves right both through the proxy and directly."""
    query = f"{MESSAGES_SEGMENT}?{SESSION_PARAM}={session_id}"
    path = query if relative else f"/{quote(slot, safe='')}/{query}"
    return b"event: endpoint\ndata: " + path.encode() + b"\n\n"


class LegacySseEndpoint:
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
        self.channels: dict[str, ClientChannel] = {}
        public_url = gateway.config.public_url
        self.relative_endpoint = bool(public_url and urlsplit(public_url).path.strip("/"))

    def routes(self) -> list[web.RouteDef]:
        return [
            web.route("*", "/{slot}/" + STREAM_SEGMENT, self.stream),
            web.route("*", "/{slot}/" + MESSAGES_SEGMENT, self.message),
        ]

    def resolve(self, request: web.Request) -> tuple[str, Target] | web.Response:
        """The slot the path names and what answers it, or the HTTP refusal."""
        segment = request.rel_url.raw_path.split("/")[1]
        if segment == WELL_KNOWN_SEGMENT:
            return http_error(404, "not_found", NO_SUCH_ENDPOINT)
        name = decode_path_segment(segment)
        try:
            return name, self.gateway.target(name)
        except SlotNameError as exc:
            return http_error(404, "unknown_slot", str(exc))
        except SlotRefused as exc:
            return http_error(404 if exc.kind == "undeclared" else 503, "slot_refused", exc.reason)

    # -- GET /<slot>/sse ------------------------------------------------------------------------

    async def stream(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return web.Response(status=405, headers={"Allow": "GET"})
        resolved = self.resolve(request)
        if isinstance(resolved, web.Response):
            return resolved
        slot, target = resolved
        _, sse_ok = accepts(request)
        if not sse_ok:
            return http_error(406, "not_acceptable", f"/{STREAM_SEGMENT} is a text/event-stream; accept it")
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
        self.channels[channel.id] = channel
        metrics = self.gateway.metrics.streams.labels(TRANSPORT)
        metrics.inc()
        response = web.StreamResponse()
        deadline: asyncio.TimerHandle | None = None
        expired: list[bool] = []  # the handshake deadline ended the stream
        try:
            response = await event_stream.open_stream(request)
            deadline = self.handshake_deadline(channel, expired)
            bound = self.limits.stream_write_timeout_s
            await event_stream.write(
                request, response, endpoint_event(slot, channel.id, self.relative_endpoint), bound, self.gateway.metrics
            )
            failure = await event_stream.pump(
                request,
                response,
                channel.outbox,
                self.limits.sse_keepalive_s,
                bound,
                self.gateway.metrics,
                CredentialWatch.of(request, "SSE stream"),
                channel.outbox.encoded,
            )
            if channel.outbox.overflowed:
                self.gateway.metrics.stream_overflows.labels(TRANSPORT).inc()
                self.gateway.metrics.limit_hit(channel.outbox.overflow_limit)
            if failure is not None:
                end = credential_gone_comment(failure)
            elif expired:
                end = b": " + no_initialize(self.limits.connections.handshake_timeout_s).encode() + b"\n\n"
            else:
                end = b""
            await event_stream.write(request, response, end, bound, self.gateway.metrics, eof=True)
        except ConnectionError:
            log.debug("SSE client of session %s... went away", channel.id[:6])
        finally:
            # The stream is the session: closed by the client, cut by the network (a keepalive
            # write fails), or ended by the gateway (shutdown, the client fell too far behind, its
            # credential no longer stands, no initialize came in time).
            if deadline is not None:
                deadline.cancel()
            metrics.dec()
            self.channels.pop(channel.id, None)
            await channel.close()
        return response

    def handshake_deadline(self, channel: ClientChannel, expired: list[bool]) -> asyncio.TimerHandle:
        """End the stream (its outbox closed, what it holds dropped) unless initialize was answered
        limits.connections.handshake_timeout_s after it opened: a stream that never starts its session
        is not held, as a raw WebSocket is not (gateway/websocket_limits.handshake_deadline)."""

        def expire() -> None:
            if channel.handshaken or channel.outbox.closed:
                return
            self.gateway.metrics.connection_cuts.labels(HANDSHAKE_TIMEOUT).inc()
            self.gateway.metrics.limit_hit(CUT_LIMIT_KEYS[HANDSHAKE_TIMEOUT])
            expired.append(True)
            channel.outbox.close(drop=True)

        return asyncio.get_running_loop().call_later(self.limits.connections.handshake_timeout_s, expire)

    # -- POST /<slot>/messages?sessionId= -------------------------------------------------------

    async def message(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST"})
        resolved = self.resolve(request)
        if isinstance(resolved, web.Response):
            return resolved
        slot, target = resolved
        session_id = request.rel_url.query.get(SESSION_PARAM)
        if not session_id:
            return rpc_error(
                400,
                jsonrpc.INVALID_REQUEST,
                f"Missing {SESSION_PARAM} query parameter: open GET /{quote(slot, safe='')}/{STREAM_SEGMENT} "
                "and post to the endpoint its first event names",
            )
        channel = self.channels.get(session_id)
        if channel is None or channel.target is not target:
            return rpc_error(
                404,
                jsonrpc.INVALID_REQUEST,
                f"Unknown or expired session: its SSE stream is closed; open GET /{quote(slot, safe='')}/"
                f"{STREAM_SEGMENT} for a new one",
            )
        if not session_era.claims_session(
            channel.session, request_principal(request), self.gateway, request.rel_url.raw_path, request.remote
        ):
            return http_error(403, "forbidden", session_era.OWNER_MISMATCH)
        # A message nested too deep is answered on the stream, with its id: the SDK's client stops
        # posting altogether after one refused POST.
        message = await http_io.read_message(
            request, self.limits, self.gateway.metrics, stream_answers=True, batches=True
        )
        if not isinstance(message, jsonrpc.Message):
            return message
        if message.kind is Kind.BATCH and not channel.takes_batches:
            return json_response(batches.not_accepted(), status=400)
        channel.receive(message, request.headers)
        return web.Response(status=202)
