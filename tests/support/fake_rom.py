"""An ESP32-C3's ROM loader (download mode) on a pseudo-terminal, for `mcp-gateway flash` tests.

The board's side of a PtyPair: esptool opens `pair.path`, this thread answers on `pair.master` in the
ROM's serial protocol, as esptool's loader.py speaks it: SLIP frames (0xC0 ends, 0xDB 0xDC / 0xDB 0xDD
escape); a request is `<BBHI` (0x00, command, data length, checksum) then data; an answer is `<BBHI`
(0x01, command, data length, value) then data ending in the ROM's 4 status bytes (status, error, 0, 0).

Commands answered: SYNC (eight answers, value non-zero as from a ROM, not the stub), READ_REG and
WRITE_REG on a register file holding the eFuses an ESP32-C3 is read by (MAC, revision v0.4) and the
SPI0 registers of its "user command" (RDID for the flash ID, SFDP), GET_SECURITY_INFO (chip id 5, the
ESP32-C3's; this is how esptool tells a C3 from other chips), SPI_ATTACH, SPI_SET_PARAMS,
CHANGE_BAUDRATE, FLASH_BEGIN / DATA / END, FLASH_DEFL_BEGIN / DATA / END (inflated into `flash`),
SPI_FLASH_MD5 (32 hex characters, as the ROM answers). Anything else, the stub loader's MEM_* upload
included, is refused as the ROM refuses an unknown command (status 1, error 5).

Faults: `answer_sync = False` (a board that is running its application, not in download mode), and
`corrupt_after_write` (flip one byte of the flash after the last block, before the MD5).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import struct
import threading
import zlib

from tests.support.serial_ports import PtyPair

# loader.py ESPLoader.ESP_CMDS
FLASH_BEGIN, FLASH_DATA, FLASH_END = 0x02, 0x03, 0x04
SYNC, WRITE_REG, READ_REG = 0x08, 0x09, 0x0A
SPI_SET_PARAMS, SPI_ATTACH, CHANGE_BAUDRATE = 0x0B, 0x0D, 0x0F
FLASH_DEFL_BEGIN, FLASH_DEFL_DATA, FLASH_DEFL_END = 0x10, 0x11, 0x12
SPI_FLASH_MD5, GET_SECURITY_INFO = 0x13, 0x14
FLASH_COMMANDS = {FLASH_BEGIN, FLASH_DATA, FLASH_END, FLASH_DEFL_BEGIN, FLASH_DEFL_DATA, FLASH_DEFL_END}

# targets/esp32c3.py
EFUSE_BASE = 0x60008800
MAC_EFUSE_REG = EFUSE_BASE + 0x044
EFUSE_BLOCK1_ADDR = EFUSE_BASE + 0x044
SPI_REG_BASE = 0x60002000
SPI_CMD_REG = SPI_REG_BASE + 0x00
SPI_ADDR_REG = SPI_REG_BASE + 0x04
SPI_USR2_REG = SPI_REG_BASE + 0x20
SPI_W0_REG = SPI_REG_BASE + 0x58
SPI_CMD_USR = 1 << 18
CHIP_ID_C3 = 5

OK = b"\x00\x00\x00\x00"
BAD_CHECKSUM = b"\x01\x07\x00\x00"  # ROM error 0x07: checksum failure
INVALID_MESSAGE = b"\x01\x05\x00\x00"  # ROM error 0x05: invalid message (unknown command)
BAD_STATE = b"\x01\x08\x00\x00"


def slip(packet: bytes) -> bytes:
    return b"\xc0" + packet.replace(b"\xdb", b"\xdb\xdd").replace(b"\xc0", b"\xdb\xdc") + b"\xc0"


def checksum(data: bytes) -> int:
    state = 0xEF
    for byte in data:
        state ^= byte
    return state


class FakeRom:
    """An ESP32-C3 in download mode with `flash_size` bytes of (initially erased) flash."""

    def __init__(
        self,
        pair: PtyPair,
        *,
        mac: bytes = bytes.fromhex("3485180a0b0c"),
        flash_id: int = 0x1640EF,  # Winbond (0xEF), memory type 0x40, capacity 0x16: 4 MB
        flash_size: int = 4 * 1024 * 1024,
    ) -> None:
        self.pair = pair
        self.flash = bytearray(b"\xff" * flash_size)
        self.flash_id = flash_id
        self.answer_sync = True
        self.corrupt_after_write = False
        self.commands: list[int] = []
        """Every command received, in order."""
        self.baud = 115200
        self.spi_params: tuple[int, ...] | None = None
        self.regs: dict[int, int] = {
            MAC_EFUSE_REG: int.from_bytes(mac[2:], "big"),
            MAC_EFUSE_REG + 4: int.from_bytes(mac[:2], "big"),
            EFUSE_BLOCK1_ADDR + 12: 4 << 18,  # minor revision (low bits) 4, package 0 (QFN32)
            EFUSE_BLOCK1_ADDR + 20: 0,  # major revision 0, minor high bit 0: v0.4
        }
        self._write: dict[str, int] = {}
        self._inflate: zlib._Decompress | None = None
        self._buffer = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-rom", daemon=True)
        self._thread.start()

    # -- the line ------------------------------------------------------------------------------

    def _serve(self) -> None:
        fd = self.pair.master
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.05)
            except (OSError, ValueError):
                return
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                return
            self._buffer += data
            for frame in self._frames():
                self._handle(frame)

    def _frames(self) -> list[bytes]:
        frames: list[bytes] = []
        while True:
            start = self._buffer.find(b"\xc0")
            if start < 0:
                self._buffer.clear()
                return frames
            end = self._buffer.find(b"\xc0", start + 1)
            if end < 0:
                del self._buffer[:start]
                return frames
            raw = bytes(self._buffer[start + 1 : end])
            del self._buffer[: end + 1]
            if raw:
                frames.append(raw.replace(b"\xdb\xdc", b"\xc0").replace(b"\xdb\xdd", b"\xdb"))
            else:  # two delimiters in a row: the second starts the next frame
                self._buffer[:0] = b"\xc0"

    def _send(self, op: int, data: bytes = OK, value: int = 0) -> None:
        packet = struct.pack("<BBHI", 0x01, op, len(data), value) + data
        out = slip(packet)
        while out:
            try:
                written = os.write(self.pair.master, out)
            except BlockingIOError:
                select.select([], [self.pair.master], [], 0.05)
                continue
            except OSError:
                return
            out = out[written:]

    # -- the commands --------------------------------------------------------------------------

    def _handle(self, frame: bytes) -> None:
        if len(frame) < 8 or frame[0] != 0x00:
            return
        _, op, length, chk = struct.unpack("<BBHI", frame[:8])
        data = frame[8 : 8 + length]
        self.commands.append(op)
        if op == SYNC:
            if self.answer_sync:
                for _ in range(8):
                    self._send(SYNC, OK, value=0x20120707)
            return
        handler = {
            READ_REG: self._read_reg,
            WRITE_REG: self._write_reg,
            GET_SECURITY_INFO: self._security_info,
            SPI_ATTACH: lambda d, c: OK,
            SPI_SET_PARAMS: self._spi_set_params,
            CHANGE_BAUDRATE: self._change_baud,
            FLASH_BEGIN: self._flash_begin,
            FLASH_DATA: self._flash_data,
            FLASH_END: lambda d, c: OK,
            FLASH_DEFL_BEGIN: self._defl_begin,
            FLASH_DEFL_DATA: self._defl_data,
            FLASH_DEFL_END: lambda d, c: OK,
            SPI_FLASH_MD5: self._md5,
        }.get(op)
        if handler is None:
            self._send(op, INVALID_MESSAGE)
            return
        value = 0
        if op == READ_REG:
            value = self.regs.get(struct.unpack("<I", data[:4])[0], 0)
        self._send(op, handler(data, chk), value=value)

    def _read_reg(self, data: bytes, chk: int) -> bytes:
        return OK

    def _write_reg(self, data: bytes, chk: int) -> bytes:
        for at in range(0, len(data) - 15, 16):
            addr, value, mask, _delay = struct.unpack("<IIII", data[at : at + 16])
            self.regs[addr] = (self.regs.get(addr, 0) & ~mask) | (value & mask)
            if addr == SPI_CMD_REG and value & SPI_CMD_USR:
                self._spi_user_command()
        return OK

    def _spi_user_command(self) -> None:
        """The SPI0 'user command' esptool runs through registers: the flash chip answers in W0."""
        command = self.regs.get(SPI_USR2_REG, 0) & 0xFF
        address = self.regs.get(SPI_ADDR_REG, 0)
        answer = 0
        if command == 0x9F:  # RDID
            answer = self.flash_id
        elif command == 0x5A:  # RDSFDP
            answer = {0x00: 0x50444653, 0x10: self.flash_id & 0xFF}.get(address, 0)
        self.regs[SPI_W0_REG] = answer
        self.regs[SPI_CMD_REG] = self.regs[SPI_CMD_REG] & ~SPI_CMD_USR  # done at once

    def _security_info(self, data: bytes, chk: int) -> bytes:
        # flags, flash_crypt_cnt, 7 key purposes, chip id, API version
        return struct.pack("<IBBBBBBBBII", 0, 0, 0, 0, 0, 0, 0, 0, 0, CHIP_ID_C3, 0) + OK

    def _spi_set_params(self, data: bytes, chk: int) -> bytes:
        self.spi_params = struct.unpack("<IIIIII", data[:24])
        return OK

    def _change_baud(self, data: bytes, chk: int) -> bytes:
        self.baud = struct.unpack("<I", data[:4])[0]
        return OK

    def _begin(self, data: bytes) -> None:
        erase_size, blocks, block_size, offset = struct.unpack("<IIII", data[:16])
        self.flash[offset : offset + erase_size] = b"\xff" * erase_size  # the ROM erases up front
        self._write = {"offset": offset, "position": offset, "block_size": block_size, "blocks": blocks, "seq": 0}

    def _block(self, data: bytes, chk: int) -> bytes | None:
        """The block's payload, or None when its checksum or sequence number is wrong."""
        length, seq, _, _ = struct.unpack("<IIII", data[:16])
        payload = data[16 : 16 + length]
        if checksum(payload) != chk or seq != self._write.get("seq"):
            return None
        self._write["seq"] = seq + 1
        return payload

    def _flash_begin(self, data: bytes, chk: int) -> bytes:
        self._begin(data)
        return OK

    def _flash_data(self, data: bytes, chk: int) -> bytes:
        payload = self._block(data, chk)
        if payload is None:
            return BAD_CHECKSUM
        at = self._write["position"]
        self.flash[at : at + len(payload)] = payload
        self._write["position"] = at + len(payload)
        return OK

    def _defl_begin(self, data: bytes, chk: int) -> bytes:
        self._begin(data)
        self._inflate = zlib.decompressobj()
        return OK

    def _defl_data(self, data: bytes, chk: int) -> bytes:
        if self._inflate is None:
            return BAD_STATE
        payload = self._block(data, chk)
        if payload is None:
            return BAD_CHECKSUM
        out = self._inflate.decompress(payload)
        at = self._write["position"]
        self.flash[at : at + len(out)] = out
        self._write["position"] = at + len(out)
        if self._write["seq"] == self._write["blocks"] and self.corrupt_after_write:
            self.flash[self._write["offset"] + 100] ^= 0x01
        return OK

    def _md5(self, data: bytes, chk: int) -> bytes:
        addr, size, _, _ = struct.unpack("<IIII", data[:16])
        return hashlib.md5(self.flash[addr : addr + size]).hexdigest().encode() + OK

    # -- for the tests -------------------------------------------------------------------------

    def wrote_flash(self) -> bool:
        return any(op in FLASH_COMMANDS for op in self.commands)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self.pair.close()
