"""What a firmware file is: an ESP image (docs/field.md, "What the command checks").

The ESP image format: a common header (magic 0xE9, segment count, flash mode, size/frequency, entry
point), a 16-byte extended header whose `chip_id` names the chip the image is built for (5 ESP32-C3,
9 ESP32-S3, 0 ESP32, ...), the segments, a checksum byte (XOR of the segments' data, from 0xEF) and,
when the extended header says so, the SHA-256 of all that. esptool's own parser
(`esptool.bin_image.LoadFirmwareImage`) reads it; this module checks the checksum and the digest and
names the chip. A whole-flash image (bootloader, partition table and application merged) starts with
the bootloader's image, whose header names the chip the same way.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from esptool.bin_image import LoadFirmwareImage  # type: ignore[import-untyped]
from esptool.targets import CHIP_DEFS  # type: ignore[import-untyped]
from esptool.util import FatalError  # type: ignore[import-untyped]

from gateway.flash.errors import FlashError, esptool_text

ESP_IMAGE_MAGIC = 0xE9
HEADER_LEN = 8 + 16  # the common header, then the extended header
SEGMENT_HEADER_LEN = 8  # a segment's load address and length
DIGEST_LEN = 32  # the SHA-256 an image may end with
CHIP_ID_AT = 8 + 4  # the extended header's chip_id (after WP pin and SPI drive settings), 16 bits


@dataclass(frozen=True)
class FirmwareImage:
    path: Path
    data: bytes
    chip_id: int
    min_rev_full: int
    max_rev_full: int
    """Chip revisions the image accepts, major * 100 + minor; max 0: the image does not say."""

    @property
    def chip_name(self) -> str:
        return chip_name(self.chip_id)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def chip_names() -> dict[int, str]:
    """Image chip id -> esptool's chip name ("ESP32-C3"), for every chip esptool knows."""
    names: dict[int, str] = {}
    for cls in CHIP_DEFS.values():
        if cls.IMAGE_CHIP_ID is not None:
            names[int(cls.IMAGE_CHIP_ID)] = str(cls.CHIP_NAME)
    return names


def chip_name(chip_id: int) -> str:
    return chip_names().get(chip_id, f"unknown chip (id {chip_id})")


def load_image(path: Path) -> FirmwareImage:
    """Read and check `path`; FlashError firmware-not-found or not-an-image."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FlashError("firmware-not-found", f"{path}: no such file") from None
    except IsADirectoryError:
        raise FlashError("not-an-image", f"{path} is a directory, not a firmware image") from None
    except PermissionError:
        raise FlashError("firmware-not-found", f"{path}: cannot read it (permission denied)") from None
    return parse_image(path, data)


def header_chip(path: Path) -> int | None:
    """The chip id the header of `path` names (its first bytes only), or None when it is no image."""
    try:
        with path.open("rb") as file:
            header = file.read(HEADER_LEN)
    except OSError:
        return None
    if len(header) < HEADER_LEN or header[0] != ESP_IMAGE_MAGIC:
        return None
    (chip_id,) = struct.unpack_from("<H", header, CHIP_ID_AT)
    return int(chip_id)


def parse_image(path: Path, data: bytes) -> FirmwareImage:
    if data[:1] == bytes([ESP_IMAGE_MAGIC]) and len(data) < HEADER_LEN:  # it ends inside its header
        raise _cut_short(path, data)
    if len(data) < HEADER_LEN or data[0] != ESP_IMAGE_MAGIC:
        first = f"0x{data[0]:02X}" if data else "nothing (an empty file)"
        raise FlashError(
            "not-an-image",
            f"{path} is not an ESP firmware image: it starts with {first}, an image starts with 0xE9",
        )
    try:
        # Every ESP32-family image has the same layout; the chip is read from the header, not assumed.
        parsed = LoadFirmwareImage("esp32", data)
    except (struct.error, TypeError):
        # esptool reads the file as its header says; past the end, struct.unpack and ord(b"") fail.
        raise _cut_short(path, data) from None
    except (FatalError, RuntimeError, ValueError) as exc:
        if segments_end(data) > len(data):  # esptool's "End of file reading segment ...": a segment cut short
            raise _cut_short(path, data) from None
        detail = esptool_text(exc).splitlines()[0].rstrip(".")
        raise FlashError("not-an-image", f"{path} is not a valid ESP firmware image: {detail}") from None
    if parsed.checksum != parsed.calculate_checksum():
        raise FlashError("not-an-image", f"{path} is damaged: its checksum byte does not match its segments")
    if parsed.append_digest and len(parsed.stored_digest) < DIGEST_LEN:  # the file ends inside its SHA-256
        raise _cut_short(path, data)
    if parsed.append_digest and parsed.stored_digest != parsed.calc_digest:
        raise FlashError("not-an-image", f"{path} is damaged: the SHA-256 at its end does not match its contents")
    return FirmwareImage(
        path=path,
        data=data,
        chip_id=int(parsed.chip_id),
        min_rev_full=int(parsed.min_rev_full),
        max_rev_full=int(parsed.max_rev_full),
    )


def _cut_short(path: Path, data: bytes) -> FlashError:
    size = "1 byte" if len(data) == 1 else f"{len(data)} bytes"
    return FlashError(
        "not-an-image",
        f"{path} is not a valid ESP firmware image: it ends after {size}, before the end its header describes "
        "(a file cut short, or not an image)",
    )


def segments_end(data: bytes) -> int:
    """Where the last segment ends by the headers' word: the segment count in the common header, then
    each segment's 8-byte header (load address, length) followed by its data. Past len(data): cut short."""
    end = HEADER_LEN
    for _ in range(data[1]):
        if end + SEGMENT_HEADER_LEN > len(data):
            return end + SEGMENT_HEADER_LEN
        (length,) = struct.unpack_from("<I", data, end + 4)
        end += SEGMENT_HEADER_LEN + length
    return end


def revision_problem(image: FirmwareImage, revision: int) -> str | None:
    """Why the board's chip revision (major * 100 + minor) does not run `image`, or None."""
    if image.max_rev_full == 0:  # the image does not say
        return None
    if image.min_rev_full <= revision <= image.max_rev_full:
        return None

    def text(rev: int) -> str:
        return f"v{rev // 100}.{rev % 100}"

    wanted = f"{text(image.min_rev_full)} or higher"
    if image.max_rev_full != 0xFFFF:
        wanted = f"{text(image.min_rev_full)} to {text(image.max_rev_full)}"
    return f"{image.path.name} needs chip revision {wanted}; this board's chip is {text(revision)}"
