"""How large an MQTT packet may be: the Maximum Packet Size the gateway announces, an upper bound of a
PUBLISH's size before it is built, and the limit a connection publishes under (the broker's CONNACK)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.config import MqttBrokerConfig
from gateway.southbound.mqtt.connack import ConnackLimits

UserProperties = Sequence[tuple[str, str]]

PACKET_HEADROOM_BYTES = 16_384
"""What a PUBLISH holds besides its payload: fixed header, topic, packet id and properties."""
MQTT_MAX_PACKET_BYTES = 268_435_455
"""The largest packet MQTT can express (a four-byte Remaining Length)."""


def max_packet_bytes(max_payload_bytes: int) -> int:
    """The Maximum Packet Size the gateway announces in CONNECT (MQTT 5) for a payload cap."""
    return min(max_payload_bytes + PACKET_HEADROOM_BYTES, MQTT_MAX_PACKET_BYTES)


def publish_packet_bytes_at_most(
    topic: str, payload_bytes: int, user_properties: UserProperties = (), expiry: bool = False
) -> int:
    """An upper bound of an MQTT 5 QoS 1 PUBLISH's size (as mqtt_topics.publish_packet_bytes counts it)
    that packs nothing: every character of the topic and of the user properties as 4 UTF-8 bytes (the
    most one takes), the Remaining Length and the properties' length field as 4 bytes each (their
    most). The properties are what `BrokerClient.publish` sets: user properties (identifier and two
    length-prefixed strings each) and the message expiry (identifier and a four-byte integer)."""
    properties = 4 + (5 if expiry else 0)
    for key, value in user_properties:
        properties += 1 + 2 + 4 * len(key) + 2 + 4 * len(value)
    return 1 + 4 + 2 + 4 * len(topic) + 2 + properties + payload_bytes


def outbound_limit(config: MqttBrokerConfig, limits: ConnackLimits) -> tuple[int, str]:
    """The most a connection may publish, and what it is measured on: MQTT 5, the whole packet ("packet")
    against the CONNACK's Maximum Packet Size (absent: MQTT's own limit); MQTT 3.1.1, whose CONNACK says
    nothing, the payload ("payload") against max_payload_bytes (the appliance's mosquitto allows a packet
    1 KiB above the default, room for the topic and header)."""
    if config.protocol == "5":
        return limits.maximum_packet_size or MQTT_MAX_PACKET_BYTES, "packet"
    return config.max_payload_bytes, "payload"
