"""Serial framing (docs/protocol-serial-mqtt.md, "Frames"): COBS(JSON + CRC-32 LE) + 0x00, and the
gateway's streaming decoder."""

from __future__ import annotations

import binascii

import orjson
import pytest
from cobs import cobs
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.southbound.serial import framing
from gateway.southbound.serial.framing import FrameDecoder, encode_frame, wire_bytes

PING = b'{"jsonrpc":"2.0","id":"brk-1","method":"ping"}'
ANSWER = b'{"jsonrpc":"2.0","id":"brk-1","result":{}}'


def frames_of(*messages: bytes) -> bytes:
    return b"".join(wire_bytes(message) for message in messages)


def test_crc_check_value() -> None:
    assert framing.crc32(b"123456789") == 0xCBF43926


def test_a_frame_is_cobs_of_json_and_crc_le_then_one_zero() -> None:
    frame = encode_frame(b'{"a":1}')
    assert frame == b'\x0c{"a":1}\xaf\xac\x1bV\x00'
    raw = cobs.decode(frame[:-1])
    assert raw[:-4] == b'{"a":1}'
    assert raw[-4:] == binascii.crc32(b'{"a":1}').to_bytes(4, "little")
    assert b"\x00" not in frame[:-1]
    assert wire_bytes(b'{"a":1}') == b"\x00" + frame


def test_round_trip_of_several_frames_in_one_read_and_byte_by_byte() -> None:
    stream = frames_of(PING, ANSWER, PING)
    assert FrameDecoder().feed(stream) == [PING, ANSWER, PING]
    decoder = FrameDecoder()
    out: list[bytes] = []
    for byte in stream:
        out += decoder.feed(bytes([byte]))
    assert out == [PING, ANSWER, PING]
    assert decoder.frames == 3
    assert decoder.dropped_total == 0


def test_frames_without_the_leading_delimiter_decode_too() -> None:
    assert FrameDecoder().feed(encode_frame(PING) + encode_frame(ANSWER)) == [PING, ANSWER]


def test_empty_frames_and_line_ends_between_frames_cost_nothing() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00" + frames_of(PING) + b"\r\n\x00\n\x00") == [PING]
    assert decoder.dropped_total == 0


def test_boot_text_before_a_frame_is_dropped_as_text_and_the_frame_served() -> None:
    decoder = FrameDecoder()
    boot = b"ets Jun  8 2016 00:22:57\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n"
    assert decoder.feed(boot + frames_of(PING)) == [PING]
    assert decoder.dropped == {"text": 1, "cobs": 0, "crc": 0, "oversize": 0}


def test_text_inside_a_frame_costs_that_frame_only() -> None:
    wire = frames_of(PING)
    decoder = FrameDecoder()
    damaged = wire[:10] + b"I (312) boot: ESP-IDF v5.1\r\n" + wire[10:]
    assert decoder.feed(damaged + frames_of(ANSWER)) == [ANSWER]
    assert decoder.dropped_total == 1


def test_a_flipped_bit_is_dropped_as_crc() -> None:
    wire = bytearray(frames_of(PING))
    wire[20] ^= 0x04
    decoder = FrameDecoder()
    assert decoder.feed(bytes(wire) + frames_of(ANSWER)) == [ANSWER]
    assert decoder.dropped["crc"] == 1


def test_a_lost_byte_is_dropped_and_the_next_frame_served() -> None:
    wire = frames_of(PING)
    decoder = FrameDecoder()
    assert decoder.feed(wire[:5] + wire[6:] + frames_of(ANSWER)) == [ANSWER]
    assert decoder.dropped_total == 1


def test_bad_cobs_is_counted_as_cobs() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x09\x01\x02\x00" + frames_of(PING)) == [PING]
    assert decoder.dropped["cobs"] == 1


def test_too_short_for_a_crc_is_counted_as_crc() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00" + cobs.encode(b"\x01\x02\x03") + b"\x00") == []
    assert decoder.dropped["crc"] == 1


def test_over_the_cap_is_discarded_while_it_arrives_then_the_next_frame_served() -> None:
    decoder = FrameDecoder(frame_cap=300)
    big = orjson.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "y" * 400}})
    fits = orjson.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "y" * 200}})
    stream = frames_of(big, fits)
    out: list[bytes] = []
    for at in range(0, len(stream), 7):
        out += decoder.feed(stream[at : at + 7])
        assert decoder.buffered <= decoder.encoded_cap
    assert out == [fits]
    assert decoder.dropped == {"text": 0, "cobs": 0, "crc": 0, "oversize": 1}


def test_a_frame_just_over_the_cap_after_decoding_is_oversize() -> None:
    decoder = FrameDecoder(frame_cap=300)
    assert decoder.feed(frames_of(b"x" * 301, b"y" * 300)) == [b"y" * 300]
    assert decoder.dropped["oversize"] == 1


def test_endless_noise_without_a_delimiter_never_holds_more_than_the_cap() -> None:
    decoder = FrameDecoder(frame_cap=256)
    for _ in range(100):
        assert decoder.feed(b"\xff" * 1000) == []
        assert decoder.buffered <= decoder.encoded_cap
    assert decoder.feed(frames_of(PING)) == [PING]
    assert decoder.dropped["oversize"] == 1


def test_debug_lines_are_off_by_default() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(PING + b"\n") == []
    assert decoder.feed(b"\x00") == []
    assert decoder.dropped["text"] == 1


def test_debug_mode_takes_json_lines_and_frames_alike() -> None:
    decoder = FrameDecoder(debug_json_lines=True)
    typed = b'{"jsonrpc":"2.0","method":"notifications/register","params":{"slot":"bench"}}'
    out = decoder.feed(b"hello\r\n" + typed + b"\r\n" + b"{not json\n" + frames_of(ANSWER) + PING + b"\n")
    assert out == [typed, ANSWER, PING]
    assert decoder.debug_lines == 2
    # "hello" came before the first line; "{not json" was judged at the next delimiter.
    assert decoder.dropped["text"] == 2


def test_debug_mode_a_line_that_is_not_an_object_is_not_delivered() -> None:
    decoder = FrameDecoder(debug_json_lines=True)
    assert decoder.feed(b"{1: 2}\n[1, 2]\n" + b'{"ok":true}\n') == [b'{"ok":true}']


def test_debug_mode_a_frame_holding_a_newline_byte_is_still_a_frame() -> None:
    # Find a message whose frame carries 0x0A (in its CRC or a code byte): it must not be split there.
    for n in range(2000):
        message = orjson.dumps({"n": n})
        if b"\n" in encode_frame(message):
            break
    else:
        pytest.fail("no frame with a newline byte found")
    decoder = FrameDecoder(debug_json_lines=True)
    assert decoder.feed(frames_of(message)) == [message]
    assert decoder.dropped_total == 0


def test_debug_mode_endless_typing_is_bounded_and_lines_come_back_after_the_cap() -> None:
    decoder = FrameDecoder(frame_cap=256, debug_json_lines=True)
    assert decoder.feed(b"x" * 5000) == []
    assert decoder.buffered <= decoder.encoded_cap
    assert decoder.feed(b"\n" + PING + b"\n") == [PING]
    assert decoder.dropped["oversize"] == 1


# -- properties ---------------------------------------------------------------------------------

json_bytes = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
).map(orjson.dumps)


@settings(max_examples=200)
@given(st.lists(json_bytes, min_size=1, max_size=6), st.integers(min_value=1, max_value=64))
def test_any_messages_in_any_chunking_come_out_whole_and_in_order(messages: list[bytes], step: int) -> None:
    stream = frames_of(*messages)
    decoder = FrameDecoder(frame_cap=1 << 16)
    out: list[bytes] = []
    for at in range(0, len(stream), step):
        out += decoder.feed(stream[at : at + step])
    assert out == messages
    assert decoder.dropped_total == 0


@settings(max_examples=200)
@given(
    st.lists(json_bytes, min_size=2, max_size=5),
    st.data(),
)
def test_noise_never_delivers_a_wrong_message(messages: list[bytes], data: st.DataObject) -> None:
    """Whatever bytes are damaged, every message that comes out is one that was sent, and each
    damaged frame costs at most itself (the frames after it come through)."""
    pieces = [bytearray(wire_bytes(message)) for message in messages]
    victim = data.draw(st.integers(0, len(pieces) - 1))
    kind = data.draw(st.sampled_from(["flip", "insert", "delete"]))
    frame = pieces[victim]
    at = data.draw(st.integers(1, len(frame) - 2))
    if kind == "flip":
        frame[at] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "insert":
        frame[at:at] = data.draw(st.binary(min_size=1, max_size=20))
    else:
        del frame[at]
    out = FrameDecoder(frame_cap=1 << 16).feed(b"".join(pieces))
    assert all(message in messages for message in out)
    intact = [message for index, message in enumerate(messages) if index != victim]
    for message in intact:
        assert message in out


@settings(max_examples=300)
@given(st.binary(max_size=600), st.booleans())
def test_arbitrary_bytes_only_yield_crc_checked_messages(noise: bytes, debug: bool) -> None:
    decoder = FrameDecoder(frame_cap=512, debug_json_lines=debug)
    for message in decoder.feed(noise + b"\x00"):
        if message.startswith(b"{") and debug:
            assert isinstance(orjson.loads(message), dict)
        else:
            assert encode_frame(message)[:-1] in noise
    assert decoder.buffered == 0
