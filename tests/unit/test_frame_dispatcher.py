"""The publisher's dispatcher: what it takes from the SDK is there, and its shortcuts change nothing."""

from __future__ import annotations

import inspect
import json
from typing import Any

import mcp_types as types
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage

from gateway.publish.frame_dispatcher import FrameDispatcher, parse
from gateway.publish.frame_writer import FrameWriter


def sdk_parse(data: bytes) -> SessionMessage | Exception:
    """What the SDK's own validation makes of a frame (the path parse() leaves the rest to)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(data, by_name=False))
    except Exception as exc:
        return exc


def same(ours: SessionMessage | Exception, sdk: SessionMessage | Exception) -> bool:
    if isinstance(ours, Exception) or isinstance(sdk, Exception):
        return isinstance(ours, Exception) and isinstance(sdk, Exception)
    return (
        type(ours.message) is type(sdk.message)
        and ours.message.model_dump(exclude_unset=True) == sdk.message.model_dump(exclude_unset=True)
        and ours.message.model_fields_set == sdk.message.model_fields_set
    )


def test_the_sdk_internals_the_dispatcher_overrides_or_calls_are_there() -> None:
    """mcp is pinned below 2.4 for these; a newer SDK that moved them fails here, not in the field."""
    for name, parameters in {
        "_dispatch": ["self", "item", "on_request", "on_notify", "sender_ctx"],
        "_write_result": ["self", "request_id", "result"],
        "_fan_out_closed": ["self"],
        "run": ["self", "on_request", "on_notify", "on_notify_intercept", "task_status"],
    }.items():
        method = getattr(JSONRPCDispatcher, name)
        assert list(inspect.signature(method).parameters) == parameters, name
    dispatcher = FrameDispatcher(FrameWriter(_collect([])))
    for attribute in ("_tg", "_running", "_closed", "_on_notify_intercept", "_write_stream", "_in_flight"):
        assert hasattr(dispatcher, attribute), attribute


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1}}},
        {"jsonrpc": "2.0", "id": "brk-7", "method": "ping"},
        {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": None},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},  # a bool is no request id
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "extra": 1},  # left to the SDK, which drops the key
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        [],
        "text",
    ],
)
def test_parse_agrees_with_the_sdk(frame: Any) -> None:
    data = orjson.dumps(frame)
    assert same(parse(data), sdk_parse(data))


def test_parse_builds_a_plain_request_itself() -> None:
    message = parse(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}')
    assert isinstance(message, SessionMessage)
    assert isinstance(message.message, types.JSONRPCRequest)
    assert message.message.params == {"name": "x"}
    assert message.message.model_fields_set == {"jsonrpc", "id", "method", "params"}


@pytest.mark.parametrize("data", [b"", b"{", b'{"jsonrpc":"2.0","id":1,"method":"ping"', b"\xff", b"[1,2]"])
def test_a_malformed_frame_is_the_error_the_sdk_answers(data: bytes) -> None:
    assert isinstance(parse(data), Exception)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
frames = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.integers(-5, 2**66) | st.text(max_size=4) | st.booleans() | st.none() | st.floats(allow_nan=False),
        "method": st.text(max_size=12) | st.integers(),
        "params": st.none() | st.dictionaries(st.text(max_size=4), json_values, max_size=3) | json_values,
        "result": json_values,
        "error": st.fixed_dictionaries({"code": st.integers(-40000, 0), "message": st.text(max_size=5)}),
    },
)


@settings(max_examples=300, deadline=None)
@given(frames)
def test_parse_agrees_with_the_sdk_on_any_frame(frame: dict[str, Any]) -> None:
    data = json.dumps(frame).encode()  # json, not orjson: integers past 64 bits are JSON too
    assert same(parse(data), sdk_parse(data))


def _collect(sent: list[bytes]) -> Any:
    async def send(data: bytes) -> None:
        sent.append(data)

    return send


async def test_a_result_is_written_as_the_sdk_would_write_it() -> None:
    sent: list[bytes] = []
    dispatcher = FrameDispatcher(FrameWriter(_collect(sent)))
    result = {"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}, "isError": False}
    await dispatcher._write_result("gw-1", result)
    # A set is no JSON for orjson: such a result takes the SDK's own model and dump, as before.
    await dispatcher._write_result(2, {"tags": {"a"}})
    assert [orjson.loads(frame) for frame in sent] == [
        {"jsonrpc": "2.0", "id": "gw-1", "result": result},
        {"jsonrpc": "2.0", "id": 2, "result": {"tags": ["a"]}},
    ]


async def test_a_result_after_the_writer_closed_is_dropped() -> None:
    sent: list[bytes] = []
    writer = FrameWriter(_collect(sent))
    dispatcher = FrameDispatcher(writer)
    await writer.aclose()
    await dispatcher._write_result(1, {})
    assert sent == []


async def test_deliver_before_run_is_a_named_error() -> None:
    dispatcher = FrameDispatcher(FrameWriter(_collect([])))
    with pytest.raises(RuntimeError, match="before run"):
        await dispatcher.deliver(parse(b'{"jsonrpc":"2.0","id":1,"method":"ping"}'))
