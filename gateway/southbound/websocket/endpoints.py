"""WebSocket ways in for providers: `/provider/<slot>` (one slot) and `/providers` (enveloped, many).

Byte-compatible with mcp-broker's DirectTransport/MultiplexTransport and libmcpb: the URL or the
first envelope claims a slot, a register frame opts in to `_all`, refusals are 1008 closes (or error
envelopes on a multiplexed link), oversized messages 1009. Everything else is the core's job.

Who may connect and which slots an identity may publish is decided by the provider policy that the
composition root passes in (gateway/policy/provider_auth.py); this module only asks it and answers
with what it says: an HTTP refusal before the upgrade, or an error envelope for one slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import WSMsgType, web

from gateway.core import jsonrpc
from gateway.core.gateway import Gateway
from gateway.core.link import (
    CLOSE_GOING_AWAY,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    MAX_CLOSE_REASON_BYTES,
    LinkInfo,
    ProviderLink,
    close_reason,
    close_reason_quoting,
)
from gateway.core.names import SlotNameError, SlotPathError, check_slot_name, slot_from_raw_path
from gateway.core.provider_session import ProviderSession
from gateway.core.slots import SlotRefused
from gateway.policy.provider_auth import ProviderAuthPolicy, ProviderAuthRefusal, ProviderCredential
from gateway.southbound import envelope
from gateway.southbound.websocket.pacing import SocketSender, TurnPacer
from gateway.southbound.websocket.refusal_log import RefusalLog
from gateway.websocket_limits import CappedWebSocketResponse, handshake_deadline, is_too_big, peer_left

log = logging.getLogger("gateway.southbound.websocket")

DEDICATED_PREFIX = "/provider"
MULTIPLEXED_PATH = "/providers"
HEARTBEAT_HEADER = "X-Heartbeat-Interval-S"
MAX_FRAME_HEADER = "X-Max-Frame-Bytes"


PEER_CLOSED = "provider closed the connection"

SLOTS_REFUSED = "slots_refused"
"""The cut (mcpgw_connection_cuts_total{reason}) of a `/providers` socket whose every slot claim was
refused, at limits.connections.handshake_timeout_s after its upgrade (a socket that claimed nothing is
cut as handshake_timeout)."""
REFUSED_EVERY_SLOT = "No slot served: every slot claimed was refused"
REFUSALS_SENT = "the error envelopes said why"


def link_end(reason: str, close_code: int | None) -> str:
    """Why a provider socket ended, as the log and provider_status say it."""
    if close_code is not None:
        return f"{reason} (close code {close_code})"
    # No close frame either way: the TCP connection was cut (a board reset, a Wi-Fi drop).
    return "connection lost without a close frame" if reason == PEER_CLOSED else reason


def _remote(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(request.remote or "")


def refused_close_reason(last_refused: str) -> str:
    """The close reason of a `/providers` socket refused every slot it claimed: whole, never cut. Each
    refusal reached the board in full as an error envelope; the last refused slot is named when it fits."""
    named = f'{REFUSED_EVERY_SLOT} (last: "{last_refused}"); {REFUSALS_SENT}'
    if len(named.encode("utf-8")) <= MAX_CLOSE_REASON_BYTES:
        return named
    return f"{REFUSED_EVERY_SLOT}; {REFUSALS_SENT}"


class WebSocketLink(ProviderLink):
    """One dedicated WebSocket carrying one slot."""

    def __init__(self, ws: web.WebSocketResponse, info: LinkInfo, sender: SocketSender) -> None:
        self.ws = ws
        self.info = info
        self.sender = sender

    async def send(self, data: bytes) -> None:
        await self.sender.send(data)

    def send_ping(self) -> None:
        if not self.ws.closed:
            asyncio.get_running_loop().create_task(self.sender.quiet_ping())

    async def close(self, code: int, reason: str) -> None:
        await self.sender.close(code, reason)


class MultiplexedSocket:
    """One `/providers` WebSocket and the slots it holds."""

    def __init__(
        self, ws: web.WebSocketResponse, remote: str, credential: ProviderCredential, sender: SocketSender
    ) -> None:
        self.ws = ws
        self.sender = sender
        sender.on_cut = self.cut
        self.remote = remote
        self.credential = credential
        self.sessions: dict[str, ProviderSession] = {}
        self.ping_outstanding = False
        self.warned_unparsable = False
        self.served = False
        """Whether any slot it claimed was given to it (its claim handshake is done, whatever came after)."""
        self.last_refused: str | None = None
        """The last slot it claimed and was refused (with an error envelope); None while none was refused."""

    def ping(self) -> None:
        # Every slot on the socket asks for a heartbeat (and a takeover probe for one more); one
        # ping frame answers for all of them. A new ping is sent only when the last one has had its
        # pong, so no sweep or probe is ever left waiting for a pong to a ping that was never sent.
        if not self.ping_outstanding and not self.ws.closed:
            self.ping_outstanding = True
            asyncio.get_running_loop().create_task(self.sender.quiet_ping())

    def pong(self) -> None:
        self.ping_outstanding = False
        for session in self.sessions.values():
            session.mark_alive()

    def cut(self, reason: str) -> None:
        """The socket was cut (SocketSender): every slot it carries ends now, with `reason`."""
        for session in list(self.sessions.values()):
            session.link_lost(reason)


class MultiplexedSlotLink(ProviderLink):
    """One slot on a multiplexed socket."""

    def __init__(self, socket: MultiplexedSocket, slot: str, info: LinkInfo) -> None:
        self.socket = socket
        self.slot = slot
        self.info = info

    async def send(self, data: bytes) -> None:
        if self.socket.ws.closed or self.socket.sessions.get(self.slot) is None:
            raise ConnectionError("slot no longer on this socket")
        await self.socket.sender.send(envelope.wrap(self.slot, data))

    def send_ping(self) -> None:
        self.socket.ping()

    async def close(self, code: int, reason: str) -> None:
        # The socket stays open for its other slots; this one is told why it lost the slot.
        self.socket.sessions.pop(self.slot, None)
        if not self.socket.ws.closed:
            with contextlib.suppress(Exception):
                # Bounded like every send: a socket that does not read is cut, with all its slots.
                await self.socket.sender.send(envelope.error_envelope(self.slot, jsonrpc.UNAVAILABLE, reason))
        if not self.socket.sessions and self.socket.ping_outstanding and not self.socket.ws.closed:
            # The last slot of a socket that stopped answering pings (a missed heartbeat, a failed
            # takeover probe): the socket itself is dead, so close it (aborted when it does not take
            # frames) and let the board reconnect instead of leaving a half-open socket behind.
            with contextlib.suppress(Exception):
                await self.socket.sender.close(code, reason)


WITHDRAWN = (
    "Provider credential withdrawn while this link was being attached ([providers.auth] reloaded, or the device "
    "revoked); reconnect with a current one"
)
"""Why a link whose credential no longer stands once attached is closed (1008)."""


class ProviderWebSockets:
    """aiohttp handlers for both provider WebSocket paths."""

    def __init__(self, gateway: Gateway, auth: ProviderAuthPolicy) -> None:
        self.gateway = gateway
        self.auth = auth
        self.sockets: set[MultiplexedSocket] = set()
        self.pacer = TurnPacer(gateway.config.providers.upgrades_per_turn)
        self.refusals = RefusalLog(gateway.config.logging.repeat_interval_s)
        self.refused_cuts = gateway.metrics.connection_cuts.labels(SLOTS_REFUSED)
        self._cutting: set[asyncio.Task[bool]] = set()
        """Closes started by _cut_if_all_refused, held until they finish."""

    async def shutdown(self) -> None:
        """Close every `/providers` socket with 1001 (their slots were already released by the core).

        Dedicated sockets are closed by their slot's link; a multiplexed socket outlives its slots,
        so without this it would be cut without a close frame when the server stops."""
        for socket in list(self.sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(socket.ws.close(code=CLOSE_GOING_AWAY, message=b"Gateway shutting down"), 2.0)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(MULTIPLEXED_PATH, self.multiplexed),
            web.get(DEDICATED_PREFIX, self.dedicated),
            web.get(DEDICATED_PREFIX + r"/{rest:[\s\S]*}", self.dedicated),
        ]

    def _sender(self, ws: web.WebSocketResponse, request: web.Request) -> SocketSender:
        """The bounded sends of one provider socket (limits.provider_send_timeout_s)."""
        limits = self.gateway.config.limits
        return SocketSender(
            ws,
            request.transport,
            limits.provider_send_timeout_s,
            lambda: self.gateway.metrics.limit_hit("provider_send_timeout_s"),
            kernel_send_buffer_bytes=limits.provider_send_buffer_bytes,
        )

    def _response(self) -> CappedWebSocketResponse:
        config = self.gateway.config
        ws = CappedWebSocketResponse(config.limits.max_frame_bytes, autoping=False)
        # Announced in the 101 answer (informational; boards may ignore them): a publisher sizes its
        # silence bound and its frame bound by what this gateway enforces (docs/protocol.md).
        interval = config.providers.heartbeat_interval_s
        ws.headers[HEARTBEAT_HEADER] = str(int(interval)) if interval.is_integer() else repr(interval)
        ws.headers[MAX_FRAME_HEADER] = str(config.limits.max_frame_bytes)
        return ws

    def _socket_error(self, ws: CappedWebSocketResponse, error: object) -> tuple[str, int | None]:
        """Why a socket aiohttp reported an error on ended, and the close code sent for it."""
        if is_too_big(error):
            # aiohttp sent 1009 with our reason; ws.close_code reads 1006 afterwards (its reader failed).
            self.gateway.metrics.limit_hit("max_frame_bytes")
            return ws.too_big_reason, CLOSE_TOO_BIG
        return f"WebSocket error: {ws.exception()}", None

    @staticmethod
    def _not_an_upgrade() -> web.Response:
        # Without this aiohttp's prepare() answers a plain GET with a text/plain 400.
        return web.json_response(
            {
                "error": "bad_upgrade",
                "error_description": "This is a provider WebSocket endpoint: connect with a WebSocket client "
                "(ws:// or wss://) sending a valid RFC 6455 upgrade request.",
            },
            status=400,
        )

    @staticmethod
    def _refusal_response(refusal: ProviderAuthRefusal) -> web.Response:
        return web.json_response(refusal.body(), status=refusal.status, headers=refusal.headers())

    def _refused_at_door(self, request: web.Request, refusal: ProviderAuthRefusal, slot: str) -> web.Response:
        """The HTTP answer to a provider refused before the upgrade (its secret, or a slot its identity
        may not publish), warned of as a refusal after the upgrade is: once per slot and reason, then at
        most once per logging.repeat_interval_s (RefusalLog)."""
        why = f"HTTP {refusal.status} {refusal.error}: {refusal.description}"
        self.refusals.refused(slot, refusal.reason, why, "websocket", _remote(request))
        return self._refusal_response(refusal)

    @staticmethod
    def _asked_slot(request: web.Request) -> str:
        """The slot a provider refused at the door asked for, as the log may show it."""
        try:
            slot = slot_from_raw_path(request.rel_url.raw_path, DEDICATED_PREFIX)
            check_slot_name(slot)
        except (SlotPathError, SlotNameError):
            return "(invalid name)"
        return slot

    # -- /provider/<slot> ---------------------------------------------------------------------

    def _stands(self, admitted_by: ProviderAuthPolicy, identity: str | None, slot: str, info: LinkInfo) -> bool:
        """Whether a link `admitted_by` admitted as `identity` may still publish `slot` once attached. Its
        upgrade and a takeover probe are awaited after the credential was checked, and a reload or a
        revocation meanwhile finds no session of it to close (gateway/reload/parts/providers.py): it is
        judged again here, as the links it found are."""
        credential = self.auth.standing(admitted_by, identity)
        if credential is not None and credential.allows(slot):
            return True
        self.refusals.refused(slot, "withdrawn", WITHDRAWN, info.transport, info.remote)
        return False

    async def dedicated(self, request: web.Request) -> web.StreamResponse:
        await self.pacer.turn()
        # Authentication first: a peer without a valid secret learns nothing about paths or slots.
        admitted_by = self.auth
        credential = admitted_by.authenticate(request.headers)
        if isinstance(credential, ProviderAuthRefusal):
            return self._refused_at_door(request, credential, self._asked_slot(request))
        try:
            slot = slot_from_raw_path(request.rel_url.raw_path, DEDICATED_PREFIX)
        except SlotPathError as exc:
            self.gateway.metrics.provider_refusals.labels("bad_path").inc()
            return web.json_response({"error": "bad_provider_path", "error_description": str(exc)}, status=400)
        forbidden = self.auth.slot_refusal(credential, slot)
        if forbidden is not None:
            return self._refused_at_door(request, forbidden, slot)
        # A name no provider may use (reserved, too long, undeclared, held) is refused after the
        # upgrade with 1008, as mcp-broker does, so WebSocket clients can read the reason.
        ws = self._response()
        if not ws.can_prepare(request).ok:
            return self._not_an_upgrade()
        if not await ws.upgrade(request):
            return peer_left()
        info = LinkInfo(
            transport="websocket",
            remote=_remote(request),
            identity=credential.identity,
            native_ping=True,
            register_frame_follows=True,
            peer_outlives_link=True,
        )
        sender = self._sender(ws, request)
        link = WebSocketLink(ws, info, sender)
        try:
            session = await self.gateway.registry.attach(slot, link)
        except SlotRefused as exc:
            self.refusals.refused(slot, exc.kind, exc.reason, info.transport, info.remote)
            await ws.close(code=CLOSE_POLICY, message=close_reason(exc.reason).encode())
            return ws
        sender.on_cut = session.link_lost  # a socket cut for not reading ends the slot at once
        reason = PEER_CLOSED
        close_code: int | None = None  # the code the gateway closed with, when it did
        first = True
        if not self._stands(admitted_by, credential.identity, slot, info):
            await session.close(CLOSE_POLICY, WITHDRAWN)  # the loop below then reads only the close
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data: bytes = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                    if first:
                        first = False
                        mismatch = await self._first_dedicated_frame(ws, slot, session, data)
                        session.first_frame_handled()
                        if mismatch:
                            reason = "framing mismatch: envelope on /provider/<slot>"
                            break
                    else:
                        session.receive(data)
                    # Not kept while waiting for the next frame: a board's last frame is often its
                    # tool list, tens of KiB that would stay for as long as the board is idle.
                    del msg, data
                elif msg.type is WSMsgType.PING:
                    session.mark_alive()
                    await ws.pong(msg.data)
                elif msg.type is WSMsgType.PONG:
                    session.mark_alive()
                elif msg.type is WSMsgType.ERROR:
                    reason, close_code = self._socket_error(ws, msg.data)
                    break
        finally:
            sender.stop_watch()
            session.link_lost(sender.cut_reason or link_end(reason, close_code or ws.close_code))
        return ws

    async def _first_dedicated_frame(
        self, ws: web.WebSocketResponse, slot: str, session: ProviderSession, data: bytes
    ) -> bool:
        """Consume a register frame or catch an envelope; True when the link must close."""
        message = jsonrpc.parse(data, session.settings.max_json_depth)
        registration = envelope.registration(message.body)
        if registration is not None:
            session.register(registration.aggregate, registration.hello)
            return False
        if envelope.looks_like_envelope(message.body):
            announced = envelope.decode_envelope(message.body)
            assert announced is not None
            detail = (
                f'Provider "{slot}" is registered on the slot-scoped path "{DEDICATED_PREFIX}/{slot}", which carries '
                f"plain JSON-RPC frames, but its first frame is a multiplex envelope (it announced slot "
                f'"{announced.provider}"). This is a MultiplexTransport pointed at a DirectTransport URL. Connect '
                f"it to {MULTIPLEXED_PATH}, or send bare JSON-RPC here."
            )
            with contextlib.suppress(Exception):
                await ws.send_frame(
                    envelope.error_envelope(announced.provider, jsonrpc.UNAVAILABLE, detail), WSMsgType.TEXT
                )
            self.gateway.metrics.provider_refusals.labels("framing").inc()
            await session.close(
                CLOSE_POLICY,
                close_reason_quoting(
                    f"Envelope frame on slot-scoped path {DEDICATED_PREFIX}/",
                    slot,
                    f": use DirectTransport here, or connect to {MULTIPLEXED_PATH}",
                ),
            )
            return True
        session.receive_message(message)
        return False

    # -- /providers ---------------------------------------------------------------------------

    async def multiplexed(self, request: web.Request) -> web.StreamResponse:
        await self.pacer.turn()
        credential = self.auth.authenticate(request.headers)
        if isinstance(credential, ProviderAuthRefusal):
            return self._refused_at_door(request, credential, f"(any, on {MULTIPLEXED_PATH})")
        ws = self._response()
        if not ws.can_prepare(request).ok:
            return self._not_an_upgrade()
        if not await ws.upgrade(request):
            return peer_left()
        socket = MultiplexedSocket(ws, _remote(request), credential, self._sender(ws, request))
        self.sockets.add(socket)
        timeout_s = self.gateway.config.limits.connections.handshake_timeout_s
        deadline = handshake_deadline(
            ws,
            timeout_s,
            lambda: socket.served or socket.last_refused is not None,
            f"No slot claimed within {timeout_s:g} s (limits.connections.handshake_timeout_s): send an envelope first",
            self.gateway.metrics,
        )
        refused_deadline = asyncio.get_running_loop().call_later(timeout_s, self._cut_if_all_refused, socket)
        first = True
        reason = PEER_CLOSED
        close_code: int | None = None  # the code the gateway closed with, when it did
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data: bytes = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                    message = jsonrpc.parse(data, self.gateway.config.limits.max_json_depth)
                    if first:
                        first = False
                        if envelope.looks_like_bare_jsonrpc(message.body):
                            await self._refuse_bare_frame(ws, message)
                            reason = "framing mismatch: bare JSON-RPC on /providers"
                            break
                    await self._multiplexed_frame(socket, message)
                    del msg, data, message  # not kept while the socket idles (see `dedicated`)
                elif msg.type is WSMsgType.PING:
                    for session in socket.sessions.values():
                        session.mark_alive()
                    await ws.pong(msg.data)
                elif msg.type is WSMsgType.PONG:
                    socket.pong()
                elif msg.type is WSMsgType.ERROR:
                    reason, close_code = self._socket_error(ws, msg.data)
                    break
        finally:
            deadline.cancel()
            refused_deadline.cancel()
            socket.sender.stop_watch()
            self.sockets.discard(socket)
            sessions, socket.sessions = socket.sessions, {}
            for session in sessions.values():
                session.link_lost(socket.sender.cut_reason or link_end(reason, close_code or ws.close_code))
        return ws

    def _cut_if_all_refused(self, socket: MultiplexedSocket) -> None:
        """Close a `/providers` socket that claimed slots and was refused every one, once its handshake
        time is up: the board has its refusal envelopes at once, and the close makes it reconnect on its
        back-off and claim again (the holder may have left by then) instead of idling with no slot."""
        if socket.ws.closed or socket.served or socket.last_refused is None:
            return
        self.refused_cuts.inc()
        reason = refused_close_reason(socket.last_refused)
        task = asyncio.get_running_loop().create_task(socket.ws.close(code=CLOSE_POLICY, message=reason.encode()))
        self._cutting.add(task)
        task.add_done_callback(self._cutting.discard)

    async def _refuse_bare_frame(self, ws: web.WebSocketResponse, message: jsonrpc.Message) -> None:
        method = message.method or "(none)"
        detail = (
            f'A provider connected to the multiplexed path "{MULTIPLEXED_PATH}", which carries envelope frames '
            f'{{"provider":"<slot>","payload":{{...}}}}, but sent a plain JSON-RPC frame (method "{method}"). '
            f"This is a DirectTransport pointed at a MultiplexTransport URL. Connect it to "
            f"{DEDICATED_PREFIX}/<name>, or wrap every frame in an envelope."
        )
        self.gateway.metrics.provider_refusals.labels("framing").inc()
        with contextlib.suppress(Exception):
            await ws.send_frame(envelope.error_message(jsonrpc.UNAVAILABLE, detail), WSMsgType.TEXT)
        await ws.close(
            code=CLOSE_POLICY,
            message=close_reason(
                f"Plain JSON-RPC on multiplex path {MULTIPLEXED_PATH}: use MultiplexTransport here, "
                f"or connect to {DEDICATED_PREFIX}/<name>"
            ).encode(),
        )

    async def _multiplexed_frame(self, socket: MultiplexedSocket, message: jsonrpc.Message) -> None:
        frame = envelope.decode_envelope(message.body)
        if frame is None:
            self.gateway.metrics.unparsable.labels("provider").inc()
            invalid = message.kind is jsonrpc.Kind.INVALID and (message.body is None or message.limit)
            if invalid and not socket.warned_unparsable:
                # Once per socket: a noisy serial bridge must not flood the log; the metric counts.
                socket.warned_unparsable = True
                log.warning("unparsable frame on %s from %s: %s", MULTIPLEXED_PATH, socket.remote, message.problem)
            return
        session = socket.sessions.get(frame.provider)
        if session is None or session.state == "closed":
            session = await self._claim(socket, frame)
            if session is None:
                return
            if envelope.registration(frame.payload) is not None:
                return
        if isinstance(frame.payload, dict | list):
            session.mark_alive()
            session.receive_message(jsonrpc.classify(frame.payload))
        else:
            session.counters.unparsable += 1

    async def _claim(self, socket: MultiplexedSocket, frame: envelope.Envelope) -> ProviderSession | None:
        admitted_by, identity = self.auth, socket.credential.identity
        forbidden = admitted_by.slot_refusal(socket.credential, frame.provider)
        if forbidden is not None:
            # Only this slot is refused; the socket keeps the slots it may publish.
            socket.last_refused = frame.provider
            with contextlib.suppress(Exception):
                await socket.sender.send(
                    envelope.error_envelope(frame.provider, jsonrpc.FORBIDDEN, forbidden.description)
                )
            return None
        registration = envelope.registration(frame.payload)
        info = LinkInfo(
            transport="websocket-mux",
            remote=socket.remote,
            identity=socket.credential.identity,
            native_ping=True,
            peer_outlives_link=True,
        )
        link = MultiplexedSlotLink(socket, frame.provider, info)
        try:
            session = await self.gateway.registry.attach(
                frame.provider,
                link,
                aggregate=registration.aggregate if registration else False,
                hello=registration.hello if registration else None,
            )
        except SlotRefused as exc:
            self.refusals.refused(frame.provider, exc.kind, exc.reason, info.transport, info.remote)
            socket.last_refused = frame.provider
            with contextlib.suppress(Exception):
                await socket.sender.send(envelope.error_envelope(frame.provider, exc.code, exc.reason))
            return None
        if not self._stands(admitted_by, identity, frame.provider, info):
            await session.close(CLOSE_POLICY, WITHDRAWN)
            return None
        socket.served = True
        socket.sessions[frame.provider] = session
        return session


PROVIDER_SOCKETS_KEY = web.AppKey("provider_sockets", ProviderWebSockets)
"""Where the composition root keeps the handlers on the application (a reload swaps their [providers.auth])."""
