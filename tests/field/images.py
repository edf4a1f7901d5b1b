"""ESP application images for the flash tests, built with esptool's own image classes.

The header esptool writes: magic 0xE9, segment count, flash mode and size, entry point; the extended
header with the chip id of the class (5 for ESP32-C3, 9 for ESP32-S3) and the revision range; the
segments; the checksum byte; the SHA-256 of the whole.
"""

from __future__ import annotations

import random

from esptool.bin_image import (  # type: ignore[import-untyped]
    ELFSection,
    ESP32C3FirmwareImage,
    ESP32S3FirmwareImage,
)

APP_DESC_MAGIC = b"\x32\x54\xcd\xab"  # esp_app_desc_t's magic word, first in an application's rodata


def build_image(chip: str = "esp32c3", size: int = 48 * 1024, seed: int = 1) -> bytes:
    """An image of about `size` bytes; half its data random (so it compresses to many 1 KB blocks)."""
    cls = {"esp32c3": ESP32C3FirmwareImage, "esp32s3": ESP32S3FirmwareImage}[chip]
    rng = random.Random(seed)
    half = size // 2
    rodata = APP_DESC_MAGIC + rng.randbytes(half // 2) + bytes(half // 2)
    text = rng.randbytes(half // 2) + b"\x13\x00\x00\x00" * (half // 8)
    image = cls()
    image.entrypoint = 0x40380000
    image.min_rev_full = 3  # v0.3
    image.max_rev_full = 199  # v1.99
    image.segments = [
        ELFSection(b".flash.rodata", 0x3C000020, rodata, 0),
        ELFSection(b".iram0.text", 0x40380000, text, 0),
    ]
    data: bytes = image.save(None)
    return data
