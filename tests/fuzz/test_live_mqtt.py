"""Live fuzzing of the MQTT ways in through a real mosquitto on a free loopback port
(docs/protocol-serial-mqtt.md, "MQTT ways in").

The gateway runs both profiles on one broker. Each example is a burst a stranger with an account on
the broker publishes (QoS 1, retained or not): statuses and `up` messages under `mcpb/<slot>/`, MCP
over MQTT presences (`$mcp-server/presence/<server-id>/<server-name>`, `notifications/server/online`
or empty), capability and RPC traffic, on topics of every shape up to MQTT's 65535-byte limit, with
payloads that are almost right, empty, noise, or over `max_payload_bytes`. A sentinel message on a
topic the gateway drops (`mcpb/_sync-<n>/up`) tells when it has read the burst.

What must hold: the gateway reads every burst within 10 s; no exception escapes a handler or a task
(including the background work a presence starts: subscribing to the server's topics, attaching its
slot); the broker connection and its subscriptions stay as they were; every drop has a documented
reason. Afterwards a good plain-profile board and a good MCP over MQTT server (the simulator's
pumps) are found and an SDK client calls a tool on each.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from gateway.southbound.mqtt import drops as mqtt_drops
from gateway.southbound.mqtt.brokers import MqttBroker
from gateway.southbound.mqtt.client import InboundMessage
from gateway.southbound.mqtt.packet_size import max_packet_bytes
from sim.mqtt import MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.live import READ_TIMEOUT_S, LiveGateway
from tests.fuzz.targets import mqtt_topic_name_ok
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    # The gateway's own thread draws back-off jitter from `random` while Hypothesis draws the next burst.
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]

MAX_PAYLOAD = 65_536
BROKER_MAX_PACKET = max_packet_bytes(MAX_PAYLOAD) - 1024
"""The broker refuses larger packets outright (it disconnects their publisher), as the appliance's
mosquitto does (image/mosquitto/mcp-gateway.conf): that is what bounds what the gateway reads, which
announces no Maximum Packet Size of its own by default (mosquitto 2.0.11 stalls on the drops that
would cause: docs/security-limits.md, "Regression inputs")."""


def broker_accepts(topic: str) -> bool:
    """A topic mosquitto takes from a publisher: an MQTT topic name without control characters or
    Unicode noncharacters (it disconnects a client that sends one: "malformed packet")."""
    return mqtt_topic_name_ok(topic) and not any(
        ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xFDD0 <= ord(c) <= 0xFDEF or ord(c) & 0xFFFE == 0xFFFE
        for c in topic
    )


def fits_the_broker(topic: str, payload: bytes) -> bool:
    """The PUBLISH (fixed header, topic, packet id, properties, payload) is within BROKER_MAX_PACKET."""
    return len(topic.encode()) + len(payload) + 64 <= BROKER_MAX_PACKET


publications = st.tuples(
    st.one_of(
        fz.mqtt_publications,
        st.tuples(
            fz.mqtt_topic_names, st.integers(min_value=MAX_PAYLOAD - 2, max_value=MAX_PAYLOAD + 2).map(fz.padded)
        ),
    ).filter(lambda publication: broker_accepts(publication[0]) and fits_the_broker(*publication)),
    st.booleans(),
)


@dataclass
class MqttRig:
    live: LiveGateway
    broker: MqttBroker
    mosquitto: Mosquitto
    peer: RawPeer | None = None
    seen: list[str] = field(default_factory=list)
    sentinels: Iterator[int] = field(default_factory=itertools.count)


def record(rig: MqttRig) -> None:
    """Note every message the gateway's broker connection hands to its routing."""
    route = rig.broker.message

    def message(inbound: InboundMessage) -> None:
        rig.seen.append(inbound.topic)
        route(inbound)

    rig.broker.message = message  # type: ignore[method-assign,assignment]


async def wait_until(condition: Any, what: str, timeout: float = READ_TIMEOUT_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if condition():
            return
        assert loop.time() < deadline, f"{what} within {timeout}s"
        await asyncio.sleep(0.005)


async def set_up(rig: MqttRig) -> None:
    broker = rig.broker
    await wait_until(lambda: broker.client.connected and len(broker.subscribed) == 3, "the gateway subscribed")
    record(rig)
    rig.peer = RawPeer(broker.client.config.port, "fuzz-publisher")
    assert await rig.peer.connect() == "Success"


async def play(rig: MqttRig, burst: list[tuple[tuple[str, bytes], bool]]) -> None:
    broker, peer = rig.broker, rig.peer
    assert peer is not None
    connects, subscribed = broker.client.connects, list(broker.subscribed)
    for (topic, payload), retain in burst:
        peer.client.publish(topic, fz.with_slot(topic, payload), qos=1, retain=retain)
    sentinel = f"mcpb/_sync-{next(rig.sentinels)}/up"
    peer.client.publish(sentinel, b"", qos=1)
    await wait_until(
        lambda: sentinel in rig.seen or not peer.client.is_connected(),
        f"the gateway did not read {sentinel} (backlog {broker.client.backlog}, connected "
        f"{broker.client.connected}, seen {[t[:30] for t in rig.seen]}, publisher inflight "
        f"{len(peer.client._out_messages)}; mosquitto: {rig.mosquitto.log_tail(30)})",
    )
    assert peer.client.is_connected(), f"the broker disconnected the publisher: {burst!r:.300}"
    rig.seen.clear()
    assert broker.client.connected and broker.client.connects == connects, broker.client.last_error
    assert broker.subscribed == subscribed and not broker.subscribe_error
    assert set(broker.drops.totals) <= set(mqtt_drops.REASONS)


async def good_boards_are_served(rig: MqttRig, url: str) -> None:
    def pumps(first: int) -> SimulatorSettings:
        return SimulatorSettings(pumps=1, first=first, backoff_min_s=0.05, backoff_max_s=0.3)

    sims = [
        Simulator(None, pumps(7), mqtt=MqttTarget(url, "plain")),
        Simulator(None, pumps(8), mqtt=MqttTarget(url, "mcp")),
    ]
    for sim in sims:
        sim.start()
    try:
        for slot in ("pump-7", "pump-8"):
            await rig.live.wait_ready(slot, timeout=20)
            async with Client(f"{rig.live.url}/{slot}/mcp", mode="2026-07-28") as client:
                result = await client.call_tool("get_status", {})
            assert not result.is_error, result.content
    finally:
        for sim in sims:
            await sim.stop()


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    directory = Path(tmp_path_factory.mktemp("fuzz-mosquitto"))
    config = [
        "listener {port} 127.0.0.1",
        "allow_anonymous true",
        "persistence false",
        f"max_packet_size {BROKER_MAX_PACKET}",
        f"log_dest file {directory / 'mosquitto.log'}",
        "log_type error",
        "log_type warning",
        "log_type notice",
    ]
    broker = Mosquitto(directory, config_text="\n".join(config) + "\n")
    asyncio.run(broker.start())
    try:
        yield broker
    finally:
        asyncio.run(broker.stop())


@pytest.fixture(scope="module")
def rig(mosquitto: Mosquitto) -> Iterator[MqttRig]:
    config = {
        "limits": {"max_slots": 4096},
        "providers": {"initialize_timeout_ms": 1000, "takeover_probe_ms": 100},
        "mqtt": {
            "brokers": [
                {
                    "url": mosquitto.url,
                    "max_payload_bytes": MAX_PAYLOAD,
                    "reconnect_initial_s": 0.05,
                    "reconnect_max_s": 0.3,
                    "connect_timeout_s": 3,
                }
            ]
        },
    }
    with LiveGateway(config) as live:
        assert live.server is not None
        rig = MqttRig(live, first_mqtt_broker(live.server), mosquitto)
        live.run(set_up(rig))
        try:
            yield rig
        finally:
            if rig.peer is not None:
                live.run(rig.peer.disconnect())


def test_no_publication_breaks_the_mqtt_ways_in(rig: MqttRig, mosquitto: Mosquitto) -> None:
    live = rig.live

    @fuzz_settings(100, deadline=None)
    @given(burst=st.lists(publications, min_size=1, max_size=5))
    def fuzz(burst: list[tuple[tuple[str, bytes], bool]]) -> None:
        tally("live.mqtt (mosquitto)")
        tally("live.mqtt messages", len(burst))
        live.run(play(rig, burst))
        assert not live.all_crashes(), live.all_crashes()[0]

    fuzz()
    live.run(good_boards_are_served(rig, mosquitto.url), timeout=60)
    assert not live.all_crashes(), live.all_crashes()[0]
