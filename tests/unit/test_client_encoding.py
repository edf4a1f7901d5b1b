"""A message for a client that JSON cannot hold (gateway/northbound/http_io.py, event_stream.py): an
answer becomes its -32603 error, never a 500; a notification or request is dropped, never the stream."""

from __future__ import annotations

from typing import Any

import orjson

from gateway import http_answers as http_io
from gateway.northbound import event_stream


def deeper_than_orjson_writes() -> Any:
    value: Any = "bottom"
    for _ in range(300):
        value = [value]
    return value


def test_an_answer_json_cannot_hold_is_an_error_under_its_id_on_the_same_status() -> None:
    for result in (deeper_than_orjson_writes(), {1, 2}):
        response = http_io.json_response({"jsonrpc": "2.0", "id": 4, "result": result}, headers={"X-Kept": "1"})
        assert (response.status, response.content_type, response.headers["X-Kept"]) == (200, "application/json", "1")
        assert isinstance(response.body, bytes)
        body = orjson.loads(response.body)
        assert body["id"] == 4
        assert body["error"]["code"] == -32603
        assert body["error"]["message"].startswith("The gateway could not encode this answer as JSON (")
        assert body["error"]["data"] == {"reason": "unencodable"}


def test_an_sse_answer_json_cannot_hold_carries_the_error_instead() -> None:
    event = event_stream.encode_event({"jsonrpc": "2.0", "id": "a", "result": deeper_than_orjson_writes()})
    head, data = event.split(b"\ndata: ")
    assert head == b"event: message" and data.endswith(b"\n\n")
    answer = orjson.loads(data)
    assert (answer["id"], answer["error"]["code"]) == ("a", -32603)


def test_a_notification_or_request_json_cannot_hold_is_dropped() -> None:
    notification = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": {1, 2}}}
    assert event_stream.encode_event(notification) == b""
    request = {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": deeper_than_orjson_writes()}
    assert http_io.encode_refused(request, TypeError("Recursion limit reached")) is None
    assert event_stream.encode_event({"jsonrpc": "2.0", "method": "ping"}) == (
        b'event: message\ndata: {"jsonrpc":"2.0","method":"ping"}\n\n'
    )
