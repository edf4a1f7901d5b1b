"""Publish SDK servers to a gateway over `/provider/<slot>` or `/providers`, reconnecting on loss."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl as ssl_module
import time
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio
import orjson
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from gateway.core.backoff import MAX_DOUBLINGS, Backoff
from gateway.publish.sdk_bridge import SdkServer, SdkSession

TEXT = aiohttp.WSMsgType.TEXT
"""Every frame a provider sends is a text frame (one JSON-RPC message per text frame, as mcp-broker
reads them: docs/protocol.md, "Compatibility with mcp-broker"); the bytes are UTF-8 already, so they
go out without a decode and re-encode."""

log = logging.getLogger("gateway.publish")

CLOSE_POLICY = 1008
"""The gateway's close for a slot it refuses after the upgrade (held, reserved, undeclared)."""
FAULT_KINDS_LOGGED = 32
"""Kinds (exception types) of unexpected fault whose first occurrence is logged with its traceback;
past them, and for each kind's repeats, a fault is only counted (`faults`)."""


SPOKEN_VERSIONS = [*MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS]
"""What an SDK server published here speaks: its hello says so, or a gateway would take it for a board
of the device profile (session era only; docs/protocol.md, "Hello `versions`")."""


def register_frame(aggregate: bool, hello: dict[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if aggregate:
        params["aggregate"] = True
    if hello:
        params["hello"] = {"versions": SPOKEN_VERSIONS, **hello}
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/register"}
    if params:
        frame["params"] = params
    return frame


TOKEN_HEADER = "X-Provider-Token"


def client_ssl(ssl: ssl_module.SSLContext | bool | None, ca_file: str | None) -> ssl_module.SSLContext | bool:
    """What aiohttp's `ssl=` gets: the given context, or one trusting `ca_file` (e.g. the ca.pem of
    `mcp-gateway tls self-signed`), else True (the system's CAs; only used for wss://)."""
    if ssl is not None and ca_file is not None:
        raise ValueError("give ssl or ca_file, not both")
    if ca_file is not None:
        return ssl_module.create_default_context(cafile=ca_file)
    return True if ssl is None else ssl


class _PublisherBase:
    def __init__(
        self,
        gateway_url: str,
        *,
        headers: dict[str, str] | None = None,
        token: str | None = None,
        ssl: ssl_module.SSLContext | bool | None = None,
        ca_file: str | None = None,
        reconnect: bool = True,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_msg_size: int = 4 * 1024 * 1024,
    ) -> None:
        base = gateway_url.rstrip("/")
        if base.startswith("http"):
            base = "ws" + base[4:]
        self.base_url = base
        self.headers = dict(headers or {})
        if token is not None:
            self.headers[TOKEN_HEADER] = token
        self.ssl = client_ssl(ssl, ca_file)
        self.reconnect = reconnect
        self.backoff = Backoff(backoff_initial_s, backoff_max_s)
        self.max_msg_size = max_msg_size
        self.connected = asyncio.Event()
        self.connections = 0
        self.last_close: tuple[int | None, str] | None = None
        self.faults = 0
        """Links ended by an unexpected error in the publisher's own handling (logged, then dialled again)."""
        self._faults_logged: set[str] = set()
        self._stop = asyncio.Event()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._close_reasons: list[str] = []
        self._carried = False  # the current link carried a frame for an accepted slot

    def url(self) -> str:
        raise NotImplementedError

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        """Connect, serve, and reconnect with jittered back-off until `stop()`."""
        async with aiohttp.ClientSession() as http:
            while not self._stop.is_set():
                self._carried = False
                up_at: float | None = None  # time.monotonic() when the upgrade succeeded
                try:
                    async with http.ws_connect(
                        self.url(), headers=self.headers, autoping=True, max_msg_size=self.max_msg_size, ssl=self.ssl
                    ) as ws:
                        self._ws = ws
                        self.connections += 1
                        up_at = time.monotonic()
                        self.connected.set()
                        self._close_reasons = []
                        await self._serve(ws)
                        self.last_close = (ws.close_code, _reason(ws, "".join(self._close_reasons)))
                except (aiohttp.ClientError, OSError) as exc:
                    self.last_close = (None, str(exc))
                except Exception as exc:  # a fault of ours ends this link, never the publisher
                    self._fault(exc)
                finally:
                    self._ws = None
                    self.connected.clear()
                if self.last_close and self.last_close[0] not in (None, 1000):
                    log.info("gateway closed the link: %s %s", *self.last_close)
                if not self.reconnect or self._stop.is_set():
                    return
                self._count_link(up_at)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.backoff.next_delay())

    def _count_link(self, up_at: float | None) -> None:
        """Where the back-off stands after a link: it starts over only once a link proved itself (it
        carried a frame for an accepted slot and stayed up at least `backoff_max_s`), so a gateway that
        refuses or drops the publisher right after the upgrade is dialled ever more slowly; a close 1008
        before any such frame (a refusal at the door: slot held, reserved, undeclared) puts the ceiling
        at `backoff_max_s` at once, as the boards and the simulator do."""
        if up_at is None:
            return
        if self._carried and time.monotonic() - up_at >= self.backoff.max_s:
            self.backoff.reset()
        elif not self._carried and self.last_close is not None and self.last_close[0] == CLOSE_POLICY:
            self.backoff.failures = max(self.backoff.failures, _ceiling_failures(self.backoff))

    def _fault(self, exc: Exception) -> None:
        """An error in the publisher's own handling of a link: the link ends, the publisher dials again."""
        leaf = _leaf(exc)
        if isinstance(leaf, (aiohttp.ClientError, OSError)):  # the link failed inside a task group
            self.last_close = (None, str(leaf))
            return
        self.faults += 1
        self.last_close = (None, f"publisher fault: {type(leaf).__name__}: {leaf}")
        kind = type(leaf).__name__
        if kind not in self._faults_logged and len(self._faults_logged) < FAULT_KINDS_LOGGED:
            self._faults_logged.add(kind)
            log.error("publisher fault on the link to %s; the link ends", self.url(), exc_info=exc)
        else:
            log.debug("publisher fault on the link to %s (%d so far): %s", self.url(), self.faults, leaf)

    async def stop(self) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None and not ws.closed:
            await ws.close()

    async def drop(self) -> None:
        """Close the current connection abruptly (tests use it to simulate a lost link)."""
        ws = self._ws
        if ws is not None:
            await ws.close(code=1001)


def _ceiling_failures(backoff: Backoff) -> int:
    """Failures after which the back-off's ceiling is its maximum."""
    if not 0 < backoff.initial_s < backoff.max_s:
        return 0
    return min(MAX_DOUBLINGS, math.ceil(math.log2(backoff.max_s / backoff.initial_s)))


def _leaf(exc: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: what went wrong, rather than the task group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(ws: aiohttp.ClientWebSocketResponse, close_reason: str) -> str:
    """The gateway's close reason (what to do), else what went wrong on our side."""
    if close_reason:
        return close_reason
    exc = ws.exception()
    return str(exc) if exc else ""


async def _send_text(ws: aiohttp.ClientWebSocketResponse, data: bytes) -> None:
    """One frame out; dropped when the link is closed or closing. The gateway has already answered
    the callers of a provider that left, and an error here would end the SDK session in the middle
    of a tool's answer instead of letting the link's end end it."""
    if ws.closed:
        return
    with contextlib.suppress(ConnectionResetError):  # aiohttp's ClientConnectionResetError: closing
        await ws.send_frame(data, TEXT)


async def _read_frames(
    ws: aiohttp.ClientWebSocketResponse, close_reasons: list[str]
) -> AsyncGenerator[bytes | str, None]:
    """Every text or binary frame; the reason of the close frame that ends them goes to `close_reasons`."""
    # receive(), not `async for`: iterating stops at a close frame without handing over its reason.
    while True:
        msg = await ws.receive()
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            yield msg.data
        elif msg.type is aiohttp.WSMsgType.CLOSE:
            close_reasons.append(msg.extra or "")
            return
        elif msg.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            return


class Publisher(_PublisherBase):
    """One SDK server in one slot over the dedicated path `/provider/<slot>`."""

    def __init__(
        self,
        server: SdkServer,
        gateway_url: str,
        slot: str,
        *,
        aggregate: bool = False,
        hello: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(gateway_url, **options)
        self.server = server
        self.slot = slot
        self.aggregate = aggregate
        self.hello = hello

    def url(self) -> str:
        return f"{self.base_url}/provider/{quote(self.slot, safe='')}"

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        # Always first, even with nothing to say: the gateway sends initialize as soon as it has the
        # first frame, instead of waiting providers.register_wait_ms for a register frame that may come.
        await ws.send_frame(orjson.dumps(register_frame(self.aggregate, self.hello)), TEXT)

        async def send(data: bytes) -> None:
            await _send_text(ws, data)

        session = SdkSession(self.server, send)
        async with anyio.create_task_group() as group:
            await group.start(session.run)
            async for data in _read_frames(ws, self._close_reasons):
                self._carried = True  # the gateway speaks only once it accepted the slot
                await session.feed(data)
            await session.close_input()
            group.cancel_scope.cancel()


class MultiplexedPublisher(_PublisherBase):
    """Several SDK servers, each in its own slot, over one `/providers` WebSocket."""

    def __init__(
        self,
        servers: dict[str, SdkServer],
        gateway_url: str,
        *,
        aggregate: bool = False,
        hello: dict[str, dict[str, Any]] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(gateway_url, **options)
        self.servers = dict(servers)
        self.aggregate = aggregate
        self.hello = hello or {}
        self.errors: list[dict[str, Any]] = []
        """The gateway's latest refusal of each slot it refused: at most one entry per slot."""
        self.malformed_frames: dict[str, int] = {}
        """Frames from the gateway skipped as malformed, counted by kind (MALFORMED_KINDS)."""

    def url(self) -> str:
        return f"{self.base_url}/providers"

    def _malformed(self, kind: str) -> None:
        """Skip a frame; the first of each kind is logged, the rest counted (a gateway that sends one
        bad frame usually sends it again)."""
        count = self.malformed_frames.get(kind, 0) + 1
        self.malformed_frames[kind] = count
        if count == 1:
            log.warning("skipped a frame from %s: %s (later ones of this kind are only counted)", self.url(), kind)

    def _refused(self, slot: str, error: Any) -> None:
        code, message = (error.get("code"), error.get("message")) if isinstance(error, dict) else (None, None)
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
            self._malformed(MALFORMED_REFUSAL)
            return
        # The latest per slot: the gateway refuses a held slot again at every reconnect.
        self.errors = [entry for entry in self.errors if entry["slot"] != slot]
        self.errors.append({"slot": slot, "code": code, "message": message})

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        sessions: dict[str, SdkSession] = {}

        def sender(slot: str) -> Any:
            prefix = b'{"provider":' + orjson.dumps(slot) + b',"payload":'

            async def send(data: bytes) -> None:
                await _send_text(ws, prefix + data + b"}")

            return send

        async with anyio.create_task_group() as group:
            for slot, server in self.servers.items():
                register = register_frame(self.aggregate, self.hello.get(slot))
                await ws.send_frame(orjson.dumps({"provider": slot, "payload": register}), TEXT)
                sessions[slot] = SdkSession(server, sender(slot))
                await group.start(sessions[slot].run)
            async for data in _read_frames(ws, self._close_reasons):
                # Every value from the wire is checked before use: a frame that is not what the
                # gateway sends is skipped, and the link and its other slots carry on.
                try:
                    frame = orjson.loads(data)
                except orjson.JSONDecodeError:
                    self._malformed(MALFORMED_JSON)
                    continue
                provider = frame.get("provider") if isinstance(frame, dict) else None
                if not isinstance(provider, str):
                    self._malformed(MALFORMED_ENVELOPE)
                    continue
                session = sessions.get(provider)
                if session is None:
                    self._malformed(MALFORMED_SLOT)
                    continue
                payload = frame.get("payload")
                if not isinstance(payload, dict):
                    self._malformed(MALFORMED_PAYLOAD)
                    continue
                if "id" in payload and payload["id"] is None and "error" in payload:
                    # The gateway refused this slot (held, reserved, forbidden).
                    self._refused(provider, payload["error"])
                    continue
                self._carried = True
                await session.feed(orjson.dumps(payload))
            for session in sessions.values():
                await session.close_input()
            group.cancel_scope.cancel()


MALFORMED_JSON = "not JSON"
MALFORMED_ENVELOPE = "not an envelope with a string provider"
MALFORMED_SLOT = "an envelope for a slot this publisher does not publish"
MALFORMED_PAYLOAD = "an envelope whose payload is not a JSON object"
MALFORMED_REFUSAL = "a refusal whose error has no integer code and string message"
MALFORMED_KINDS = (MALFORMED_JSON, MALFORMED_ENVELOPE, MALFORMED_SLOT, MALFORMED_PAYLOAD, MALFORMED_REFUSAL)
"""What `MultiplexedPublisher.malformed_frames` counts: a fixed set, so the count stays bounded."""
