"""Serial framing (docs/protocol-serial-mqtt.md, "Frames") as pure functions and a streaming decoder (no I/O).

One frame is COBS(UTF-8 JSON + CRC-32 of the JSON, 4 bytes little endian) followed by one 0x00. COBS
leaves no 0x00 inside a frame, so a reader finds every frame boundary by looking for 0x00 alone and
resynchronises on the next one after any damage. The CRC (IEEE, as `binascii.crc32`) catches what
COBS cannot: a flipped bit, bytes lost or inserted, text that happens to decode. Whatever fails is
dropped and counted by reason; a message is delivered only when its CRC matches, so noise costs
frames and never delivers a wrong message.

Senders here (the gateway, the MicroPython transport, the simulator) also put a 0x00 *before* every
frame: an empty frame between two delimiters is ignored without being counted, and text written on
the line between two frames (a boot banner, a stray print) becomes a chunk of its own that is
dropped (reason "text") instead of corrupting the frame after it.

Debug mode (off by default) additionally accepts a line that starts with `{` and ends with a newline
(or a carriage return) as one unframed JSON message, so that a person can type into a terminal. It
has no CRC: never use it on a port that drives actuators in production.
"""

from __future__ import annotations

import binascii

import orjson
from cobs import cobs

DELIMITER = b"\x00"
FRAME_LEAD = DELIMITER
"""Written before each frame: ends whatever noise came before, so it cannot spoil the frame."""
CRC_BYTES = 4
DEFAULT_FRAME_CAP = 8192
"""Largest decoded JSON message a port accepts by default (8 KB; docs/protocol-serial-mqtt.md, "Frames")."""
DROP_REASONS = ("text", "cobs", "crc", "oversize")
"""Why a chunk between two delimiters was dropped:
text      printable text with a line end that is not a frame (boot log, stray prints, a line typed
          without debug mode)
cobs      not valid COBS (bytes lost or inserted, binary noise)
crc       valid COBS, but too short to carry a CRC or the CRC does not match (a flipped bit)
oversize  larger than the frame cap (discarded as it arrives, up to the next delimiter)"""

_TEXT_BYTES = bytes([9, 10, 13, *range(0x20, 0x7F)])


def crc32(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected, as zlib and MicroPython's binascii); "123456789" -> 0xCBF43926."""
    return binascii.crc32(data)


def encode_frame(message: bytes) -> bytes:
    """One frame: COBS(message + CRC-32 LE) + 0x00, without the leading 0x00 (docs/protocol-serial-mqtt.md,
    "Frames")."""
    encoded: bytes = cobs.encode(message + crc32(message).to_bytes(CRC_BYTES, "little"))
    return encoded + DELIMITER


def wire_bytes(message: bytes) -> bytes:
    """What a sender writes for one message: the leading delimiter, then the frame."""
    return FRAME_LEAD + encode_frame(message)


def max_encoded_length(frame_cap: int) -> int:
    """Longest COBS chunk (without delimiters) a message of `frame_cap` bytes can take.

    One byte more than this package's encoder needs: when message and CRC fill whole 254-byte
    blocks, encoders differ on the end. `cobs` stops after the last full block; the board's
    (mcpdevice.framing.encode) closes it with an empty block, code 0x01. Both decode alike."""
    return int(cobs.max_encoded_length(frame_cap + CRC_BYTES)) + 1


def is_text(chunk: bytes) -> bool:
    """Printable text with a line end: what a console prints (a damaged frame of compact JSON has none)."""
    return not chunk.translate(None, _TEXT_BYTES) and (b"\n" in chunk or b"\r" in chunk)


class FrameDecoder:
    """Bytes in, verified messages out; holds at most one frame's worth of bytes.

    `feed(data)` returns the messages completed by `data` (each the JSON bytes without the CRC).
    `dropped` counts dropped chunks by reason (DROP_REASONS); `frames` counts delivered messages,
    `debug_lines` the unframed JSON lines among them.
    """

    def __init__(self, frame_cap: int = DEFAULT_FRAME_CAP, *, debug_json_lines: bool = False) -> None:
        if frame_cap < 1:
            raise ValueError("frame_cap must be at least 1 byte")
        self.frame_cap = frame_cap
        self.debug_json_lines = debug_json_lines
        self.encoded_cap = max_encoded_length(frame_cap)
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.frames = 0
        self.debug_lines = 0
        self._buffer = bytearray()
        self._discarding = False  # over the cap: skip everything up to the next delimiter
        self._line_start = 0  # debug mode: where the current line starts in the buffer

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def buffered(self) -> int:
        """Bytes held for a frame still being received (at most the encoded cap)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        messages: list[bytes] = []
        start = 0
        size = len(data)
        while start <= size:
            end = data.find(DELIMITER, start)
            stop = size if end < 0 else end
            if not self._buffer and not self._discarding and end >= 0 and not self.debug_json_lines:
                # The whole chunk is in hand: decode it without copying it through the buffer.
                if stop - start > self.encoded_cap:
                    self._drop("oversize")
                elif stop > start:
                    self._finish(data[start:stop], messages)
                start = end + 1
                continue
            if self.debug_json_lines:
                self._take_lines(data, start, stop, messages)
            else:
                self._take(data, start, stop)
            if end < 0:
                break
            if not self._discarding and self._buffer:
                self._finish(bytes(self._buffer), messages)
            self.reset()
            start = end + 1
        return messages

    def _take(self, data: bytes, start: int, stop: int) -> None:
        """Add data[start:stop] (no delimiter in it) to the frame being received, within the cap."""
        if self._discarding:
            return
        if len(self._buffer) + (stop - start) > self.encoded_cap:
            self._buffer.clear()
            self._line_start = 0
            self._discarding = True
            self._drop("oversize")
            return
        self._buffer += data[start:stop]

    def _take_lines(self, data: bytes, start: int, stop: int, messages: list[bytes]) -> None:
        """Debug mode: take the bytes one line at a time, so that each typed line is judged on its own."""
        while start < stop:
            ends = [i for i in (data.find(b"\n", start, stop), data.find(b"\r", start, stop)) if i >= 0]
            end = min(ends) if ends else -1
            piece_end = stop if end < 0 else end + 1
            self._take(data, start, piece_end)
            if end >= 0:
                if self._discarding:
                    # A terminal never sends a delimiter: a line end ends the discard in debug mode.
                    self._discarding = False
                else:
                    self._debug_line(len(self._buffer) - 1, messages)
            start = piece_end

    def reset(self) -> None:
        """Forget a partly received frame (the port was reopened); the counters stay."""
        self._buffer.clear()
        self._line_start = 0
        self._discarding = False

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def _finish(self, chunk: bytes, messages: list[bytes]) -> None:
        if not chunk.strip():
            return  # line ends or spaces between frames (a board's newline after a print): nothing lost
        reason = self._verify(chunk, messages)
        if reason is not None:
            self._drop("text" if reason != "oversize" and is_text(chunk) else reason)

    def _verify(self, chunk: bytes, messages: list[bytes]) -> str | None:
        try:
            raw = cobs.decode(chunk)
        except cobs.DecodeError:
            return "cobs"
        if len(raw) <= CRC_BYTES:
            return "crc"
        payload = raw[:-CRC_BYTES]
        if crc32(payload) != int.from_bytes(raw[-CRC_BYTES:], "little"):
            return "crc"
        if len(payload) > self.frame_cap:
            return "oversize"
        self.frames += 1
        messages.append(payload)
        return None

    def _debug_line(self, end: int, messages: list[bytes]) -> None:
        """A line ended at buffer[end]: deliver it when it starts with `{` and is one JSON object."""
        buffer = self._buffer
        line = bytes(buffer[self._line_start : end])
        if line.startswith(b"{") and _json_object(line):
            if buffer[: self._line_start].strip():  # what came before the line on this chunk is not a frame
                self._drop("text")
            if len(line) > self.frame_cap:
                # The buffer holds a frame's COBS overhead more than the cap; a line gets no such margin.
                self._drop("oversize")
            else:
                self.frames += 1
                self.debug_lines += 1
                messages.append(line)
            buffer.clear()
            self._line_start = 0
        else:
            # Kept: a COBS frame may hold a newline byte; it is judged whole at its delimiter.
            self._line_start = end + 1


def _json_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False
