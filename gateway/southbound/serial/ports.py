"""The serial way in: boards on a UART or USB serial line, one slot or many per port
(docs/protocol-serial-mqtt.md, "Serial way in").

What this module holds: a port opened by opening.py read without threads (its file descriptor on
the event loop), the frames of framing.py both ways, registration (at most max_slots slots per port),
and supervision: a port that cannot be opened, fails or disappears detaches its slots at once (their
pending callers get `Provider "<slot>" disconnected`) and is opened again after a jittered, doubling
back-off.

Registration: a serial line has no URL, so a board names its slot in its first frame,
`notifications/register` with `params.slot` (and optional `aggregate`, `hello`), or sends envelopes
`{"provider":"<slot>","payload":...}` with one register envelope per slot (a name is also claimed the
first time it appears in an envelope). A serial line has no connection either: a register frame
always starts a new link for its slot (the board restarted its link loop, or rebooted), and the old
link's pending callers are answered at once. A port whose board has not registered asks for it with
the notification `broker/register` (when the port opens, and at most once per
`serial.register_request_interval_s`, 1 s, when an unregistered board speaks), so a board that was
registered with a gateway that restarted comes back without waiting for its own silence timeout.

Trust: whoever is on the cable. Each port (and the hot-plug settings) lists the slot names a board
on it may publish (`slots`, fnmatch patterns); [providers.auth] secrets do not apply to serial lines.
The identity shown in provider_status is `serial:<port>` (hot-plugged: the USB device's stable id),
so the `always` takeover policy lets a board plugged back in replace its own stale link.

Heartbeats are JSON-RPC `ping` requests (LinkInfo.native_ping is false); the core sends them.
POSIX only (the event loop watches the port's file descriptor).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import serial

from gateway.config import SERIAL_LIMIT_KEYS, SerialConfig, SerialLineConfig
from gateway.core import jsonrpc
from gateway.core.backoff import Backoff
from gateway.core.broker.scrape import serial_port_key
from gateway.core.clock import wall_time_of
from gateway.core.eras import SESSION_ERA
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import LinkInfo, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.core.slots import SlotRefused
from gateway.core.timestamps import iso
from gateway.southbound import envelope
from gateway.southbound.serial import framing
from gateway.southbound.serial.counting import PORT_DROP_REASONS as PORT_DROP_REASONS  # noqa: PLC0414
from gateway.southbound.serial.counting import PortCounters, SerialMetrics
from gateway.southbound.serial.opening import describe as describe  # noqa: PLC0414 (re-exported: sim)
from gateway.southbound.serial.opening import open_port as open_port  # noqa: PLC0414 (re-exported: sim, tests)

log = logging.getLogger("gateway.southbound.serial")

READ_CHUNK = 4096
REGISTER_REQUEST = b'{"jsonrpc":"2.0","method":"broker/register"}'
"""Sent to a port whose board has not registered: 'send your register frame (again)'."""
TRANSPORT = "serial"
WARNED_KINDS_MAX = 32
"""Kinds of fault (drop reasons, refused slot names) a port warns about once each; beyond, only counted."""
SLOTS_SEEN_MAX = 64
"""Slot names a port remembers having carried (for provider_url and fix texts after the board left)."""

Queued = tuple[jsonrpc.Message, envelope.Envelope | None]  # a message read, and its envelope if any


@dataclass(frozen=True)
class PortSpec:
    """One port to serve: where it is, how to talk on it, and what a board on it may publish."""

    path: str
    line: SerialLineConfig
    config_key: str
    """Where its settings are in the configuration, `serial.ports[<i>]` or `serial.hotplug`: the prefix of
    its bounds in mcpgw_limit and mcpgw_limit_hits_total (e.g. serial.ports[0].frame_cap). No default, so
    that no port is counted under another's key."""
    source: str = "config"  # "config" or "hotplug"
    stable_id: str | None = None
    """Hot-plugged: the USB device's stable id (VID:PID and serial number or bus location)."""
    usb: JsonObject | None = None
    """Hot-plugged: what the enumerator knows (vid_pid, serial_number, location, description)."""

    @property
    def identity(self) -> str:
        return f"serial:{self.stable_id or self.path}"


class SerialSlotLink(ProviderLink):
    """One slot on a serial port (the core's provider link)."""

    def __init__(self, port: SerialPort, slot: str, enveloped: bool) -> None:
        self.port = port
        self.slot = slot
        self.enveloped = enveloped
        self.session: ProviderSession | None = None
        self.info = LinkInfo(
            transport=TRANSPORT,
            remote=port.spec.path,
            identity=port.spec.identity,
            # A serial line carries boards of the device profile: session era, no era probe (docs/protocol.md,
            # "The gateway owns the provider session").
            era=SESSION_ERA,
            # The line outlives the link: after a new register frame, an answer to a request of the
            # slot's previous link may still arrive.
            medium_outlives_session=True,
            extra={"framing": "cobs+crc32", "enveloped": "yes" if enveloped else "no"},
        )

    @property
    def attached(self) -> bool:
        return self.port.links.get(self.slot) is self

    async def send(self, data: bytes) -> None:
        if not self.attached:
            raise ConnectionError("the slot is no longer on this serial port")
        await self.port.send_message(envelope.wrap(self.slot, data) if self.enveloped else data)

    def send_ping(self) -> None:
        """Serial links use JSON-RPC ping (info.native_ping is false)."""

    def request_dropped(self) -> None:
        """The core dropped a request of this slot's board: its answers wait for the port (counted as backlog)."""
        self.port.counters.backlog += 1
        self.port.metrics.dropped.labels(self.port.spec.path, "backlog").inc()

    async def close(self, code: int, reason: str) -> None:
        # The core let go of the slot (a missed heartbeat, a takeover, shutdown); the port stays
        # open for the board's next register frame. The board is told why, as an error with id null.
        if not self.attached:
            return
        del self.port.links[self.slot]
        refusal = (
            envelope.error_envelope(self.slot, jsonrpc.UNAVAILABLE, reason)
            if self.enveloped
            else envelope.error_message(jsonrpc.UNAVAILABLE, reason)
        )
        with contextlib.suppress(ConnectionError):
            await self.port.send_message(refusal)

    def status_extra(self) -> JsonObject:
        return {"kind": TRANSPORT, "enveloped": self.enveloped, **self.port.status()}


class SerialPort:
    """One tty, from open to close, again and again: frames in and out, slots attached to it."""

    def __init__(
        self,
        gateway: Gateway,
        spec: PortSpec,
        settings: SerialConfig,
        metrics: SerialMetrics,
    ) -> None:
        self.gateway = gateway
        self.spec = spec
        self.settings = settings
        self.decoder = framing.FrameDecoder(spec.line.frame_cap, debug_json_lines=spec.line.debug_json_lines)
        self.counters = PortCounters()
        self.links: dict[str, SerialSlotLink] = {}
        self.state = "idle"  # idle -> opening -> open -> backoff -> opening ... -> stopped; held while let go
        self.opened_at: float | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.backoff = Backoff(settings.retry_initial_s, settings.retry_max_s)
        self._serial: serial.Serial | None = None
        self._fd: int | None = None
        self._lost: asyncio.Future[str] | None = None
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue(settings.backlog_messages)
        self._lanes: dict[str | None, deque[Queued]] = {}
        """Slot (None: the bare line) -> its messages from an attaching one on, handled in order (_consume)."""
        self._lane_tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self._asked_at: float | None = None
        self._retry_at: float | None = None
        self._stopping = False
        self._held = False  # let go of for another program: closed, not reopened until take_back()
        self.shut = asyncio.Event()
        """Set while the port is not open (the handover waits on it)."""
        self.shut.set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._dropped_seen = dict(self.decoder.dropped)
        self._warned: set[str] = set()
        self.slots_seen: dict[str, float] = {}
        """Slot names attached on this port since start -> when last (Unix time), oldest first, bounded."""
        self._metrics = gateway.metrics
        self.metrics = metrics
        self._m_dropped = {reason: metrics.dropped.labels(spec.path, reason) for reason in PORT_DROP_REASONS}
        self._m_frames_in = metrics.frames.labels(spec.path, "in")
        self._m_frames_out = metrics.frames.labels(spec.path, "out")
        self._m_open = metrics.open.labels(spec.path)
        self._m_failures = metrics.failures.labels(spec.path)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"serial {self.spec.path}")

    def stopping(self) -> bool:
        """halt() was called (a method, not an attribute: it changes while the loop awaits)."""
        return self._stopping

    def halt(self) -> None:
        """No more reopening (shutdown, or the device was unplugged); an open port stays until stop()."""
        self._stopping = True
        self._wake.set()

    def held(self) -> bool:
        """let_go() was called and take_back() not yet (a method: it changes while the loop awaits)."""
        return self._held

    def let_go(self, reason: str) -> None:
        """Close the port and keep it closed until take_back(): another program (a flash) needs it."""
        self._held = True
        self._lose(f"closed: {reason}")
        if self.shut.is_set():  # not open (in back-off): held from now, not after the back-off's wait
            self.state = "held"
            self._retry_at = None
        self._wake.set()

    def take_back(self) -> None:
        """Open the port again now, after let_go()."""
        self._held = False
        self.backoff.reset()
        self._wake.set()

    def wake(self) -> None:
        """Try to open it now, its back-off started over (its USB device appeared); a held port stays held."""
        self.backoff.reset()
        self._wake.set()

    async def stop(self, reason: str = "gateway shutting down") -> None:
        """Close the port (its slots detached with `reason`) and end supervision."""
        self.halt()
        self._lose(f"closed: {reason}")
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while not self.stopping():
            if self.held():
                self.state = "held"
                self._wake.clear()
                await self._wake.wait()
                continue
            served = False
            try:
                served = await self._serve_once()
            except Exception as exc:  # a bug here must not end supervision: record it, retry
                log.exception("serial port %s: serving failed", self.spec.path)
                self._record_error(f"internal error: {exc!r}")
            if self.stopping():
                break
            if self.held():
                continue
            if served:
                self.backoff.reset()
            delay = self.backoff.next_delay()
            self.state = "backoff"
            self._retry_at = time.monotonic() + delay
            if self.backoff.failures <= 3 or self.backoff.failures % 20 == 0:
                log.warning("serial port %s: %s; opening it again in %.1fs", self.spec.path, self.last_error, delay)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._retry_at = None
        self.state = "stopped"

    async def _serve_once(self) -> bool:
        """Open the port and serve it until it fails; True when a valid frame came in on the way."""
        self.state = "opening"
        try:
            port = open_port(self.spec.path, self.spec.line.baud)
        except (serial.SerialException, OSError, ValueError) as exc:
            self._record_error(f"cannot open: {describe(exc)}")
            return False
        loop = asyncio.get_running_loop()
        self._serial = port
        self.shut.clear()
        self._fd = port.fileno()
        self._lost = loop.create_future()
        self.decoder.reset()
        self.counters.opens += 1
        self.state = "open"
        self.opened_at = time.monotonic()
        self.last_error = self.last_error_at = None  # an old error (EAGAIN) would read as why it fails now
        frames_before = self.counters.frames_in
        self._m_open.set(1)
        log.info("serial port %s open at %d baud", self.spec.path, self.spec.line.baud)
        consumer = loop.create_task(self._consume(), name=f"serial {self.spec.path} inbox")
        loop.add_reader(self._fd, self._readable)
        try:
            await self._ask_register(opening=True)
            reason = await self._lost
        finally:
            loop.remove_reader(self._fd)
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
            await self._stop_lanes()
            self._drain_inbox()
            self._close_port()
        self._detach_all(f"serial port {self.spec.path} {reason}")
        if not self._stopping and not self._held:
            self._record_error(reason)
        return self.counters.frames_in > frames_before

    def _close_port(self) -> None:
        port, self._serial, self._fd = self._serial, None, None
        self.opened_at = None
        self.shut.set()
        self._m_open.set(0)
        if port is not None:
            with contextlib.suppress(Exception):
                port.close()

    def _lose(self, reason: str) -> None:
        """The port failed, disappeared or is being closed: end serving it (once)."""
        lost = self._lost
        if lost is not None and not lost.done():
            lost.set_result(reason)

    def _record_error(self, reason: str) -> None:
        self.counters.failures += 1
        self._m_failures.inc()
        self.last_error = reason
        self.last_error_at = time.time()

    def _detach_all(self, reason: str) -> None:
        links, self.links = self.links, {}
        for link in links.values():
            if link.session is not None:
                link.session.link_lost(reason)

    # -- reading --------------------------------------------------------------------------------

    def _readable(self) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(f"failed: read error: {describe(exc)}")
            return
        if not data:
            self._lose("closed: the device went away (end of file)")
            return
        self.counters.bytes_in += len(data)
        for message in self.decoder.feed(data):
            self.counters.frames_in += 1
            self._m_frames_in.inc()
            try:
                self._inbox.put_nowait(message)
            except asyncio.QueueFull:
                self._count_drop("backlog")
        self._sync_decoder_drops()

    def _sync_decoder_drops(self) -> None:
        for reason, total in self.decoder.dropped.items():
            new = total - self._dropped_seen[reason]
            if new:
                self._dropped_seen[reason] = total
                self.counters.dropped[reason] += new
                self._m_dropped[reason].inc(new)
                if reason == "oversize":
                    self._metrics.limit_hit(f"{self.spec.config_key}.frame_cap")
                self._warn_dropped(reason)

    def _count_drop(self, reason: str, *, warn: bool = True) -> None:
        if reason in self.counters.dropped:
            self.counters.dropped[reason] += 1
        else:
            setattr(self.counters, reason, getattr(self.counters, reason) + 1)
        self._m_dropped[reason].inc()
        if reason == "backlog":
            self._metrics.limit_hit("serial.backlog_messages")
        if warn:
            self._warn_dropped(reason)

    def _warn_dropped(self, reason: str) -> None:
        self._warn_once(reason, f"dropped a frame ({reason}); see provider_status or /metrics")

    def _warn_once(self, kind: str, message: str, slot: str | None = None) -> None:
        """One warning per kind of fault (a drop reason, a refusal of one slot) and port; the counters
        carry the rest: a noisy line or a board that keeps retrying repeats itself."""
        extra = {"slot": slot} if slot else None  # the journal's SLOT= field, when a slot is concerned
        if kind in self._warned or len(self._warned) >= WARNED_KINDS_MAX:
            log.debug("serial port %s: %s", self.spec.path, message, extra=extra)
            return
        self._warned.add(kind)
        log.warning("serial port %s: %s (further ones are only counted)", self.spec.path, message, extra=extra)

    def _drain_inbox(self) -> None:
        while not self._inbox.empty():
            self._inbox.get_nowait()

    async def _consume(self) -> None:
        while True:
            data = await self._inbox.get()
            try:
                await self._message(data)
            except Exception:  # one bad message must not stop the port
                log.exception("serial port %s: handling a message failed", self.spec.path)

    async def _message(self, data: bytes) -> None:
        """Handle messages in the order they arrived, each slot's (and the bare line's) in its order.

        A message that attaches a slot (a register frame, an envelope naming a new slot) runs in a lane
        of its own, with that slot's later messages queued behind it: an attach can wait on a takeover
        probe whose answer comes on another port, whose own attach may wait on this one. At most
        max_slots lanes at once; beyond, the next attach waits here for one to end."""
        message = jsonrpc.parse(data, self.gateway.config.limits.max_json_depth)
        body = message.body
        frame = envelope.decode_envelope(body) if isinstance(body, dict) and "jsonrpc" not in body else None
        key = frame.provider if frame is not None else None  # None: the bare line
        lane = self._lanes.get(key)
        if lane is not None:  # bounded like the inbox: waiting behind an attach is waiting unread
            if sum(map(len, self._lanes.values())) >= self.settings.backlog_messages:
                self._count_drop("backlog")
            else:
                lane.append((message, frame))
        elif self._attaches(message, frame):
            while len(self._lanes) >= self.spec.line.max_slots:  # attaches start in arrival order
                await asyncio.wait(self._lane_tasks, return_when=asyncio.FIRST_COMPLETED)
            self._lanes[key] = deque([(message, frame)])
            task = asyncio.get_running_loop().create_task(self._run_lane(key))
            self._lane_tasks.add(task)
            task.add_done_callback(self._lane_tasks.discard)
        else:
            await self._handle(message, frame)

    def _attaches(self, message: jsonrpc.Message, frame: envelope.Envelope | None) -> bool:
        if frame is None:
            return envelope.registration(message.body) is not None
        return frame.provider not in self.links or envelope.registration(frame.payload) is not None

    async def _run_lane(self, key: str | None) -> None:
        lane = self._lanes[key]
        try:
            while lane:
                message, frame = lane.popleft()
                try:
                    await self._handle(message, frame)
                except Exception:
                    log.exception("serial port %s: handling a message failed", self.spec.path)
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def _stop_lanes(self) -> None:
        for task in self._lane_tasks:
            task.cancel()
        await asyncio.gather(*self._lane_tasks, return_exceptions=True)
        self._lanes.clear()

    async def _handle(self, message: jsonrpc.Message, frame: envelope.Envelope | None) -> None:
        if frame is not None:
            await self._enveloped(frame)
            return
        registration = envelope.registration(message.body)
        if registration is not None:
            await self._register(registration, None)
            return
        link = self._bare_link()
        if link is None or link.session is None:
            self._count_drop("unregistered")
            await self._ask_register()
            return
        link.session.mark_alive()
        link.session.receive_message(message)

    def _bare_link(self) -> SerialSlotLink | None:
        return next((link for link in self.links.values() if not link.enveloped), None)

    async def _enveloped(self, frame: envelope.Envelope) -> None:
        registration = envelope.registration(frame.payload)
        link = self.links.get(frame.provider)
        if registration is not None:
            await self._register(registration, frame.provider)
            return
        if link is None:
            # A name is also registered the first time it is seen in an envelope
            # (docs/protocol-serial-mqtt.md, "Registration").
            link = await self._attach(frame.provider, envelope.Registration(False, None, frame.provider), True)
            if link is None:
                return
        if link.session is None:
            self._count_drop("unregistered")
            return
        link.session.mark_alive()
        if isinstance(frame.payload, dict | list):
            link.session.receive_message(jsonrpc.classify(frame.payload))
        else:
            link.session.counters.unparsable += 1

    async def _register(self, registration: envelope.Registration, provider: str | None) -> None:
        enveloped = provider is not None
        slot = provider if provider is not None else registration.slot
        if slot is None:
            await self._refuse(
                None,
                False,
                jsonrpc.UNAVAILABLE,
                "A board on a serial port names its slot: send notifications/register with params.slot "
                '(e.g. {"jsonrpc":"2.0","method":"notifications/register","params":{"slot":"pump-1"}}), '
                "or envelopes",
            )
            return
        replaced = [self.links.get(slot)] if enveloped else list(self.links.values())
        line = f"serial port {self.spec.path}"  # a register frame starts a new link: what it had is gone
        for old in replaced:
            if old is not None:
                del self.links[old.slot]
                if old.session is not None:
                    reason = envelope.replaced_by(line, old.slot, old.session.hello, slot, registration.hello)
                    old.session.link_lost(reason)
        await self._attach(slot, registration, enveloped)

    def allows(self, slot: str) -> bool:
        return any(fnmatch.fnmatchcase(slot, pattern) for pattern in self.spec.line.slots)

    async def _attach(self, slot: str, registration: envelope.Registration, enveloped: bool) -> SerialSlotLink | None:
        if not self.allows(slot):
            patterns = ", ".join(self.spec.line.slots)
            await self._refuse(
                slot,
                enveloped,
                jsonrpc.FORBIDDEN,
                f'Serial port {self.spec.path} may not publish slot "{slot}"; its slots setting allows: {patterns}',
            )
            return None
        cap = self.spec.line.max_slots
        if slot not in self.links and len(self.links) >= cap:
            # Checked and the link stored in one step (no await between): attaches running at once count.
            self._metrics.limit_hit(f"{self.spec.config_key}.max_slots")
            await self._refuse(
                slot,
                enveloped,
                jsonrpc.UNAVAILABLE,
                f"Too many slots on serial port {self.spec.path} (limit {cap}); "
                f"raise {self.spec.config_key}.max_slots. Slot: {slot}",
            )
            return None
        link = SerialSlotLink(self, slot, enveloped)
        self.links[slot] = link
        try:
            session = await self.gateway.registry.attach(
                slot, link, aggregate=registration.aggregate, hello=registration.hello
            )
        except SlotRefused as exc:
            if self.links.get(slot) is link:
                del self.links[slot]
            await self._refuse(slot, enveloped, exc.code, exc.reason)
            return None
        link.session = session
        self._seen(slot)
        if not link.attached:  # the port was lost while the slot was being attached
            session.link_lost(f"serial port {self.spec.path} closed")
            return None
        return link

    def _seen(self, slot: str) -> None:
        self.slots_seen.pop(slot, None)
        self.slots_seen[slot] = time.time()
        while len(self.slots_seen) > SLOTS_SEEN_MAX:
            del self.slots_seen[next(iter(self.slots_seen))]

    async def _refuse(self, slot: str | None, enveloped: bool, code: int, reason: str) -> None:
        """Count a refused register frame, warn once per slot and kind, and tell the board why."""
        self._count_drop("refused", warn=False)
        self._warn_once(f"refused {code} {slot or '(no slot name)'}", reason, slot)
        refusal = (
            envelope.error_envelope(slot, code, reason)
            if enveloped and slot is not None
            else envelope.error_message(code, reason)
        )
        with contextlib.suppress(ConnectionError):
            await self.send_message(refusal)

    async def _ask_register(self, *, opening: bool = False) -> None:
        """Ask the board to register: as the port opens, and at most once per
        serial.register_request_interval_s (1 s) after that."""
        now = time.monotonic()
        if opening:
            # The board's first unregistered frame gets its own request. (None, not 0: the monotonic
            # clock may start near zero, within one interval of it.)
            self._asked_at = None
        elif self._asked_at is not None and now - self._asked_at < self.settings.register_request_interval_s:
            return
        else:
            self._asked_at = now
        self.counters.register_requests += 1
        with contextlib.suppress(ConnectionError):
            await self.send_message(REGISTER_REQUEST)

    # -- writing --------------------------------------------------------------------------------

    async def send_message(self, message: bytes) -> None:
        """Write one message as one frame (frames never interleave); ConnectionError when the port is gone."""
        data = memoryview(framing.wire_bytes(message))
        async with self._write_lock:
            fd = self._fd
            if fd is None:
                raise ConnectionError(f"serial port {self.spec.path} is not open")
            deadline = time.monotonic() + self.settings.write_timeout_s
            while data:
                try:
                    written = os.write(fd, data)
                except BlockingIOError:
                    written = 0
                except OSError as exc:
                    self._lose(f"failed: write error: {describe(exc)}")
                    raise ConnectionError(f"serial port {self.spec.path}: {describe(exc)}") from None
                # Counted as written, like bytes_in as read: delimiters, COBS overhead and CRC included.
                self.counters.bytes_out += written
                data = data[written:]
                if data and not await self._writable(fd, deadline - time.monotonic()):
                    self._metrics.limit_hit("serial.write_timeout_s")
                    self._lose(
                        f"failed: a frame could not be written within {self.settings.write_timeout_s:g}s "
                        "(serial.write_timeout_s); the board stopped reading"
                    )
                    raise ConnectionError(f"serial port {self.spec.path}: write timed out")
            self.counters.frames_out += 1
            self._m_frames_out.inc()

    async def _writable(self, fd: int, timeout_s: float) -> bool:
        if timeout_s <= 0 or self._fd != fd:
            return False
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def writable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_writer(fd, writable)
        lost = self._lost
        try:
            waiters: set[asyncio.Future[Any]] = {ready} if lost is None else {ready, lost}
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            return ready.done() and self._fd == fd
        finally:
            with contextlib.suppress(Exception):
                loop.remove_writer(fd)
            if not ready.done():
                ready.cancel()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> JsonObject:
        spec = self.spec
        counters = self.counters
        now = time.monotonic()
        reasons = {"unregistered": counters.unregistered, "refused": counters.refused, "backlog": counters.backlog}
        dropped = {**counters.dropped, **reasons}
        return {
            "path": spec.path,
            "source": spec.source,
            "config_key": spec.config_key,
            "usb": spec.usb,
            "state": self.state,
            "open_since": iso(wall_time_of(self.opened_at)) if self.opened_at is not None else None,
            "open_for_s": round(time.monotonic() - self.opened_at, 3) if self.opened_at is not None else None,
            "baud": spec.line.baud,
            "frame_cap": spec.line.frame_cap,
            "debug_json_lines": spec.line.debug_json_lines,
            "slots_allowed": list(spec.line.slots),
            "max_slots": spec.line.max_slots,
            "slots": sorted(self.links),
            "slots_seen": {slot: iso(at) for slot, at in self.slots_seen.items()},
            "opens": counters.opens,
            "failures": counters.failures,
            "failures_in_a_row": self.backoff.failures,
            "last_error": self.last_error,
            "last_error_at": iso(self.last_error_at),
            "next_retry_in_s": round(max(self._retry_at - now, 0.0), 3) if self._retry_at is not None else None,
            "frames_in": counters.frames_in,
            "frames_out": counters.frames_out,
            "bytes_in": counters.bytes_in,
            "bytes_out": counters.bytes_out,
            "debug_lines": self.decoder.debug_lines,
            "dropped": dropped,
            "dropped_total": sum(dropped.values()),
            "register_requests": counters.register_requests,
        }


class SerialLines:
    """Every serial port the gateway serves: the configured ones, and the hot-plugged ones as they come."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings = gateway.config.serial
        self.ports: dict[str, SerialPort] = {}
        self.metrics = SerialMetrics(gateway.metrics)
        self.hotplug_status: Callable[[], JsonObject] | None = None
        """Set by hot-plug (gateway/southbound/serial/hotplug.py) when it runs."""
        self._started = False
        self._halted = False
        for index, config in enumerate(self.settings.ports):
            spec = PortSpec(config.path, config, serial_port_key(index))
            self.ports[config.path] = SerialPort(gateway, spec, self.settings, self.metrics)
        if self.ports or self.settings.hotplug.enabled:
            gateway.serial_status = self.status

    def start(self) -> None:
        self._started = True
        for port in self.ports.values():
            port.start()

    def configured(self, path: str) -> SerialPort | None:
        """The port of a path the configuration names (hot-plug leaves it alone), compared by real path too."""
        port = self.ports.get(path)
        if port is not None and port.spec.source == "config":
            return port
        real = os.path.realpath(path)
        configured = (port for port in self.ports.values() if port.spec.source == "config")
        return next((port for port in configured if os.path.realpath(port.spec.path) == real), None)

    def add(self, spec: PortSpec) -> SerialPort | None:
        """Serve a port that appeared (hot-plug); None when it is already served or shutdown has begun."""
        if self._halted or spec.path in self.ports or self.configured(spec.path) is not None:
            return None
        port = SerialPort(self.gateway, spec, self.settings, self.metrics)
        self.ports[spec.path] = port
        if self._started:
            port.start()
        return port

    async def remove(self, path: str, reason: str) -> None:
        """A hot-plugged port went away: detach its slots now and stop reopening it."""
        port = self.ports.get(path)
        if port is None or port.spec.source == "config":
            return
        del self.ports[path]
        await port.stop(reason)

    def halt(self) -> None:
        self._halted = True
        for port in self.ports.values():
            port.halt()

    async def stop(self) -> None:
        self.halt()
        await asyncio.gather(*(port.stop() for port in self.ports.values()))

    def status(self) -> JsonObject:
        hotplug = self.hotplug_status() if self.hotplug_status is not None else {"enabled": False}
        return {
            "ports": [self.ports[path].status() for path in sorted(self.ports)],
            "hotplug": hotplug,
            "limits": {key: getattr(self.settings, key) for key in SERIAL_LIMIT_KEYS},
        }
