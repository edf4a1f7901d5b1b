"""The flash, step by step: image, port, detect, check, write, verify, reset (docs/field.md).

Nothing is written before the image is known to be for the board's chip and revision and to fit its
flash; every failure is a FlashError, reported as the last step and returned as the exit code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import serial
from esptool.util import FatalError  # type: ignore[import-untyped]

from gateway.flash import firmware
from gateway.flash.board import Board, BoardInfo, md5, quiet_esptool
from gateway.flash.errors import FlashError, esptool_text
from gateway.flash.handover import Handover
from gateway.flash.image import FirmwareImage, load_image, revision_problem
from gateway.flash.port import open_port
from gateway.flash.progress import Reporter

SECTOR = 0x1000
DEFAULT_BAUD = 460800


@dataclass(frozen=True)
class FlashRequest:
    port: str
    firmware: str | None
    """A path, or a name in firmware_dir; None: the one image there for the board's chip."""
    firmware_dir: Path
    chip: str = "auto"
    offset: int = 0
    baud: int = DEFAULT_BAUD
    connect_attempts: int = 3
    """Reset-and-sync rounds before giving up (each about 0.8 s without an answer)."""
    release_wait_s: float = 5.0
    """How long a released port may take to become free."""

    def __post_init__(self) -> None:
        # esptool takes 0 attempts or fewer as "try for ever": the flash would hang, silent, holding the
        # port (and keeping a gateway's serial way in released). The CLI refuses these when parsing.
        if self.connect_attempts < 1:
            raise ValueError(f"connect_attempts must be 1 or more, got {self.connect_attempts}")
        if self.baud < 1:
            raise ValueError(f"baud must be 1 or more, got {self.baud}")


def flash(request: FlashRequest, reporter: Reporter, handover: Handover | None = None) -> int:
    """Run the flash; 0, or the exit code of the FlashError that stopped it (reported as the last step)."""
    try:
        _run(request, reporter, handover)
    except FlashError as exc:
        reporter.step({"step": "error", "error": exc.code, "message": exc.message})
        return exc.exit_code
    return 0


def _image_event(image: FirmwareImage) -> dict[str, object]:
    return {
        "step": "image",
        "file": str(image.path),
        "chip": image.chip_name,
        "size": len(image.data),
        "sha256": image.sha256,
    }


def load_candidates(request: FlashRequest) -> list[FirmwareImage]:
    if request.firmware is not None:
        path = firmware.resolve(request.firmware, request.firmware_dir)
        image = load_image(path)
        firmware.check_sum(path, image.data)
        return [image]
    paths = firmware.images_in(request.firmware_dir)
    if not paths:
        raise FlashError(
            "firmware-not-found",
            f"no --firmware given and no image listed in {request.firmware_dir / firmware.SUMS_FILE}",
        )
    images = []
    for path in paths:
        image = load_image(path)
        firmware.check_sum(path, image.data)
        images.append(image)
    return images


def select(images: list[FirmwareImage], board: BoardInfo, named: bool) -> FirmwareImage:
    """The image to write: the one named (if it is for this chip), else the only one for this chip."""
    if named:
        image = images[0]
        if image.chip_id != board.chip_id:
            raise FlashError(
                "wrong-chip",
                f"{image.path.name} is an image for {image.chip_name}, the board is an {board.chip}: "
                "nothing was written",
            )
        return image
    matching = [image for image in images if image.chip_id == board.chip_id]
    names = ", ".join(image.path.name for image in (matching or images))
    if not matching:
        raise FlashError(
            "wrong-chip",
            f"no image in the firmware directory is for {board.chip} ({names}): nothing was written",
        )
    if len(matching) > 1:
        raise FlashError(
            "firmware-not-found",
            f"several images in the firmware directory are for {board.chip} ({names}): name one with --firmware",
        )
    return matching[0]


def open_with_handover(
    request: FlashRequest, reporter: Reporter, handover: Handover | None
) -> tuple[serial.Serial, bool]:
    """The open port, and whether a holder released it (and must be asked to take it back)."""
    try:
        return open_port(request.port), False
    except FlashError as exc:
        if exc.code != "port-in-use" or handover is None or not _release(handover, request.port):
            raise
        busy = exc
    try:
        reporter.step({"step": "release", "port": request.port})
        deadline = time.monotonic() + request.release_wait_s
        while True:
            try:
                return open_port(request.port), True
            except FlashError as exc:
                if exc.code != "port-in-use" or time.monotonic() > deadline:
                    raise busy from None
            time.sleep(0.1)
    except BaseException:  # the port did not open (or Ctrl-C, a stop signal): the gateway takes it back
        handover.resume(request.port)
        reporter.step({"step": "resume", "port": request.port})
        raise


def _release(handover: Handover, port: str) -> bool:
    try:
        return handover.release(port)
    except KeyboardInterrupt:  # Ctrl-C or a stop signal while asking: the gateway may have let go already
        handover.resume(port)
        raise


def _run(request: FlashRequest, reporter: Reporter, handover: Handover | None) -> None:
    images = load_candidates(request)
    named = request.firmware is not None
    if named:
        reporter.step(_image_event(images[0]))
    port, released = open_with_handover(request, reporter, handover)
    try:
        with quiet_esptool() as collector:
            board = Board.connect(port, request.chip, request.connect_attempts, collector)
            _flash_board(request, reporter, board, images, named)
    finally:
        port.close()
        if released and handover is not None:
            handover.resume(request.port)
            reporter.step({"step": "resume", "port": request.port})


def _flash_board(
    request: FlashRequest, reporter: Reporter, board: Board, images: list[FirmwareImage], named: bool
) -> None:
    step = "detect"
    try:
        info = board.info()
        reporter.step(
            {
                "step": "detect",
                "chip": info.chip,
                "mac": info.mac,
                "flash_size": info.flash_size,
                "revision": info.revision_text,
            }
        )
        image = select(images, info, named)
        if not named:
            reporter.step(_image_event(image))
        problem = revision_problem(image, info.revision)
        if problem is not None:
            raise FlashError("wrong-chip", f"{problem}: nothing was written")
        data = image.data + b"\xff" * (-len(image.data) % 4)
        end = request.offset + len(data)
        if info.flash_bytes is not None:
            if end > info.flash_bytes:
                raise FlashError(
                    "image-too-big",
                    f"{image.path.name} ({len(data):,} bytes at 0x{request.offset:X}) does not fit the board's "
                    f"{info.flash_size} flash: nothing was written",
                )
            board.set_flash_size(info.flash_bytes)
        step = "write"
        board.change_baud(request.baud)

        def progress(written: int, total: int) -> None:
            reporter.step({"step": "write", "written": written, "total": total, "offset": request.offset})

        board.write(data, request.offset, progress)
        step = "verify"
        expected = md5(data)
        actual = board.flash_md5(request.offset, len(data))
        if actual != expected:
            raise FlashError(
                "verify-failed",
                f"the flash does not hold the image after writing (MD5 {actual}, expected {expected}): "
                "the line or the flash chip corrupted it; run the command again, at a lower --baud",
            )
        reporter.step({"step": "verify", "ok": True, "md5": actual})
        step = "reset"
        board.reset()
        reporter.step({"step": "reset"})
    except (FatalError, serial.SerialException, OSError) as exc:
        detail = esptool_text(exc).splitlines()[0].rstrip(".")
        written = "" if step == "detect" else " The flash may hold part of the image: run the command again."
        raise FlashError("board-error", f"the board failed during {step}: {detail}.{written}") from None
