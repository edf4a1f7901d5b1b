"""MQTT's pure parts: topic names and their parsing, CONNACK defaults, the [mqtt] configuration, --mqtt."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.cli import build_parser
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.core.broker.scrape import mqtt_limit_values
from gateway.core.slots import SlotRegistry
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import LOST_UNSPECIFIED, BrokerClient, ClientEvents, ConnectOptions, PacketTooLarge
from gateway.southbound.mqtt.connack import ConnackLimits, read_connack
from gateway.southbound.mqtt.mcp import slot_for
from gateway.southbound.mqtt.packet_size import PACKET_HEADROOM_BYTES, max_packet_bytes, publish_packet_bytes_at_most
from gateway.southbound.mqtt.reattach import Reattach


def test_topics_follow_the_pinned_specification_revision() -> None:
    assert mqtt_topics.SPEC_REVISION == "2025-03-26"
    assert mqtt_topics.server_presence_topic("srv-1", "plant/pumps/p7") == "$mcp-server/presence/srv-1/plant/pumps/p7"
    assert mqtt_topics.server_control_topic("srv-1", "plant/p7") == "$mcp-server/srv-1/plant/p7"
    assert mqtt_topics.server_capability_topic("srv-1", "p7") == "$mcp-server/capability/srv-1/p7"
    assert mqtt_topics.rpc_topic("gw", "srv-1", "plant/p7") == "$mcp-rpc/gw/srv-1/plant/p7"
    assert mqtt_topics.client_presence_topic("gw") == "$mcp-client/presence/gw"
    assert mqtt_topics.client_capability_topic("gw") == "$mcp-client/capability/gw"
    assert mqtt_topics.server_presence_filter("plant/#") == "$mcp-server/presence/+/plant/#"
    assert mqtt_topics.PROP_COMPONENT_TYPE == "MCP-COMPONENT-TYPE"
    assert mqtt_topics.PROP_MQTT_CLIENT_ID == "MCP-MQTT-CLIENT-ID"


def test_parsing_mcp_topics() -> None:
    presence = mqtt_topics.parse_server_presence("$mcp-server/presence/srv-1/plant/pumps/p7")
    assert presence == mqtt_topics.ServerAddress("srv-1", "plant/pumps/p7")
    assert mqtt_topics.parse_server_presence("$mcp-server/presence/srv-1") is None  # no server-name
    assert mqtt_topics.parse_server_presence("$mcp-server/presence/srv-1/a//b") is None  # empty level
    rpc = mqtt_topics.parse_rpc("$mcp-rpc/gw/srv-1/plant/p7")
    assert rpc is not None and rpc.client_id == "gw" and rpc.server.server_name == "plant/p7"
    assert mqtt_topics.parse_rpc("$mcp-rpc/gw/srv-1") is None
    assert not mqtt_topics.valid_client_id("a/b") and mqtt_topics.valid_client_id("sim-pump-1")
    assert not mqtt_topics.valid_server_name("a/+/b") and mqtt_topics.valid_server_name("a/b")


def test_plain_topics_and_prefix_rules() -> None:
    assert mqtt_topics.plain_topic("site-a/mcpb", "pump-1", "down") == "site-a/mcpb/pump-1/down"
    assert mqtt_topics.plain_filter("mcpb", "status") == "mcpb/+/status"
    assert mqtt_topics.parse_plain("mcpb", "mcpb/pump-1/up") == mqtt_topics.PlainAddress("pump-1", "up")
    assert mqtt_topics.parse_plain("site/mcpb", "site/mcpb/pump-1/status") == mqtt_topics.PlainAddress(
        "pump-1", "status"
    )
    for wrong in ("mcpb/_all/up", "mcpb/" + "x" * 65 + "/up", "mcpb/pump-1/other", "other/pump-1/up"):
        assert mqtt_topics.parse_plain("mcpb", wrong) is None, wrong
    assert mqtt_topics.prefix_problem("mcpb") is None
    for bad in ("", "$SYS", "a/+/b", "a//b", "/mcpb", "mcpb/"):
        assert mqtt_topics.prefix_problem(bad) is not None, bad


@pytest.mark.parametrize(
    ("level", "problem"),
    [
        ("..", 'Slot name ".." is a path step in URLs'),
        (".", 'Slot name "." is a path step in URLs'),
        ("pump\u200b1", "format characters (U+200B at character 5)"),
        ("pump\u202e1", "bidirectional controls (U+202E at character 5)"),
        ("pump\u00851", "control characters (U+0085 at character 5)"),
        ("pump\x001", "control characters (U+0000 at character 5)"),
        ("_all", "reserved"),
        ("a+b", "'+'"),
    ],
)
def test_a_plain_slot_level_follows_the_slot_name_rules_of_every_way_in(level: str, problem: str) -> None:
    # The same names as /provider/<name>, serial and [slots.declared]: a status on such a topic
    # attaches nothing, and the drop says what to fix.
    assert problem in (mqtt_topics.slot_level_problem(level) or "")
    topic = mqtt_topics.plain_topic("mcpb", level, "status")
    assert mqtt_topics.parse_plain("mcpb", topic) is None
    assert mqtt_topics.plain_topic_problem("mcpb", topic).startswith("the slot level is not a usable slot name: ")
    assert problem in mqtt_topics.plain_topic_problem("mcpb", topic)


def test_a_topic_of_another_shape_is_described_by_its_shape() -> None:
    for topic in ("mcpb/pump-1/other", "other/pump-1/up", "mcpb/a/b/up"):
        assert mqtt_topics.plain_topic_problem("mcpb", topic) == "not <prefix>/<slot>/status|up with a usable slot name"
    assert mqtt_topics.slot_level_problem("pump 1.2 é") is None


def test_subscribe_batches_fill_each_packet_up_to_the_limit_in_order() -> None:
    filters = ["a" * 10, "b" * 10, "c" * 10, "d" * 100, "e" * 10]  # 13 bytes each in a SUBSCRIBE; d: 103
    limit = mqtt_topics.SUBSCRIBE_BASE_BYTES + 2 * 13  # two short filters per packet
    assert mqtt_topics.subscribe_batches(filters, limit) == ([[0, 1], [2, 4]], [3])
    for batch in mqtt_topics.subscribe_batches(filters, limit)[0]:
        assert mqtt_topics.subscribe_packet_bytes([filters[index] for index in batch]) <= limit
    assert mqtt_topics.subscribe_batches(filters, None) == ([[0, 1, 2, 3, 4]], [])
    assert mqtt_topics.subscribe_batches([], 100) == ([], [])
    # Multi-byte characters count as their UTF-8 bytes, as on the wire.
    assert mqtt_topics.subscribe_batches(["é" * 5, "é" * 5], mqtt_topics.SUBSCRIBE_BASE_BYTES + 13) == ([[0], [1]], [])


def test_slot_naming_rules() -> None:
    assert slot_for("plant/pumps/pump-7", "last_segment") == "pump-7"
    assert slot_for("plant/pumps/pump-7", "dashed") == "plant-pumps-pump-7"
    assert slot_for("pump-7", "last_segment") == "pump-7"
    # A server-name whose slot no way in accepts is refused when it is bridged (mqtt_mcp._activate
    # asks check_slot_name): the last level ".." names no slot; dashed, "plant-.." is a name.
    assert slot_for("plant/..", "last_segment") == ".."
    assert slot_for("plant/..", "dashed") == "plant-.."


def test_absent_connack_properties_read_as_their_mqtt5_defaults() -> None:
    # mosquitto leaves out Retain Available, Maximum QoS, Wildcard Subscription Available, ... when true/2.
    bare = read_connack(Properties(PacketTypes.CONNACK))
    assert bare.retain_available and bare.wildcard_subscription_available and bare.shared_subscription_available
    assert bare.maximum_qos == 2 and bare.maximum_packet_size is None and bare.receive_maximum == 65535
    assert bare.problems() == []
    assert read_connack(None) == bare  # MQTT 3.1.1: no properties at all
    props = Properties(PacketTypes.CONNACK)
    props.RetainAvailable = 0
    props.MaximumQoS = 1
    props.UserProperty = [("MCP-SERVER-NAME-FILTERS", '["plant/#", "lab/+"]')]
    limits = read_connack(props)
    assert not limits.retain_available and limits.maximum_qos == 1
    assert limits.problems() and "Retain Available" in limits.problems()[0]
    assert limits.suggested_server_filters() == ["plant/#", "lab/+"]
    garbled = Properties(PacketTypes.CONNACK)
    garbled.UserProperty = [("MCP-SERVER-NAME-FILTERS", "not json")]
    assert read_connack(garbled).suggested_server_filters() is None


def broker(**entry: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"mqtt": {"brokers": [{"url": "mqtt://127.0.0.1", **entry}]}})


def test_broker_config_defaults_and_derived_values() -> None:
    config = broker().mqtt.brokers[0]
    assert config.profiles == ["plain", "mcp"] and config.protocol == "5" and config.topic_prefix == "mcpb"
    assert config.server_filter == ["#"] and config.slot_naming == "last_segment"
    assert (config.host, config.port, config.tls, config.label) == ("127.0.0.1", 1883, False, "mqtt://127.0.0.1:1883")
    secure = broker(url="mqtts://broker.plant.lan", server_filter="plant/#").mqtt.brokers[0]
    assert secure.port == 8883 and secure.tls and secure.server_filter == ["plant/#"]
    assert (config.max_payload_bytes, config.max_backlog, config.max_instances) == (1_048_576, 10_000, 4096)


def test_inbound_bounds_announced_and_exported_per_broker() -> None:
    # CONNECT's Maximum Packet Size leaves room for the topic and properties, within what MQTT can say;
    # announced only on request (mosquitto 2.0.11 stalls after 20 messages it drops for it).
    assert max_packet_bytes(5000) == 5000 + PACKET_HEADROOM_BYTES
    assert max_packet_bytes(268_435_455) == 268_435_455
    assert broker().mqtt.brokers[0].announce_max_packet_size is False
    assert broker(announce_max_packet_size=True).mqtt.brokers[0].announce_max_packet_size is True
    config = GatewayConfig.model_validate(
        {
            "mqtt": {
                "brokers": [
                    {"url": "mqtt://127.0.0.1:1884", "max_payload_bytes": 4096, "max_backlog": 50},
                    {"url": "mqtt://10.0.0.5", "max_instances": 10},
                ]
            }
        }
    )
    values = mqtt_limit_values(config.mqtt)
    assert values["mqtt.brokers[0].max_payload_bytes"] == 4096
    assert values["mqtt.brokers[0].max_backlog"] == 50
    assert values["mqtt.brokers[1].max_instances"] == 10
    assert len(values) == 6
    assert mqtt_limit_values(GatewayConfig().mqtt) == {}
    with pytest.raises(ValueError, match="max_backlog"):
        broker(max_backlog=0)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({"url": "http://broker"}, "mqtt://HOST"),
        ({"url": "mqtt://user:pw@broker"}, "no credentials in the URL"),
        ({"url": "mqtt://broker/path"}, "no path"),
        ({"protocol": "3.1.1"}, "needs MQTT 5"),
        ({"protocol": "3.1.1", "profiles": ["plain"], "announce_max_packet_size": True}, "announce_max_packet_size"),
        ({"profiles": []}, "profiles is empty"),
        ({"topic_prefix": "a/+/b"}, "topic_prefix"),
        ({"topic_prefix": "$SYS"}, "topic_prefix"),
        ({"server_filter": ["a/#/b"]}, "not an MQTT topic filter"),
        ({"server_filter": [""]}, "server_filter '' is not an MQTT topic filter"),
        # Its presence filter ($mcp-server/presence/+/<filter>) would pass MQTT's 65,535 bytes.
        ({"server_filter": ["x" * 65_535]}, "is not an MQTT topic filter: its presence filter"),
        ({"client_id": "a/b"}, "client_id"),
        ({"password": {"env": "MQTT_TEST_UNSET_VARIABLE"}}, "is not set"),
        ({"username": "gw", "ca_file": "/nonexistent/ca.pem"}, "ca_file"),
    ],
)
def test_broker_config_refuses_what_cannot_work(entry: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("+", r"\+").replace("$", r"\$")):
        broker(**entry)


def test_plain_only_broker_may_use_mqtt_311() -> None:
    assert broker(profiles=["plain"], protocol="3.1.1").mqtt.brokers[0].protocol == "3.1.1"


def test_each_broker_once() -> None:
    with pytest.raises(ValueError, match="each broker once"):
        GatewayConfig.model_validate(
            {"mqtt": {"brokers": [{"url": "mqtt://127.0.0.1"}, {"url": "mqtt://127.0.0.1:1883"}]}}
        )


def test_run_mqtt_flag_adds_brokers(tmp_path: Any) -> None:
    args = build_parser().parse_args(["run", "--mqtt", "mqtt://127.0.0.1:1883", "--mqtt", "mqtt://10.0.0.5:1884"])
    file = tmp_path / "gw.toml"
    file.write_text('[[mqtt.brokers]]\nurl = "mqtts://broker.plant.lan"\nprofiles = ["mcp"]\n')
    from gateway.cli import _config_flags

    config = load_config(file, environ={}, flags=_config_flags(args))
    assert [entry.label for entry in config.mqtt.brokers] == [
        "mqtts://broker.plant.lan:8883",
        "mqtt://127.0.0.1:1883",
        "mqtt://10.0.0.5:1884",
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--mqtt", "tcp://127.0.0.1"])
    with pytest.raises(ConfigError, match=r"mqtt\.brokers"):
        load_config(None, environ={}, flags={"mqtt.brokers": [{"url": "mqtt://x", "bogus": 1}]})


def test_publish_packet_size_counts_what_the_maximum_packet_size_counts() -> None:
    # Fixed header (1 + Remaining Length), topic (2 + bytes), packet id (2), properties, payload.
    assert mqtt_topics.publish_packet_bytes("a/b", 10) == 1 + 1 + (2 + 3 + 2 + 10)
    assert mqtt_topics.publish_packet_bytes("a/b", 10, properties_bytes=1) == 1 + 1 + (2 + 3 + 2 + 1 + 10)
    # The Remaining Length takes 2 bytes from 128, 3 from 16384, 4 from 2097152.
    assert mqtt_topics.publish_packet_bytes("t", 127 - 5) == 1 + 1 + 127
    assert mqtt_topics.publish_packet_bytes("t", 128 - 5) == 1 + 2 + 128
    assert mqtt_topics.publish_packet_bytes("t", 16_384 - 5) == 1 + 3 + 16_384
    assert mqtt_topics.publish_packet_bytes("t", 2_097_152 - 5) == 1 + 4 + 2_097_152
    assert mqtt_topics.publish_packet_bytes("é", 0) == 1 + 1 + (2 + 2 + 2)  # topic bytes, not characters


GATEWAY_USERS = (
    (mqtt_topics.PROP_COMPONENT_TYPE, mqtt_topics.COMPONENT_CLIENT),
    (mqtt_topics.PROP_MQTT_CLIENT_ID, "gw"),
)


def packed_properties(users: tuple[tuple[str, str], ...], expiry: bool) -> Properties | None:
    if not users and not expiry:
        return None
    props = Properties(PacketTypes.PUBLISH)
    if users:
        props.UserProperty = list(users)
    if expiry:
        props.MessageExpiryInterval = 30
    return props


@pytest.mark.parametrize("topic", ["mcpb/pump-1/down", "é/ü", "💧/" * 40, "€" * 3000])
@pytest.mark.parametrize("users", [(), GATEWAY_USERS, (("MCP-MQTT-CLIENT-ID", "gw-💧-€"),)])
@pytest.mark.parametrize("expiry", [False, True])
@pytest.mark.parametrize("payload", [0, 100, 16_000, 2_097_000])
def test_the_publish_size_bound_is_never_below_the_packet(
    topic: str, users: tuple[tuple[str, str], ...], expiry: bool, payload: int
) -> None:
    # publish() lets every message this bound allows through without measuring it: it must never be smaller.
    props = packed_properties(users, expiry)
    exact = mqtt_topics.publish_packet_bytes(topic, payload, len(props.pack()) if props is not None else 1)
    assert exact <= publish_packet_bytes_at_most(topic, payload, users, expiry)


def test_a_message_near_the_broker_limit_is_measured_exactly() -> None:
    client = BrokerClient(broker().mqtt.brokers[0], cast(ClientEvents, None), lambda _id: ConnectOptions())
    topic = "$mcp-rpc/gw/srv-💧/plant/p7"
    props = packed_properties(GATEWAY_USERS, True)
    assert props is not None
    exact = mqtt_topics.publish_packet_bytes(topic, 5000, len(props.pack()))
    assert publish_packet_bytes_at_most(topic, 5000, GATEWAY_USERS, True) > exact  # the bound cannot decide
    client.limits = ConnackLimits(maximum_packet_size=exact)
    client._check_size(topic, 5000, props, GATEWAY_USERS, True)  # exactly the limit: published
    with pytest.raises(PacketTooLarge) as refused:
        client._check_size(topic, 5001, props, GATEWAY_USERS, True)
    assert (refused.value.size, refused.value.maximum, refused.value.measured) == (exact + 1, exact, "packet")
    assert client.outbound_limit() == (exact, "packet")


def test_a_refusal_is_news_once_per_announcement() -> None:
    reattach = Reattach(cast(SlotRegistry, None), 1.0, 2.0, lambda _slot: None)
    assert reattach.first_refusal("pump-1", announced=True)
    assert not reattach.first_refusal("pump-1", announced=True)  # an attempt again for the same announcement
    reattach.now("pump-1", new_announcement=False)  # heard from again (plain profile: on up), not announced
    assert not reattach.first_refusal("pump-1", announced=True)
    reattach.now("pump-1")  # announced again
    assert reattach.first_refusal("pump-1", announced=True)
    reattach.attached("pump-1")
    assert reattach.first_refusal("pump-1", announced=True)
    reattach.forget("pump-1")  # the announcement is gone
    assert reattach.first_refusal("pump-1", announced=True)
    reattach.clear()  # the broker is lost
    assert reattach.first_refusal("pump-1", announced=False)
    assert reattach.first_refusal("pump-1", announced=False)  # not announced: nothing remembered
    assert reattach.slots == {} and reattach.status() == {}


class _Lost:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def disconnected(self, reason: str) -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize("connected", [True, False])
def test_a_tls_error_names_a_client_certificate_only_before_the_connack(connected: bool) -> None:
    """A stopping mosquitto ends an established TLS connection without a close_notify, which paho logs as
    a TLS error ("EOF occurred in violation of protocol"): after a CONNACK that is the broker going
    away; only before one does it say that the broker may want a client certificate."""
    events = _Lost()
    client = BrokerClient(broker().mqtt.brokers[0], cast(ClientEvents, events), lambda _id: ConnectOptions())
    client.connected = connected
    eof = "EOF occurred in violation of protocol (_ssl.c:2427)"
    client._paho_errors.log(logging.ERROR, "failed to receive on socket: %s", eof)
    client._on_lost(client._generation, LOST_UNSPECIFIED)
    if connected:
        assert (client.last_error, client.last_error_kind) == ("connection lost: " + LOST_UNSPECIFIED, "network")
        assert events.reasons == ["connection lost: " + LOST_UNSPECIFIED]
    else:
        assert "client certificate" in client.last_error and client.last_error_kind == "tls"
    client._paho_errors.log(logging.ERROR, "failed to receive on socket: %s", eof)
    client.connected = True
    client._on_lost(client._generation, LOST_UNSPECIFIED)
    client.connected = False  # the next loss, without a TLS error of its own, does not take an old one
    client._on_lost(client._generation, LOST_UNSPECIFIED)
    assert client.last_error == "connection lost: " + LOST_UNSPECIFIED
