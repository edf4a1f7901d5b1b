"""The test-side reader of DNS questions (tests/support/dns_query.py), on hand-built datagrams."""

from __future__ import annotations

import struct

import pytest

from tests.support.dns_query import MalformedMessage, Question, query_questions

PTR = 12


def _labels(name: str) -> bytes:
    return b"".join(bytes([len(part)]) + part.encode() for part in name.rstrip(".").split(".")) + b"\0"


def _header(flags: int, questions: int) -> bytes:
    return struct.pack("!HHHHHH", 0, flags, questions, 0, 0, 0)


def test_reads_each_question_with_its_unicast_bit_and_follows_name_pointers() -> None:
    first = _labels("_mcp-broker._tcp.local.")
    # The second name is "_mcp" followed by a pointer to "_tcp.local." inside the first one.
    tcp_at = 12 + 1 + len("_mcp-broker")
    second = b"\x04_mcp" + struct.pack("!H", 0xC000 | tcp_at)
    data = _header(0, 2) + first + struct.pack("!HH", PTR, 0x8001) + second + struct.pack("!HH", PTR, 0x0001)
    assert query_questions(data) == [
        Question("_mcp-broker._tcp.local.", PTR, unicast=True),
        Question("_mcp._tcp.local.", PTR, unicast=False),
    ]


def test_a_response_has_no_questions_to_report() -> None:
    assert query_questions(_header(0x8400, 1) + _labels("_mcp._tcp.local.") + struct.pack("!HH", PTR, 1)) == []


@pytest.mark.parametrize(
    "data",
    [
        b"\0" * 11,  # shorter than a header
        _header(0, 1) + b"\x04_mc",  # label cut short
        _header(0, 1) + _labels("_mcp._tcp.local.") + b"\0",  # type and class cut short
        _header(0, 1) + struct.pack("!H", 0xC000 | 12),  # a pointer to itself
    ],
)
def test_a_broken_datagram_is_a_named_error(data: bytes) -> None:
    with pytest.raises(MalformedMessage):
        query_questions(data)


def test_a_name_of_many_labels_is_read_whole() -> None:
    # Only compression pointers are bounded; a name may have up to 127 labels (255 bytes).
    name = ".".join(["a"] * 100) + ".local."
    assert query_questions(_header(0, 1) + _labels(name) + struct.pack("!HH", PTR, 1)) == [
        Question(name, PTR, unicast=False)
    ]
