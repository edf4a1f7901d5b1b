"""JSON-RPC classification and error normalisation (gateway/core/jsonrpc.py): bytes in, a typed view out."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.core import jsonrpc
from gateway.core.jsonrpc import Kind


@pytest.mark.parametrize("request_id", ["brk-1", "", 0, 7, -3, 2**53])
def test_request_with_string_or_integer_id(request_id: Any) -> None:
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {}})
    assert message.kind is Kind.REQUEST
    assert message.id == request_id
    assert message.method == "tools/list"
    assert message.params == {}
    assert message.problem == ""


def test_request_without_params_has_no_params() -> None:
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert message.kind is Kind.REQUEST
    assert message.params is None


def test_notification_has_no_id() -> None:
    message = jsonrpc.classify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert message.kind is Kind.NOTIFICATION
    assert message.id is None
    assert message.method == "notifications/initialized"


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": "brk-4", "result": {}},
        {"jsonrpc": "2.0", "id": 4, "result": None},
        {"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "nope"}},
        # Error responses to unparsable requests carry id null; they are still responses.
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse"}},
    ],
)
def test_response_with_result_or_error(body: dict[str, Any]) -> None:
    message = jsonrpc.classify(body)
    assert message.kind is Kind.RESPONSE
    assert message.id == body["id"]
    assert message.method == ""


def test_batch_is_its_own_kind_with_an_actionable_problem() -> None:
    message = jsonrpc.classify([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert message.kind is Kind.BATCH
    assert "batches are not supported" in message.problem
    # A batch has no single id or method to route by.
    assert message.id is None
    assert message.method == ""
    assert message.params is None


@pytest.mark.parametrize("value", ["text", 42, 1.5, True, None])
def test_non_object_is_invalid(value: Any) -> None:
    message = jsonrpc.classify(value)
    assert message.kind is Kind.INVALID
    assert message.problem == "a JSON-RPC message must be a JSON object"
    assert message.id is None


@pytest.mark.parametrize("method", ["", 5, ["ping"], {"name": "ping"}, True])
def test_bad_method_is_invalid(method: Any) -> None:
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": method})
    assert message.kind is Kind.INVALID
    assert message.problem == '"method" must be a non-empty string'


@pytest.mark.parametrize("request_id", [True, False, 1.0, 2.5, None, [1], {"n": 1}])
def test_request_id_must_be_string_or_integer(request_id: Any) -> None:
    # bool is an int subclass in Python; JSON true is still not a valid id. null is not an id a
    # request may carry (it would make the answer indistinguishable from a parse-error reply).
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": request_id, "method": "tools/call"})
    assert message.kind is Kind.INVALID
    assert message.problem == '"id" must be a string or an integer'


@pytest.mark.parametrize("params", ["a", 3, True])
def test_params_must_be_structured(params: Any) -> None:
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    assert message.kind is Kind.INVALID
    assert message.problem == '"params" must be an object'


def test_positional_params_pass_classification_but_are_not_an_object() -> None:
    # JSON-RPC allows by-position params; MCP never uses them, so the typed view offers none.
    message = jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1, 2]})
    assert message.kind is Kind.REQUEST
    assert message.params is None


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0"},
        {"jsonrpc": "2.0", "id": 1},  # neither result nor error
        {"jsonrpc": "2.0", "result": {}},  # a response without id
        {},
    ],
)
def test_neither_request_nor_response_is_invalid(body: dict[str, Any]) -> None:
    message = jsonrpc.classify(body)
    assert message.kind is Kind.INVALID
    assert "not a request, notification or response" in message.problem


def test_parse_accepts_bytes_and_text_in_any_key_order_and_spacing() -> None:
    from_bytes = jsonrpc.parse(b'{ "method" : "ping" ,\n "id":"brk-9", "jsonrpc":"2.0" }')
    from_text = jsonrpc.parse('{"id":3,"jsonrpc":"2.0","result":{"ok":true}}')
    assert from_bytes.kind is Kind.REQUEST
    assert from_bytes.id == "brk-9"
    assert from_text.kind is Kind.RESPONSE
    assert from_text.body["result"] == {"ok": True}


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b'{"id":1,}', b"\xff\xfe", "{'single': 1}"])
def test_parse_turns_malformed_json_into_an_invalid_message(data: bytes | str) -> None:
    message = jsonrpc.parse(data)
    assert message.kind is Kind.INVALID
    assert message.body is None
    assert message.problem.startswith("malformed JSON: ")


# -- the nesting bound (limits.max_json_depth) ---------------------------------------------------


def chain(levels: int, *kinds: str) -> bytes:
    """JSON text `levels` containers deep, cycling through `kinds` ("[" or "{") from the outside in."""
    kinds = kinds or ("[",)
    openers = [kinds[level % len(kinds)] for level in range(levels)]
    text = "".join("[" if kind == "[" else '{"k":' for kind in openers) + "0"
    return (text + "".join("]" if kind == "[" else "}" for kind in reversed(openers))).encode()


@pytest.mark.parametrize("kinds", [("[",), ("{",), ("{", "["), ("[", "{", "{")])
def test_parse_takes_json_as_deep_as_the_bound_and_refuses_one_level_more(kinds: tuple[str, ...]) -> None:
    assert jsonrpc.parse(chain(64, *kinds), 64).limit == ""
    deeper = jsonrpc.parse(chain(65, *kinds), 64)
    assert deeper.kind is Kind.INVALID
    assert deeper.limit == "max_json_depth"
    assert deeper.problem.startswith("JSON nested more than 64 levels deep")
    assert "limits.max_json_depth" in deeper.problem


@pytest.mark.parametrize("levels", [65, 254, 255, 300, 1024])
def test_json_deeper_than_the_bound_is_refused_as_bytes_and_as_text(levels: int) -> None:
    # orjson reads up to 1024 levels and writes at most 254: nothing in between may get in.
    assert jsonrpc.parse(chain(levels, "{", "["), 64).limit == "max_json_depth"
    assert jsonrpc.parse(chain(levels).decode(), 64).limit == "max_json_depth"


def test_without_a_bound_parse_takes_whatever_orjson_reads() -> None:
    assert jsonrpc.parse(chain(1024)).kind is Kind.BATCH
    assert jsonrpc.parse(chain(1025)).problem.startswith("malformed JSON")


def test_a_refused_message_keeps_only_its_id_and_method() -> None:
    request = b'{"jsonrpc":"2.0","id":"c-7","method":"tools/call","params":{"a":' + chain(100) + b"}}"
    refused = jsonrpc.parse(request, 64)
    assert refused.kind is Kind.INVALID
    assert refused.body == {"id": "c-7", "method": "tools/call"}
    assert (refused.id, refused.method) == ("c-7", "tools/call")
    answer = jsonrpc.parse(b'{"jsonrpc":"2.0","id":3,"result":' + chain(100) + b"}", 64)
    assert answer.body == {"id": 3}
    # An id that is no id (nested itself, true) is not kept, nor is anything of a message that is no object.
    assert jsonrpc.parse(b'{"id":' + chain(100) + b',"method":"x"}', 64).body == {"method": "x"}
    assert jsonrpc.parse(b'{"id":true,"result":' + chain(100) + b"}", 64).body == {}
    assert jsonrpc.parse(chain(100), 64).body == {}


def test_wide_and_string_heavy_messages_pass_however_many_brackets_they_hold() -> None:
    # Far more brackets than the bound, none of them deep: the walk judges them, and lets them pass.
    rows = [{"t": n, "v": [n, n + 1], "tags": {"unit": "bar"}} for n in range(500)]
    wide = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"rows": rows}}})
    assert wide.count(b"{") > 64
    assert jsonrpc.parse(wide, 16).kind is Kind.RESPONSE
    text = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"text": "{[" * 500}]}})
    assert jsonrpc.parse(text, 16).kind is Kind.RESPONSE
    assert jsonrpc.parse(text.decode(), 16).kind is Kind.RESPONSE
    assert jsonrpc.parse(b'"' + b"[" * 100 + b'"', 16).problem == "a JSON-RPC message must be a JSON object"


def test_the_walk_finds_one_deep_branch_among_many_shallow_ones() -> None:
    shallow = ",".join('{"a":[1,{"b":2}]}' for _ in range(200))
    deep = chain(62).decode()
    value = orjson.loads(f'[{shallow},{{"x":{deep}}}]')  # 1 + 1 + 62 levels
    data = orjson.dumps(value)
    assert not jsonrpc.nested_deeper(data, value, 64)
    assert jsonrpc.nested_deeper(data, value, 63)


def test_an_answer_that_cannot_be_encoded_becomes_an_internal_error_under_its_id() -> None:
    error = jsonrpc.unencodable_answer({"jsonrpc": "2.0", "id": 9, "result": {1, 2}}, "Type is not JSON serializable")
    assert error["id"] == 9
    assert error["error"]["code"] == jsonrpc.INTERNAL_ERROR
    assert "(Type is not JSON serializable)" in error["error"]["message"]
    assert error["error"]["data"] == {"reason": "unencodable"}
    assert jsonrpc.unencodable_answer({"id": [1], "result": None}, "x")["id"] is None
    assert jsonrpc.unencodable_answer(None, "x")["id"] is None


def test_loads_raises_parse_error_for_malformed_json() -> None:
    with pytest.raises(jsonrpc.ParseError):
        jsonrpc.loads(b"{")


def test_builders_produce_compact_wire_bytes() -> None:
    assert jsonrpc.dumps(jsonrpc.result_response("brk-1", {})) == b'{"jsonrpc":"2.0","id":"brk-1","result":{}}'
    assert (
        jsonrpc.dumps(jsonrpc.error_response(7, -32601, "Method not found"))
        == b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}'
    )
    assert jsonrpc.error_object(-32000, "m", {"slot": "a"}) == {"code": -32000, "message": "m", "data": {"slot": "a"}}
    assert jsonrpc.notification("notifications/initialized") == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
    }
    assert jsonrpc.notification("n", {"a": 1}) == {"jsonrpc": "2.0", "method": "n", "params": {"a": 1}}


# -- normalize_error ----------------------------------------------------------------------------


def test_well_formed_error_is_kept_as_is() -> None:
    error = {"code": -32602, "message": "bad", "data": {"field": "x"}}
    assert jsonrpc.normalize_error(error) == error


def test_error_without_code_becomes_internal_error_keeping_the_message() -> None:
    assert jsonrpc.normalize_error({"message": "motor stalled"}) == {"code": -32603, "message": "motor stalled"}


@pytest.mark.parametrize("code", ["-32000", 1.5, True, None])
def test_error_with_a_non_integer_code_becomes_internal_error(code: Any) -> None:
    fixed = jsonrpc.normalize_error({"code": code, "message": "m", "data": [1]})
    assert fixed == {"code": -32603, "message": "m", "data": [1]}


def test_error_without_message_gets_one_and_keeps_its_code() -> None:
    fixed = jsonrpc.normalize_error({"code": -32000})
    assert fixed == {"code": -32000, "message": "Provider returned an error without a message"}


def test_error_with_a_non_string_message_gets_one() -> None:
    fixed = jsonrpc.normalize_error({"code": -1, "message": 42})
    assert fixed == {"code": -1, "message": "Provider returned an error without a message"}


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("motor stalled", "motor stalled"),
        (17, "17"),
        (None, "Provider returned an error"),
    ],
)
def test_non_object_error_becomes_internal_error(error: Any, message: str) -> None:
    assert jsonrpc.normalize_error(error) == {"code": -32603, "message": message}
