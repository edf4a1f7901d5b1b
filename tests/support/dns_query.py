"""The question section of a DNS message (RFC 1035 §4.1), read straight from the datagram.

The mDNS tests check which questions `discover` puts on the link. zeroconf parses messages too, but
only in private modules (`zeroconf._protocol`), which a new release may move; this reader needs
nothing but the wire format."""

from __future__ import annotations

import struct
from dataclasses import dataclass

QR_RESPONSE = 0x8000
"""Header flag: the message is a response, not a query."""
QU_BIT = 0x8000
"""Top bit of a question's class in mDNS: the asker wants a unicast answer (RFC 6762 §5.4)."""
_MAX_POINTERS = 32
"""Compression pointers followed in one name before the message counts as malformed (a loop)."""


class MalformedMessage(ValueError):
    """The datagram is cut short or its names do not decode."""


@dataclass(frozen=True)
class Question:
    name: str  # dotted, with the trailing dot zeroconf uses: "_mcp._tcp.local."
    qtype: int
    unicast: bool  # the QU bit


def _name(data: bytes, offset: int) -> tuple[str, int]:
    """The name at `offset` and the offset just past it (past the first pointer, if any)."""
    labels: list[str] = []
    end: int | None = None
    pointers = 0
    while True:
        if offset >= len(data):
            raise MalformedMessage("name runs past the end")
        length = data[offset]
        if length & 0xC0 == 0xC0:  # pointer to a name earlier in the message
            pointers += 1
            if pointers > _MAX_POINTERS:
                raise MalformedMessage("too many compression pointers")
            if offset + 1 >= len(data):
                raise MalformedMessage("pointer cut short")
            end = offset + 2 if end is None else end
            offset = ((length & 0x3F) << 8) | data[offset + 1]
            continue
        if length == 0:
            return ".".join(labels) + ".", offset + 1 if end is None else end
        label = data[offset + 1 : offset + 1 + length]
        if len(label) != length:
            raise MalformedMessage("label cut short")
        labels.append(label.decode("utf-8", "replace"))
        offset += 1 + length


def query_questions(data: bytes) -> list[Question]:
    """The questions of a query; [] for a response. Raises MalformedMessage for a broken datagram."""
    if len(data) < 12:
        raise MalformedMessage("shorter than a DNS header")
    flags, count = struct.unpack_from("!2xHH", data)
    if flags & QR_RESPONSE:
        return []
    questions: list[Question] = []
    offset = 12
    for _ in range(count):
        name, offset = _name(data, offset)
        if offset + 4 > len(data):
            raise MalformedMessage("question cut short")
        qtype, qclass = struct.unpack_from("!HH", data, offset)
        offset += 4
        questions.append(Question(name, qtype, bool(qclass & QU_BIT)))
    return questions
