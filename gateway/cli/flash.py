"""`mcp-gateway flash PORT`: write a firmware image to a board on a serial port (docs/field.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from gateway.cli.common import Commands, gateway_url_option, whole_number
from gateway.devices.flashes import MAX_FLASHES

if TYPE_CHECKING:
    from gateway.flash.progress import Event, Reporter

CHIPS = ("auto", "esp32", "esp32s2", "esp32s3", "esp32c2", "esp32c3", "esp32c6", "esp32h2")


def flash_offset(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number like 0x10000, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"the offset must not be negative (an address in the flash), got {text}")
    if value % 0x1000:
        raise argparse.ArgumentTypeError(f"the offset must be a multiple of 0x1000 (a flash sector), got {text}")
    return value


def _who() -> tuple[str, str | None]:
    """The OS user running the command, and under sudo the user who called it: $SUDO_USER, taken only
    when the command runs as root (any user may set the variable; sudo sets it for a command it runs as
    root)."""
    import pwd

    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (a container)
        user = str(os.getuid())
    return user, (os.environ.get("SUDO_USER") or None) if os.geteuid() == 0 else None


def record(args: argparse.Namespace, last: dict[str, Event], outcome: str) -> str | None:
    """Write the flash to the device registry; None, or why it could not be written (the flash's own
    outcome and exit code stand either way)."""
    from pathlib import Path

    from gateway.cli.device_install import _registry
    from gateway.devices.flashes import FlashRecord, device_id_of_mac, record_flash, utc_now

    detect, image = last["detect"], last.get("image")
    user, sudo_user = _who()
    flash = FlashRecord(
        flashed_at=utc_now(),
        device_id=device_id_of_mac(detect["mac"]),
        chip=detect["chip"],
        revision=detect["revision"],
        port=args.port,
        image=Path(image["file"]).name if image else None,
        image_size=image["size"] if image else None,
        image_sha256=image["sha256"] if image else None,
        image_offset=args.offset,
        outcome=outcome,
        user=user,
        sudo_user=sudo_user,
    )
    registry = _registry(args)
    try:
        record_flash(registry, flash, args.keep_flashes)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        return (
            f"the flash is not recorded: the device registry {registry.path} cannot be written ({reason}). Name "
            "one this user may write with --registry, or mend this one"
        )
    finally:
        registry.close()
    return None


class Recorder:
    """Between the steps and the reporter: once the flash has identified its board (the detect step),
    its end is recorded in the device registry, before the error step (which stays the last line) or,
    for a flash that worked, after the last step. A record that fails is one note step."""

    def __init__(self, reporter: Reporter, args: argparse.Namespace) -> None:
        self.reporter = reporter
        self.args = args
        self.last: dict[str, Event] = {}
        self.recorded = False

    def step(self, event: Event) -> None:
        if event["step"] == "error":
            self.finish(event["error"])
        else:
            self.last[event["step"]] = event
        self.reporter.step(event)

    def finish(self, outcome: str) -> None:
        if self.recorded or "detect" not in self.last:  # refused before the board was known: no row
            return
        self.recorded = True
        problem = record(self.args, self.last, outcome)
        if problem is not None:
            self.reporter.step({"step": "note", "message": problem})


def cmd_flash(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.cli.calls import _client_token
    from gateway.flash.firmware import default_firmware_dir
    from gateway.flash.handover import GatewayHandover, Stopped, stop_signals
    from gateway.flash.procedure import FlashRequest, flash
    from gateway.flash.progress import JsonLines, Lines, Seen, interrupted_event

    bar = sys.stderr if sys.stderr.isatty() else None
    reporter: Reporter = JsonLines(sys.stdout) if args.json else Lines(sys.stdout, bar)
    request = FlashRequest(
        port=args.port,
        firmware=args.firmware,
        firmware_dir=Path(args.firmware_dir) if args.firmware_dir else default_firmware_dir(),
        chip=args.chip,
        offset=args.offset,
        baud=args.baud,
        connect_attempts=args.connect_attempts,
    )
    handover = None if args.no_handover else GatewayHandover(args.url, _client_token(args))
    recorder = Recorder(reporter, args)
    seen = Seen(recorder)
    try:
        with stop_signals():  # SIGTERM and SIGHUP end it as Ctrl-C does: a released port is given back
            code = flash(request, seen, handover)
            if code == 0:
                recorder.finish("ok")
        return code
    except KeyboardInterrupt as stop:  # Ctrl-C, or Stopped (SIGTERM, SIGHUP): the last step says how far it got
        stopped_by, exit_code = (str(stop), stop.exit_code) if isinstance(stop, Stopped) else ("Ctrl-C (SIGINT)", 130)
        seen.step(interrupted_event(stopped_by, seen))
        return exit_code


def add_flash(commands: Commands) -> None:
    sub = commands.add_parser(
        "flash",
        help="write a firmware image to a board on a serial port",
        description="Write a firmware image to an ESP32 board through its ROM loader: detect the chip, its MAC "
        "and flash size, check the image is for that chip (nothing is written otherwise), write it compressed, "
        "verify it (MD5 computed by the board), and reset the board into it. Images are local files: a path, or "
        "a name in the firmware directory, checked against its SHA256SUMS. Nothing is downloaded. If a running "
        "gateway holds the port, it is asked to release it for the flash and to take it back after, also when the "
        "command is stopped (Ctrl-C, SIGTERM, SIGHUP: exit 130, 143, 129). Exit codes: docs/field.md.",
    )
    sub.add_argument("port", metavar="PORT", help="the board's serial port, e.g. /dev/ttyUSB0 or /dev/serial/by-id/…")
    sub.add_argument(
        "--firmware",
        metavar="FILE",
        help="the image: a path, or a name in the firmware directory (default: the one image there for the chip)",
    )
    sub.add_argument(
        "--firmware-dir",
        metavar="DIR",
        help="the firmware directory (default: $STATE_DIRECTORY/firmware, else "
        "$XDG_STATE_HOME/mcp-gateway/firmware, else ~/.local/state/mcp-gateway/firmware)",
    )
    sub.add_argument("--chip", choices=CHIPS, default="auto", help="the board's chip (default: detect it)")
    sub.add_argument(
        "--offset",
        type=flash_offset,
        default=0,
        metavar="ADDR",
        help="where the image goes in flash (default 0x0: a whole-flash image; an application alone: 0x10000)",
    )
    sub.add_argument("--baud", type=whole_number(1), default=460800, help="baud rate for the transfer (default 460800)")
    sub.add_argument(
        "--connect-attempts",
        type=whole_number(1),
        default=3,
        metavar="N",
        help="times to reset the board into download mode and sync before giving up, 1 or more (default 3)",
    )
    sub.add_argument("--json", action="store_true", help="one JSON object per step on stdout")
    sub.add_argument(
        "--registry",
        metavar="PATH",
        help="the device registry the flash is recorded in (default: devices.db in the state directory)",
    )
    sub.add_argument(
        "--keep-flashes",
        type=whole_number(1),
        default=MAX_FLASHES,
        metavar="N",
        help=f"flash records the registry keeps, the oldest deleted past it (default {MAX_FLASHES})",
    )
    gateway_url_option(sub, "the running gateway to ask for the port")
    sub.add_argument(
        "--token-file", metavar="FILE", help="a file holding the client token (default: $MCP_GATEWAY_TOKEN)"
    )
    sub.add_argument("--no-handover", action="store_true", help="do not ask a running gateway to release the port")
    sub.set_defaults(func=cmd_flash)
