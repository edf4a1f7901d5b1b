"""The board's ROM loader, through esptool's Python API (esptool 5, `esptool.cmds`).

What runs is the chip's ROM loader itself, without esptool's flasher stub: the ROM of every ESP32
since the first takes compressed data (FLASH_DEFL_*) and computes an MD5 of a flash region
(SPI_FLASH_MD5), which is all a flash needs. Without the stub nothing is uploaded to the board's RAM
first, and what the tests run against (tests/support/fake_rom.py, a ROM on a pseudo-terminal) is
what runs in the field. The cost: 1 KB blocks and the ROM erasing the whole region before the first
block, slower than the stub by a few seconds per megabyte.

esptool prints through a shared logger; while a Board is in use, its messages are kept in
`Board.log` (for the error text) instead of printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import esptool.logger  # type: ignore[import-untyped]  # noqa: F401  (installs esptool's logger before it is swapped)
import serial
from esp_pylib.logger import EspLog, EspLogBase
from esptool.cmds import attach_flash, detect_chip, detect_flash_size, reset_chip  # type: ignore[import-untyped]
from esptool.loader import (  # type: ignore[import-untyped]
    DEFAULT_TIMEOUT,
    ERASE_WRITE_TIMEOUT_PER_MB,
    timeout_per_mb,
)
from esptool.reset import ResetStrategy  # type: ignore[import-untyped]
from esptool.targets import CHIP_DEFS  # type: ignore[import-untyped]
from esptool.util import FatalError, PrintOnce  # type: ignore[import-untyped]

from gateway.flash.errors import FlashError, esptool_text

DOWNLOAD_MODE_HINT = (
    "hold BOOT (GPIO9 on an ESP32-C3, GPIO0 on others), tap EN/RESET, release BOOT, then run the command again"
)


class _Collector(EspLogBase):
    """esptool's messages, kept instead of printed."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _keep(self, *args: Any) -> None:
        text = " ".join(str(arg) for arg in args).strip()
        if text:
            self.lines.append(text)

    def print(self, *args: Any, **kwargs: Any) -> None:
        self._keep(*args)

    def err(self, *args: Any, suggestion: str | None = None) -> None:
        self._keep(*args)

    def warn(self, *args: Any, suggestion: str | None = None) -> None:
        self._keep(*args)

    def note(self, *args: Any) -> None:
        self._keep(*args)

    def hint(self, *args: Any) -> None:
        self._keep(*args)

    def debug(self, *args: Any) -> None:
        pass

    def set_verbosity(self, mode: int | str) -> None:
        pass

    def progress_bar(
        self, cur_iter: int, total_iters: int, prefix: str = "", suffix: str = "", bar_length: int = 30
    ) -> None:
        pass


@contextlib.contextmanager
def quiet_esptool() -> Iterator[_Collector]:
    collector = _Collector()
    previous = EspLog.instance
    # A warning esptool's reset prints once per process (a tty without modem lines), bound at import.
    previous_once = ResetStrategy.print_once
    EspLog.instance = collector
    ResetStrategy.print_once = PrintOnce(collector.warn)
    try:
        yield collector
    finally:
        EspLog.instance = previous
        ResetStrategy.print_once = previous_once


@dataclass(frozen=True)
class BoardInfo:
    chip: str
    chip_id: int
    mac: str
    revision: int
    """major * 100 + minor, as in image headers."""
    flash_size: str | None
    """As esptool names it ("4MB"); None when the flash chip's ID is not one esptool knows."""

    @property
    def revision_text(self) -> str:
        return f"v{self.revision // 100}.{self.revision % 100}"

    @property
    def flash_bytes(self) -> int | None:
        if self.flash_size is None:
            return None
        number, unit = int(self.flash_size[:-2]), self.flash_size[-2:]
        return number * (1024 if unit == "KB" else 1024 * 1024)


class Board:
    """A board in download mode, connected on an open port."""

    def __init__(self, esp: Any, collector: _Collector) -> None:
        self.esp = esp
        self.collector = collector

    @classmethod
    def connect(cls, port: serial.Serial, chip: str, attempts: int, collector: _Collector) -> Board:
        """Reset the board into its ROM loader (DTR/RTS) and sync; FlashError not-in-download-mode."""
        try:
            if chip == "auto":
                esp = detect_chip(port, port.baudrate, "default-reset", False, attempts)
            else:
                esp = CHIP_DEFS[chip](port, port.baudrate)
                esp.connect("default-reset", attempts)
        except (serial.SerialException, OSError) as exc:  # the port went away (unplugged) while syncing
            detail = esptool_text(exc)
            raise FlashError("board-error", f"the port {port.port} failed while connecting: {detail}") from None
        except FatalError as exc:
            text = esptool_text(exc)
            if "This chip is" in text:  # --chip named another chip than the board's
                raise FlashError("wrong-chip", text.split("\n", maxsplit=1)[0]) from None
            detail = text.splitlines()[0].rstrip(".") if text else "no answer"
            raise FlashError(
                "not-in-download-mode",
                f"no ROM loader answers on {port.port} ({detail}). Put the board in download mode: "
                + DOWNLOAD_MODE_HINT,
            ) from None
        return cls(esp, collector)

    def info(self) -> BoardInfo:
        esp = self.esp
        mac = ":".join(f"{byte:02x}" for byte in esp.read_mac())
        attach_flash(esp)  # the ROM loader does not enable the SPI flash on its own
        flash_size = detect_flash_size(esp)
        return BoardInfo(
            chip=str(esp.CHIP_NAME),
            chip_id=int(esp.IMAGE_CHIP_ID),
            mac=mac,
            revision=int(esp.get_chip_revision()),
            flash_size=flash_size,
        )

    def set_flash_size(self, size_bytes: int) -> None:
        self.esp.flash_set_parameters(size_bytes)

    def change_baud(self, baud: int) -> None:
        if baud != self.esp._port.baudrate:
            self.esp.change_baud(baud)

    def write(self, data: bytes, offset: int, progress: Callable[[int, int], None]) -> None:
        """Write `data` at `offset` compressed; progress(image bytes written, image size) after each block."""

        esp = self.esp
        compressed = zlib.compress(data, 9)
        block_size = int(esp.FLASH_WRITE_SIZE)
        esp.flash_defl_begin(len(data), len(compressed), offset)
        total = len(data)
        sent = 0
        seq = 0
        progress(0, total)
        while sent < len(compressed):
            block = compressed[sent : sent + block_size]
            # A block inflates to at most the image's ratio more bytes; the ROM writes them before answering.
            inflated = min(total, len(block) * total // max(len(compressed), 1) + block_size)
            timeout = max(DEFAULT_TIMEOUT, timeout_per_mb(ERASE_WRITE_TIMEOUT_PER_MB, inflated))
            esp.flash_defl_block(block, seq, timeout=timeout)
            sent += len(block)
            seq += 1
            progress(total * sent // len(compressed), total)
        # The ROM loader is not sent FLASH_DEFL_END here: that would leave the loader (esptool does the same).

    def flash_md5(self, offset: int, size: int) -> str:
        return str(self.esp.flash_md5sum(offset, size)).lower()

    def reset(self) -> None:
        """Hard reset through RTS (EN low, then high): the board starts its application."""
        reset_chip(self.esp, "hard-reset")


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()
