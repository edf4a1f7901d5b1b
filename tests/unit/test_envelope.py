"""Provider frame shapes (gateway/southbound/envelope.py): envelopes, registration, mismatch.

As docs/protocol.md describes them: "Registration", "Refusals and close codes", "Framing mismatch (first frame
only)".
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.southbound.envelope import (
    Envelope,
    Registration,
    decode_envelope,
    error_envelope,
    error_message,
    looks_like_bare_jsonrpc,
    looks_like_envelope,
    registration,
    wrap,
)

PING = {"jsonrpc": "2.0", "id": "brk-1", "method": "ping"}
REGISTER = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}


# -- envelopes ----------------------------------------------------------------------------------


def test_decode_envelope() -> None:
    assert decode_envelope({"provider": "pump-1", "payload": PING}) == Envelope("pump-1", PING)


def test_decode_envelope_keeps_any_payload_value() -> None:
    # The payload is checked as JSON-RPC later; a null payload is still an envelope for that slot.
    assert decode_envelope({"payload": None, "provider": "x"}) == Envelope("x", None)


@pytest.mark.parametrize(
    "value",
    [
        None,
        [{"provider": "x", "payload": {}}],
        "x",
        {"provider": "x"},  # no payload
        {"payload": PING},  # no provider
        {"provider": "", "payload": PING},
        {"provider": 7, "payload": PING},
        {"provider": None, "payload": PING},
    ],
)
def test_not_an_envelope(value: Any) -> None:
    assert decode_envelope(value) is None


@pytest.mark.parametrize("slot", ["pump-1", 'quote"and\\backslash', "泵-1", "a/b", "new\nline"])
def test_wrap_then_decode_round_trips(slot: str) -> None:
    payload = orjson.dumps(PING)
    framed = wrap(slot, payload)
    assert decode_envelope(orjson.loads(framed)) == Envelope(slot, PING)


def test_wrap_does_not_reserialise_the_payload() -> None:
    # Spacing and key order of what the provider or client sent survive byte for byte.
    payload = b'{ "method":"ping", "id" : 1,"jsonrpc":"2.0" }'
    assert wrap("x", payload) == b'{"provider":"x","payload":' + payload + b"}"


def test_error_envelope_bytes_match_mcp_broker_exactly() -> None:
    assert error_envelope("x", -32000, "m") == (
        b'{"provider":"x","payload":{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"m"}}}'
    )


def test_error_message_bytes() -> None:
    assert error_message(-32001, 'Provider "_all" is reserved by the broker') == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Provider \\"_all\\" is reserved by the broker"}}'
    )


def test_error_envelope_escapes_the_slot_and_round_trips() -> None:
    framed = error_envelope('a"b', -32000, "Slot already held")
    decoded = decode_envelope(orjson.loads(framed))
    assert decoded == Envelope(
        'a"b', {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "Slot already held"}}
    )


# -- registration -------------------------------------------------------------------------------


def test_jsonrpc_register_opting_into_all() -> None:
    assert registration(REGISTER) == Registration(aggregate=True, hello=None, slot=None)


def test_jsonrpc_register_without_params_stays_out_of_all() -> None:
    assert registration({"jsonrpc": "2.0", "method": "notifications/register"}) == Registration(False, None, None)


@pytest.mark.parametrize("aggregate", ["true", 1, "yes", None, {}, False])
def test_aggregate_must_be_the_boolean_true(aggregate: Any) -> None:
    frame = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": aggregate}}
    result = registration(frame)
    assert result is not None
    assert result.aggregate is False


def test_register_with_slot_and_hello() -> None:
    hello = {"device_id": "24:6f:28:aa:bb:cc", "firmware": "pump 1.2.0", "schema": "0123456789abcdef"}
    frame = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {"slot": "pump-1", "aggregate": True, "hello": hello},
    }
    assert registration(frame) == Registration(aggregate=True, hello=hello, slot="pump-1")


@pytest.mark.parametrize(("hello", "slot"), [("v1", 5), ([], ["pump"]), (None, None)])
def test_malformed_hello_and_slot_are_ignored(hello: Any, slot: Any) -> None:
    frame = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"hello": hello, "slot": slot}}
    assert registration(frame) == Registration(False, None, None)


def test_non_object_params_count_as_none() -> None:
    frame = {"jsonrpc": "2.0", "method": "notifications/register", "params": [True]}
    assert registration(frame) == Registration(False, None, None)


def test_legacy_mcp_broker_register_frame() -> None:
    assert registration({"type": "register", "aggregate": True}) == Registration(True, None, None)
    assert registration({"type": "register"}) == Registration(False, None, None)
    assert registration({"type": "register", "aggregate": "true"}) == Registration(False, None, None)


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "notifications/register", "params": {"aggregate": True}},  # a request
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "type": "register", "aggregate": True},  # JSON-RPC without the method
        {"type": "mcp", "payload": PING},  # xiaozhi envelope
        PING,
        "register",
        None,
        [REGISTER],
    ],
)
def test_not_a_register_frame(value: Any) -> None:
    assert registration(value) is None


def test_registration_envelope_on_a_multiplexed_link() -> None:
    frame = orjson.loads(b'{"provider":"pump-1","payload":' + orjson.dumps(REGISTER) + b"}")
    envelope = decode_envelope(frame)
    assert envelope is not None
    assert envelope.provider == "pump-1"
    assert registration(envelope.payload) == Registration(True, None, None)


# -- framing mismatch (first frame) -------------------------------------------------------------


def test_envelope_sent_to_a_dedicated_link_is_a_mismatch() -> None:
    assert looks_like_envelope({"provider": "pump-1", "payload": PING})
    assert looks_like_envelope({"provider": "pump-1", "payload": REGISTER})


@pytest.mark.parametrize(
    "value",
    [
        PING,
        REGISTER,
        {"type": "register", "aggregate": True},
        # A JSON-RPC message that happens to have these keys is still JSON-RPC.
        {"jsonrpc": "2.0", "method": "x", "provider": "a", "payload": 1},
        {"provider": "", "payload": PING},
        [PING],
        "text",
    ],
)
def test_ordinary_traffic_on_a_dedicated_link_is_not_a_mismatch(value: Any) -> None:
    assert not looks_like_envelope(value)


def test_bare_jsonrpc_sent_to_the_multiplexed_endpoint_is_a_mismatch() -> None:
    assert looks_like_bare_jsonrpc(PING)
    assert looks_like_bare_jsonrpc(REGISTER)
    assert looks_like_bare_jsonrpc({"jsonrpc": "2.0", "id": 1, "result": {}})


@pytest.mark.parametrize(
    "value",
    [
        {"provider": "pump-1", "payload": PING},
        {"type": "register", "aggregate": True},
        {"jsonrpc": "2.0", "method": "x", "provider": "a", "payload": 1},
        [PING],
        None,
    ],
)
def test_envelopes_and_non_jsonrpc_on_the_multiplexed_endpoint_are_not_a_mismatch(value: Any) -> None:
    assert not looks_like_bare_jsonrpc(value)
