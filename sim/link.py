"""One simulated pump's link to the gateway: a WebSocket to `/provider/<slot>`, as the board dials it.

The board's link loop (mcpdevice.provider) over aiohttp: dial, send the register frame (aggregate
true, the hello), answer every frame with the pump's dispatcher (each connection empties its repeat
cache: a new gateway session's ids may start over), send the pump's telemetry beside the
answers (the board's own report task, docs/pump-1.md "Telemetry"), answer WebSocket pings (each frame
and each ping feeds the pump's dead-man), drop a link silent for `silence_s`, and dial again after a
jittered back-off (gateway.core.backoff.Backoff: between half the ceiling and the ceiling, which
doubles per failure). The ceiling starts over only after a link that carried a frame from the
gateway and stayed up at least `backoff_max_s`, counted from the dial's success as the board counts
it; a link lost sooner is a failed dial (the gateway speaks at every attach, so a link it drops soon,
as in a takeover back and forth, must not reset the wait). A refusal at the door (an HTTP 4xx on the
upgrade, or a close 1008 before the gateway sent a frame, such as "Slot already held by a live
provider") puts the ceiling at its maximum at once, as the C board does: a pump that is not wanted
waits 15 to 30 s.

The link is logged as up once the gateway sent its first frame (the initialize that follows an
accepted registration): the gateway refuses a slot only after the WebSocket upgrade, so an open
socket alone does not mean the pump is published. A refusal is a warning.

The control interface cuts the link on purpose:
- drop(offline_s): the socket is shut down without a WebSocket close (the gateway sees the TCP
  connection end, as when a board loses power or a cable), then the pump dials again after the
  back-off, or after `offline_s` seconds when given; reconnect() ends such an offline period early;
- restart(): a reboot; the socket is cut the same way and the pump dials again at once.
Either sets last_down_reason at once, so the control endpoint's answer names the cut it made.

A link to the gateway of its own process (`own_gateway`, `run --sim-pumps`) that the gateway closes
with 1001 (going away: it is shutting down) is not dialled again until reconnect() or stop().
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway import __version__
from gateway.config.credentials import header_safe
from gateway.core.backoff import MAX_DOUBLINGS, Backoff
from sim import FIRMWARE_NAME, firmware
from sim.pump import SimulatedPump

log = logging.getLogger("sim")

HEAD_BYTES = 96  # of a frame over the cap, kept to name its request id (as the board does)
READ_MAX_BYTES = 1 << 20
"""Largest message from the gateway a pump reads whole (the gateway's default limits.max_frame_bytes):
one over the pump's frame cap but within this is answered by name, as the board answers it; a bigger
one closes the link with 1009 before any of it is buffered (aiohttp cannot skip a message as the
board does), and the pump dials again after its back-off."""
USER_AGENT = f"{FIRMWARE_NAME}/{__version__}"
TOKEN_HEADER = "X-Provider-Token"
TOKEN_ENV = "MCP_SIM_PROVIDER_TOKEN"
"""The provider secret from the environment when no --provider-token-file is given."""
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008


@dataclass(frozen=True)
class LinkSecurity:
    """How the pumps prove who they are (the provider secret, as X-Provider-Token) and what TLS
    they trust for wss:// (aiohttp's `ssl=`: a context, or True for the system's CAs)."""

    token: str | None = field(default=None, repr=False)
    ssl: ssl.SSLContext | bool = True


def provider_token(file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The secret from `file` (stripped), else from $MCP_SIM_PROVIDER_TOKEN (read as a token file is),
    else None.

    Raises OSError naming the file when it cannot be read or is empty; ValueError naming the file or
    the variable when the secret holds a control character (header_safe)."""
    if file is not None:
        with open(file, encoding="utf-8") as handle:
            token = handle.read().strip()
        if not token:
            raise OSError(f"provider token file {file} is empty")
        return header_safe(token, f"provider token file {file}")
    value = (os.environ if environ is None else environ).get(TOKEN_ENV, "")
    if not value.strip():
        return None
    from gateway.config.auth import secret_from_text

    return header_safe(secret_from_text(value, f"${TOKEN_ENV}"), f"${TOKEN_ENV}")


REFUSAL_BODY_BYTES = 4096
"""Of the answer to a refused upgrade, at most this much is read for what the gateway said."""
REFUSAL_TEXT_CHARS = 400
"""What the gateway said when it refused a pump is logged cut to this many characters."""
REFUSAL_READ_S = 2.0
"""How long the body of a refused upgrade is waited for; past it, the refusal is logged without it."""


def refusal_text(body: bytes) -> str | None:
    """What a refused upgrade's answer says: `error: error_description` of the gateway's JSON body, else
    its text; printable characters only, cut to REFUSAL_TEXT_CHARS; None when it says nothing."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = body.decode("utf-8", "replace")
    if isinstance(value, dict):
        parts = [value.get("error"), value.get("error_description")]
        value = ": ".join(part for part in parts if isinstance(part, str) and part)
    if not isinstance(value, str):
        return None
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in value).split())
    if len(text) > REFUSAL_TEXT_CHARS:
        text = text[: REFUSAL_TEXT_CHARS - 3] + "..."
    return text or None


class RefusalBodies:
    """What the gateway said when it refused a pump's WebSocket upgrade (HTTP 4xx with a JSON body that
    names the fault, e.g. `invalid_provider_token`): aiohttp's WSServerHandshakeError carries the status
    only, so a trace hook on the simulator's HTTP session reads the body, kept by URL until the pump's
    link takes it (one entry per pump URL at most)."""

    def __init__(self) -> None:
        self._said: dict[str, str] = {}

    def trace_config(self) -> aiohttp.TraceConfig:
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._on_request_end)
        return trace

    async def _on_request_end(
        self, session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestEndParams
    ) -> None:
        response = params.response
        if not 400 <= response.status < 500 or params.headers.get("Upgrade", "").lower() != "websocket":
            return
        body = b""
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with asyncio.timeout(REFUSAL_READ_S):
                while len(body) < REFUSAL_BODY_BYTES:
                    chunk = await response.content.read(REFUSAL_BODY_BYTES - len(body))
                    if not chunk:
                        break
                    body += chunk
        said = refusal_text(body)
        if said is not None:
            self._said[str(params.url)] = said

    def take(self, url: str) -> str | None:
        """What the gateway said when it last refused the upgrade to `url` (None: nothing), forgotten then."""
        return self._said.pop(url, None)


def refusal_failures(backoff_min_s: float, backoff_max_s: float) -> int:
    """Failures after which the back-off's ceiling is its maximum: where a refusal puts it."""
    doublings = math.ceil(math.log2(backoff_max_s / backoff_min_s)) if 0 < backoff_min_s < backoff_max_s else 0
    return min(MAX_DOUBLINGS, doublings)


class PumpLink:
    def __init__(
        self,
        pump: SimulatedPump,
        gateway_url: str,
        http: aiohttp.ClientSession,
        hello: dict[str, Any],
        *,
        silence_s: float = 90.0,
        connect_timeout_s: float = 10.0,
        backoff_min_s: float = 1.0,
        backoff_max_s: float = 30.0,
        security: LinkSecurity | None = None,
        own_gateway: bool = False,
        refusals: RefusalBodies | None = None,
        read_max_bytes: int = READ_MAX_BYTES,
    ) -> None:
        self.pump = pump
        self.read_max_bytes = read_max_bytes
        self.refusals = refusals
        """Where the session's trace hook leaves what the gateway said in refusing an upgrade."""
        self.own_gateway = own_gateway
        self.security = security or LinkSecurity()
        self.headers = {"User-Agent": USER_AGENT}
        if self.security.token is not None:
            self.headers[TOKEN_HEADER] = self.security.token
        self.url = firmware.provider_url(gateway_url, pump.slot)
        self.http = http
        self.first_frame = firmware.register_frame(hello)
        self.silence_s = silence_s
        self.connect_timeout_s = connect_timeout_s
        self.backoff = Backoff(backoff_min_s, backoff_max_s)
        self._refused_failures = refusal_failures(backoff_min_s, backoff_max_s)
        self.links = 0  # links made so far
        self.connected = False
        self.last_down_reason: str | None = None
        self.offline_until: float | None = None  # time.monotonic() until which the pump does not dial
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._wake = asyncio.Event()  # ends a back-off or offline wait early
        self._redial_now = False
        self._cut_reason: str | None = None  # why the control interface cut the current link
        self._stop = asyncio.Event()
        self._carried = False  # the current link carried a request
        self._up_at = 0.0  # time.monotonic() when the current (or last) link's dial succeeded
        self._refused: str | None = None  # why the gateway refused the last dial at the door
        self._refusals = 0  # refusals in a row, to log a long run of them only now and then
        self._close_code: int | None = None  # the gateway's close code on the last link
        self._offline_s: float | None = None  # the offline period the last link_drop asked for
        self._last_line = 0.0  # time.monotonic() of the last link-down or refusal line
        self._unlogged = 0  # failed dials since that line that got none
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sim-link-{self.pump.slot}")

    async def stop(self) -> None:
        """Close politely (1001) and stop dialling."""
        self._stop.set()
        self._wake.set()
        ws = self._ws
        if ws is not None and not ws.closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=1001, message=b"simulator stopping"), 2.0)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # -- what the control interface does ----------------------------------------------------------

    def drop(self, offline_s: float | None = None) -> None:
        if offline_s is not None:
            self.offline_until = time.monotonic() + offline_s
        self._offline_s = offline_s
        if self._ws is None and offline_s is not None:  # no link to cut: the wait under way becomes this
            log.info("%s offline for %g s (link_drop), dialling again after", self.pump.slot, offline_s)
            self._wake.set()
        self._cut("link_drop from the control endpoint")

    def reconnect(self) -> None:
        """End an offline period (or a back-off wait): dial now. A link that is up stays up, and its
        next loss waits out the back-off as any loss does."""
        self.offline_until = None
        if self._ws is not None and self._cut_reason is None:
            return
        self._redial_now = True
        self._wake.set()

    def restart(self) -> None:
        self.offline_until = None
        self._redial_now = True
        self._cut("reboot from the control endpoint")
        self._wake.set()

    def offline_for_s(self) -> float | None:
        if self.offline_until is None:
            return None
        left = self.offline_until - time.monotonic()
        return round(left, 3) if left > 0 else None

    def _cut(self, reason: str) -> None:
        ws = self._ws
        if ws is None:
            return
        self._cut_reason = reason
        # At once: the control endpoint's answer shows the link as down, and why.
        self.connected = False
        self.last_down_reason = reason
        sock = ws.get_extra_info("socket")
        if sock is not None:
            # No close frame: the peer just sees the connection end. uvloop hands out a stand-in
            # without shutdown(); a duplicate descriptor shuts the same connection on either loop.
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(sock.fileno())) as duplicate:
                duplicate.shutdown(socket.SHUT_RDWR)

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self._wait_offline()
            if self._stop.is_set():
                return
            self._redial_now = False
            try:
                carried = await self._link_once()
            except Exception as exc:  # an unforeseen error must not end the pump's link for good
                self._unexpected(exc)
                carried = False
            if self._stop.is_set():
                return
            if carried and time.monotonic() - self._up_at >= self.backoff.max_s:
                self.backoff.reset()  # a link pushed off sooner is a failed dial, as on the board
            if self._redial_now:
                continue
            slot = self.pump.slot
            if self.offline_until is not None:  # a link_drop with seconds: that wait replaces the back-off
                log.info(
                    "%s link down (%s); offline for %g s, dialling again after",
                    slot,
                    self.last_down_reason,
                    self._offline_s or 0,
                )
                continue
            if self.own_gateway and self._close_code == CLOSE_GOING_AWAY:
                # This process's gateway is shutting down: nothing to dial, the simulator stops next.
                log.info("%s link down (%s)", slot, self.last_down_reason)
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._refused is not None:
                self._refusals += 1
                self.backoff.failures = max(self.backoff.failures, self._refused_failures)
                delay = self.backoff.next_delay()
                tries = self._line_due(self._refusals)
                if tries is not None:
                    log.warning(
                        "%s refused by the gateway (%s); dialling again in %.1f s%s", slot, self._refused, delay, tries
                    )
            else:
                self._refusals = 0
                delay = self.backoff.next_delay()
                tries = self._line_due(self.backoff.failures)
                if tries is not None:
                    log.info("%s link down (%s); dialling again in %.2f s%s", slot, self.last_down_reason, delay, tries)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def _unexpected(self, exc: Exception) -> None:
        """An error _link_once does not expect: named with the pump (with its traceback, unless it is
        the last loss's again), then a failed dial as any other, dialled again after the back-off."""
        self.connected = False
        self._ws = None
        self._refused = None
        reason = f"{type(exc).__name__}: {exc}"
        if reason != self.last_down_reason:
            log.error(
                "%s link failed unexpectedly (%s); dialling again after the back-off",
                self.pump.slot,
                reason,
                exc_info=exc,
            )
        self.last_down_reason = reason

    def _line_due(self, in_a_row: int) -> str | None:
        """Whether failed dial number `in_a_row` of a run gets a log line: the first three, then one per
        two longest back-offs (60 s with the defaults), as the board logs, so that a long outage never
        leaves the log silent. None if not, else what the line adds about the dials it follows."""
        now = time.monotonic()
        if in_a_row > 3 and now - self._last_line < 2 * self.backoff.max_s:
            self._unlogged += 1
            return None
        unlogged, self._unlogged, self._last_line = self._unlogged, 0, now
        return f" (try {in_a_row} in a row; {unlogged} not logged since the last line)" if unlogged else ""

    async def _wait_offline(self) -> None:
        while self.offline_until is not None and not self._stop.is_set():
            left = self.offline_until - time.monotonic()
            if left <= 0:
                self.offline_until = None
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    async def _link_once(self) -> bool:
        """One link from dial to loss; True when it carried a frame from the gateway."""
        self._refused = None
        self._close_code = None
        try:
            # The whole dial (TCP connect and handshake) is bounded, as on the board.
            ws = await asyncio.wait_for(
                self.http.ws_connect(
                    self.url,
                    autoping=False,  # pings are answered below, where they also feed the dead-man
                    # Frames over the board's cap are refused by name, up to this bound (aiohttp
                    # refuses one past it with 1009 from its length, before buffering it).
                    max_msg_size=self.read_max_bytes + 1,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=2.0),
                    headers=self.headers,
                    ssl=self.security.ssl,
                ),
                self.connect_timeout_s,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # asyncio's own timeout has no text: say what did not answer, as the board does.
            text = str(exc) or f"no answer from {self.url} within {self.connect_timeout_s:g} s"
            self.last_down_reason = f"{type(exc).__name__}: {text}"
            if isinstance(exc, aiohttp.WSServerHandshakeError) and 400 <= exc.status < 500:
                said = self.refusals.take(self.url) if self.refusals is not None else None
                self._refused = f"HTTP {exc.status} on the upgrade: {said or exc.message}"
            return False
        self._ws = ws
        self._redial_now = False  # a reconnect() asked for during the dial is done: this link is it
        self.pump.new_link()  # a new WebSocket is a new gateway session: request ids may repeat
        self._up_at = time.monotonic()
        self.links += 1
        self.connected = True
        # Not "up" yet: the gateway may still refuse the slot (close 1008) before its first frame.
        log.debug("%s dialled %s (link %d), registering", self.pump.slot, self.url, self.links)
        if self.offline_until is not None:  # cut while dialling
            self._cut("link_drop from the control endpoint")
        self._carried = False
        reporter: asyncio.Task[None] | None = None
        try:
            await ws.send_frame(self.first_frame, aiohttp.WSMsgType.TEXT)
            # The board's telemetry task, as mcpdevice.provider runs it beside the link loop.
            reporter = self.pump.report(lambda frame: ws.send_frame(frame, aiohttp.WSMsgType.TEXT))
            await self._serve(ws)
        except (aiohttp.ClientError, OSError) as exc:
            self.last_down_reason = f"{type(exc).__name__}: {exc}"
        finally:
            if reporter is not None:
                reporter.cancel()
            self.connected = False
            self._ws = None
            if self._cut_reason is not None:
                self.last_down_reason, self._cut_reason = self._cut_reason, None
            if not ws.closed:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(code=1001, message=b"device reconnecting"), 1.0)
        return self._carried

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        pump = self.pump
        heard = time.monotonic()
        while True:
            remaining = self.silence_s - (time.monotonic() - heard)
            if remaining <= 0:
                self.last_down_reason = f"no frame or ping from the gateway for {self.silence_s:g} s"
                return
            try:
                msg = await ws.receive(timeout=remaining)
            except TimeoutError:
                continue
            if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                heard = time.monotonic()
                pump.heard()
                data: bytes = msg.data.encode() if isinstance(msg.data, str) else msg.data
                if not self._carried:  # the gateway's first frame: it accepted the registration
                    log.info("%s link up to %s (link %d)", pump.slot, self.url, self.links)
                self._carried = True
                if len(data) > pump.settings.frame_max_bytes:
                    answer: bytes | None = pump.oversize(len(data), data[:HEAD_BYTES])
                else:
                    answer = pump.handle(data)
                if answer is not None:
                    await ws.send_frame(answer, aiohttp.WSMsgType.TEXT)
            elif msg.type is aiohttp.WSMsgType.PING:
                heard = time.monotonic()
                pump.heard()
                await ws.pong(msg.data)
            elif msg.type is aiohttp.WSMsgType.PONG:
                heard = time.monotonic()
                pump.heard()
            else:  # CLOSE, CLOSING, CLOSED, ERROR
                if msg.type is aiohttp.WSMsgType.CLOSE:
                    self._close_code = msg.data
                    self.last_down_reason = f"closed by the gateway, code {msg.data}: {msg.extra or ''}".rstrip(": ")
                    if msg.data == CLOSE_POLICY and not self._carried:  # at the door: held slot, bad name
                        self._refused = f"code {msg.data}: {msg.extra or ''}".rstrip(": ")
                else:
                    # aiohttp hands a failed read (a message over max_msg_size: 1009) in msg.data.
                    error = msg.data if isinstance(msg.data, BaseException) else ws.exception()
                    self.last_down_reason = f"connection lost: {error}" if error else "connection lost"
                return
