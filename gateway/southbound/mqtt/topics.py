"""Every MQTT topic, topic filter and user-property name the gateway uses, for both profiles
(docs/protocol-serial-mqtt.md, "MQTT ways in").

This module is the single agreement between the gateway (gateway/southbound/mqtt*.py), the simulator
(sim/) and the MicroPython transport (device/micropython), which mirrors these names: change a name
here and there together.

Plain profile (MQTT 3.1.1 or 5, what umqtt.simple can do; docs/protocol-serial-mqtt.md, "Plain
profile"), QoS 1 everywhere:

    <prefix>/<slot>/status   device -> gateway, RETAINED: the register frame
                             {"jsonrpc":"2.0","method":"notifications/register",
                              "params":{"slot":"<slot>","aggregate":true,"hello":{...}}}
                             The device's last will is an EMPTY retained message on the same topic:
                             an empty status means "offline" and detaches the slot.
    <prefix>/<slot>/down     gateway -> device: one JSON-RPC message per MQTT message
    <prefix>/<slot>/up       device -> gateway: one JSON-RPC message per MQTT message

    Prefix rules: default "mcpb"; one or more topic levels separated by "/" (e.g. "site-a/cell-3/mcpb"),
    no empty level (so no leading, trailing or doubled "/"), no "+", "#" or NUL, and not starting with
    "$" (brokers reserve "$" topics). The <slot> level is the slot name itself, under the slot-name
    rules of every way in (1..64 bytes of UTF-8, printable characters only, not "." or "..", not
    starting with "_") and with no "/", "+" or "#"; `params.slot` of the register frame must equal it.

MCP over MQTT (the EMQX specification, MQTT 5 only), the revision pinned below in SPEC_*:

    $mcp-server/<server-id>/<server-name>             control topic: the client's `initialize`
    $mcp-server/capability/<server-id>/<server-name>  server's list_changed / resources/updated
    $mcp-server/presence/<server-id>/<server-name>    RETAINED `notifications/server/online`;
                                                      empty retained message (also the will) = offline
    $mcp-client/presence/<mcp-client-id>              client's `notifications/disconnected` (also its will)
    $mcp-client/capability/<mcp-client-id>            client's list_changed notifications
    $mcp-rpc/<mcp-client-id>/<server-id>/<server-name>  requests, responses and notifications both ways;
                                                      both sides subscribe with No Local

    server-id and mcp-client-id are MQTT client ids (no "/", "+", "#"); server-name is hierarchical
    ("type/sub-type/name"), no "+" or "#". QoS 1 for every PUBLISH and SUBSCRIBE, session expiry 0.
    CONNECT carries user properties MCP-COMPONENT-TYPE and MCP-META; every PUBLISH carries
    MCP-COMPONENT-TYPE and MCP-MQTT-CLIENT-ID. The broker MAY put MCP-SERVER-NAME (to a server),
    MCP-SERVER-NAME-FILTERS and MCP-RBAC (to a client) in CONNACK; a client given
    MCP-SERVER-NAME-FILTERS must subscribe to presence with those filters instead of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.core.names import SlotNameError, check_slot_name

QOS = 1

# --- The specification revision this module follows (MCP over MQTT, EMQX) ----------------------------
SPEC_NAME = "MCP over MQTT (EMQX)"
# The transport document is versioned alongside the MCP revision it extends; the EMQX documentation
# ("EMQX AI / MCP over MQTT / Specification", docs.emqx.com) publishes the same text.
SPEC_REVISION = "2025-03-26"
SPEC_SOURCE = "mqtt-ai/mcp-over-mqtt specification/2025-03-26/basic/mqtt_transport.md"
SPEC_COMMIT = "cd3a13a0748cd29a5dcc34df6adeed7f2de084d3"

# --- MCP over MQTT: user properties -------------------------------------------------------------------
# CONNECT (both components) and PUBLISH (both components).
PROP_COMPONENT_TYPE = "MCP-COMPONENT-TYPE"
# CONNECT only: a JSON object describing the component (version, implementation, location).
PROP_META = "MCP-META"
# PUBLISH only: the MQTT client id of the sender.
PROP_MQTT_CLIENT_ID = "MCP-MQTT-CLIENT-ID"
# CONNACK, broker -> server: the server-name the server MUST use.
PROP_SERVER_NAME = "MCP-SERVER-NAME"
# CONNACK, broker -> client: a JSON array of server-name filters the client MUST use for presence.
PROP_SERVER_NAME_FILTERS = "MCP-SERVER-NAME-FILTERS"
# CONNACK, broker -> client: a JSON array of {"server_name", "role_name"} objects.
PROP_RBAC = "MCP-RBAC"

COMPONENT_CLIENT = "mcp-client"
COMPONENT_SERVER = "mcp-server"

# --- MCP over MQTT: methods of the transport ----------------------------------------------------------
METHOD_SERVER_ONLINE = "notifications/server/online"
METHOD_DISCONNECTED = "notifications/disconnected"

# --- MCP over MQTT: topics ----------------------------------------------------------------------------
SERVER_ROOT = "$mcp-server"
CLIENT_ROOT = "$mcp-client"
RPC_ROOT = "$mcp-rpc"
PRESENCE = "presence"
CAPABILITY = "capability"

DEFAULT_SERVER_NAME_FILTER = "#"


def server_control_topic(server_id: str, server_name: str) -> str:
    return f"{SERVER_ROOT}/{server_id}/{server_name}"


def server_capability_topic(server_id: str, server_name: str) -> str:
    return f"{SERVER_ROOT}/{CAPABILITY}/{server_id}/{server_name}"


def server_presence_topic(server_id: str, server_name: str) -> str:
    return f"{SERVER_ROOT}/{PRESENCE}/{server_id}/{server_name}"


def client_presence_topic(client_id: str) -> str:
    return f"{CLIENT_ROOT}/{PRESENCE}/{client_id}"


def client_capability_topic(client_id: str) -> str:
    return f"{CLIENT_ROOT}/{CAPABILITY}/{client_id}"


def rpc_topic(client_id: str, server_id: str, server_name: str) -> str:
    return f"{RPC_ROOT}/{client_id}/{server_id}/{server_name}"


def server_presence_filter(server_name_filter: str) -> str:
    """What a client subscribes to for discovery: every instance of every matching server-name."""
    return f"{SERVER_ROOT}/{PRESENCE}/+/{server_name_filter}"


def server_capability_filter(server_id: str, server_name_filter: str) -> str:
    return f"{SERVER_ROOT}/{CAPABILITY}/{server_id}/{server_name_filter}"


@dataclass(frozen=True)
class ServerAddress:
    """One server instance: its MQTT client id and its (hierarchical) server-name."""

    server_id: str
    server_name: str


def _split_server_address(levels: list[str]) -> ServerAddress | None:
    if len(levels) < 2 or not levels[0] or not all(levels[1:]):
        return None
    return ServerAddress(levels[0], "/".join(levels[1:]))


def parse_server_presence(topic: str) -> ServerAddress | None:
    """`$mcp-server/presence/<server-id>/<server-name>` -> its address, else None."""
    levels = topic.split("/")
    if levels[:2] != [SERVER_ROOT, PRESENCE]:
        return None
    return _split_server_address(levels[2:])


def parse_server_capability(topic: str) -> ServerAddress | None:
    levels = topic.split("/")
    if levels[:2] != [SERVER_ROOT, CAPABILITY]:
        return None
    return _split_server_address(levels[2:])


@dataclass(frozen=True)
class RpcAddress:
    client_id: str
    server: ServerAddress


def parse_rpc(topic: str) -> RpcAddress | None:
    """`$mcp-rpc/<mcp-client-id>/<server-id>/<server-name>` -> its parts, else None."""
    levels = topic.split("/")
    if len(levels) < 4 or levels[0] != RPC_ROOT or not levels[1]:
        return None
    server = _split_server_address(levels[2:])
    return RpcAddress(levels[1], server) if server is not None else None


MAX_TOPIC_BYTES = 65_535
"""MQTT topic names and filters are length-prefixed UTF-8 strings (MQTT 5 §1.5.4): at most this long."""


def filter_problem(topic_filter: str) -> str | None:
    """Why `topic_filter` is not an MQTT topic filter a broker (or paho) accepts, or None when it is one."""
    if not topic_filter or not fits_topic(topic_filter):
        return f"a topic filter is 1 to {MAX_TOPIC_BYTES} bytes"
    levels = topic_filter.split("/")
    if "\x00" in topic_filter or any(("#" in level or "+" in level) and level not in ("#", "+") for level in levels):
        return "'+' and '#' stand alone in their level, and no NUL"
    if "#" in levels[:-1]:
        return "'#' is the last level"
    return None


def fits_topic(topic: str) -> bool:
    """`topic` is short enough to be an MQTT topic (the other rules are the callers')."""
    return len(topic.encode("utf-8", "surrogatepass")) <= MAX_TOPIC_BYTES


def server_filter_problem(server_name_filter: str) -> str | None:
    """Why `server_name_filter` cannot be a server-name filter (a configured server_filter, a broker's
    MCP-SERVER-NAME-FILTERS), or None when it can: one that is not would make the gateway's SUBSCRIBE
    fail, and with it every subscription of the connection. It is not empty, and its presence filter
    (`server_presence_filter`) is an MQTT topic filter, within MQTT's length too."""
    if not server_name_filter:
        return "a server-name filter is not empty"
    presence = server_presence_filter(server_name_filter)
    if not fits_topic(presence):
        return f"its presence filter {presence[:40]}... is over {MAX_TOPIC_BYTES} bytes"
    return filter_problem(presence)


SUBSCRIBE_BASE_BYTES = 8
"""A SUBSCRIBE without filters, at most: fixed header (up to 5 bytes), packet id (2), property length (1)."""


def subscribe_filter_bytes(topic_filter: str) -> int:
    """One filter in a SUBSCRIBE: its length (2), its bytes and its options (1)."""
    return 3 + len(topic_filter.encode("utf-8", "surrogatepass"))


def subscribe_packet_bytes(filters: Sequence[str]) -> int:
    """The most an MQTT 5 SUBSCRIBE of `filters` (no properties) takes."""
    return SUBSCRIBE_BASE_BYTES + sum(subscribe_filter_bytes(topic_filter) for topic_filter in filters)


def subscribe_batches(filters: Sequence[str], maximum: int | None) -> tuple[list[list[int]], list[int]]:
    """The positions of `filters` in SUBSCRIBE packets that each fit in `maximum` bytes (the broker's
    Maximum Packet Size; None: all in one), in order, and the positions of filters too long for any.
    A broker disconnects a client that sends a larger packet (MQTT 5 §3.1.2.11.4), and with it every
    slot of the broker; a broker's MCP-SERVER-NAME-FILTERS or a long server_filter list can be that long."""
    if maximum is None:
        return ([list(range(len(filters)))] if filters else []), []
    batches: list[list[int]] = []
    unfit: list[int] = []
    size = SUBSCRIBE_BASE_BYTES
    for index, topic_filter in enumerate(filters):
        needed = subscribe_filter_bytes(topic_filter)
        if SUBSCRIBE_BASE_BYTES + needed > maximum:
            unfit.append(index)
            continue
        if not batches or size + needed > maximum:
            batches.append([])
            size = SUBSCRIBE_BASE_BYTES
        batches[-1].append(index)
        size += needed
    return batches, unfit


def publish_packet_bytes(topic: str, payload_bytes: int, properties_bytes: int = 0) -> int:
    """The size of a QoS 1 PUBLISH, as MQTT 5 §3.1.2.11.4 counts it for the Maximum Packet Size: the fixed
    header (one byte and the Remaining Length's 1 to 4), the topic (2 + its bytes), the packet id (2), the
    properties (MQTT 5: their length field included; 0 on MQTT 3.1.1) and the payload."""
    remaining = 2 + len(topic.encode("utf-8", "surrogatepass")) + 2 + properties_bytes + payload_bytes
    length_bytes = 1 if remaining < 128 else 2 if remaining < 16_384 else 3 if remaining < 2_097_152 else 4
    return 1 + length_bytes + remaining


def valid_client_id(value: str) -> bool:
    """server-id and mcp-client-id: any non-empty string without "/", "+", "#" (they sit in topics)."""
    return bool(value) and not any(c in value for c in "/+#\x00")


def valid_server_name(value: str) -> bool:
    """A hierarchical name without wildcards or empty levels."""
    return bool(value) and "+" not in value and "#" not in value and "\x00" not in value and all(value.split("/"))


# --- Plain profile ------------------------------------------------------------------------------------
DEFAULT_PREFIX = "mcpb"
STATUS: Literal["status"] = "status"
DOWN: Literal["down"] = "down"
UP: Literal["up"] = "up"
PlainKind = Literal["status", "down", "up"]


def prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot be a plain-profile topic prefix, or None when it can."""
    if not prefix:
        return "the topic prefix is empty"
    if prefix.startswith("$"):
        return "the topic prefix starts with '$' (reserved by brokers)"
    if any(c in prefix for c in "+#\x00"):
        return "the topic prefix contains '+', '#' or NUL"
    if not all(prefix.split("/")):
        return "the topic prefix has an empty level (leading, trailing or doubled '/')"
    return None


def slot_level_problem(slot: str) -> str | None:
    """Why `slot` cannot be the <slot> level of a plain-profile topic, or None when it can: a slot name
    every way in accepts (gateway/core/names.py: 1 to 64 bytes, printable, not `.`, `..` or reserved)
    that is also one topic level without wildcards."""
    if any(c in slot for c in "/+#"):
        return "the slot name contains '/', '+' or '#'"
    try:
        check_slot_name(slot)
    except SlotNameError as exc:
        return str(exc)
    return None


def plain_topic(prefix: str, slot: str, kind: PlainKind) -> str:
    return f"{prefix}/{slot}/{kind}"


def plain_filter(prefix: str, kind: PlainKind) -> str:
    """What the gateway subscribes to: `<prefix>/+/status` and `<prefix>/+/up`."""
    return f"{prefix}/+/{kind}"


@dataclass(frozen=True)
class PlainAddress:
    slot: str
    kind: PlainKind


def parse_plain(prefix: str, topic: str) -> PlainAddress | None:
    """`<prefix>/<slot>/<status|down|up>` -> its slot and kind, else None (a wrong topic)."""
    head = prefix + "/"
    if not topic.startswith(head):
        return None
    rest = topic[len(head) :].split("/")
    if len(rest) != 2 or rest[1] not in (STATUS, DOWN, UP) or slot_level_problem(rest[0]) is not None:
        return None
    kind: PlainKind = STATUS if rest[1] == STATUS else DOWN if rest[1] == DOWN else UP
    return PlainAddress(rest[0], kind)


def reserved_status_slot(prefix: str, topic: str) -> str | None:
    """The slot level of `<prefix>/<slot>/status` when it names a slot reserved for the gateway (`_all`,
    `_broker`, any name starting with `_`) and is otherwise usable as a topic level, else None: such a
    board's `down` topic can carry its refusal."""
    head = prefix + "/"
    if not topic.startswith(head):
        return None
    rest = topic[len(head) :].split("/")
    if len(rest) != 2 or rest[1] != STATUS or not rest[0].startswith("_") or any(c in rest[0] for c in "+#"):
        return None
    problem = slot_level_problem(rest[0])
    return rest[0] if problem is not None and "reserved" in problem else None


def plain_topic_problem(prefix: str, topic: str) -> str:
    """Why `parse_plain` finds no slot in `topic`: the slot level's own problem when the topic has the
    profile's shape (what the operator must fix on the board), else what the shape must be."""
    head = prefix + "/"
    rest = topic[len(head) :].split("/") if topic.startswith(head) else []
    if len(rest) == 2 and rest[1] in (STATUS, DOWN, UP):
        problem = slot_level_problem(rest[0])
        if problem is not None:
            return f"the slot level is not a usable slot name: {problem}"
    return "not <prefix>/<slot>/status|up with a usable slot name"
