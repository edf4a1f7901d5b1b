"""What a broker's CONNACK allows, with every absent property read as its MQTT 5 default.

MQTT 5 (§3.2.2.3) lets a broker leave out a property whose value is the default, and mosquitto does
so for most of them (Retain Available, Maximum QoS, Wildcard Subscription Available, ...). A client
that treats "absent" as "not supported" refuses a perfectly good broker; this module reads them the
way the standard says. Pure: paho's Properties object (or None, on MQTT 3.1.1) in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.southbound.mqtt import topics as mqtt_topics

DEFAULT_RECEIVE_MAXIMUM = 65_535
DEFAULT_MAXIMUM_QOS = 2


@dataclass(frozen=True)
class ConnackLimits:
    retain_available: bool = True
    maximum_qos: int = DEFAULT_MAXIMUM_QOS
    wildcard_subscription_available: bool = True
    shared_subscription_available: bool = True
    subscription_identifiers_available: bool = True
    maximum_packet_size: int | None = None
    """None: no limit beyond the protocol's."""
    receive_maximum: int = DEFAULT_RECEIVE_MAXIMUM
    topic_alias_maximum: int = 0
    server_keep_alive: int | None = None
    """The keep-alive the broker imposes instead of ours, when it says so."""
    assigned_client_id: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()

    def user_property(self, name: str) -> str | None:
        """The first user property called `name` (names compare case-insensitively: brokers differ)."""
        wanted = name.lower()
        return next((value for key, value in self.user_properties if key.lower() == wanted), None)

    def suggested_server_filters(self) -> list[str] | None:
        """MCP-SERVER-NAME-FILTERS as a list of filters, or None when absent or not a JSON array of
        server-name filters (each must make a presence filter MQTT accepts: one that is not would make
        the gateway's SUBSCRIBE fail, and with it every subscription of the connection)."""
        text = self.user_property(mqtt_topics.PROP_SERVER_NAME_FILTERS)
        if text is None:
            return None
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            return None
        if any(mqtt_topics.server_filter_problem(item) for item in value):
            return None
        return list(value)

    def problems(self) -> list[str]:
        """What the gateway needs and this broker refuses (retained status and presence, wildcards),
        and a server-name filter suggestion it cannot use."""
        found = []
        if not self.retain_available:
            found.append("the broker does not keep retained messages (Retain Available = 0): devices cannot be found")
        if not self.wildcard_subscription_available:
            found.append("the broker refuses wildcard subscriptions (Wildcard Subscription Available = 0)")
        if self.user_property(mqtt_topics.PROP_SERVER_NAME_FILTERS) is not None and not self.suggested_server_filters():
            found.append(
                f"the broker's {mqtt_topics.PROP_SERVER_NAME_FILTERS} is not a JSON array of MQTT topic filters: "
                "ignored, the configured server_filter is used"
            )
        return found


def _get(properties: Any, name: str, default: Any) -> Any:
    if properties is None:
        return default
    value = getattr(properties, name, None)
    return default if value is None else value


def read_connack(properties: Any) -> ConnackLimits:
    """ConnackLimits from paho's CONNACK Properties (None on MQTT 3.1.1: every default)."""
    packet_size = _get(properties, "MaximumPacketSize", None)
    keep_alive = _get(properties, "ServerKeepAlive", None)
    assigned = _get(properties, "AssignedClientIdentifier", None)
    users = _get(properties, "UserProperty", [])
    return ConnackLimits(
        retain_available=bool(_get(properties, "RetainAvailable", 1)),
        maximum_qos=int(_get(properties, "MaximumQoS", DEFAULT_MAXIMUM_QOS)),
        wildcard_subscription_available=bool(_get(properties, "WildcardSubscriptionAvailable", 1)),
        shared_subscription_available=bool(_get(properties, "SharedSubscriptionAvailable", 1)),
        subscription_identifiers_available=bool(_get(properties, "SubscriptionIdentifierAvailable", 1)),
        maximum_packet_size=int(packet_size) if packet_size else None,
        receive_maximum=int(_get(properties, "ReceiveMaximum", DEFAULT_RECEIVE_MAXIMUM)),
        topic_alias_maximum=int(_get(properties, "TopicAliasMaximum", 0)),
        server_keep_alive=int(keep_alive) if keep_alive is not None else None,
        assigned_client_id=str(assigned) if assigned else None,
        user_properties=tuple((str(key), str(value)) for key, value in users),
    )
