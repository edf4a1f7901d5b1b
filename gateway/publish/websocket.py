"""Publish SDK servers to a gateway over `/provider/<slot>` or `/providers`, reconnecting on loss."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import ssl as ssl_module
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import anyio
import anyio.abc
import orjson
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from gateway.core.backoff import MAX_DOUBLINGS, Backoff
from gateway.publish.link_errors import (
    REFUSED_STATUSES,
    ConnectTimeout,
    PublishRefused,
    UpgradeRefused,
    check_upgrade,
    plain,
)
from gateway.publish.sdk_bridge import SdkServer, SdkSession

TEXT = aiohttp.WSMsgType.TEXT
"""Every frame a provider sends is a text frame (one JSON-RPC message per text frame, as mcp-broker
reads them: docs/protocol.md, "Compatibility with mcp-broker"); the bytes are UTF-8 already, so they
go out without a decode and re-encode."""

log = logging.getLogger("gateway.publish")
_T = TypeVar("_T")

CLOSE_POLICY = 1008
"""The gateway's close for a slot it refuses after the upgrade (held, reserved, undeclared)."""
CLOSE_ABNORMAL = 1006
"""A link that ended without a close frame (here: one the gateway went silent on)."""
DEFAULT_SILENCE_S = 90.0
"""How long a link may carry nothing from the gateway (no frame, no ping) before it is taken as lost:
three of the gateway's pings at its default providers.heartbeat_interval_s (30 s), as on the boards.
A gateway that announces a longer interval gets SILENCE_PINGS of its own pings instead."""
SILENCE_PINGS = 3
"""Pings at the gateway's announced interval a link may miss before it is taken as lost."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""How long a dial (TCP, TLS and the WebSocket upgrade) may take."""
DEFAULT_MAX_FRAME_BYTES = 1_048_576
"""The largest frame sent to a gateway that announces no bound: its default limits.max_frame_bytes,
past which it closes 1009."""
MIN_FRAME_BYTES = 1024
"""The smallest max_frame_bytes accepted: the gateway's own floor for limits.max_frame_bytes."""
MAX_FRAME_BYTES = 1 << 30
"""The largest max_frame_bytes a gateway may announce: its own ceiling for limits.max_frame_bytes."""
HEARTBEAT_HEADER = "X-Heartbeat-Interval-S"
"""The gateway's providers.heartbeat_interval_s, in its answer to the upgrade (docs/protocol.md)."""
MAX_FRAME_HEADER = "X-Max-Frame-Bytes"
"""The gateway's limits.max_frame_bytes, in its answer to the upgrade (docs/protocol.md)."""
ANNOUNCED_CHARS = 32
"""Longest announced value read; a longer one is not a number the gateway sends."""
FAILURES_WARNED = 32
"""Distinct dial failures warned of between two links that came up; past them, repeats only at debug."""
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
ENDPOINT_PATHS = re.compile(r"/(provider(/[^/]*)?|providers)$")
"""Paths the publisher adds itself: a gateway_url ending in one would get it twice."""


def gateway_base(gateway_url: str) -> str:
    """The gateway's ws:// or wss:// base URL (a path prefix, as behind a reverse proxy, is kept)."""
    scheme, sep, rest = gateway_url.rstrip("/").partition("://")
    scheme = scheme.lower()  # schemes are case-insensitive (RFC 3986, 3.1)
    if scheme in ("http", "https"):
        scheme = "ws" + scheme[4:]
    base = f"{scheme}{sep}{rest}"
    if not sep or scheme not in ("ws", "wss"):
        raise ValueError(f"gateway_url must be a ws://, wss://, http:// or https:// URL; got {gateway_url!r}")
    _, slash, path = rest.partition("/")
    if slash and ENDPOINT_PATHS.search("/" + path.partition("?")[0]):
        raise ValueError(
            f"gateway_url names the gateway, not a provider endpoint: give {scheme}://{rest.partition('/')[0]} "
            f"(the publisher adds /provider/<slot> or /providers); got {gateway_url!r}"
        )
    return base


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
        silence_s: float | None = DEFAULT_SILENCE_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_frame_bytes: int | None = None,
    ) -> None:
        self.base_url = gateway_base(gateway_url)
        self.headers = dict(headers or {})
        if token is not None:
            self.headers[TOKEN_HEADER] = token
        self.ssl = client_ssl(ssl, ca_file)
        self.reconnect = reconnect
        self.backoff = Backoff(backoff_initial_s, backoff_max_s)
        self.max_msg_size = max_msg_size
        if silence_s is not None and not (_seconds(silence_s) and silence_s > 0):
            raise ValueError(f"silence_s must be a number of seconds above 0, or None (no limit); got {silence_s!r}")
        if not (_seconds(connect_timeout_s) and connect_timeout_s > 0):
            raise ValueError(f"connect_timeout_s must be a number of seconds above 0; got {connect_timeout_s!r}")
        if max_frame_bytes is not None and not (type(max_frame_bytes) is int and max_frame_bytes >= MIN_FRAME_BYTES):
            raise ValueError(
                f"max_frame_bytes must be an integer of at least {MIN_FRAME_BYTES}, or None (the gateway's "
                f"announced bound, else {DEFAULT_MAX_FRAME_BYTES}); got {max_frame_bytes!r}"
            )
        self.silence_s = silence_s
        self.connect_timeout_s = connect_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.announced_heartbeat_s: float | None = None
        """The gateway's X-Heartbeat-Interval-S on the current or last link (None: not announced)."""
        self.announced_max_frame_bytes: int | None = None
        """The gateway's X-Max-Frame-Bytes on the current or last link (None: not announced)."""
        self._bad_announcements: set[str] = set()
        self.connected = asyncio.Event()
        self.connections = 0
        self.last_close: tuple[int | None, str] | None = None
        self.faults = 0
        """Links ended by an unexpected error in the publisher's own handling (logged, then dialled again)."""
        self._faults_logged: set[str] = set()
        self._failures_warned: set[str] = set()
        self._stop = asyncio.Event()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._dialling: asyncio.Task[aiohttp.ClientWebSocketResponse] | None = None
        self._closed_with: list[tuple[int | None, str]] = []
        self._carried = False  # the current link carried a frame for an accepted slot
        self._refused_link = False  # the last dial or link was refused (HTTP 401/403, 1008 before any frame)

    def url(self) -> str:
        raise NotImplementedError

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        """Connect, serve, and reconnect with jittered back-off until `stop()`."""
        async with aiohttp.ClientSession(raise_for_status=self._upgrade_answer) as http:
            while not self._stop.is_set():
                self._carried = False
                self._refused_link = False
                self.announced_heartbeat_s = self.announced_max_frame_bytes = None
                up_at: float | None = None  # time.monotonic() when the upgrade succeeded
                try:
                    ws = await self._dial(http)
                    if ws is None:  # stop() while dialling
                        return
                    if self._stop.is_set():  # stop() as the dial completed: too late to cancel it
                        await ws.close()
                        return
                    async with ws:
                        self._ws = ws
                        self.connections += 1
                        up_at = time.monotonic()
                        self._failures_warned.clear()  # the next outage is warned of again
                        self.connected.set()
                        self._closed_with = []
                        await self._serve(ws)
                        self.last_close = self._closed_with[0] if self._closed_with else (ws.close_code, _reason(ws))
                except UpgradeRefused as exc:
                    self.last_close = (None, str(exc))
                    self._refused_link = exc.status in REFUSED_STATUSES
                    self._warn_failure(str(exc))
                except (aiohttp.ClientError, OSError) as exc:
                    self.last_close = (None, str(exc) or type(exc).__name__)
                    self._warn_failure(self.last_close[1])
                except Exception as exc:  # a fault of ours ends this link, never the publisher
                    self._fault(exc)
                finally:
                    self._ws = None
                    self.connected.clear()
                if self.last_close and self.last_close[0] not in (None, 1000):
                    log.info("the link to %s ended: %s %s", self.url(), *self.last_close)
                if up_at is not None and not self._carried and self.last_close is not None:
                    self._refused_link = self.last_close[0] == CLOSE_POLICY
                if not self.reconnect or self._stop.is_set():
                    if self._refused_link and not self._stop.is_set() and self.last_close is not None:
                        raise PublishRefused(self.last_close)
                    return
                self._count_link(up_at)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.backoff.next_delay())

    async def _dial(self, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse | None:
        """The upgraded WebSocket, within `connect_timeout_s`; None when `stop()` cancelled the dial."""
        self._dialling = asyncio.ensure_future(self._connect(http))
        try:
            return await self._dialling
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._stop.is_set() and task is not None and not task.cancelling():
                return None
            raise
        finally:
            self._dialling = None

    async def _connect(self, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        try:
            return await asyncio.wait_for(
                http.ws_connect(
                    self.url(),
                    headers=self.headers,
                    autoping=True,
                    max_msg_size=self.max_msg_size,
                    ssl=self.ssl,
                    # Bounds the wait for the gateway's answer to our close too (a gateway gone silent).
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self.connect_timeout_s),
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise ConnectTimeout(
                f"no WebSocket upgrade from {self.url()} within {self.connect_timeout_s:g}s (connect_timeout_s)"
            ) from None

    async def _upgrade_answer(self, response: aiohttp.ClientResponse) -> None:
        """The session's `raise_for_status`: a refusal raises (check_upgrade); a 101 gives the bounds
        the gateway announces. aiohttp keeps no public handle on the upgrade's answer past this point."""
        if response.status == 101:
            headers = response.headers
            self.announced_heartbeat_s = self._announced(HEARTBEAT_HEADER, headers.get(HEARTBEAT_HEADER), _seconds_text)
            self.announced_max_frame_bytes = self._announced(
                MAX_FRAME_HEADER, headers.get(MAX_FRAME_HEADER), _bytes_text
            )
        await check_upgrade(response)

    def _announced(self, name: str, text: str | None, parse: Callable[[str], _T | None]) -> _T | None:
        """An announced bound, or None when absent or not what a gateway sends (warned of once per value)."""
        if text is None:
            return None
        value = parse(text) if len(text) <= ANNOUNCED_CHARS else None
        if value is None:
            warning = f"{name}: {plain(text)!r}"
            if warning not in self._bad_announcements and len(self._bad_announcements) < FAILURES_WARNED:
                self._bad_announcements.add(warning)
                log.warning("ignored the bound %s from %s: not a bound a gateway announces", warning, self.url())
        return value

    def silence_bound(self) -> tuple[float | None, str]:
        """How long the link may stay silent, and why: `silence_s`, or SILENCE_PINGS of the gateway's
        announced pings when that is longer (None: no bound)."""
        announced = self.announced_heartbeat_s
        if self.silence_s is None or announced is None or SILENCE_PINGS * announced <= self.silence_s:
            return self.silence_s, "silence_s"
        return SILENCE_PINGS * announced, f"{SILENCE_PINGS} x the gateway's announced heartbeat of {announced:g}s"

    def frame_bound(self) -> tuple[int, str]:
        """The largest frame sent on the link, and where that bound comes from. A frame over the announced
        bound would only get the link closed (1009), so an explicit max_frame_bytes can lower it, never raise it."""
        announced, own = self.announced_max_frame_bytes, self.max_frame_bytes
        if own is not None and (announced is None or own <= announced):
            return own, "the publisher's max_frame_bytes"
        if announced is not None:
            return announced, "limits.max_frame_bytes, announced by the gateway"
        return DEFAULT_MAX_FRAME_BYTES, "the publisher's 1 MiB default; the gateway announced no bound"

    def _warn_failure(self, text: str) -> None:
        """A failed dial is warned of once per distinct failure until a link comes up; repeats at debug."""
        if text not in self._failures_warned and len(self._failures_warned) < FAILURES_WARNED:
            self._failures_warned.add(text)
            log.warning("cannot publish to %s: %s (retried with back-off; repeats are not logged)", self.url(), text)
        else:
            log.debug("cannot publish to %s: %s", self.url(), text)

    def _count_link(self, up_at: float | None) -> None:
        """Where the back-off stands after a link: it starts over only once a link proved itself (it
        carried a frame for an accepted slot and stayed up at least `backoff_max_s`), so a gateway that
        refuses or drops the publisher right after the upgrade is dialled ever more slowly; a refusal
        (HTTP 401 or 403 before the upgrade, or a close 1008 before any frame: slot held, reserved,
        undeclared) puts the ceiling at `backoff_max_s` at once, as the boards and the simulator do."""
        if self._refused_link:
            self.backoff.failures = max(self.backoff.failures, _ceiling_failures(self.backoff))
        elif up_at is not None and self._carried and time.monotonic() - up_at >= self.backoff.max_s:
            self.backoff.reset()

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
        """End `run()`: a dial in progress is cancelled, a link up is closed."""
        self._stop.set()
        if self._dialling is not None:
            self._dialling.cancel()
        ws = self._ws
        if ws is not None and not ws.closed:
            await ws.close()

    async def drop(self) -> None:
        """Close the current connection abruptly (tests use it to simulate a lost link)."""
        ws = self._ws
        if ws is not None:
            await ws.close(code=1001)


def _seconds(value: object) -> bool:
    """Whether an option is a finite number (a bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _seconds_text(text: str) -> float | None:
    """An announced interval: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _bytes_text(text: str) -> int | None:
    """An announced frame bound: ASCII digits, within the gateway's own range for limits.max_frame_bytes."""
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        return None
    value = int(stripped)
    return value if MIN_FRAME_BYTES <= value <= MAX_FRAME_BYTES else None


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


def _reason(ws: aiohttp.ClientWebSocketResponse) -> str:
    """What went wrong on our side, for a link that ended without a close frame."""
    exc = ws.exception()
    return str(exc) if exc else ""


async def _send_text(ws: aiohttp.ClientWebSocketResponse, data: bytes, max_frame_bytes: int) -> None:
    """One frame out; dropped when the link is closed or closing. The gateway has already answered
    the callers of a provider that left, and an error here would end the SDK session in the middle
    of a tool's answer instead of letting the link's end end it. A frame over the gateway's bound is
    dropped too (results never get here over it: FrameDispatcher answers an error instead): the
    gateway would close the whole link with 1009, failing every other call in flight on it."""
    if ws.closed:
        return
    if len(data) > max_frame_bytes:
        log.warning(
            "dropped a %d-byte frame: over the frame bound (%d), which the gateway closes the link for",
            len(data),
            max_frame_bytes,
        )
        return
    with contextlib.suppress(ConnectionResetError):  # aiohttp's ClientConnectionResetError: closing
        await ws.send_frame(data, TEXT)


class _LinkSends:
    """Every frame the SDK sessions of one link send. Once the link ends (`end()`), nothing more goes
    out on it, and sends waiting for the link to drain (a gateway that stopped reading) are abandoned:
    the SDK's writer shields them from its callers' cancellation, which would otherwise hold the
    link's teardown, and with it the next dial, for as long as the dead link never drains."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, max_frame_bytes: int) -> None:
        self.ws = ws
        self.max_frame_bytes = max_frame_bytes
        self.ended = False
        self._waiting: set[anyio.CancelScope] = set()

    async def send(self, data: bytes) -> None:
        if self.ended:
            return  # the gateway has answered this link's callers already (or never will hear it)
        with anyio.CancelScope() as scope:
            self._waiting.add(scope)
            try:
                await _send_text(self.ws, data, self.max_frame_bytes)
            finally:
                self._waiting.discard(scope)

    def end(self) -> None:
        self.ended = True
        for scope in list(self._waiting):
            scope.cancel()


async def _end_sessions(sends: _LinkSends, sessions: list[SdkSession], group: anyio.abc.TaskGroup) -> None:
    """The link's end: sends stop first, so no call cut off here answers on the dead link, then the
    sessions' calls in flight are cancelled (their handlers see the cancellation), so the task group
    waits for no send and for no `async` tool."""
    sends.end()
    for session in sessions:
        await session.close_input()
    group.cancel_scope.cancel()


async def _read_frames(
    ws: aiohttp.ClientWebSocketResponse, closed_with: list[tuple[int | None, str]], silence: tuple[float | None, str]
) -> AsyncGenerator[bytes | str, None]:
    """Every text or binary frame; the code and reason of the close frame that ends them go to
    `closed_with`. Nothing at all (no frame, no ping) for `silence_s` ends them too: a gateway that lost
    power or its cable leaves a half-open TCP link that would otherwise look connected forever."""
    silence_s, why = silence
    # receive(), not `async for`: iterating stops at a close frame without handing over its reason.
    # aiohttp answers a ping inside receive() and starts the timeout over for the next read.
    while True:
        try:
            msg = await ws.receive(timeout=silence_s)
        except TimeoutError:
            reason = f"nothing from the gateway (no frame, no ping) for {silence_s:g}s ({why}); link taken as lost"
            closed_with.append((CLOSE_ABNORMAL, reason))
            return
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            yield msg.data
        elif msg.type is aiohttp.WSMsgType.CLOSE:
            closed_with.append((msg.data if isinstance(msg.data, int) else None, msg.extra or ""))
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

        bound, source = self.frame_bound()
        sends = _LinkSends(ws, bound)
        session = SdkSession(self.server, sends.send, max_message_bytes=bound, bound_source=source)
        async with anyio.create_task_group() as group:
            await group.start(session.run)
            try:
                async for data in _read_frames(ws, self._closed_with, self.silence_bound()):
                    self._carried = True  # the gateway speaks only once it accepted the slot
                    await session.feed(data)
            finally:  # a fault of ours ends the link too
                await _end_sessions(sends, [session], group)


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
        """Record the gateway's refusal of `slot` (a malformed one is counted instead)."""
        code, message = (error.get("code"), error.get("message")) if isinstance(error, dict) else (None, None)
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
            self._malformed(MALFORMED_REFUSAL)
            return
        # The latest per slot: the gateway refuses a held slot again at every claim.
        self.errors = [entry for entry in self.errors if entry["slot"] != slot]
        self.errors.append({"slot": slot, "code": code, "message": message})

    def _accepted(self, slot: str) -> None:
        """The gateway spoke to `slot`: it holds it, so no refusal of it stands any more."""
        if any(entry["slot"] == slot for entry in self.errors):
            self.errors = [entry for entry in self.errors if entry["slot"] != slot]

    def _register_envelope(self, slot: str) -> bytes:
        return orjson.dumps({"provider": slot, "payload": register_frame(self.aggregate, self.hello.get(slot))})

    async def _claim_again(self, ws: aiohttp.ClientWebSocketResponse, slot: str, claiming: set[str]) -> None:
        """Send a refused slot's register envelope again after its own wait (drawn as for a close 1008:
        `backoff_max_s`/2 to `backoff_max_s`), so a slot freed by its holder is taken within `backoff_max_s`."""
        backoff = Backoff(self.backoff.initial_s, self.backoff.max_s)
        backoff.failures = _ceiling_failures(backoff)
        try:
            await asyncio.sleep(backoff.next_delay())
            await _send_text(ws, self._register_envelope(slot), self.frame_bound()[0])
        finally:
            claiming.discard(slot)

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        sessions: dict[str, SdkSession] = {}
        claiming: set[str] = set()  # refused slots whose next claim is waiting
        frame_bytes, source = self.frame_bound()
        sends = _LinkSends(ws, frame_bytes)

        def sender(prefix: bytes) -> Any:
            async def send(data: bytes) -> None:
                await sends.send(prefix + data + b"}")

            return send

        async with anyio.create_task_group() as group:
            for slot, server in self.servers.items():
                await ws.send_frame(self._register_envelope(slot), TEXT)
                prefix = b'{"provider":' + orjson.dumps(slot) + b',"payload":'
                bound = frame_bytes - len(prefix) - 1
                sessions[slot] = SdkSession(
                    server, sender(prefix), max_message_bytes=bound, bound_source=f"{source}, less the envelope"
                )
                await group.start(sessions[slot].run)
            try:
                async for data in _read_frames(ws, self._closed_with, self.silence_bound()):
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
                        # The gateway refused this slot (held, reserved, forbidden) and forgot the name:
                        # a later register envelope for it tries again (docs/protocol.md).
                        self._refused(provider, payload["error"])
                        if provider not in claiming:
                            claiming.add(provider)
                            group.start_soon(self._claim_again, ws, provider, claiming)
                        continue
                    self._carried = True
                    self._accepted(provider)
                    await session.feed(orjson.dumps(payload))
            finally:  # a fault of ours ends the link too
                await _end_sessions(sends, list(sessions.values()), group)


MALFORMED_JSON = "not JSON"
MALFORMED_ENVELOPE = "not an envelope with a string provider"
MALFORMED_SLOT = "an envelope for a slot this publisher does not publish"
MALFORMED_PAYLOAD = "an envelope whose payload is not a JSON object"
MALFORMED_REFUSAL = "a refusal whose error has no integer code and string message"
MALFORMED_KINDS = (MALFORMED_JSON, MALFORMED_ENVELOPE, MALFORMED_SLOT, MALFORMED_PAYLOAD, MALFORMED_REFUSAL)
"""What `MultiplexedPublisher.malformed_frames` counts: a fixed set, so the count stays bounded."""
