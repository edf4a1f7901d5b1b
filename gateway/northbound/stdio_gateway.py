"""The gateway side of the stdio bridge: the HTTP requests it makes of the gateway's `/<slot>/mcp` (POST
of a message, the session's GET stream, DELETE of the session), with the credentials' headers, and the
error each failure of them is to the host (bridge_errors.py). No redirect is followed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from yarl import URL

from gateway.core.client_context import TRANSPORT_HEADER
from gateway.core.jsonrpc import JsonObject
from gateway.northbound.bridge_errors import AnswerLost, AnswerUnreadable, BridgeError, RedirectRefused, Unreachable
from gateway.northbound.bridge_relay import Drops, EventIds, PendingRequests, Relay, read_answer, sse_messages
from gateway.northbound.bridge_wait import GatewaySilent
from gateway.northbound.stdio_order import SentPayload, own_message
from gateway.northbound.stdio_stateless import VERSION_HEADER
from gateway.policy.bridge_credentials import Credentials, NoCredentials

log = logging.getLogger("gateway.stdio")

SESSION_HEADER = "Mcp-Session-Id"
LAST_EVENT_ID = "Last-Event-ID"
DELETE_TIMEOUT_S = 1.0
REQUEST_ID_PREFIX = "mcp-gateway-stdio-"
RESENT = frozenset({401, 404})
"""Statuses after which the bridge may send a POST again: a session the gateway forgot (404), a signature
to make again (401). The message has not been taken in yet."""

Emit = Callable[[JsonObject], Awaitable[None]]

STREAM_TCP_KEEPALIVE = (30, 10, 3)
"""The GET stream's TCP keepalive (idle seconds, seconds between probes, probes): it has no read timeout,
since it may idle longer than --read-timeout (a gateway's limits.sse_keepalive_s), so a gateway gone with
its host or network is noticed by the kernel, within about a minute, and the stream is opened again."""


@dataclass
class Answer:
    status: int
    body: Any = None
    """The decoded JSON body of a non-SSE answer (None when empty or not JSON)."""
    session_id: str | None = None
    retry_after_s: int | None = None
    """The Retry-After of a refusal (whole seconds), passed to the host as retryAfterMs."""


class GatewayHttp:
    """The requests of one bridge to its gateway URL; the bridge (stdio_bridge.StdioBridge) builds on it."""

    def __init__(
        self,
        url: URL,
        credentials: Credentials | None,
        ssl_context: ssl.SSLContext | None,
        read_timeout_s: float | None,
    ) -> None:
        self.url = url
        self.read_timeout_s = read_timeout_s or None
        """The longest silence of the gateway waited through while reading an answer (None: no limit)."""
        self.credentials = credentials or NoCredentials()
        self.ssl = ssl_context
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.http: aiohttp.ClientSession | None = None
        self._internal_ids = 0
        self.drops = Drops()
        self.pending = PendingRequests(self.drops)
        self.stream_ids = EventIds()
        """The last event id of the GET stream of `stream_session`, sent as Last-Event-ID when it reopens."""
        self.stream_session: str | None = None

    async def emit(self, message: Any) -> None:
        """Write one message from the gateway to the host."""
        raise NotImplementedError

    def _headers(self, method: str, body: bytes, session_id: str | None) -> dict[str, str]:
        # TRANSPORT_HEADER: the audit trail records the host's way in as "stdio" (a label, never a credential).
        headers = {"Accept": "application/json, text/event-stream", TRANSPORT_HEADER: "stdio"}
        if body:
            headers["Content-Type"] = "application/json"
        if session_id is not None:
            headers[SESSION_HEADER] = session_id
            if self.protocol_version:
                headers[VERSION_HEADER] = self.protocol_version
        headers.update(self.credentials.headers(method, self.url.raw_path_qs, body))
        return headers

    def _unreachable(self, exc: BaseException) -> BridgeError:
        """Unreachable when no connection could be made (nothing was sent); else AnswerLost: the request
        may have reached the gateway, so the host must not take it as never sent."""
        if isinstance(exc, aiohttp.SocketTimeoutError) and self.read_timeout_s is not None:
            return GatewaySilent(self.read_timeout_s)
        detail = f"{type(exc).__name__}: {str(exc) or type(exc).__name__}"
        if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
            return Unreachable(detail)
        return AnswerLost(detail)

    def _next_internal_id(self) -> str:
        self._internal_ids += 1
        return f"{REQUEST_ID_PREFIX}{self._internal_ids}"

    async def post(
        self,
        message: JsonObject,
        session_id: str | None,
        on_message: Emit,
        extra_headers: dict[str, str] | None = None,
    ) -> Answer:
        """POST one message; SSE events and a JSON body are handed to `on_message` as they arrive. A
        refusal the credentials can answer (Credentials.resend_after) is sent again, signed afresh."""
        body = orjson.dumps(message)
        attempt = 0
        sending = own_message(message)
        with self.pending.awaiting(on_message):
            while True:
                # The host's own message says when it went out: the next one is sent only then. A resend
                # says it too (the refused attempt cleared it), else what waits for it waits for its end.
                data = SentPayload(body, sending) if sending is not None else body
                answer = await self._post_once(body, data, session_id, on_message, extra_headers)
                if answer.status < 400:
                    return answer
                pause = self.credentials.resend_after(answer.status, answer.body, attempt)
                if pause is None:
                    return answer
                await asyncio.sleep(pause)
                attempt += 1

    async def _post_once(
        self,
        body: bytes,
        data: bytes | SentPayload,
        session_id: str | None,
        on_message: Emit,
        extra_headers: dict[str, str] | None,
    ) -> Answer:
        assert self.http is not None
        headers = self._headers("POST", body, session_id)
        headers.update(extra_headers or {})
        answer = Answer(0)  # 0: no answer of the gateway's to this POST (the GET stream may bring one)
        try:
            async with self.http.post(
                self.url, data=data, headers=headers, ssl=self.ssl or True, allow_redirects=False
            ) as response:
                if isinstance(data, SentPayload):
                    if response.status in RESENT:
                        data.sending.written.clear()  # sent again: what waits for it waits for the resend
                    else:
                        data.sending.began.set()
                _refuse_redirect(response)
                answer = Answer(response.status, session_id=response.headers.get(SESSION_HEADER))
                content_type = response.headers.get("Content-Type", "")
                if response.status == 200 and content_type.startswith("text/event-stream"):
                    async for event in sse_messages(response.content):
                        await on_message(event)
                    return answer
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.isdigit():
                    answer.retry_after_s = int(retry_after)
                raw = await read_answer(response.content)
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            if isinstance(on_message, Relay) and on_message.answered:
                # After the answer, which the host has already: one answer per request, so this is a log line.
                log.info("the answer stream to id %.80r failed after its answer: %r", on_message.request_id, exc)
                return answer
            raise self._unreachable(exc) from exc
        except (aiohttp.ClientPayloadError, AnswerUnreadable) as exc:
            if isinstance(on_message, Relay) and on_message.answered:
                return answer  # what failed came after the answer, which the host has already
            if isinstance(exc, AnswerUnreadable):
                raise
            raise AnswerUnreadable(
                f"the gateway's answer broke off ({exc}); the request may have been carried out: check its "
                "effect before sending it again"
            ) from exc
        if raw:
            with contextlib.suppress(orjson.JSONDecodeError):
                answer.body = orjson.loads(raw)
        if answer.status == 200 and answer.body is not None:
            await on_message(answer.body)
        return answer

    async def listen(self, session_id: str) -> Answer:
        """Read the session's GET stream until it ends; its HTTP status (and a refusal's body, also for a 200
        that is no event stream). Opened again on the same session, it asks for the events after the last
        one read (Last-Event-ID), which a resumable server replays."""
        assert self.http is not None
        if session_id != self.stream_session:
            self.stream_session, self.stream_ids = session_id, EventIds()
        headers = self._headers("GET", b"", session_id)
        if self.stream_ids.last is not None:
            headers[LAST_EVENT_ID] = self.stream_ids.last
        # No read timeout: an idle stream hears nothing for limits.sse_keepalive_s, which may be longer
        # than --read-timeout, and events sent while it was closed would be lost (STREAM_TCP_KEEPALIVE).
        bound = self.http.timeout
        timeout = aiohttp.ClientTimeout(total=None, connect=bound.connect, sock_connect=bound.sock_connect)
        try:
            async with self.http.get(
                self.url, headers=headers, ssl=self.ssl or True, allow_redirects=False, timeout=timeout
            ) as response:
                _refuse_redirect(response)
                content_type = response.headers.get("Content-Type", "")
                if response.status == 200 and not content_type.startswith("text/event-stream"):
                    # Not a stream (a proxy's page, say): a refusal, or the bridge would ask again at once.
                    shown = content_type[:80] or "no Content-Type"
                    return Answer(200, {"error": "not_an_event_stream", "error_description": f"it answered {shown}"})
                if response.status != 200:
                    answer = Answer(response.status)
                    with contextlib.suppress(orjson.JSONDecodeError, AnswerUnreadable):
                        answer.body = orjson.loads(await read_answer(response.content) or b"null")
                    return answer
                _keep_alive(response)
                async for event in sse_messages(response.content, self.stream_ids):
                    await self.pending.from_stream(event, self.emit)
                return Answer(200)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            raise self._unreachable(exc) from exc

    async def end_session(self) -> None:
        session_id, self.session_id = self.session_id, None
        if session_id is None or self.http is None:
            return
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self.http.delete(
                self.url,
                headers=self._headers("DELETE", b"", session_id),
                ssl=self.ssl or True,
                timeout=aiohttp.ClientTimeout(total=DELETE_TIMEOUT_S),
                allow_redirects=False,
            ) as response:
                try:
                    _refuse_redirect(response)
                except RedirectRefused as exc:
                    log.warning("%s", exc.log_text("DELETE", str(self.url)))
                    return
                log.info("ended the gateway session (HTTP %d)", response.status)


# -- helpers ----------------------------------------------------------------------------------------


def _refuse_redirect(response: aiohttp.ClientResponse) -> None:
    """Every request is made with allow_redirects=False: a token or an HMAC signature, and what the host
    sends, go to --url only, never to where its answer points."""
    if 300 <= response.status < 400:
        raise RedirectRefused(response.status, response.headers.get("Location"))


def _keep_alive(response: aiohttp.ClientResponse) -> None:
    """TCP keepalive on the connection of a GET stream (STREAM_TCP_KEEPALIVE), where the system has it."""
    transport = response.connection.transport if response.connection is not None else None
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    idle, interval, count = STREAM_TCP_KEEPALIVE
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def is_jsonrpc(body: Any) -> bool:
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def describe(body: Any) -> str:
    """A refusal's text for a person: the error description, the JSON-RPC message, or a short dump."""
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            return str(body["error"].get("message", ""))[:500]
        if "error_description" in body:
            return f"{body.get('error')}: {body['error_description']}"[:500]
    return "no details" if body is None else orjson.dumps(body)[:300].decode(errors="replace")


def keeper(kept: list[Any]) -> Emit:
    """An `on_message` that keeps what the gateway sends (for the bridge's own requests)."""

    async def keep(message: Any) -> None:
        kept.append(message)

    return keep
