"""What the gateway writes to and reads from remote MCP servers: event streams, envelopes, headers, failures."""

from __future__ import annotations

import pytest

from gateway.core.stateless import decode_header_value
from gateway.southbound.remote.sse_events import SseDecoder, SseEvent, SseTooLarge
from gateway.southbound.remote.wire import (
    encode_header_value,
    http_failure,
    param_headers,
    public_url,
    stateless_headers,
    www_authenticate_params,
)

# -- event streams ------------------------------------------------------------------------------


def decode(*chunks: bytes, limit: int = 1024) -> list[SseEvent]:
    decoder = SseDecoder(limit)
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_events_with_every_line_ending_and_split_anywhere() -> None:
    stream = b'event: endpoint\r\ndata: /messages?x=1\r\n\r\n: comment\nid: 7\ndata: {"a":\ndata: 1}\n\n'
    whole = decode(stream)
    assert whole == [
        SseEvent("endpoint", "/messages?x=1"),
        SseEvent("message", '{"a":\n1}', "7"),
    ]
    for cut in range(1, len(stream)):
        assert decode(stream[:cut], stream[cut:]) == whole, cut
    assert decode(b"data: a\r\rdata: b\r\r") == [SseEvent("message", "a"), SseEvent("message", "b")]


def test_event_fields_as_the_standard_reads_them() -> None:
    events = decode(b"data:no-space\nretry: 1500\n\nevent\ndata\n\nid: 9\n\ndata: after id\n\n")
    assert events == [
        SseEvent("message", "no-space", None, 1500),
        SseEvent("message", ""),  # `event` with no value, then an empty data line
        SseEvent("message", "after id", "9"),  # the last event id persists
    ]


def test_an_event_larger_than_the_bound_is_refused() -> None:
    with pytest.raises(SseTooLarge):
        decode(b"data: " + b"x" * 2000 + b"\n\n", limit=1024)
    with pytest.raises(SseTooLarge):
        decode(*[b"data: " + b"x" * 100 + b"\n"] * 20, limit=1024)  # many lines, one event
    with pytest.raises(SseTooLarge):
        decode(b"x" * 2000, limit=1024)  # no line end at all


# -- the stateless era --------------------------------------------------------------------------

META = "io.modelcontextprotocol/protocolVersion"


def test_routing_headers_for_each_method() -> None:
    call = {"method": "tools/call", "params": {"name": "add", "arguments": {"region": "nord", "n": 3}}}
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "Count"},
        },
    }
    assert stateless_headers(call, schema) == {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "add",
        "Mcp-Param-Region": "nord",
        "Mcp-Param-Count": "3",
    }
    # The version header says what the body's envelope says, so header and body agree.
    enveloped = {"method": "tools/list", "params": {"_meta": {META: "2099-01-01"}}}
    assert stateless_headers(enveloped)["MCP-Protocol-Version"] == "2099-01-01"
    read = stateless_headers({"method": "resources/read", "params": {"uri": "file:///é.txt"}})
    assert decode_header_value(read["Mcp-Name"]) == "file:///é.txt"
    assert "Mcp-Name" not in stateless_headers({"method": "tools/list"})


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("plain", True),
        ("mit Leerzeichen", True),
        (" lead", False),
        ("ünï", False),
        ("=?base64?eA==?=", False),
        ("a\tb", False),
    ],
)
def test_header_values_round_trip(value: str, plain: bool) -> None:
    encoded = encode_header_value(value)
    assert encoded.isascii() and "\n" not in encoded and "\t" not in encoded
    assert decode_header_value(encoded) == value
    assert (encoded == value) is plain


def test_param_headers_skip_absent_and_unrenderable_arguments() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A"}}}
    assert param_headers(schema, {}) == {}
    assert param_headers(schema, {"a": None}) == {}
    assert param_headers(schema, {"a": True}) == {"Mcp-Param-A": "true"}
    bad = {"type": "object", "properties": {"a": {"type": "object", "x-mcp-header": "A"}}}
    assert param_headers(bad, {"a": "x"}) == {}  # an invalid annotation: nothing is mirrored


# -- failures and the rest ----------------------------------------------------------------------


def test_http_failures_become_named_errors() -> None:
    rpc = b'{"jsonrpc":"2.0","id":"brk-2","error":{"code":-32602,"message":"Invalid params"}}'
    assert http_failure("brk-2", "files", 400, rpc)["error"] == {"code": -32602, "message": "Invalid params"}
    failure = http_failure("brk-2", "files", 502, b"<html>Bad Gateway</html>")
    assert failure["error"]["code"] == -32000
    assert failure["error"]["message"] == 'Upstream "files" answered HTTP 502: <html>Bad Gateway</html>'
    assert failure["error"]["data"] == {"slot": "files", "reason": "upstream_http", "status": 502}
    assert len(http_failure(1, "files", 500, b"x" * 5000)["error"]["message"]) < 260


def test_public_url_hides_credentials_and_query() -> None:
    assert public_url("https://tools.plant.lan:8443/mcp?api_key=s3cret") == "https://tools.plant.lan:8443/mcp?…"
    assert public_url("http://[::1]:9000/sse") == "http://[::1]:9000/sse"


def test_www_authenticate_parameters() -> None:
    header = 'Bearer realm="files", error="invalid_token", resource_metadata="https://x/.well-known/a\\"b", scope=read'
    assert www_authenticate_params(header) == {
        "realm": "files",
        "error": "invalid_token",
        "resource_metadata": 'https://x/.well-known/a"b',
        "scope": "read",
    }
    assert www_authenticate_params("Bearer") == {}
