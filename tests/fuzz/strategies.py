"""Inputs a stranger can send, as Hypothesis strategies: JSON values, JSON-RPC messages, envelopes,
register frames, raw and mutated bytes, header values and URL path segments.

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
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=16,
)
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


frames = st.one_of(
    messages.map(dumps),
    jsonrpc_messages.map(dumps),
    messages.map(lambda value: dumps(value, ascii_only=True)),
    mutated(messages.map(dumps)),
    st.binary(max_size=256),
    st.integers(min_value=1, max_value=5000).map(nested),
    st.integers(min_value=1, max_value=2000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
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
