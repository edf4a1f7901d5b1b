"""MQTT messages through the gateway's routing (gateway/southbound/mqtt/brokers.py `MqttBroker.message`, then
mqtt_plain.py and mqtt_mcp.py), in process: the broker connection and the slot registry are stand-ins.

Each example is one broker connection: a CONNACK (its properties as paho decodes them), then a few
messages on any topic the subscriptions can deliver, with payloads that are mostly almost right
(register frames naming the topic's own slot, `notifications/server/online`, empty retained
messages, JSON-RPC) and otherwise noise. Background work the profiles start (attaching a slot,
subscribing to a server's topics) runs at once, in order.

What must hold: nothing raises, in handling or in the work it starts; each message costs at most one
drop, with one of the documented reasons (docs/protocol-serial-mqtt.md "Broker outages and bad input"); a message
dropped as malformed, wrong_topic, oversize or unregistered changes nothing; whatever the gateway
subscribes to, unsubscribes from or publishes to is a topic (filter) MQTT accepts, so that no input
can make paho refuse the call, in a packet within the broker's Maximum Packet Size (a broker
disconnects a client that sends a larger one); and every message handed to a session is one
JSON-RPC message or a batch, and every one refused to it says what was wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.config import GatewayConfig, MqttBrokerConfig
from gateway.core import jsonrpc
from gateway.core.gateway import Gateway
from gateway.core.names import SlotNameError, check_slot_name
from gateway.core.provider_state import SessionSettings
from gateway.core.slots import SlotRefused
from gateway.southbound.mqtt import drops as mqtt_drops
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.brokers import MqttBroker
from gateway.southbound.mqtt.client import BrokerClient, InboundMessage
from gateway.southbound.mqtt.connack import ConnackLimits, read_connack
from gateway.southbound.mqtt.drops import MqttMetrics
from gateway.southbound.mqtt.mcp import McpLink, slot_for
from gateway.telemetry.metrics import Metrics
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.targets import connack, connack_properties, mqtt_filter_ok, mqtt_topic_name_ok, relayable

MAX_PAYLOAD = 2048
PUBLISH_OVERHEAD = 256
"""Fixed header, topic length, packet id and the gateway's properties (user properties, expiry)."""
SMALLEST_BROKER_PACKET = 70_000
"""The smallest Maximum Packet Size a broker announces here: one that carries any one of the gateway's
subscription filters (it spreads several over as many SUBSCRIBE packets as needed) and a message of
MAX_PAYLOAD on any topic."""
HELD = "held-1"
"""A slot another provider holds: attaching it is refused (as the registry refuses a live slot)."""


class StandInClient:
    """The broker connection as the profiles use it; checks every topic as paho would, and MQTT's rules."""

    def __init__(self) -> None:
        self.client_id = fz.GATEWAY_CLIENT_ID
        self.limits = ConnackLimits()
        self.subscribed: set[str] = set()
        self.published: list[tuple[str, bytes]] = []

    def fits(self, packet_bytes: int, what: str) -> None:
        """A broker disconnects a client whose packet exceeds its Maximum Packet Size (every slot goes)."""
        maximum = self.limits.maximum_packet_size
        assert maximum is None or packet_bytes <= maximum, f"{what}: {packet_bytes} bytes, the broker takes {maximum}"

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        retain: bool = False,
        user_properties: Any = (),
        expiry_s: int | None = None,
    ) -> None:
        assert mqtt_topic_name_ok(topic), f"the gateway publishes to {topic[:60]!r}…, which MQTT refuses"
        self.fits(len(topic.encode()) + len(payload) + PUBLISH_OVERHEAD, f"a PUBLISH to {topic[:60]!r}…")
        self.published.append((topic, payload))

    async def subscribe(self, filters: list[tuple[str, bool]]) -> list[int]:
        for topic_filter, _ in filters:
            assert mqtt_filter_ok(topic_filter), f"the gateway subscribes to {topic_filter[:60]!r}…, MQTT refuses it"
            self.subscribed.add(topic_filter)
        self.fits(8 + sum(3 + len(topic_filter.encode()) for topic_filter, _ in filters), "a SUBSCRIBE")
        return [1] * len(filters)

    def unsubscribe(self, topics: list[str]) -> None:
        for topic_filter in topics:
            assert mqtt_filter_ok(topic_filter), f"the gateway unsubscribes {topic_filter[:60]!r}…, MQTT refuses it"
            self.subscribed.discard(topic_filter)


class StandInSession:
    def __init__(self, hello: Any) -> None:
        self.hello = hello
        self.state = "ready"
        self.settings = SessionSettings()
        self.received: list[jsonrpc.Message] = []

    def mark_alive(self) -> None:
        pass

    def receive_message(self, message: jsonrpc.Message) -> None:
        """One JSON-RPC message, or a batch (the session answers it -32600, as on every way in)."""
        assert message.kind is not jsonrpc.Kind.INVALID, message.problem
        relayable(message.body)
        self.received.append(message)

    def refused(self, message: jsonrpc.Message) -> None:
        """A message that is no answer (not JSON, nested too deep, no outcome): the session ends the
        request it names, if any, with what was wrong."""
        assert message.kind is jsonrpc.Kind.INVALID and message.problem, message
        relayable(message.problem)

    def link_lost(self, reason: str) -> None:
        relayable(reason)
        self.state = "closed"


class StandInRegistry:
    """The slot registry's attach: a name it refuses (check_slot_name), a held slot, else a session."""

    def __init__(self) -> None:
        self.slots: dict[str, Any] = {}
        self.membership_listeners: list[Any] = []

    async def attach(self, name: str, link: Any, *, aggregate: bool = False, hello: Any = None) -> StandInSession:
        try:
            check_slot_name(name)
        except SlotNameError as exc:
            raise SlotRefused(str(exc), jsonrpc.UNAVAILABLE, "bad_name") from exc
        if name == HELD:
            raise SlotRefused(f'Slot already held by a live provider. Slot: "{name}"', jsonrpc.UNAVAILABLE, "held")
        return StandInSession(hello)


@dataclass
class StandInGateway:
    config: GatewayConfig
    registry: StandInRegistry
    metrics: Metrics
    device_revoked: Callable[[str], bool] | None = None  # no device registry: no board is revoked


class InProcessBroker(MqttBroker):
    """MqttBroker with the stand-in connection; the work it spawns runs at once (and must not wait)."""

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            work.send(None)
        except StopIteration:
            return
        work.close()
        raise AssertionError("background work waited for something the stand-ins never give")


_metrics = Metrics()
METRICS = (_metrics, MqttMetrics(_metrics))
"""One registry for every broker of the run (each counts its drops itself, in its DropCounter)."""


def broker_for(slot_naming: str) -> InProcessBroker:
    config = MqttBrokerConfig.model_validate(
        # No anonymous-client check: it connects to a real broker, which the stand-in is not.
        {
            "url": "mqtt://127.0.0.1:1883",
            "max_payload_bytes": MAX_PAYLOAD,
            "slot_naming": slot_naming,
            "check_anonymous": False,
        }
    )
    metrics, mqtt_metrics = METRICS
    gateway = StandInGateway(GatewayConfig(), StandInRegistry(), metrics)
    broker = InProcessBroker(config, cast(Gateway, gateway), mqtt_metrics)
    broker.client = cast(BrokerClient, StandInClient())
    return broker


def state(broker: MqttBroker) -> Any:
    assert broker.plain is not None and broker.mcp is not None
    plain, mcp = broker.plain, broker.mcp
    return (
        {slot: id(link) for slot, link in plain.links.items()},
        dict(plain.announced),
        {server_id: instance.address for server_id, instance in mcp.instances.items()},
        {slot: id(link) for slot, link in mcp.by_slot.items()},
        {server_id: id(link) for server_id, link in mcp.by_server.items()},
    )


def check_invariants(broker: MqttBroker) -> None:
    assert broker.plain is not None and broker.mcp is not None
    for slot in broker.plain.links:
        assert mqtt_topics.slot_level_problem(slot) is None
    mcp = broker.mcp
    # An instance is its slot and server-id, indexed three ways: by that pair, by slot, by server-id.
    assert {(slot, server_id) for slot, same in mcp.of_slot.items() for server_id in same} == set(mcp.instances)
    assert {(slot, server_id) for server_id, same in mcp.of_server.items() for slot in same} == set(mcp.instances)
    assert all(mcp.of_slot.values()), "a slot without instances is still indexed"
    assert all(mcp.of_server.values()), "a server-id without instances is still indexed"
    for slot, same in mcp.of_slot.items():
        for instance in same.values():
            assert instance is mcp.instances[(slot, instance.address.server_id)]
            assert instance is mcp.of_server[instance.address.server_id][slot]
            assert slot == slot_for(instance.address.server_name, mcp.rule)
    assert len(mcp.by_server) == len(mcp.by_slot)
    for slot, link in broker.mcp.by_slot.items():
        assert link.slot == slot and broker.mcp.by_server[link.address] is link
        assert isinstance(link, McpLink)
        for topic in (link.rpc, link.control, link.capability):
            assert mqtt_topic_name_ok(topic), f"a bridged server's topic {topic[:60]!r}… is not an MQTT topic"


mqtt_messages = st.one_of(
    fz.mqtt_publications,
    st.tuples(fz.mqtt_topic_names, st.integers(min_value=MAX_PAYLOAD - 2, max_value=MAX_PAYLOAD + 2).map(fz.padded)),
)


def test_any_message_is_routed_or_dropped_for_a_documented_reason() -> None:
    # On an event loop, as the gateway routes: a refused slot is tried again later (a timer).
    with asyncio.Runner() as runner:

        @fuzz_settings(200)
        @given(
            fields=st.one_of(st.none(), connack_properties),
            slot_naming=st.sampled_from(("last_segment", "dashed")),
            messages=st.lists(mqtt_messages, min_size=1, max_size=6),
        )
        # A message nested too deep from an attached MCP-over-MQTT server: its session is told (refused).
        @example(
            fields=None,
            slot_naming="last_segment",
            messages=[
                ("mcpb/pump-1/status", b""),
                ("mcpb/pump-1/status", b""),
                (
                    "$mcp-server/presence/srv-3/pump-1/pump-2",
                    b'{"jsonrpc": "2.0", "method": "notifications/server/online"}',
                ),
                ("$mcp-rpc/mcp-gateway-0123456789ab/srv-3/pump-1/pump-2", b"[" * 65 + b"]" * 65),
            ],
        )
        # From a bridged server: no outcome, nothing, a batch (the session is told of each).
        @example(
            fields=None,
            slot_naming="last_segment",
            messages=[
                (
                    "$mcp-server/presence/srv-2/plant/pump-1",
                    b'{"jsonrpc": "2.0", "method": "notifications/server/online"}',
                ),
                ("$mcp-rpc/mcp-gateway-0123456789ab/srv-2/plant/pump-1", b"{}"),
                ("$mcp-rpc/mcp-gateway-0123456789ab/srv-2/plant/pump-1", b""),
                (
                    "$mcp-rpc/mcp-gateway-0123456789ab/srv-2/plant/pump-1",
                    b'[{"jsonrpc": "2.0", "id": 1, "result": {}}]',
                ),
            ],
        )
        def fuzz(fields: dict[str, Any] | None, slot_naming: str, messages: list[tuple[str, bytes]]) -> None:
            tally("mqtt.message (plain and mcp profiles)", len(messages))
            runner.run(route(fields, slot_naming, messages))

        fuzz()


async def route(fields: dict[str, Any] | None, slot_naming: str, messages: list[tuple[str, bytes]]) -> None:
    broker = broker_for(slot_naming)
    if fields is not None and fields.get("MaximumPacketSize", SMALLEST_BROKER_PACKET) < SMALLEST_BROKER_PACKET:
        fields = {**fields, "MaximumPacketSize": SMALLEST_BROKER_PACKET}
    limits = read_connack(connack(fields))
    cast(StandInClient, broker.client).limits = limits  # as BrokerClient keeps the CONNACK's
    broker.connected(limits)
    for topic, raw in messages:
        payload = fz.with_slot(topic, raw)
        before, totals = state(broker), dict(broker.drops.totals)
        broker.message(InboundMessage(topic, payload, retain=True))
        dropped = {reason: count - totals.get(reason, 0) for reason, count in broker.drops.totals.items()}
        dropped = {reason: count for reason, count in dropped.items() if count}
        assert set(dropped) <= set(mqtt_drops.REASONS), dropped
        assert sum(dropped.values()) <= 1, f"one message, several drops: {dropped}"
        if dropped and "refused" not in dropped:
            assert state(broker) == before, f"a message dropped as {dropped} changed the profiles' state"
        owned = topic.startswith(("mcpb/", "$mcp-server/", "$mcp-rpc/"))
        if not owned:
            assert dropped == {"wrong_topic": 1}
        elif len(payload) > MAX_PAYLOAD:
            assert dropped == {"oversize": 1}
        check_invariants(broker)
    for profile in (broker.plain, broker.mcp):
        if profile is not None:
            profile.reattach.clear()  # the timers of slots to be tried again


def test_a_board_refused_its_slot_is_counted_and_told_once_per_status() -> None:
    """Heard from again on `up`, the board is attached again and refused again: not news. A new status is."""
    with asyncio.Runner() as runner:
        runner.run(refused_board())


async def refused_board() -> None:
    broker = broker_for("last_segment")
    client = cast(StandInClient, broker.client)
    broker.connected(ConnackLimits())
    status = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/register", "params": {"slot": HELD, "hello": {}}})
    ping = b'{"jsonrpc":"2.0","id":1,"result":{}}'

    def told() -> int:
        return sum(1 for topic, _ in client.published if topic == f"mcpb/{HELD}/down")

    broker.message(InboundMessage(f"mcpb/{HELD}/status", status, retain=True))
    assert (broker.drops.totals["refused"], told()) == (1, 1)
    for _ in range(3):
        broker.message(InboundMessage(f"mcpb/{HELD}/up", ping, retain=False))
    assert (broker.drops.totals["refused"], told()) == (1, 1)
    broker.message(InboundMessage(f"mcpb/{HELD}/status", status, retain=True))  # announced again
    assert (broker.drops.totals["refused"], told()) == (2, 2)
    assert broker.plain is not None
    broker.plain.reattach.clear()
