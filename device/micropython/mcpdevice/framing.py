"""Serial frames for a small board: COBS(JSON + CRC-32 LE) + 0x00, both ways, in place.

The frame format: docs/protocol-serial-mqtt.md "Frames"."""

# Plain Python that MicroPython and CPython both run. No frame is ever built whole: the encoder
# stuffs pieces into one 255-byte block and hands each finished block to `write`; the decoder
# undoes the stuffing block by block into one buffer allocated once (frame_max + 4 bytes) and
# checks the CRC-32 over what it decoded with the CRC's residue, so a frame over the cap is still
# verified (and its first bytes kept, to name the request it refuses) without being stored.
# A frame that fails COBS or the CRC is dropped and counted; decoding resumes after the next 0x00.
#
# API
# ---
# encode(parts, write, block)   parts: bytes, or a list of bytes-like or objects with .chunks();
#                               write(buffer) is called with each piece of the frame, the final 0x00
#                               included; block: a bytearray(255) to reuse between frames
# Decoder(frame_max, head_bytes=96)
#     .feed(data, at=0) -> (frame, next_at)
#         frame: bytes (a verified message), (size, head) for a verified message over frame_max,
#         or None when data ran out (next_at == len(data)); call again with next_at for the rest
#     .dropped       frames dropped (bad COBS or CRC)

from binascii import crc32

CRC_RESIDUE = 0x2144DF1C  # CRC-32 of any message followed by its own CRC (little endian)
_ZERO = b"\x00"


def _stuff(piece, n, block, write):
    """COBS-stuff `piece` into `block` (filled up to n); returns the new fill."""
    size = len(piece)
    at = 0
    while at < size:
        zero = piece.find(_ZERO, at)
        end = size if zero < 0 else zero
        while at < end:
            take = min(end - at, 255 - n)
            block[n : n + take] = piece[at : at + take]
            n += take
            at += take
            if n == 255:  # a full block: 254 bytes and no zero after them
                block[0] = 255
                write(block)
                n = 1
        if zero >= 0:
            block[0] = n
            write(memoryview(block)[:n])
            n = 1
            at = zero + 1
    return n


def encode(parts, write, block):
    crc = 0
    n = 1
    for part in parts if isinstance(parts, list) else (parts,):
        for piece in part.chunks() if hasattr(part, "chunks") else (part,):
            crc = crc32(piece, crc)
            n = _stuff(piece, n, block, write)
    n = _stuff(crc.to_bytes(4, "little"), n, block, write)
    block[0] = n
    write(memoryview(block)[:n])
    write(_ZERO)


class Decoder:
    def __init__(self, frame_max, head_bytes=96):
        self.frame_max = frame_max
        self.head_bytes = head_bytes
        self.dropped = 0
        self._buf = bytearray(frame_max + 4)
        self._view = memoryview(self._buf)
        self._reset()

    def _reset(self):
        self._left = 0  # bytes left in the current block; 0: the next byte is a code byte
        self._zero = False  # a zero is due before the next block's bytes
        self._size = 0
        self._crc = 0
        self._bad = False  # not a frame: skip to the next 0x00
        self._head = None  # first bytes of a frame over the cap

    def _emit(self, data):
        size = self._size
        end = size + len(data)
        self._crc = crc32(data, self._crc)
        if end <= len(self._buf):
            self._view[size:end] = data
        elif self._head is None:
            self._head = bytes(self._view[: min(size, self.head_bytes)])
            if len(self._head) < self.head_bytes:
                self._head += bytes(data[: self.head_bytes - len(self._head)])
        self._size = end

    def _end(self):
        """A 0x00 ended the frame: what it was, or None (empty, or dropped)."""
        size = self._size
        frame = None
        if self._bad or self._left:
            self.dropped += 1
        elif size == 0:
            pass  # two delimiters in a row: nothing was lost
        elif size < 5 or self._crc != CRC_RESIDUE:
            self.dropped += 1
        elif self._head is not None:
            frame = (size - 4, self._head)
        elif size - 4 > self.frame_max:
            frame = (size - 4, bytes(self._view[: self.head_bytes]))
        else:
            frame = bytes(self._view[: size - 4])
        self._reset()
        return frame

    def feed(self, data, at=0):
        size = len(data)
        view = memoryview(data)
        while at < size:
            if self._bad:
                zero = data.find(_ZERO, at)
                if zero < 0:
                    return None, size
                at = zero
                self._left = 0
            if self._left == 0:
                code = data[at]
                at += 1
                if code == 0:
                    frame = self._end()
                    if frame is not None:
                        return frame, at
                    continue
                if self._zero:
                    self._emit(_ZERO)
                self._left = code - 1
                self._zero = code < 255
                continue
            end = min(size, at + self._left)
            zero = data.find(_ZERO, at, end)
            if zero >= 0:  # a block cut short: bytes were lost
                self._bad = True
                at = zero
                continue
            self._emit(view[at:end])
            self._left -= end - at
            at = end
        return None, size
