"""Remote upstreams, pure parts: an event over the bound skipped to its end with its head kept, why a
body read stopped in plain words, and which server messages get the gateway's relatedRequest tag."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.http_exceptions import ContentEncodingError, TransferEncodingError

from gateway.core.answer_head import HEAD_BYTES, answer_id
from gateway.core.relay import RELATED_REQUEST_KEY
from gateway.southbound.remote.http import CLOSED_MID_ANSWER, read_failure
from gateway.southbound.remote.sse_events import SseDecoder, SseEvent
from gateway.southbound.remote.wire import related_to

ANSWER = b'{"jsonrpc":"2.0","id":"brk-9","result":{"content":[{"type":"text","text":"' + b"y" * 3000 + b'"}]}}'


def skipping(*chunks: bytes, limit: int = 1024) -> list[SseEvent]:
    decoder = SseDecoder(limit, skip_oversized=True)
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_an_event_over_the_bound_is_skipped_to_its_end_and_the_next_one_read() -> None:
    stream = b"data: " + ANSWER + b'\r\n\r\nevent: message\ndata: {"after": 1}\n\n'
    whole = skipping(stream)
    assert whole == [
        SseEvent("message", ANSWER[:HEAD_BYTES].decode(), oversized=True),
        SseEvent("message", '{"after": 1}'),
    ]
    assert answer_id(whole[0].data.encode()) == "brk-9"
    # However the bytes arrive, the same events come out, and nothing past the bound is held.
    for cut in range(1, len(stream), 97):
        decoder = SseDecoder(1024, skip_oversized=True)
        events = decoder.feed(stream[:cut])
        assert len(decoder._buffer) + decoder._data_bytes <= 1024 + len(b"data: ")
        assert events + decoder.feed(stream[cut:]) == whole, cut


def test_an_event_over_the_bound_in_many_data_lines_keeps_the_first_ones_as_its_head() -> None:
    lines = [b"data: " + str(index % 10).encode() * 100 + b"\n" for index in range(1, 13)]
    events = skipping(*lines, b"\n", b"data: next\n\n")
    assert [event.oversized for event in events] == [True, False]
    assert events[0].data == ("1" * 100 + "\n" + "2" * 100 + "\n" + "3" * 54)[:HEAD_BYTES]
    assert events[1].data == "next"


def test_a_blank_line_ends_a_skipped_event_only_when_it_is_one() -> None:
    # A long line split over chunks, then a CRLF split across chunks: neither is an empty line.
    events = skipping(b"data: " + b"x" * 2000, b"x" * 10 + b"\r", b"\ndata: more\r\n", b"\r\n", b"data: ok\n\n")
    assert [(event.oversized, event.data[:3]) for event in events] == [(True, "xxx"), (False, "ok")]


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (aiohttp.ClientPayloadError("Response payload is not completed: <TransferEncodingError: 400, ...>"), None),
        (aiohttp.ServerDisconnectedError(), None),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), None),
        (ConnectionResetError(), None),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), "timed out waiting for the rest"),
    ],
)
def test_a_read_that_stopped_is_named_in_plain_words(failure: BaseException, words: str | None) -> None:
    assert read_failure(failure).startswith(words or CLOSED_MID_ANSWER)
    assert read_failure(failure, "the upstream closed the connection").startswith(
        words or "the upstream closed the connection"
    )


def test_a_payload_error_is_told_by_its_cause() -> None:
    cut = aiohttp.ClientPayloadError("Response payload is not completed")
    cut.__cause__ = TransferEncodingError("Not enough data to satisfy transfer length header.")
    assert read_failure(cut) == CLOSED_MID_ANSWER
    undecodable = aiohttp.ClientPayloadError("400, message='Can not decode content-encoding: gzip'")
    undecodable.__cause__ = ContentEncodingError("gzip")
    assert read_failure(undecodable) == "the upstream's answer could not be decompressed (its Content-Encoding)"


def test_progress_is_never_tagged_with_the_request_it_belongs_to() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
    assert related_to(progress, "brk-4") is None  # routed by its token, forwarded as the server wrote it
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    tagged = related_to(log, "brk-4")
    assert tagged is not None and tagged["params"]["_meta"] == {RELATED_REQUEST_KEY: "brk-4"}
