"""A file that starts with an image's magic byte and ends inside the 24-byte header is named cut short,
as a file cut inside a segment or its SHA-256 (gateway/flash/image.py, docs/field.md "Not an image")."""

from __future__ import annotations

from pathlib import Path

from gateway.flash.errors import EXIT_CODES
from tests.field.images import build_image
from tests.field.test_port_and_image_messages import MISSING, flash_error


def test_a_file_cut_inside_its_header_is_named_cut_short(tmp_path: Path) -> None:
    good = build_image("esp32c3")
    for size in (1, 2, 8, 23):
        path = tmp_path / f"cut-{size}.bin"
        path.write_bytes(good[:size])

        code, error, message = flash_error(MISSING, path)  # the image is checked before the port

        assert (code, error) == (EXIT_CODES["not-an-image"], "not-an-image"), message
        assert message == (
            f"{path} is not a valid ESP firmware image: it ends after {size} {'byte' if size == 1 else 'bytes'}, "
            "before the end its header describes (a file cut short, or not an image)"
        )
