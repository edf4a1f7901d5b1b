"""Event-stream decoding does work linear in the answer's size, however the bytes are chunked (counted
in lines of Python run, not timed: bench/big_answer.py times it), and still holds nothing past the event
bound while a long line arrives."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from gateway.southbound.remote import sse_events
from gateway.southbound.remote.sse_events import SseDecoder, SseEvent, SseTooLarge

LIMIT = 64 * 1024 * 1024


def long_line_chunks(chunk_count: int, chunk_size: int) -> list[bytes]:
    """One `data:` line of chunk_count * chunk_size bytes, cut into equal chunks, then its event end."""
    body = b"data: " + b"x" * (chunk_count * chunk_size - len(b"data: "))
    return [body[offset : offset + chunk_size] for offset in range(0, len(body), chunk_size)] + [b"\n\n"]


def decoder_lines_executed(chunks: list[bytes]) -> int:
    """Python lines run inside the decoder module while feeding `chunks`: a proxy for its work."""
    count = 0
    module_file = sse_events.__file__

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        nonlocal count
        if frame.f_code.co_filename != module_file:
            return None
        if event == "line":
            count += 1
        return tracer

    decoder = SseDecoder(LIMIT)
    events: list[SseEvent] = []
    sys.settrace(tracer)
    try:
        for chunk in chunks:
            events.extend(decoder.feed(chunk))
    finally:
        sys.settrace(None)
    assert [len(event.data) for event in events] == [sum(map(len, chunks)) - len(b"data: \n\n")]
    return count


def test_the_work_per_chunk_does_not_grow_with_the_unfinished_line() -> None:
    # Four times the chunks of one long line: four times the work when each chunk is read once,
    # sixteen times when every chunk rescans what came before.
    few = decoder_lines_executed(long_line_chunks(32, 64))
    many = decoder_lines_executed(long_line_chunks(128, 64))
    assert many / few < 6, (few, many)


def test_the_bound_holds_while_a_long_line_arrives() -> None:
    chunks = long_line_chunks(64, 1000)
    # Refused at the chunk that crosses the bound, not at the line's end.
    decoder = SseDecoder(10_000)
    fed = 0
    with pytest.raises(SseTooLarge):
        for chunk in chunks:
            decoder.feed(chunk)
            fed += len(chunk)
    assert fed <= 10_000
    # Skipped: never more than the bound held between chunks, and the head kept.
    decoder = SseDecoder(10_000, skip_oversized=True)
    events: list[SseEvent] = []
    for chunk in [*chunks, b"data: next\n\n"]:
        events.extend(decoder.feed(chunk))
        assert len(decoder._buffer) + decoder._data_bytes <= 10_000
    assert [(event.oversized, event.data[:3]) for event in events] == [(True, "xxx"), (False, "nex")]
