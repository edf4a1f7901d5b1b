"""Which pending requests a refused provider answer names, and what each caller hears
(gateway/core/refused_answers.py)."""

from __future__ import annotations

from gateway.core import jsonrpc
from gateway.core.refused_answers import refused_answers

SLOT = "pump-1"
PENDING = {"gw-1": object(), "gw-2": object(), 7: object()}


def refused_ids(data: bytes | str) -> list[object]:
    return [request_id for request_id, _ in refused_answers(SLOT, jsonrpc.parse(data), PENDING)]


def test_the_id_at_the_head_of_text_that_is_not_json_names_the_request() -> None:
    surrogate = b'{"jsonrpc":"2.0","id":"gw-1","result":{"content":[{"type":"text","text":"\\ud800"}]}}'
    [(request_id, failure)] = refused_answers(SLOT, jsonrpc.parse(surrogate), PENDING)
    assert request_id == "gw-1"
    assert failure.code == jsonrpc.INTERNAL_ERROR
    assert failure.message.startswith(f'Provider "{SLOT}" answered, but the gateway refused the answer: malformed JSON')
    assert failure.data == {"slot": SLOT, "reason": "answer_refused"}
    # Text as a WebSocket hands it over, and an integer id.
    assert refused_ids('{"id": 7, "result": {"text": "cut') == [7]


def test_text_that_names_no_pending_answer_names_nothing() -> None:
    assert refused_ids(b'{"jsonrpc":"2.0","id":"gw-9","result":{"t":"\\ud800"}}') == []  # not pending
    assert refused_ids(b'{"jsonrpc":"2.0","id":"gw-1","method":"x","params":{"t":"\\ud800"}}') == []  # a request
    assert refused_ids(b'{"jsonrpc":"2.0","result":{"id":"gw-1","t":"\\ud800"}}') == []  # an id nested in a result
    assert refused_ids(b"Traceback (most recent call last):") == []


def test_every_answer_in_a_batch_that_names_a_pending_request_is_refused_once() -> None:
    batch = jsonrpc.dumps(
        [
            {"jsonrpc": "2.0", "id": "gw-2", "result": {}},
            {"jsonrpc": "2.0", "id": "gw-1", "error": {"code": 1, "message": "no"}},
            {"jsonrpc": "2.0", "id": "gw-2", "result": {}},
            {"jsonrpc": "2.0", "id": 7, "method": "ping"},
            {"jsonrpc": "2.0", "id": True, "result": {}},
            "text",
        ]
    )
    refused = refused_answers(SLOT, jsonrpc.parse(batch), PENDING)
    assert [request_id for request_id, _ in refused] == ["gw-2", "gw-1"]
    assert all("inside a JSON-RPC batch, which providers may not send" in failure.message for _, failure in refused)


def test_an_answer_without_outcome_and_one_nested_too_deep_keep_their_errors() -> None:
    [(_, failure)] = refused_answers(SLOT, jsonrpc.parse(b'{"jsonrpc":"2.0","id":"gw-1"}'), PENDING)
    assert failure.data == {"slot": SLOT, "reason": "malformed_answer"}
    deep = b'{"jsonrpc":"2.0","id":"gw-1","result":' + b"[" * 70 + b"]" * 70 + b"}"
    [(_, failure)] = refused_answers(SLOT, jsonrpc.parse(deep, 64), PENDING)
    assert failure.data == {"slot": SLOT, "reason": "answer_refused", "limit": "max_json_depth"}
