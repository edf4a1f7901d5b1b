"""`mcp-gateway stdio`: a stdio MCP server that forwards to a running gateway's `/<slot>/mcp`.

For hosts that can only launch a command (desktop MCP hosts, IDE plugins): the host writes
newline-delimited JSON-RPC to stdin and reads it from stdout; the bridge speaks the session era to
the gateway over HTTP. Every client message becomes one POST (answers come back as JSON or SSE and
are written out as they arrive); after `notifications/initialized` the bridge holds the session's
GET stream open and relays its notifications (list_changed, resource updates). At EOF on stdin it
ends the gateway session with DELETE.

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
schemas of the tools/list answers the bridge relayed), no session is opened, and the host's
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
import concurrent.futures
import contextlib
import io
import logging
import os
import signal
import ssl
import stat
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import quote

import aiohttp
import orjson
from yarl import URL

from gateway.core import eras, jsonrpc, stateless
from gateway.core.client_context import TRANSPORT_HEADER
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.northbound.bridge_errors import (
    MAX_LINE_BYTES,
    AnswerLost,
    AnswerUnreadable,
    BridgeError,
    RedirectRefused,
    SessionRefused,
    Unreachable,
)
from gateway.northbound.bridge_relay import Drops, PendingRequests, Relay, read_answer, sse_messages
from gateway.northbound.bridge_wait import DEFAULT_READ_TIMEOUT_S, GatewaySilent, too_deep, unreadable_line
from gateway.policy.bridge_credentials import BearerToken, Credentials, HmacKey, NoCredentials

log = logging.getLogger("gateway.stdio")
__all__ = ["BearerToken", "Credentials", "HmacKey", "NoCredentials", "StdioBridge", "main"]

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
CONNECT_TIMEOUT_S = 5.0
EOF_GRACE_S = 1.5
"""After stdin closes, how long answers still in flight may take before they are cancelled. Hosts
kill a server that has not exited a couple of seconds after closing its stdin."""
DELETE_TIMEOUT_S = 1.0
STREAM_RETRY_S = (0.25, 5.0)
"""First and longest pause before the GET stream is opened again after it ended."""
REQUEST_ID_PREFIX = "mcp-gateway-stdio-"

Emit = Callable[[JsonObject], Awaitable[None]]


# -- stdio ------------------------------------------------------------------------------------------


class Stdout:
    """Writes whole JSON-RPC messages, one per line, in the order they are handed over."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.lock = asyncio.Lock()
        self.gone = asyncio.Event()
        """Set when the host closed its end of stdout: nobody reads answers any more."""

    async def write(self, message: JsonObject) -> None:
        line = orjson.dumps(message) + b"\n"
        async with self.lock:
            if self.gone.is_set():
                return
            try:
                # A thread, so a host that is slow to read stalls this writer, not the event loop.
                await asyncio.to_thread(self._write, line)
            except (BrokenPipeError, ValueError, OSError):
                self.gone.set()

    def _write(self, line: bytes) -> None:
        self.stream.write(line)
        self.stream.flush()


TOO_LONG = b"\x00too long"
"""Stands for a stdin line over MAX_LINE_BYTES (no JSON text starts with a NUL byte)."""


async def stdin_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of stdin (without the newline) until EOF; a line over MAX_LINE_BYTES comes out as TOO_LONG.

    A pipe or socket is read by the event loop. Anything else is read in a thread: epoll refuses
    regular files and devices such as /dev/null (EPERM), and the loop's reader would set O_NONBLOCK
    on a terminal, which stdout, stderr and the shell share with stdin."""
    loop = asyncio.get_running_loop()
    if _pipe_or_socket(stream):
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
        except (ValueError, OSError) as exc:
            log.debug("stdin cannot be watched by the event loop (%s): reading it in a thread", exc)
        else:
            async for line in _reader_lines(reader):
                yield line
            return
    async for line in _thread_lines(stream):
        yield line


def _pipe_or_socket(stream: BinaryIO) -> bool:
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _reader_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                yield exc.partial
            return
        except asyncio.LimitOverrunError:
            await _skip_line(reader)
            yield TOO_LONG
            continue
        yield line.rstrip(b"\r\n")


_EOF = b""


async def _thread_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines read by a daemon thread: a read blocked on a terminal must not hold up the exit
    (asyncio's default executor is joined when the loop closes)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)  # a few lines ahead, then the thread waits

    def hand_over(line: bytes) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(lines.put(line), loop).result()
        except (RuntimeError, concurrent.futures.CancelledError):  # the loop is closing
            return False
        return True

    def read() -> None:
        try:
            while line := stream.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass  # skip the rest of the long line without holding it
                    line = TOO_LONG
                else:
                    line = line.rstrip(b"\r\n")
                    if not line:
                        continue
                if not hand_over(line):
                    return
        except (OSError, ValueError) as exc:
            log.warning("reading stdin failed: %s", exc)
        hand_over(_EOF)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while line := await lines.get():
        yield line


async def _skip_line(reader: asyncio.StreamReader) -> None:
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)
        except asyncio.IncompleteReadError:
            return


# -- the gateway side -------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: Any = None
    """The decoded JSON body of a non-SSE answer (None when empty or not JSON)."""
    session_id: str | None = None
    retry_after_s: int | None = None
    """The Retry-After of a refusal (whole seconds), passed to the host as retryAfterMs."""


def _rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> JsonObject:
    return jsonrpc.error_response(request_id, code, message, data)


SESSION_STATE_METHODS = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
"""Requests whose effect lasts as long as the session: the bridge makes them again on a new one."""


def endpoint_path(slot: str, group: str | None = None) -> str:
    """`/<slot>/mcp`, or for a tool group `/mcp/<group>` (`/mcp`, every enabled group, for "")."""
    if group is not None:
        return f"/mcp/{quote(group, safe='')}" if group else "/mcp"
    return f"/{quote(slot, safe='')}/mcp"


class StdioBridge:
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
        self.url = URL(base_url.rstrip("/") + endpoint_path(slot, group), encoded=True)
        self.slot = slot
        self.read_timeout_s = read_timeout_s or None
        """The longest silence of the gateway waited through while reading an answer (None: no limit)."""
        self.credentials = credentials or NoCredentials()
        self.ssl = ssl_context
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.init_params: JsonObject | None = None
        """The client's own initialize params, replayed when the gateway lost the session."""
        self.session_lock = asyncio.Lock()
        self.http: aiohttp.ClientSession | None = None
        self.out: Stdout | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.stream_task: asyncio.Task[None] | None = None
        self._internal_ids = 0
        self.tool_schemas: dict[str, Any] = {}
        """Input schemas from the tools/list answers relayed so far, by tool name."""
        self.stateless_calls: dict[Any, asyncio.Task[Any]] = {}
        """Stateless-era requests in flight by the host's id (notifications/cancelled cancels one)."""
        self.log_level: JsonObject | None = None
        """The params of the host's last accepted logging/setLevel, set again on a new session."""
        self.subscriptions: dict[str, JsonObject] = {}
        """The host's accepted resources/subscribe params by URI, made again on a new session."""
        self.drops = Drops()
        self.pending = PendingRequests(self.drops)

    # -- plumbing ---------------------------------------------------------------------------

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

    async def emit(self, message: Any) -> None:
        """Write one message from the gateway to the client; anything that is not a JSON object is dropped."""
        if not isinstance(message, dict):
            log.warning("dropped a non-object message from the gateway")
            return
        assert self.out is not None
        await self.out.write(message)

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
        with self.pending.awaiting(on_message):
            while True:
                answer = await self._post_once(body, session_id, on_message, extra_headers)
                if answer.status < 400:
                    return answer
                pause = self.credentials.resend_after(answer.status, answer.body, attempt)
                if pause is None:
                    return answer
                await asyncio.sleep(pause)
                attempt += 1

    async def _post_once(
        self, body: bytes, session_id: str | None, on_message: Emit, extra_headers: dict[str, str] | None
    ) -> Answer:
        assert self.http is not None
        headers = self._headers("POST", body, session_id)
        headers.update(extra_headers or {})
        try:
            async with self.http.post(
                self.url, data=body, headers=headers, ssl=self.ssl or True, allow_redirects=False
            ) as response:
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

    # -- session ----------------------------------------------------------------------------

    def _next_internal_id(self) -> str:
        self._internal_ids += 1
        return f"{REQUEST_ID_PREFIX}{self._internal_ids}"

    async def _open_session(self) -> None:
        """initialize + notifications/initialized with the client's parameters (session lock held)."""
        assert self.init_params is not None
        request = {"jsonrpc": "2.0", "id": self._next_internal_id(), "method": "initialize", "params": self.init_params}
        results: list[Any] = []

        async def keep(message: JsonObject) -> None:
            results.append(message)

        answer = await self.post(request, None, keep)
        result = results[-1].get("result") if results and isinstance(results[-1], dict) else None
        if answer.status != 200 or not isinstance(result, dict) or answer.session_id is None:
            refused: JsonObject = {"reason": "session_refused", "httpStatus": answer.status}
            if answer.retry_after_s is not None:
                refused["retryAfterMs"] = answer.retry_after_s * 1000
            raise SessionRefused(
                f"The gateway at {self.url} would not open a session for this client "
                f"(HTTP {answer.status}): {_describe(answer.body)}",
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
            await self._open_session()
        # The new session may see other tools (a restarted gateway, providers that came or went).
        await self.emit(jsonrpc.notification("notifications/tools/list_changed"))

    async def current_session(self) -> tuple[str | None, bool]:
        """The session to use, and whether it was opened just now: when the client sent initialize
        but has no session (the gateway was down then, or forgot it), one is opened for it."""
        async with self.session_lock:
            if self.session_id is None and self.init_params is not None:
                await self._open_session()
                self.start_stream()
                return self.session_id, True
            return self.session_id, False

    # -- one client message -----------------------------------------------------------------

    async def handle_line(self, line: bytes) -> None:
        if line == TOO_LONG:
            await self.emit(_rpc_error(None, jsonrpc.INVALID_REQUEST, f"Message longer than {MAX_LINE_BYTES} bytes"))
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
            await self.emit(_rpc_error(message.id, jsonrpc.INVALID_REQUEST, *refusal))
            return
        if message.kind is Kind.BATCH:
            await self.emit(_rpc_error(None, jsonrpc.INVALID_REQUEST, "JSON-RPC batches are not supported"))
            return
        try:
            await self.forward(message)
        except BridgeError as exc:
            url = str(self.url)
            log.warning("%s", exc.log_text(message.method, url))
            if message.kind is Kind.REQUEST:
                text, data = exc.host_error(url)
                await self.emit(_rpc_error(message.id, exc.code, text, data))

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
        if message.kind is Kind.NOTIFICATION and message.method == "notifications/cancelled":
            call = self.stateless_calls.get((message.params or {}).get("requestId"))
            if call is not None:
                call.cancel()  # closing its HTTP answer is how the stateless era cancels upstream
                return
        relay = self.relay_for(message)
        initialized = message.kind is Kind.NOTIFICATION and message.method == "notifications/initialized"
        session_id, opened = await self.current_session()
        if initialized and opened:
            return  # opening the session sent notifications/initialized already
        answer = await self.post(body, session_id, relay)
        if answer.status == 404 and session_id is not None and _is_jsonrpc(answer.body):
            # The gateway forgot the session (restart, idle expiry): a new one, then the message again.
            log.info("gateway session %s... is gone; opening a new one", session_id[:6])
            await self.renew(session_id)
            answer = await self.post(body, self.session_id, relay)
        if initialized and answer.status < 400:
            self.start_stream()
        await self.finish(message, answer, relay)

    def relay_for(self, message: jsonrpc.Message) -> Relay:
        """What writes the gateway's messages for one client message out, noting its answer (and the
        tools' input schemas in a tools/list answer, for the stateless era's Mcp-Param-* headers; the
        session state a new session must be given again)."""
        relay = Relay(self.emit, message.id if message.kind is Kind.REQUEST else None, self.drops)
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
        result = reply.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self.tool_schemas[tool["name"]] = tool.get("inputSchema")

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
        await self.relay_refusal(message, answer)

    async def forward_stateless(self, message: jsonrpc.Message) -> None:
        """A 2026-07-28 request (it carries its protocol version in params._meta): passed through as
        a stateless-era POST, with the routing headers that era needs, outside any session."""
        body: JsonObject = message.body
        relay = self.relay_for(message)
        task = asyncio.current_task()
        if task is not None:
            self.stateless_calls[message.id] = task
        try:
            answer = await self.post(body, None, relay, self.stateless_headers(body))
        finally:
            if self.stateless_calls.get(message.id) is task:
                del self.stateless_calls[message.id]
        await self.finish(message, answer, relay)

    def stateless_headers(self, body: JsonObject) -> dict[str, str]:
        """MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-*, as the body says (the gateway
        checks them against it); a value that is not text is left out for the gateway to refuse."""
        params = body.get("params")
        params = params if isinstance(params, dict) else {}
        meta = params.get("_meta")
        version = meta.get(eras.META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        method = body["method"]
        headers = {VERSION_HEADER: version} if isinstance(version, str) else {}
        headers["Mcp-Method"] = stateless.encode_header_value(method)
        name_key = stateless.NAME_PARAM.get(method)
        name = params.get(name_key) if name_key is not None else None
        if isinstance(name, str):
            headers["Mcp-Name"] = stateless.encode_header_value(name)
        if method == "tools/call" and isinstance(name, str):
            headers.update(stateless.param_headers(self.tool_schemas.get(name), params.get("arguments")))
        return headers

    async def initialize(self, body: JsonObject) -> None:
        params = body.get("params")
        async with self.session_lock:
            self.init_params = params if isinstance(params, dict) else {}
            if self.session_id is not None:
                await self.end_session()
            message = jsonrpc.Message(Kind.REQUEST, body)
            relay = self.relay_for(message)
            answer = await self.post(body, None, relay)
            if answer.status == 200 and answer.session_id is not None and relay.answered:
                self.session_id = answer.session_id
                result = answer.body.get("result") if isinstance(answer.body, dict) else None
                if isinstance(result, dict):
                    self.protocol_version = result.get("protocolVersion")
        await self.finish(message, answer, relay)

    async def relay_refusal(self, message: jsonrpc.Message, answer: Answer) -> None:
        """An HTTP refusal (4xx/5xx) of a request becomes the request's JSON-RPC error."""
        if answer.status < 400:
            return
        if message.kind is not Kind.REQUEST:
            log.warning("the gateway refused a %s (HTTP %d): %s", message.method, answer.status, _describe(answer.body))
            return
        if _is_jsonrpc(answer.body) and isinstance(answer.body.get("error"), dict):
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
                f"The gateway refused the request (HTTP {answer.status}): {_describe(answer.body)}",
                data,
            )
        )

    # -- the GET stream ---------------------------------------------------------------------

    def start_stream(self) -> None:
        if self.stream_task is None or self.stream_task.done():
            self.stream_task = asyncio.get_running_loop().create_task(self.stream_loop())

    async def stream_loop(self) -> None:
        """Hold the session's GET stream open and relay what comes on it, reopening it when it ends."""
        pause = STREAM_RETRY_S[0]
        while True:
            try:
                session_id, _ = await self.current_session()
                if session_id is None:
                    return
                status = await self.listen(session_id)
                if status == 404:
                    await self.renew(session_id)
                    continue
                if status in (405, 406):
                    log.info("the gateway offers no GET stream (HTTP %d); notifications come with answers only", status)
                    return
                if status == 200:
                    pause = STREAM_RETRY_S[0]
            except RedirectRefused as exc:
                log.warning("%s; the bridge holds no GET stream on this session", exc.log_text("GET", str(self.url)))
                return
            except BridgeError as exc:
                log.debug("GET stream: %s", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, STREAM_RETRY_S[1])

    async def listen(self, session_id: str) -> int:
        assert self.http is not None
        try:
            async with self.http.get(
                self.url, headers=self._headers("GET", b"", session_id), ssl=self.ssl or True, allow_redirects=False
            ) as response:
                _refuse_redirect(response)
                if response.status != 200:
                    return response.status
                async for event in sse_messages(response.content):
                    await self.pending.from_stream(event, self.emit)
                return 200
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            raise self._unreachable(exc) from exc

    # -- life cycle -------------------------------------------------------------------------

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

    async def run(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.out = Stdout(stdout)
        # sock_read: the longest silence between two reads of an answer (headers, body, SSE keepalives),
        # so a gateway that took a request and then stopped is named, while a long call it keeps alive runs on.
        timeout = aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=self.read_timeout_s
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            self.http = http
            reading = loop.create_task(self.read(stdin))
            stopping = loop.create_task(stop.wait())
            gone = loop.create_task(self.out.gone.wait())
            await asyncio.wait({reading, stopping, gone}, return_when=asyncio.FIRST_COMPLETED)
            gone.cancel()
            if reading.done() and not stop.is_set() and not self.out.gone.is_set():
                # EOF: let answers in flight arrive briefly, then give up on them.
                pending = set(self.tasks)
                if pending:
                    await asyncio.wait(pending, timeout=EOF_GRACE_S)
            for task in (reading, stopping, *self.tasks, *([self.stream_task] if self.stream_task else [])):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(reading, stopping, *self.tasks, return_exceptions=True)
            if self.stream_task is not None:
                await asyncio.gather(self.stream_task, return_exceptions=True)
            await self.end_session()
        self.drops.summary()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)

    async def read(self, stdin: BinaryIO) -> None:
        async for line in stdin_lines(stdin):
            if not line.strip():
                continue
            task = asyncio.get_running_loop().create_task(self.handle_line(line))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)


# -- helpers ---------------------------------------------------------------------------------------


def _refuse_redirect(response: aiohttp.ClientResponse) -> None:
    """Every request is made with allow_redirects=False: a token or an HMAC signature, and what the host
    sends, go to --url only, never to where its answer points."""
    if 300 <= response.status < 400:
        raise RedirectRefused(response.status, response.headers.get("Location"))


def _is_jsonrpc(body: Any) -> bool:
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def _describe(body: Any) -> str:
    """A refusal's text for a person: the error description, the JSON-RPC message, or a short dump."""
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            return str(body["error"].get("message", ""))[:500]
        if "error_description" in body:
            return f"{body.get('error')}: {body['error_description']}"[:500]
    return "no details" if body is None else orjson.dumps(body)[:300].decode(errors="replace")


def main(bridge: StdioBridge) -> None:
    asyncio.run(bridge.run(sys.stdin.buffer, sys.stdout.buffer))
