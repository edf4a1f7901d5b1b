"""Reading an answer's id from its first bytes (gateway/core/answer_head.py)."""

from __future__ import annotations

import pytest

from gateway.core.answer_head import HEAD_BYTES, answer_id

BIG_TEXT = b'{"content":[{"type":"text","text":"' + b"x" * 2 * HEAD_BYTES


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":"brk-5","result":' + BIG_TEXT, "brk-5"),
        (b'{"jsonrpc": "2.0", "id": 17, "result": {', 17),
        (b'\r\n {\n  "id" : -3 ,\n  "error" : {"code": -32603, "message": "', -3),
        (b'{"jsonrpc":"2.0","error":{"code":1,"message":"a"},"id":"brk-9"}', "brk-9"),
        (b'{"id":"a\\"b","result":', 'a"b'),  # an escaped quote inside the id
        (b'{"jsonrpc":"2.0","result":{"id":"brk-1"},"id":"brk-2","x":1}', "brk-2"),  # the top-level one
        (b'{"id":"","result":', ""),
    ],
)
def test_the_id_of_an_answer_is_read_from_its_head(head: bytes, expected: object) -> None:
    assert answer_id(head[:HEAD_BYTES]) == expected


@pytest.mark.parametrize(
    "head",
    [
        b'{"jsonrpc":"2.0","result":{"id":"brk-5","text":"' + b"x" * HEAD_BYTES,  # only a nested id
        b'{"jsonrpc":"2.0","result":' + BIG_TEXT + b'"}]},"id":"brk-5"}',  # the id past the head
        b'{"jsonrpc":"2.0","id":"brk-5","method":"sampling/createMessage","params":{',  # a request
        b'{"jsonrpc":"2.0","id":"brk-5","params":{"a":1},"x":"' + b"y" * HEAD_BYTES,  # no outcome in the head
        b'{"jsonrpc":"2.0","id":"brk-5"}',  # no outcome at all
        b'{"id":12',  # an integer cut off by the end of the head
        b'{"id":12.5,"result":{}}',  # not an integer
        b'{"id":1e3,"result":{}}',
        b'{"id":01,"result":{}}',
        b'{"id":true,"result":{}}',
        b'{"id":null,"result":{}}',
        b'{"id":"brk-' + b"5" * HEAD_BYTES,  # a string cut off
        b'[{"jsonrpc":"2.0","id":"brk-5","result":{}}]',  # a batch
        b'"brk-5"',
        b"",
        b'{"jsonrpc" "2.0","id":"brk-5","result":{}}',  # not JSON
    ],
)
def test_no_id_is_read_where_it_cannot_be_told_safely(head: bytes) -> None:
    assert answer_id(head[:HEAD_BYTES]) is None
