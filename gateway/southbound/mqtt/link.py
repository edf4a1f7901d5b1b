"""What both MQTT profiles share: the broker context they run in and the base of their provider links."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Coroutine
from typing import Any, Protocol

import orjson

from gateway.config import MqttBrokerConfig
from gateway.core import errors, jsonrpc
from gateway.core.answer_head import answer_id
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import LinkInfo, MessageRefused, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import NO_DEADLINE
from gateway.southbound.mqtt.client import BrokerClient, PacketTooLarge
from gateway.southbound.mqtt.drops import DropCounter, MqttMetrics
from gateway.southbound.mqtt.packet_size import UserProperties

_REQUEST_HEAD = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?[0-9]{1,20}|"[^"\\]{0,256}")')
"""How the gateway's own messages begin (jsonrpc.dumps of {"jsonrpc", "id", ...}, compact, in that order)."""


def _request_id(data: bytes) -> jsonrpc.JsonId | None:
    """The id of a message the gateway serialized, read from its head (no parse of the whole message)."""
    match = _REQUEST_HEAD.match(data)
    if match is None:
        return None
    token = match.group(1)
    return token[1:-1].decode("utf-8", "replace") if token.startswith(b'"') else int(token)


class BrokerContext(Protocol):
    """One broker connection as its profiles see it (gateway/southbound/mqtt/brokers.py implements it)."""

    label: str
    config: MqttBrokerConfig
    client: BrokerClient
    drops: DropCounter
    gateway: Gateway
    metrics: MqttMetrics
    limits_key: str
    """The configuration key of this broker's entry (mqtt.brokers[<i>]): the prefix of its bounds' labels."""

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in the background, tracked so that stopping the broker ends it."""
        ...

    def is_halted(self) -> bool:
        """Shutdown has begun: no slot is attached (again) from here on."""
        ...

    def limit_hit(self, name: str, times: int = 1) -> None:
        """One of this broker's bounds (max_payload_bytes, max_backlog, max_instances) refused something."""
        ...

    def slot_seen(self, slot: str, remote: str) -> None:
        """A link of this broker was attached to `slot` (`remote`: its broker and topic, as LinkInfo names it)."""
        ...


class MqttLink(ProviderLink):
    """A provider link over a broker: publish to reach the provider; the profile feeds what it sends."""

    def __init__(self, broker: BrokerContext, slot: str, info: LinkInfo) -> None:
        self.broker = broker
        self.slot = slot
        self.info = info
        self.session: ProviderSession | None = None
        self.closed = False
        self.close_reason = ""
        self.with_broker = False
        """Its provider left with the broker's connection (`left_with_broker`), not on its own."""

    def expiry_s(self, data: bytes) -> int:
        """The MQTT 5 message expiry of `data`: a request is never delivered after its caller's deadline,
        the broker discards it (a board that was away reconnecting must not start a pump minutes later).
        A pending request's own deadline (the slot's request_timeout_ms, a tool's tool_timeouts_ms entry,
        initialize_timeout_ms), what is left of it when published again; anything else the slot's deadline."""
        session = self.session
        if session is None:
            return math.ceil(self.broker.gateway.config.providers.request_timeout_ms / 1000)
        request_id = _request_id(data)
        entry = session.pending.get(request_id) if request_id is not None else None
        if entry is not None and entry.timeout_ms != NO_DEADLINE:
            left_s = entry.started + entry.timeout_ms / 1000 - time.monotonic()
            return max(math.ceil(left_s), 1)  # 1 s at least: an expiry of 0 is no expiry for some brokers
        return math.ceil(session.settings.request_timeout_ms / 1000)

    def publish(self, topic: str, data: bytes, user_properties: UserProperties = ()) -> None:
        if self.closed:
            raise ConnectionError(f"the MQTT link of slot {self.slot} is closed ({self.close_reason})")
        try:
            self.broker.client.publish(topic, data, user_properties=user_properties, expiry_s=self.expiry_s(data))
        except PacketTooLarge as exc:
            raise self._too_large(exc) from None
        self.broker.metrics.messages.labels(self.broker.label, "out").inc()

    def _too_large(self, exc: PacketTooLarge) -> MessageRefused:
        """The broker would disconnect the gateway (every slot it carries) for this message: refuse it alone."""
        label = self.broker.label
        if exc.measured == "packet":
            self.broker.limit_hit("broker_max_packet_size")
            text = (
                f'Request for "{self.slot}" is {exc.size} bytes; the MQTT broker {label} accepts at most '
                f"{exc.maximum} (its Maximum Packet Size). Send less, or raise max_packet_size in the broker's "
                "configuration"
            )
        else:
            self.broker.limit_hit("max_payload_bytes")
            text = (
                f'Request for "{self.slot}" is {exc.size} bytes; the MQTT broker {label} accepts at most '
                f"{exc.maximum} from the gateway (max_payload_bytes of its [[mqtt.brokers]] entry: MQTT 3.1.1 "
                "announces no limit). Send less, or raise max_payload_bytes with the broker's max_packet_size"
            )
        return MessageRefused(text, {"size": exc.size, "limit": exc.maximum, "measured": exc.measured, "broker": label})

    def publish_refused(self, topic: str, payload: bytes, text: str) -> None:
        """The broker refused a message this link published (its ACL): the request it carried, still
        pending, ends now with the broker's reason instead of waiting out its deadline."""
        session = self.session
        if session is None:
            return
        try:
            body = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(body, dict) or "method" not in body or "id" not in body:
            return  # a notification (or an answer to the provider): nobody waits for it
        request_id = body["id"]
        entry = session.pending.get(request_id) if isinstance(request_id, str | int) else None
        if entry is None:
            return
        data = {"slot": self.slot, "reason": "broker_refused_publish", "broker": self.broker.label, "topic": topic}
        session.fail_request(entry, errors.RpcError(jsonrpc.UNAVAILABLE, f'"{self.slot}" not reached: {text}', data))

    def is_closed(self) -> bool:
        """Read again after an await (the link may have been closed meanwhile)."""
        return self.closed

    def was_ready(self) -> bool:
        """The link's session had completed its initialize (attaching again starts the back-off over)."""
        session = self.session
        return session is not None and session.init_result is not None

    def send_ping(self) -> None:
        """MQTT links use JSON-RPC ping (info.native_ping is false)."""

    def lost(self, reason: str) -> None:
        """The provider is gone (offline announcement, broker lost): answer its callers now."""
        if not self.closed:
            self.closed = True
            self.close_reason = reason
        if self.session is not None:
            self.session.link_lost(reason)

    def left_with_broker(self, reason: str | None = None) -> None:
        """The broker's connection was lost: this link's provider went with it (`lost` first), or, given
        `reason`, left just before it (its will came as the broker closed). The slot's leave reason
        becomes `reason`, and the leave is not counted as the slot flapping. A link whose slot is still
        being attached is told again when the attach ends (the profile calls this once more)."""
        self.with_broker = True
        if reason is not None:
            self.close_reason = reason
        if self.session is not None:
            self.broker.gateway.registry.left_with_broker(self.slot, self.info, reason)

    def deliver(self, topic: str, message: jsonrpc.Message) -> None:
        """Hand one decoded message to the session, or drop it when it is not one JSON-RPC message."""
        if message.kind is jsonrpc.Kind.INVALID or message.kind is jsonrpc.Kind.BATCH:
            what = message.problem or "a batch (send one JSON-RPC message per MQTT message)"
            self.broker.drops.count("malformed", topic, what, self.slot)
            session = self.session
            if session is not None and message.kind is jsonrpc.Kind.BATCH:
                session.receive_message(message)  # counted and answered as on every way in
            elif session is not None:
                session.refused(message)  # an answer nested too deep, or without an outcome, ends its caller's wait
            return
        session = self.session
        if session is not None:
            session.mark_alive()
            session.receive_message(message)

    def oversize(self, head: bytes, size: int) -> None:
        """A message over max_payload_bytes came from the provider (dropped unread, `head` its first
        bytes): when they show it answers a pending request, that request ends now with the reason
        instead of waiting out its deadline."""
        session = self.session
        request_id = answer_id(head) if session is not None else None
        if session is None or request_id is None:
            return
        maximum = self.broker.config.max_payload_bytes
        problem = (
            f"{size} bytes, over max_payload_bytes ({maximum}) of MQTT broker {self.broker.label}; raise "
            "max_payload_bytes or send smaller messages"
        )
        limit = f"{self.broker.limits_key}.max_payload_bytes"
        session.refused(jsonrpc.Message(jsonrpc.Kind.INVALID, {"id": request_id}, problem, limit))

    def common_status(self) -> JsonObject:
        return {
            "kind": "mqtt",
            "broker": self.broker.label,
            "client_id": self.broker.client.client_id,
            "dropped": self.broker.drops.of_slot(self.slot),
        }
