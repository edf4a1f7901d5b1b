"""One connection to one MQTT broker: paho-mqtt in its own thread, every event handed to asyncio.

paho's network loop runs in the thread `loop_start` makes; its callbacks only post to the event loop
(`call_soon_threadsafe`), so everything the gateway does with a message happens on the loop thread,
in arrival order. Publishing and subscribing are called from the loop thread (paho allows that).

Each connection is a fresh paho client, and reconnecting is this module's loop, not paho's: a paho
client keeps QoS 1 messages that were not acknowledged and sends them again on its next connection,
and a request whose caller was already answered "disconnected" must never reach a pump after the
broker comes back. A new client per connection forgets them. Back-off between attempts is the
gateway's full-jitter doubling (gateway.core.backoff), reset once a connection was accepted.

Inbound bounds. paho reads a whole packet before the gateway's own size check (max_payload_bytes), so
what bounds the read is the broker's own limit (mosquitto's `max_packet_size`, which the CONNACK
announces on MQTT 5: `limits.maximum_packet_size`). Only with `announce_max_packet_size` does CONNECT
carry a Maximum Packet Size of max_payload_bytes plus room for the topic and properties
(`max_packet_bytes`), so that the broker drops a larger PUBLISH instead of sending it (MQTT 5
§3.1.2.11.4): mosquitto 2.0.11 never frees the in-flight slot of a QoS 1 message it drops that way,
and after max_inflight_messages (20) of them it sends the gateway nothing more. Messages waiting for
the event loop are bounded by `max_backlog`: past it paho's thread drops them (they are acknowledged,
and counted as `backlog` once the loop is back).

Outbound bound. A packet over the broker's Maximum Packet Size makes the broker disconnect the
gateway, and with it every slot of the broker; `publish` refuses such a message (PacketTooLarge)
before paho sends it: MQTT 5, the whole packet against the CONNACK's Maximum Packet Size (absent: the
protocol's limit); MQTT 3.1.1, whose CONNACK says nothing, the payload against max_payload_bytes.

Refused connections. A broker that refuses CONNECT (wrong password, ACL) is warned about once per
reason until a connection is accepted; the attempts again are counted (`refusals`, `attempts`).

Failed attempts. Every attempt that fails (the TLS files cannot be loaded, the TCP or TLS connection
fails, no CONNACK comes, or anything unexpected) is recorded as `last_error` (with `last_error_kind`:
tls, refused, network or internal) and retried with the back-off; nothing ends the connection task
but stopping. The first failure of a streak (attempts since the last accepted connection) is a
warning, as is a new kind of TLS failure; another kind is logged at info, the same kind again at debug.
A kind (`last_error_category`) is what failed, not its words: OpenSSL words one TLS failure differently
from attempt to attempt. A connection closed before the CONNACK adds that the listener may expect the
other scheme (mqtt:// or mqtts://).

Refused publishes. A PUBACK that refuses a publish (MQTT 5 reason >= 0x80, the broker's ACL) is
counted, warned of and handed to the owner (gateway/southbound/mqtt/puback.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from gateway.config import MqttBrokerConfig
from gateway.config.mqtt_tls import GATEWAY_TLS_NAMES, TlsFilesError, TlsSettingNames, client_context
from gateway.core.backoff import Backoff
from gateway.southbound.mqtt import paho_select
from gateway.southbound.mqtt import tls as mqtt_tls
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.connack import ConnackLimits, read_connack
from gateway.southbound.mqtt.packet_size import (
    UserProperties,
    max_packet_bytes,
    outbound_limit,
    publish_packet_bytes_at_most,
)
from gateway.southbound.mqtt.puback import PublishAcks, is_refusal

log = logging.getLogger("gateway.mqtt")


@dataclass(frozen=True)
class InboundMessage:
    topic: str
    payload: bytes
    retain: bool
    user_properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Outbound:
    """A message to publish later: a connection's will, or a farewell before DISCONNECT."""

    topic: str
    payload: bytes
    retain: bool = False
    user_properties: UserProperties = ()


@dataclass(frozen=True)
class ConnectOptions:
    """What one connection announces: its will and the CONNECT user properties (MQTT 5)."""

    will: Outbound | None = None
    user_properties: UserProperties = ()


class ClientEvents(Protocol):
    """What the owner of a connection hears, always on the event loop thread."""

    def connected(self, limits: ConnackLimits) -> None: ...

    def disconnected(self, reason: str) -> None: ...

    def message(self, message: InboundMessage) -> None: ...

    def backlog_dropped(self, count: int, topic: str) -> None:
        """`count` messages were dropped in paho's thread (max_backlog); `topic` is the latest one's."""
        ...

    def publish_refused(self, topic: str, payload: bytes, text: str) -> None:
        """The broker refused this publish (MQTT 5 PUBACK reason >= 0x80); `text` says so for a caller."""
        ...


class NotConnected(ConnectionError):
    pass


class NoSuback(NotConnected):
    """The broker did not answer a SUBSCRIBE within connect_timeout_s; the connection is still up."""


class PacketTooLarge(ValueError):
    """A message this connection must not publish: the broker would disconnect the gateway for it."""

    def __init__(self, size: int, maximum: int, measured: str) -> None:
        super().__init__(f"{measured} of {size} bytes, the broker accepts at most {maximum}")
        self.size = size
        self.maximum = maximum
        self.measured = measured
        """"packet" (MQTT 5: the whole PUBLISH) or "payload" (MQTT 3.1.1: against max_payload_bytes)."""


def default_client_id() -> str:
    return f"mcp-gateway-{secrets.token_hex(6)}"


def _reason(code: Any) -> str:
    return str(code.getName()) if isinstance(code, ReasonCode) else str(code)


def _lost_reason(code: Any) -> str:
    # paho reports a connection that broke (the broker stopped, the network failed) as the MQTT 5
    # reason "Unspecified error"; a DISCONNECT from the broker carries its own reason.
    text = _reason(code)
    return LOST_UNSPECIFIED if text == "Unspecified error" else text


LOST_UNSPECIFIED = "the broker or the network closed it"


class _PahoErrors:
    """paho's logger, keeping only its latest error (e.g. the TLS alert a broker closed the connection
    with, which paho reports only as a lost connection); the level check keeps paho's hot path cheap."""

    def __init__(self) -> None:
        self.latest = ""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        if level >= logging.ERROR:
            text = fmt % args
            if _is_tls_text(text):  # not paho's later "Client is not connected", which says nothing new
                self.latest = text


def _is_tls_text(text: str) -> bool:
    lowered = text.lower()
    return "ssl" in lowered or "tls" in lowered or "alert" in lowered


def _user_properties(properties: Any) -> tuple[tuple[str, str], ...]:
    users = getattr(properties, "UserProperty", None) if properties is not None else None
    return tuple((str(key), str(value)) for key, value in users) if users else ()


class BrokerClient:
    """Keeps one broker connected; `state` is idle, connecting, connected, backoff or stopped."""

    def __init__(
        self,
        config: MqttBrokerConfig,
        events: ClientEvents,
        options: Callable[[str], ConnectOptions],
        *,
        logger: logging.Logger | None = None,
        who: str = "the gateway",
        counters: str | None = "broker_info mqtt[]",
        tls_names: TlsSettingNames = GATEWAY_TLS_NAMES,
    ) -> None:
        """`logger`, `who`, `counters` (where the repeats of a warning are counted; None: nowhere to
        look) and `tls_names` (what its TLS settings are called) word the log and the errors for the
        connection's owner: the gateway, or a simulated board."""
        self.config = config
        self.tls_names = tls_names
        self.log = logger or log
        self.counters = counters
        self.acks = PublishAcks(config.label, self.log, who, f"{counters}.publish_refusals" if counters else "")
        self.label = config.label
        self.events = events
        self.options = options
        self.v5 = config.protocol == "5"
        self.backoff = Backoff(config.reconnect_initial_s, config.reconnect_max_s)
        self.state = "idle"
        self.client_id = config.client_id or default_client_id()
        self.limits = ConnackLimits()
        self.connected = False
        self.connects = 0
        self.attempts = 0
        self.losses = 0
        self.refusals = 0
        """CONNECTs the broker refused (its CONNACK said why): one warning per reason, counted here."""
        self._refusals_warned: set[str] = set()
        self._retry_logged: tuple[str, ...] = ()
        """The failure category (`last_error_category`) the back-off last logged at info or above."""
        self._streak_warned = False
        """The current streak of failed attempts was warned of (a loss, a refusal, or its first failure)."""
        self.last_error_kind = ""
        """tls, refused, network or internal: what kind of failure last_error is."""
        self.last_error_category: tuple[str, ...] = ()
        """What failed, without the words (an exception class, an errno, the TLS handshake phase): the
        retries log once per category, since OpenSSL words one failure differently from try to try."""
        self._paho_errors = _PahoErrors()
        self.last_error = ""
        self.last_error_at: float | None = None
        self.connected_since: float | None = None
        self.next_attempt_at: float | None = None
        self._client: paho.Client | None = None
        self._generation = 0
        self._connack: asyncio.Future[bool] | None = None
        self._ended: asyncio.Event | None = None
        self._subacks: dict[int, asyncio.Future[list[int]]] = {}
        self._stopping = False
        self.hold_until: float | None = None
        """time.monotonic() until which no connection is attempted (`cut(hold_s)`)."""
        self._redial_now = False
        self._drop_reason = ""
        """Why `drop` ended the current connection: its loss is named so, not as the network's."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Messages handed to the loop and not yet handled, and those dropped past max_backlog: written
        # by paho's thread and by the loop thread, hence the lock.
        self._inbound_lock = threading.Lock()
        self._queued = 0
        self._overflow = 0
        self._overflow_topic = ""

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=f"mqtt {self.label}")

    def halt(self) -> None:
        self._stopping = True
        self._wake.set()

    async def stop(self, farewell: Sequence[Outbound] = ()) -> None:
        """Publish `farewell` messages (when connected), DISCONNECT (so no will is sent), end the thread."""
        self.halt()
        client = self._client
        if client is not None and self.connected:
            for message in farewell:
                with contextlib.suppress(ConnectionError, PacketTooLarge):
                    self.publish(
                        message.topic, message.payload, retain=message.retain, user_properties=message.user_properties
                    )
            self._fail("stopped")
            client.disconnect()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if client is not None:
            await asyncio.to_thread(client.loop_stop)
        self.state = "stopped"

    def cut(self, hold_s: float | None = None) -> None:
        """End the connection without DISCONNECT, as a lost network does (the broker publishes the will),
        then connect again after the back-off, or after `hold_s` seconds when given."""
        if hold_s is not None:
            self.hold_until = time.monotonic() + hold_s
        client = self._client
        sock = client.socket() if client is not None else None
        if isinstance(sock, socket.socket):  # an SSLSocket too
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def drop(self, reason: str) -> None:
        """End a connection that is of no use (the broker did not answer its SUBSCRIBE) as `cut` does, its
        loss named `reason`; the next connection, after the back-off, subscribes anew."""
        if self.connected:
            self._drop_reason = reason
            self.cut()

    def redial(self) -> None:
        """Connect again now: ends a hold or a back-off wait (a connection that is up stays up)."""
        self.hold_until = None
        self._redial_now = True
        self._wake.set()

    async def _hold(self) -> None:
        while self.hold_until is not None and not self._stopping:
            left = self.hold_until - time.monotonic()
            if left <= 0:
                self.hold_until = None
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def stopping(self) -> bool:
        """Stopping has begun (a method, not an attribute: it changes while the loop awaits)."""
        return self._stopping

    async def _run(self) -> None:
        try:
            while not self.stopping():
                await self._hold()
                if self.stopping():
                    break
                self._redial_now = False
                try:
                    accepted = await self._connect_once()
                except Exception as exc:  # a bug must not end the connection task: it is retried
                    self.log.error("MQTT broker %s: connection attempt failed", self.label, exc_info=exc)
                    self._fail(
                        f"connection attempt failed: {type(exc).__name__}: {exc}",
                        "internal",
                        ("internal", type(exc).__name__),
                    )
                    accepted = False
                if self.stopping():
                    break
                if accepted:
                    self.backoff.reset()
                    # The loss that ended it was warned of (_lost): the retry names only a new failure at info.
                    self._retry_logged = self.last_error_category
                if self._redial_now or self.hold_until is not None:
                    continue
                delay = self.backoff.next_delay()
                self.state = "backoff"
                self.next_attempt_at = time.monotonic() + delay
                self._log_retry(delay)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                self.next_attempt_at = None
        finally:
            if self.connected:
                self._lost("gateway shutting down")

    def _log_retry(self, delay: float) -> None:
        """Once per kind of failure (`last_error_category`; a broker that keeps refusing would log every
        attempt otherwise): a warning for the first failure of a streak and for a new kind of TLS failure,
        else info; repeats at debug."""
        if self.last_error_category == self._retry_logged:
            self.log.debug("MQTT broker %s: %s; connecting again in %.1fs", self.label, self.last_error, delay)
            return
        self._retry_logged = self.last_error_category
        level = logging.INFO
        if not self._streak_warned or self.last_error_kind == "tls":
            level = logging.WARNING
        self._streak_warned = True
        self.log.log(level, "MQTT broker %s: %s; connecting again in %.1fs", self.label, self.last_error, delay)

    def _fail(self, text: str, kind: str = "network", category: tuple[str, ...] | None = None) -> None:
        """Record a failure; `category` (default: its kind and text) is what the retries log once."""
        if kind == "tls" and self.tls_names is not GATEWAY_TLS_NAMES:
            text = mqtt_tls.reword(text, self.tls_names)
        self.last_error = text
        self.last_error_kind = kind
        self.last_error_category = category or (kind, text)
        self.last_error_at = time.time()

    def _scheme_hint(self) -> str:
        """For a connection the broker closed before its CONNACK: the other scheme may be the listener's."""
        if self.config.tls:
            return "; the listener may expect plain MQTT (an mqtt:// URL), and this URL is mqtts://"
        return "; the listener may expect TLS (an mqtts:// URL), and this URL is mqtt://"

    def _new_client(self, generation: int) -> paho.Client:
        config = self.config
        if config.client_id is None and self.connects:
            # The MCP over MQTT specification wants a new mcp-client-id for each initialization; with one
            # connection for every server the nearest is one per connection (docs/protocol.md, Departures).
            self.client_id = default_client_id()
        client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=paho.MQTTv5 if self.v5 else paho.MQTTv311,
            clean_session=None if self.v5 else True,
            reconnect_on_failure=False,
        )
        client.connect_timeout = config.connect_timeout_s
        if config.username is not None:
            password = config.password.secret.get_secret_value() if config.password is not None else None
            client.username_pw_set(config.username, password)
        if config.tls:
            # Read at each connect: a rotated CA or certificate is used from the next connection on.
            context = client_context(config.ca_file, config.cert_file, config.key_file, config.key_password_text)
            client.tls_set_context(context)
        client.enable_logger(self._paho_errors)  # type: ignore[arg-type]
        options = self.options(self.client_id)
        if options.will is not None:
            will = options.will
            client.will_set(
                will.topic,
                will.payload,
                qos=mqtt_topics.QOS,
                retain=will.retain,
                properties=self._props(will.user_properties),
            )
        client.on_connect = lambda _c, _u, _f, code, props: self._post(self._on_connack, generation, code, props)
        client.on_disconnect = lambda _c, _u, _f, code, _p: self._post(self._on_lost, generation, _lost_reason(code))
        client.on_message = lambda _c, _u, msg: self._inbound(generation, msg)
        client.on_subscribe = lambda _c, _u, mid, codes, _p: self._post(self._on_suback, generation, mid, codes)
        if self.v5:
            client.on_publish = lambda c, _u, mid, code, _p: self._puback(c, generation, mid, code)
        return client

    def _puback(self, client: paho.Client, generation: int, mid: int, code: Any) -> None:
        """In paho's thread (inside its PUBACK handling, the message still in its out-queue): hand a refusal,
        or an acceptance on a topic refused before, to the loop; nothing for the common acceptance."""
        refused = is_refusal(code)
        if not refused and not self.acks.refused_topics:
            return
        message = client._out_messages.get(mid)  # paho gives on_publish only the message id
        if message is None:
            return
        if refused:
            self._post(self._on_puback, generation, message.topic, bytes(message.payload), code)
        elif message.topic in self.acks.refused_topics:
            self._post(self._on_puback, generation, message.topic, b"", code)

    def _post(self, handler: Callable[..., None], *args: Any) -> None:
        """From paho's thread to the event loop (a closed loop at shutdown is not an error here)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(handler, *args)

    def _inbound(self, generation: int, msg: paho.MQTTMessage) -> None:
        """In paho's thread: hand one message to the loop, or drop it when max_backlog are waiting."""
        with self._inbound_lock:
            if self._queued >= self.config.max_backlog:
                self._overflow += 1
                self._overflow_topic = msg.topic
                return
            self._queued += 1
        self._post(self._on_message, generation, msg)

    @property
    def backlog(self) -> int:
        """Messages handed to the event loop and not yet handled."""
        return self._queued

    @property
    def backlog_overflow(self) -> int:
        """Messages dropped past max_backlog that the event loop has not counted yet."""
        return self._overflow

    def _props(self, users: UserProperties, packet: int = PacketTypes.PUBLISH) -> Properties | None:
        if not self.v5 or not users:
            return None
        props = Properties(packet)  # type: ignore[no-untyped-call]
        props.UserProperty = list(users)
        return props

    async def _connect_once(self) -> bool:
        """One connection from dial to loss; True when the broker accepted it."""
        self._generation += 1
        generation = self._generation
        self.state = "connecting"
        self.attempts += 1
        self._paho_errors.latest = ""
        self._drop_reason = ""
        try:
            client = self._new_client(generation)
        except TlsFilesError as exc:
            self._fail(f"cannot connect: {exc}", "tls", ("tls", "files", str(exc)))
            return False
        loop = asyncio.get_running_loop()
        self._connack = loop.create_future()
        self._ended = asyncio.Event()
        connect_props = self._props(self.options(self.client_id).user_properties, PacketTypes.CONNECT)
        if self.v5:
            connect_props = connect_props or Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            connect_props.SessionExpiryInterval = 0  # the spec's session expiry 0: nothing outlives a connection
            if self.config.announce_max_packet_size:
                # The broker drops a larger PUBLISH for us instead of sending it (paho would read it whole).
                connect_props.MaximumPacketSize = max_packet_bytes(self.config.max_payload_bytes)
        config = self.config
        try:
            if self.v5:
                await asyncio.to_thread(
                    client.connect,
                    config.host,
                    config.port,
                    config.keepalive_s,
                    clean_start=True,
                    properties=connect_props,
                )
            else:
                await asyncio.to_thread(client.connect, config.host, config.port, config.keepalive_s)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            text = mqtt_tls.describe_failure(exc, self.config.cert_file is not None)
            if isinstance(exc, ssl.SSLCertVerificationError):
                self._fail(f"cannot connect: {text}", "tls", ("tls", "untrusted", str(exc.verify_code)))
            else:
                hint = self._scheme_hint() if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError) else ""
                self._fail(f"cannot connect: {text}{hint}", "tls", ("tls", "handshake"))
            return False
        except (OSError, ValueError) as exc:
            closed = isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError)
            hint = self._scheme_hint() if closed and self.config.tls else ""
            errno = getattr(exc, "errno", None)
            self._fail(f"cannot connect: {exc}{hint}", "network", ("network", type(exc).__name__, str(errno)))
            return False
        if self.stopping():
            client.disconnect()
            return False
        sock = client.socket()
        if isinstance(sock, socket.socket):
            # paho leaves Nagle on: each small answer would wait for a delayed ACK (40 ms on Linux).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client = client
        paho_select.install()  # its socket may be above descriptor 1023 (gateway/southbound/mqtt/paho_select.py)
        client.loop_start()
        accepted = False
        try:
            try:
                accepted = await asyncio.wait_for(asyncio.shield(self._connack), config.connect_timeout_s)
            except TimeoutError:
                self._fail(f"no CONNACK within {config.connect_timeout_s:g}s", "network", ("network", "no CONNACK"))
            if accepted:
                await self._ended.wait()
        finally:
            if self.connected:
                self._lost(self.last_error or "connection ended")
            self._generation += 1  # late events of this client are ignored from here on
            with contextlib.suppress(Exception):
                client.disconnect()
            await asyncio.to_thread(client.loop_stop)
            self._client = None
        return accepted

    # -- events (on the loop thread) ------------------------------------------------------------

    def _on_connack(self, generation: int, code: Any, properties: Any) -> None:
        if generation != self._generation or self._connack is None or self._connack.done():
            return
        if isinstance(code, ReasonCode) and code.is_failure:
            reason = _reason(code)
            self._fail(f"refused by the broker: {reason}", "refused", ("refused", reason))
            self.refusals += 1
            if reason not in self._refusals_warned:
                self._refusals_warned.add(reason)
                self._streak_warned = True
                counted = f"; the attempts are counted in {self.counters}.refusals" if self.counters else ""
                self.log.warning(
                    "MQTT broker %s refused the connection: %s (trying again with back-off%s)",
                    self.label,
                    reason,
                    counted,
                )
            self._connack.set_result(False)
            return
        self._refusals_warned.clear()
        self._streak_warned = False
        self.limits = read_connack(properties)
        self.connected = True
        self.connects += 1
        self.connected_since = time.time()
        self.state = "connected"
        self._connack.set_result(True)
        self.log.info("connected to MQTT broker %s as %s", self.label, self.client_id)
        for problem in self.limits.problems():
            self.log.warning("MQTT broker %s: %s", self.label, problem)
        self.events.connected(self.limits)

    def _on_lost(self, generation: int, reason: str) -> None:
        if generation != self._generation:
            return
        refused = self._connack is not None and self._connack.done() and not self.connected
        if refused:
            # The broker closes the socket after a refusing CONNACK; paho calls that a lost connection
            # ("Protocol error"), but nothing was lost: the refusal is the error.
            if self._ended is not None:
                self._ended.set()
            return
        paho_error, self._paho_errors.latest = self._paho_errors.latest, ""
        if self._drop_reason:
            reason, self._drop_reason = self._drop_reason, ""
            paho_error = ""
        if reason == LOST_UNSPECIFIED and paho_error and _is_tls_text(paho_error) and not self.connected:
            # The broker ended the connection with a TLS alert before its CONNACK (e.g. it requires a
            # client certificate). After one, a TLS error is how a stopping broker's close reads.
            has_certificate = self.config.cert_file is not None
            text = mqtt_tls.describe_alert(paho_error, has_certificate)
            self._fail(f"connection lost: {text}", "tls", ("tls", "handshake"))
        elif self._connack is not None and not self._connack.done():
            # Closed before its CONNACK: nothing was connected, and a scheme that does not match the
            # listener ends a connection exactly so.
            self._fail(
                f"connection closed before the broker's CONNACK: {reason}{self._scheme_hint()}",
                "network",
                ("network", "closed before CONNACK"),
            )
        else:
            self._fail(f"connection lost: {reason}", "network", ("network", "lost", reason))
        if self.connected:
            self._lost(self.last_error)
        if self._connack is not None and not self._connack.done():
            self._connack.set_result(False)
        if self._ended is not None:
            self._ended.set()

    def _lost(self, reason: str) -> None:
        self.connected = False
        self.connected_since = None
        self.losses += 1
        subacks, self._subacks = self._subacks, {}
        for future in subacks.values():
            if not future.done():
                future.set_exception(NotConnected(reason))
        if not self._stopping:
            self._streak_warned = True
            self.log.warning("MQTT broker %s: %s", self.label, reason)
        self.events.disconnected(reason)

    def _on_message(self, generation: int, msg: paho.MQTTMessage) -> None:
        with self._inbound_lock:
            self._queued -= 1
            overflow, self._overflow = self._overflow, 0
            overflow_topic = self._overflow_topic
        if overflow:
            self.events.backlog_dropped(overflow, overflow_topic)
        if generation != self._generation or not self.connected:
            return
        self.events.message(
            InboundMessage(
                topic=msg.topic,
                payload=bytes(msg.payload),
                retain=bool(msg.retain),
                user_properties=_user_properties(getattr(msg, "properties", None)),
            )
        )

    def _on_puback(self, generation: int, topic: str, payload: bytes, code: Any) -> None:
        if generation != self._generation:
            return
        if not is_refusal(code):
            self.acks.accepted(topic)
            return
        self.events.publish_refused(topic, payload, self.acks.refused(topic, code))

    def _on_suback(self, generation: int, mid: int, codes: list[Any]) -> None:
        future = self._subacks.pop(mid, None) if generation == self._generation else None
        if future is not None and not future.done():
            future.set_result([code.value if isinstance(code, ReasonCode) else int(code) for code in codes])

    # -- what the profiles call (on the loop thread) --------------------------------------------

    def _live(self) -> paho.Client:
        client = self._client
        if client is None or not self.connected:
            raise NotConnected(f"not connected to MQTT broker {self.label}")
        return client

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        retain: bool = False,
        user_properties: UserProperties = (),
        expiry_s: int | None = None,
    ) -> None:
        """Queue one message at QoS 1 (or the broker's maximum, if lower); NotConnected when the broker is away,
        PacketTooLarge (nothing sent, the connection stays) when the broker would disconnect us for it."""
        client = self._live()
        props = self._props(user_properties)
        if expiry_s is not None and self.v5:
            props = props or Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            props.MessageExpiryInterval = expiry_s
        self._check_size(topic, len(payload), props, user_properties, expiry_s is not None)
        info = client.publish(
            topic, payload, qos=min(mqtt_topics.QOS, self.limits.maximum_qos), retain=retain, properties=props
        )
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise NotConnected(f"publishing to MQTT broker {self.label} failed: {paho.error_string(info.rc)}")

    def outbound_limit(self) -> tuple[int, str]:
        """The most this connection may publish, and what it is measured on (`outbound_limit`)."""
        return outbound_limit(self.config, self.limits)

    def _check_size(
        self, topic: str, payload_bytes: int, props: Properties | None, users: UserProperties, expiry: bool
    ) -> None:
        maximum, measured = self.outbound_limit()
        if measured == "payload":
            size = payload_bytes
        else:
            # Nearly every message is far below the limit: a bound decides it without packing the
            # properties (paho packs them again to send them); only near the limit is the size exact.
            if publish_packet_bytes_at_most(topic, payload_bytes, users, expiry) <= maximum:
                return
            properties_bytes = len(props.pack()) if props is not None else 1  # type: ignore[no-untyped-call]
            size = mqtt_topics.publish_packet_bytes(topic, payload_bytes, properties_bytes)
        if size > maximum:
            raise PacketTooLarge(size, maximum, measured)

    async def subscribe(self, filters: Sequence[tuple[str, bool]]) -> list[int]:
        """Subscribe at QoS 1 (`(filter, no_local)` pairs); the SUBACK reason codes, in order (>= 0x80: refused)."""
        client = self._live()
        topics: list[tuple[str, Any]]
        if self.v5:
            topics = [(topic, SubscribeOptions(qos=mqtt_topics.QOS, noLocal=no_local)) for topic, no_local in filters]
        else:
            topics = [(topic, mqtt_topics.QOS) for topic, _ in filters]
        rc, mid = client.subscribe(topics)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or mid is None:
            raise NotConnected(f"subscribing at MQTT broker {self.label} failed: {paho.error_string(rc)}")
        # Registered before this coroutine yields: the SUBACK's event is queued behind us on the loop.
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._subacks[mid] = future
        try:
            return await asyncio.wait_for(future, self.config.connect_timeout_s)
        except TimeoutError:
            self._subacks.pop(mid, None)
            raise NoSuback(
                f"no SUBACK from MQTT broker {self.label} within {self.config.connect_timeout_s:g}s (connect_timeout_s)"
            ) from None

    def unsubscribe(self, topics: Sequence[str]) -> None:
        client = self._client
        if client is not None and self.connected and topics:
            client.unsubscribe(list(topics))

    def status(self) -> dict[str, Any]:
        from gateway.core.timestamps import iso

        return {
            "state": self.state,
            "connected": self.connected,
            "client_id": self.client_id,
            "protocol": self.config.protocol,
            "connects": self.connects,
            "attempts": self.attempts,
            "refusals": self.refusals,
            "connection_losses": self.losses,
            "connected_since": iso(self.connected_since),
            "last_error": self.last_error or None,
            "last_error_kind": self.last_error_kind or None,
            "last_error_at": iso(self.last_error_at),
            "next_attempt_in_s": round(max(self.next_attempt_at - time.monotonic(), 0.0), 3)
            if self.next_attempt_at is not None
            else None,
            **self.acks.status(),
        }
