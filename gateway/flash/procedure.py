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
from gateway.flash.handover import Handover, Release
from gateway.flash.image import FirmwareImage, chip_name, header_chip, load_image, revision_problem
from gateway.flash.port import held_by_another_command, holders, in_use_error, lock_holders, open_port
from gateway.flash.progress import Reporter
from gateway.flash.shown import printable

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
        # A message may name a file of the firmware directory or a process: what does not print is escaped.
        reporter.step({"step": "error", "error": exc.code, "message": printable(exc.message)})
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


@dataclass(frozen=True)
class Candidates:
    """The images to choose from, and, without --firmware, what else the firmware directory holds."""

    images: list[FirmwareImage]
    directory: firmware.Directory | None = None
    unlisted_chips: tuple[int | None, ...] = ()
    """The chip id each of directory.unlisted names in its header; None: not a readable image."""


def load_candidates(request: FlashRequest) -> Candidates:
    if request.firmware is not None:
        path = firmware.resolve(request.firmware, request.firmware_dir)
        image = load_image(path)
        firmware.check_sum(path, image.data, request.firmware_dir)
        return Candidates([image])
    directory = firmware.survey(request.firmware_dir)
    if not directory.listed:
        raise _nothing_listed(directory)
    images = []
    for path in directory.listed:
        image = load_image(path)
        firmware.check_sum(path, image.data)
        images.append(image)
    return Candidates(images, directory, tuple(header_chip(path) for path in directory.unlisted))


def _nothing_listed(directory: firmware.Directory) -> FlashError:
    if not directory.has_sums:
        listing = f"there is no {directory.sums_path}"
    elif directory.missing:
        listing = (
            f"{directory.sums_path} lists {', '.join(map(printable, directory.missing))}, none of them in the directory"
        )
    elif directory.foreign:
        listing = directory.foreign_text().replace(firmware.SUMS_FILE, str(directory.sums_path), 1)
    else:
        listing = f"{directory.sums_path} lists no image"
    if directory.unlisted:
        names = ", ".join(printable(path.name) for path in directory.unlisted)
        return FlashError(
            "checksum-mismatch",
            f"no --firmware given and {listing}; not recorded: {names}. If the image to write is there, record "
            f"the images ({directory.record_command()}) and run the command again",
        )
    return FlashError("firmware-not-found", f"no --firmware given and {listing}")


def select(candidates: Candidates, board: BoardInfo, named: bool) -> FirmwareImage:
    """The image to write: the one named (if it is for this chip), else the only one for this chip.

    Without --firmware, an unlisted file that may be for this chip (its header names it, or it is no
    readable image) stops the command: it is most likely the image just copied in, and writing another
    one would leave the board on the old firmware with nothing to show for it."""
    images = candidates.images
    directory = candidates.directory
    if named or directory is None:  # --firmware named it: there is no directory to choose from
        image = images[0]
        if image.chip_id != board.chip_id:
            raise FlashError(
                "wrong-chip",
                f"{printable(image.path.name)} is an image for {image.chip_name}, the board is an {board.chip}: "
                "nothing was written",
            )
        return image
    matching = [image for image in images if image.chip_id == board.chip_id]
    _refuse_unlisted_for(board, candidates, matching, directory)
    stale = f"; {directory.missing_text()}" if directory.missing else ""
    if not matching:
        names = ", ".join(f"{printable(image.path.name)} is for {image.chip_name}" for image in images)
        if stale:  # the image for this chip may be the one that was deleted or renamed
            raise FlashError(
                "firmware-not-found",
                f"no image in the firmware directory is for {board.chip} ({names}){stale}: copy the image in "
                f"again, or record the images anew ({directory.record_command()}); nothing was written",
            )
        raise FlashError(
            "wrong-chip", f"no image in the firmware directory is for {board.chip} ({names}): nothing was written"
        )
    if len(matching) > 1:
        names = ", ".join(printable(image.path.name) for image in matching)
        raise FlashError(
            "firmware-not-found",
            f"several images in the firmware directory are for {board.chip} ({names}): name one with --firmware",
        )
    return matching[0]


def _refuse_unlisted_for(
    board: BoardInfo, candidates: Candidates, matching: list[FirmwareImage], directory: firmware.Directory
) -> None:
    fitting = [
        f"{printable(path.name)} ({'not a readable image' if chip is None else chip_name(chip)})"
        for path, chip in zip(directory.unlisted, candidates.unlisted_chips, strict=True)
        if chip is None or chip == board.chip_id
    ]
    if not fitting:
        return
    listed = ""
    if matching:
        names = " or ".join(printable(image.path.stem) for image in matching)
        listed = f", or name the listed image to write with --firmware ({names})"
    stale = f"; {directory.missing_text()}" if directory.missing else ""
    raise FlashError(
        "checksum-mismatch",
        f"not listed in {directory.sums_path}, and may be for this {board.chip}: {', '.join(fitting)}{stale}. "
        f"If the image to write is there, record the images ({directory.record_command()}) and run the command "
        f"again{listed}; nothing was written",
    )


def directory_notes(candidates: Candidates) -> list[str]:
    """What the firmware directory holds besides the image chosen: unlisted files (for other chips, or
    the command would have stopped), listed names that are not there, and entries of other directories."""
    directory = candidates.directory
    if directory is None:
        return []
    notes = []
    if directory.unlisted:
        names = ", ".join(
            f"{printable(path.name)} ({'not a readable image' if chip is None else chip_name(chip)})"
            for path, chip in zip(directory.unlisted, candidates.unlisted_chips, strict=True)
        )
        notes.append(
            f"left out, not listed in {directory.sums_path}: {names}; to use them, record the images "
            f"({directory.record_command()})"
        )
    if directory.missing:
        notes.append(f"{directory.missing_text()}; record the images anew ({directory.record_command()})")
    if directory.foreign:
        notes.append(directory.foreign_text())
    return notes


def open_with_handover(
    request: FlashRequest, reporter: Reporter, handover: Handover | None
) -> tuple[serial.Serial, bool]:
    """The open port, and whether this flash holds a release (and must ask the holder to take it back).

    A port that opens at once may still be one the gateway serves and holds released, waiting to be
    given back (a flash killed mid-way never asked for it back): the gateway is asked to release it
    anyway, when it is seen listening at the URL (GatewayHandover asks no other listener). If it says
    it did, it holds the port for this flash (its bound starts again): the flash could lock the port,
    so whoever it was released for is gone, and this flash takes the hold over and asks for the port
    back at the end, as after a handover; otherwise the board stays unserved after a successful flash
    until `[serial] max_hold_s` passes."""
    try:
        port = open_port(request.port)
    except FlashError as exc:
        if exc.code != "port-in-use" or handover is None:
            raise
        return _open_from_gateway(request, reporter, handover), True
    if handover is None:
        return port, False
    try:
        held = _release(handover, request.port) is not None
    except BaseException:
        port.close()
        raise
    if held:
        reporter.step({"step": "release", "port": request.port})
    return port, held


def _open_from_gateway(request: FlashRequest, reporter: Reporter, handover: Handover) -> serial.Serial:
    """The port, once the gateway let go of it for this flash; else port-in-use, naming the holders as
    found when the flash gives up. A port locked by another `mcp-gateway` command (another flash) is
    left alone: that command has it, and gives back what it took from the gateway. A port the gateway
    had let go of before this flash asked is another program's release: that program gives it back."""
    if held_by_another_command(request.port):
        raise _in_use_now(request.port)
    release = _release(handover, request.port)
    if release is None or release.already_held:
        raise _in_use_now(request.port)
    try:
        reporter.step({"step": "release", "port": request.port})
        deadline = time.monotonic() + request.release_wait_s
        while True:
            try:
                return open_port(request.port)
            except FlashError as exc:
                if exc.code != "port-in-use" or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
    except BaseException:  # the port did not open (or Ctrl-C, a stop signal): the gateway takes it back
        # ... unless another flash locked it meanwhile: it took the hold over and gives the port back itself
        if not held_by_another_command(request.port):
            handover.resume(request.port)
            reporter.step({"step": "resume", "port": request.port})
        raise


def _in_use_now(path: str) -> FlashError:
    """port-in-use, naming the holders of `path` as they are now (they change while the flash waits)."""
    return in_use_error(path, lock_holders(path) or holders(path))


def _release(handover: Handover, port: str) -> Release | None:
    try:
        return handover.let_go(port)
    except KeyboardInterrupt:  # Ctrl-C or a stop signal while asking: the gateway may have let go already
        handover.resume(port)
        raise


def _run(request: FlashRequest, reporter: Reporter, handover: Handover | None) -> None:
    candidates = load_candidates(request)
    named = request.firmware is not None
    if named:
        reporter.step(_image_event(candidates.images[0]))
    port, released = open_with_handover(request, reporter, handover)
    try:
        with quiet_esptool() as collector:
            board = Board.connect(port, request.chip, request.connect_attempts, collector)
            _flash_board(request, reporter, board, candidates, named)
    finally:
        port.close()
        if released and handover is not None:
            handover.resume(request.port)
            reporter.step({"step": "resume", "port": request.port})


def _flash_board(request: FlashRequest, reporter: Reporter, board: Board, candidates: Candidates, named: bool) -> None:
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
        image = select(candidates, info, named)
        if not named:
            reporter.step(_image_event(image))
            for note in directory_notes(candidates):
                reporter.step({"step": "note", "message": note})
        problem = revision_problem(image, info.revision)
        if problem is not None:
            raise FlashError("wrong-chip", f"{problem}: nothing was written")
        data = image.data + b"\xff" * (-len(image.data) % 4)
        end = request.offset + len(data)
        if info.flash_bytes is not None:
            if end > info.flash_bytes:
                raise FlashError(
                    "image-too-big",
                    f"{printable(image.path.name)} ({len(data):,} bytes at 0x{request.offset:X}) does not fit the "
                    f"board's {info.flash_size} flash: nothing was written",
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
