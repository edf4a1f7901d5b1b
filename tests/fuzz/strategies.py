"""Inputs a stranger can send, as Hypothesis strategies: JSON values (deeply nested ones too), JSON-RPC
messages, envelopes, register frames, raw and mutated bytes, header values and URL path segments,
serial lines (frames, console text, damaged frames, chunkings) and MQTT topics and payloads.

Half of fuzzing is reaching deep code: besides noise, every strategy produces inputs that are almost
right (the keys the parsers look for, ids shaped like the gateway's, versions it speaks), so checks
past the first `isinstance` get exercised too.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import strategies as st

from gateway.core.versions import HANDSHAKE_VERSIONS, STATELESS_VERSIONS
from gateway.southbound.mqtt.topics import parse_plain
from gateway.southbound.serial.framing import encode_frame

# -- JSON --------------------------------------------------------------------------------------------

KEYS = (
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "provider",
    "payload",
    "type",
    "aggregate",
    "hello",
    "slot",
    "schema",
    "ids",
    "_meta",
    "progressToken",
    "progress",
    "requestId",
    "name",
    "arguments",
    "uri",
    "cursor",
    "nextCursor",
    "tools",
    "protocolVersion",
    "capabilities",
    "clientInfo",
    "serverInfo",
    "io.github.mcp-gateway/relatedRequest",
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
    "notifications",
    "x-mcp-header",
    "properties",
)
METHODS = (
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "server/discover",
    "subscriptions/listen",
    "sampling/createMessage",
    "roots/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/register",
    "notifications/hello",
    "notifications/tools/list_changed",
    "notifications/resources/updated",
    "broker/telemetry",
)
VERSIONS = (*HANDSHAKE_VERSIONS, *STATELESS_VERSIONS)

keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=6))
strings = st.one_of(
    st.sampled_from(("", "2.0", "brk-1", "brk-2", "1", "pump-1", "_all", "add", "echo", *METHODS, *VERSIONS)),
    st.text(max_size=24),
)
integers = st.one_of(
    st.integers(min_value=-3, max_value=5),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.sampled_from((2**53, -(2**63) - 1, 10**30)),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    integers,
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
shallow_json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=16,
)
NESTED_VALUE_DEPTHS = (16, 63, 64, 65, 100, 120)
"""Python values nest up to 120 levels: past the gateway's default bound (limits.max_json_depth, 64)
and within the 254 levels orjson writes, which parsers' verdicts must stay encodable by. Deeper JSON
comes as text (`nested_json`): what enters the gateway deeper than its bound never becomes a value."""


@st.composite
def nested_values(draw: st.DrawFn) -> Any:
    """A shallow value at the bottom of a chain of arrays and objects (in a repeating pattern)."""
    depth = draw(st.one_of(st.sampled_from(NESTED_VALUE_DEPTHS), st.integers(min_value=1, max_value=120)))
    pattern = draw(st.lists(st.booleans(), min_size=1, max_size=3))  # True: an array, False: an object
    value = draw(shallow_json_values)
    for level in range(depth):
        value = [value] if pattern[level % len(pattern)] else {draw(st.sampled_from(("data", "a", ""))): value}
    return value


json_values: st.SearchStrategy[Any] = st.one_of(shallow_json_values, shallow_json_values, nested_values())
ids = st.one_of(
    st.sampled_from(("brk-1", "brk-2", "brk-3", 1, 2, 3, 0, -1, True, False, None, 1.0, "", "1")),
    integers,
    st.text(max_size=10),
    json_values,
)


def dumps(value: Any, ascii_only: bool = False) -> bytes:
    """The stdlib encoder: unlike orjson it writes integers of any size and lone surrogates (as \\udxxx
    escapes), which are exactly the inputs a strict decoder must refuse without falling over."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


# -- JSON-RPC, envelopes, register frames ---------------------------------------------------------

meta = st.fixed_dictionaries(
    {},
    optional={
        "io.modelcontextprotocol/protocolVersion": st.one_of(st.sampled_from(VERSIONS), json_values),
        "io.modelcontextprotocol/clientCapabilities": json_values,
        "io.modelcontextprotocol/clientInfo": json_values,
        "io.modelcontextprotocol/logLevel": json_values,
        "progressToken": ids,
        "io.github.mcp-gateway/relatedRequest": ids,
    },
)
params = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.sampled_from(("add", "echo", "sleep", "fail", "nope", "start")), json_values),
            "arguments": st.one_of(
                st.fixed_dictionaries({}, optional={"a": json_values, "b": json_values, "text": json_values}),
                json_values,
            ),
            "uri": st.one_of(st.just("demo://greeting"), json_values),
            "cursor": st.one_of(st.sampled_from(("1", "2", "0", "99", "²", "-1", "")), json_values),
            "_meta": st.one_of(meta, json_values),
            "protocolVersion": st.one_of(st.sampled_from(VERSIONS), json_values),
            "capabilities": json_values,
            "clientInfo": json_values,
            "requestId": ids,
            "progressToken": ids,
            "progress": json_values,
            "notifications": json_values,
            "aggregate": json_values,
            "hello": json_values,
            "slot": json_values,
            "level": json_values,
        },
    ),
    json_values,
)
errors = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"code": st.one_of(integers, json_values), "message": json_values, "data": json_values}
    ),
    json_values,
)
jsonrpc_messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), json_values),
        "id": ids,
        "method": st.one_of(st.sampled_from(METHODS), json_values),
        "params": params,
        "result": json_values,
        "error": errors,
    },
)
slot_names = st.one_of(
    st.sampled_from(("pump-1", "pump-2", "tank-1", "_all", "_broker", "_x", "", "a/b", "a\x00b", "é", "x" * 65)),
    st.text(max_size=12),
)
register_frames = st.one_of(
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "method": st.just("notifications/register")},
        optional={"params": params, "id": ids},
    ),
    st.fixed_dictionaries(
        {"type": st.just("register")},
        optional={"aggregate": json_values, "hello": json_values, "slot": json_values},
    ),
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "provider": st.one_of(slot_names, json_values),
        "payload": st.one_of(jsonrpc_messages, register_frames, json_values),
        "jsonrpc": st.one_of(st.just("2.0"), json_values),
    },
)
messages = st.one_of(jsonrpc_messages, register_frames, envelopes, json_values)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """Well-formed bytes with a few bytes flipped, inserted, deleted, or the tail cut off."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(("flip", "insert", "delete", "truncate")))
        at = draw(st.integers(min_value=0, max_value=len(data)))
        if op == "insert" or not data:
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "flip":
            data[min(at, len(data) - 1)] ^= draw(st.integers(min_value=1, max_value=255))
        elif op == "delete":
            del data[at : at + draw(st.integers(min_value=1, max_value=4))]
        else:
            del data[at:]
    return bytes(data)


def nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


NESTING_DEPTHS = (15, 16, 17, 63, 64, 65, 100, 199, 200, 201, 253, 254, 255, 256, 300, 1023, 1024, 1025)
"""Depths where a bound lies: the gateway's limits.max_json_depth (16 to 200, 64 by default), the 254
levels orjson writes and the 1024 it reads."""


@st.composite
def nested_json(draw: st.DrawFn) -> bytes:
    """JSON text `depth` levels deep: arrays and objects in a repeating pattern around a scalar."""
    depth = draw(st.one_of(st.sampled_from(NESTING_DEPTHS), st.integers(min_value=1, max_value=1100)))
    pattern = draw(st.lists(st.booleans(), min_size=1, max_size=3))  # True: an array, False: an object
    kinds = [pattern[level % len(pattern)] for level in range(depth)]
    openers = b"".join(b"[" if array else b'{"a":' for array in kinds)
    closers = b"".join(b"]" if array else b"}" for array in reversed(kinds))
    return openers + dumps(draw(scalars)) + closers


NESTED_HERE = "@nested-json@"
"""Stands for the nested JSON a shape carries; replaced in the text, since no encoder writes JSON as deep."""
nested_shapes = st.one_of(
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": ids,
            "method": st.sampled_from(METHODS),
            "params": st.just({"name": "echo", "arguments": {"text": NESTED_HERE}}),
        }
    ),
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": ids, "result": st.just({"content": [], "structuredContent": NESTED_HERE})}
    ),
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": ids, "error": st.just({"code": -32000, "message": "x", "data": NESTED_HERE})}
    ),
    st.just({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": NESTED_HERE}}),
    st.just({"jsonrpc": "2.0", "method": "notifications/register", "params": {"hello": NESTED_HERE}}),
    st.just(NESTED_HERE),
)
nested_messages = st.builds(
    lambda shape, enveloped, text: dumps({"provider": "pump-1", "payload": shape} if enveloped else shape).replace(
        dumps(NESTED_HERE), text
    ),
    nested_shapes,
    st.booleans(),
    nested_json(),
)
"""A JSON-RPC request, answer, error, notification or register frame (bare or enveloped) carrying
JSON nested up to past what orjson reads, or being it."""


frames = st.one_of(
    messages.map(dumps),
    jsonrpc_messages.map(dumps),
    messages.map(lambda value: dumps(value, ascii_only=True)),
    mutated(messages.map(dumps)),
    st.binary(max_size=256),
    st.integers(min_value=1, max_value=5000).map(nested),
    st.integers(min_value=1, max_value=2000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
    nested_messages,
    nested_json(),
    st.sampled_from((b"", b" ", b"null", b"[]", b"{}", b'"\\ud800"', b"1e999", b"-0", b"\xef\xbb\xbf{}", b"{" * 3)),
)
"""One WebSocket message or one HTTP body, as bytes."""


# -- HTTP headers and paths --------------------------------------------------------------------------

header_text = st.one_of(
    st.sampled_from(
        ("", " ", "null", "2025-06-18", "2026-07-28", "tools/call", "add", "=?base64?YWRk?=", "=?base64??=")
    ),
    st.sampled_from(VERSIONS),
    st.sampled_from(METHODS),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
    st.text(max_size=20).map(
        lambda text: "=?base64?" + base64.b64encode(text.encode("utf-8", "replace")).decode() + "?="
    ),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20).map(
        lambda text: f"=?base64?{text}?="
    ),
)
"""Values of MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-*: plausible and not."""

header_bytes = st.one_of(
    header_text.map(lambda text: text.encode("latin-1", "replace")),
    # Bytes above 0x7F: legal in a header value (obs-text), never UTF-8 by accident.
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=20).map(
        lambda text: text.encode("latin-1")
    ),
    st.binary(max_size=40).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"")),
    st.text(max_size=12).map(lambda text: text.encode("utf-8").replace(b"\r", b"").replace(b"\n", b"")),
)
"""Any bytes a header value can carry on the wire (everything but CR and LF)."""

percent_encoded = st.binary(max_size=12).map(lambda raw: "".join(f"%{byte:02X}" for byte in raw))
path_segments = st.one_of(
    st.sampled_from(("pump-1", "_all", "_broker", "nope", "%2F", "a%2Fb", "%FF", "_%FF", "%C3%A9", "..", ".", "")),
    percent_encoded,
    st.text(alphabet="abcXYZ019-_.~%+", max_size=16),
    st.text(alphabet="abc%0123456789ABCDEF", max_size=70),
)


# -- serial lines (docs/protocol-serial-mqtt.md, "Frames") -----------------------------------------

FRAME_CAPS = (256, 300, 1024, 8192)
"""Frame caps a port may be configured with (256 is the smallest the configuration accepts)."""


def padded(size: int) -> bytes:
    """A JSON-RPC notification of exactly `size` bytes (at least 60): messages at a frame cap's edge."""
    head, tail = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"', b'"}}'
    return head + b"p" * max(0, size - len(head) - len(tail)) + tail


line_messages = st.one_of(
    messages.map(dumps),
    register_frames.map(dumps),
    jsonrpc_messages.map(dumps),
    nested_messages,
    st.binary(min_size=1, max_size=80),  # a frame carries bytes; only the port's reader parses them
    st.tuples(st.sampled_from(FRAME_CAPS), st.integers(min_value=-3, max_value=3)).map(
        lambda case: padded(case[0] + case[1])
    ),
    st.sampled_from((b"\x00", b"\x00" * 5, b"{}", b"\xff" * 254, b"x" * 253, b"x" * 254, b"x" * 255)),
    # With its CRC, a message that fills whole COBS blocks (encoders differ on how they end it).
    st.integers(min_value=1, max_value=33).map(lambda blocks: padded(254 * blocks - 4)),
)
"""The JSON (or not) a board sends in one frame: every shape, zeros inside, sizes around COBS's
254-byte blocks and around the frame caps."""

BOOT_LINES = (
    b"ets Jun  8 2016 00:22:57\r\n",
    b"rst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n",
    b"I (312) boot: ESP-IDF v5.1\r\n",
    b"MicroPython v1.23.0 on 2024-06-02; ESP32 module with ESP32\r\n",
    b'Type "help()" for more information.\r\n>>> ',
    b"Traceback (most recent call last):\r\n",
    b"\r\n",
)
text_lines = st.one_of(
    st.sampled_from(BOOT_LINES),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60).map(
        lambda text: text.encode() + b"\r\n"
    ),
    st.tuples(jsonrpc_messages.map(dumps), st.sampled_from((b"\n", b"\r\n", b"\r"))).map(b"".join),
    register_frames.map(lambda value: dumps(value) + b"\n"),
    st.sampled_from((b"{not json\n", b"{1: 2}\n", b"[1, 2]\n", b"{}\r", b"{" * 3 + b"\n", b"\n\n", b"\r\r")),
    # A typed line around the frame cap (and around what a frame of that cap takes encoded).
    st.tuples(st.sampled_from(FRAME_CAPS), st.integers(min_value=-2, max_value=8)).map(
        lambda case: padded(case[0] + case[1]) + b"\n"
    ),
)
"""Lines on the console: boot logs, prints, and JSON lines (what a person types in debug mode)."""


@st.composite
def line_noise(draw: st.DrawFn) -> bytes:
    """What can be on a serial line between frames, or instead of them."""
    kind = draw(st.sampled_from(("text", "binary", "damaged", "long", "zeros")))
    if kind == "text":
        return b"".join(draw(st.lists(text_lines, min_size=1, max_size=4)))
    if kind == "binary":
        return draw(st.binary(min_size=1, max_size=300))
    if kind == "damaged":
        # A frame with bytes flipped, lost or inserted (the CRC catches what COBS cannot).
        return draw(mutated(line_messages.map(encode_frame)))
    if kind == "long":
        # More than a frame's worth of bytes before the next delimiter (or line end).
        size = draw(st.sampled_from(FRAME_CAPS)) + draw(st.integers(min_value=-8, max_value=40))
        filler = draw(st.sampled_from((b"x", b"\xff", b"{", b"\x01", b"ab\n")))
        return (filler * size)[:size]
    return b"\x00" * draw(st.integers(min_value=1, max_value=3))


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut into the pieces a read returns: anywhere, byte by byte, or all at once."""
    how = draw(st.sampled_from(("cuts", "cuts", "bytes", "whole")))
    if how == "whole" or not data:
        return [data]
    if how == "bytes":
        return [data[at : at + 1] for at in range(len(data))]
    cuts = sorted(set(draw(st.lists(st.integers(min_value=1, max_value=len(data)), max_size=12))))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


# -- MQTT (docs/protocol-serial-mqtt.md, "MQTT ways in") -------------------------------------------

SLOT_PLACEHOLDER = "{slot-of-the-topic}"
"""Stands for the slot named by the topic a payload is published on (a status must name its own slot)."""


def with_slot(topic: str, payload: bytes) -> bytes:
    """`payload` with the topic's own slot where it names SLOT_PLACEHOLDER."""
    placeholder = SLOT_PLACEHOLDER.encode()
    if placeholder not in payload:
        return payload
    address = parse_plain("mcpb", topic)
    slot = address.slot if address is not None else "pump-1"
    return payload.replace(placeholder, json.dumps(slot)[1:-1].encode())


MAX_TOPIC_BYTES = 65_535
"""An MQTT topic is a length-prefixed UTF-8 string: what any broker can deliver at most."""

mqtt_slots = st.one_of(
    st.sampled_from(("pump-1", "pump-2", "held-1", "_all", "_x", "a+b", "a#", "é", "x" * 64, "x" * 65, "a\x01b")),
    slot_names,
)
server_ids = st.one_of(st.sampled_from(("srv-1", "srv-2", "srv-3", "a+b", "#", "")), st.text(max_size=8))
server_names = st.one_of(
    st.sampled_from(
        ("pump-1", "plant/pump-1", "plant/pumps/pump-2", "lab/pump-1", "plant/held-1", "plant/_x", "a//b", "a/", "+")
    ),
    st.lists(mqtt_slots, min_size=1, max_size=4).map("/".join),
)
GATEWAY_CLIENT_ID = "mcp-gateway-0123456789ab"
"""The shape of the gateway's own MQTT client id (mqtt_client.default_client_id)."""
mqtt_topic_names = st.one_of(
    st.tuples(
        st.sampled_from(("mcpb", "mcpb", "mcpb/x", "other", "", "$SYS")),
        mqtt_slots,
        st.sampled_from(("status", "status", "up", "up", "down", "x", "status/x", "")),
    ).map("/".join),
    st.tuples(
        st.sampled_from(("$mcp-server/presence", "$mcp-server/presence", "$mcp-server/capability", "$mcp-server")),
        server_ids,
        server_names,
    ).map("/".join),
    st.tuples(
        st.sampled_from((f"$mcp-rpc/{GATEWAY_CLIENT_ID}", "$mcp-rpc/other-client", "$mcp-rpc", "$mcp-rpc/")),
        server_ids,
        server_names,
    ).map("/".join),
    st.lists(
        st.sampled_from(("mcpb", "$mcp-server", "$mcp-rpc", "presence", "capability", "", "+", "#")), max_size=5
    ).map("/".join),
    st.text(max_size=40),
    # Topics up to MQTT's limit: the longer topics the gateway derives from them would not fit.
    st.tuples(
        st.sampled_from(("$mcp-server/presence/srv-1/plant/", "$mcp-server/capability/srv-1/", "mcpb/")),
        st.one_of(st.sampled_from((0, 1, 2, 13, 14, 15)), st.integers(min_value=0, max_value=80)),
        st.sampled_from(("/pump-9", "/status", "/up")),
    ).map(lambda case: case[0] + "n" * (MAX_TOPIC_BYTES - case[1] - len(case[0]) - len(case[2])) + case[2]),
).filter(lambda topic: len(topic.encode()) <= MAX_TOPIC_BYTES)
"""Topics a publisher can use, as a broker hands them to the gateway's subscriptions."""

status_frames = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "method": st.just("notifications/register"),
        "params": st.fixed_dictionaries(
            {"slot": st.one_of(st.just(SLOT_PLACEHOLDER), st.just(SLOT_PLACEHOLDER), mqtt_slots, json_values)},
            optional={
                "aggregate": st.one_of(st.booleans(), json_values),
                "hello": st.one_of(
                    st.fixed_dictionaries({"device_id": st.sampled_from(("board-a", "board-b"))}), json_values
                ),
            },
        ),
    },
    optional={"id": ids},
)
online_notifications = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.just("notifications/server/online")},
    optional={
        "params": st.one_of(
            st.fixed_dictionaries({}, optional={"description": st.one_of(st.text(max_size=20), json_values)}),
            json_values,
        ),
        "id": ids,
    },
)
mqtt_payloads = st.one_of(
    st.just(b""),
    st.just(b""),
    status_frames.map(dumps),
    status_frames.map(dumps),
    online_notifications.map(dumps),
    online_notifications.map(dumps),
    st.sampled_from((b'{"jsonrpc":"2.0","method":"notifications/disconnected"}', b"[]", b"{}", b"null")),
    jsonrpc_messages.map(dumps),
    frames,
)
"""Payloads: register frames (mostly naming the topic's own slot), presences, JSON-RPC, noise, empty."""


def _topic(*levels: str) -> str:
    return "/".join(levels)


plain_statuses = st.tuples(
    st.builds(_topic, st.just("mcpb"), mqtt_slots, st.just("status")),
    st.one_of(st.just(b""), status_frames.map(dumps)),
)
plain_ups = st.tuples(
    st.builds(_topic, st.just("mcpb"), mqtt_slots, st.just("up")),
    st.one_of(jsonrpc_messages.map(dumps), frames),
)
presences = st.tuples(
    st.one_of(
        st.builds(_topic, st.just("$mcp-server/presence"), server_ids, server_names),
        mqtt_topic_names.filter(lambda topic: topic.startswith("$mcp-server/presence/")),
    ),
    st.one_of(st.just(b""), online_notifications.map(dumps)),
)
rpcs = st.tuples(
    st.builds(
        _topic, st.sampled_from((f"$mcp-rpc/{GATEWAY_CLIENT_ID}", "$mcp-server/capability")), server_ids, server_names
    ),
    st.one_of(
        jsonrpc_messages.map(dumps),
        st.just(b'{"jsonrpc":"2.0","method":"notifications/disconnected"}'),
        frames,
    ),
)
mqtt_publications = st.one_of(
    st.tuples(mqtt_topic_names, mqtt_payloads), plain_statuses, plain_ups, presences, presences, rpcs
)
"""(topic, payload): anything, and what each topic the gateway subscribes to is meant to carry."""
