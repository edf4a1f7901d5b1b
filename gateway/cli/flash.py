"""`mcp-gateway flash PORT`: write a firmware image to a board on a serial port (docs/field.md)."""

from __future__ import annotations

import argparse
import sys

from gateway.cli.common import Commands, gateway_url_option, whole_number

CHIPS = ("auto", "esp32", "esp32s2", "esp32s3", "esp32c2", "esp32c3", "esp32c6", "esp32h2")


def flash_offset(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number like 0x10000, got {text!r}") from None
    if value < 0 or value % 0x1000:
        raise argparse.ArgumentTypeError(f"the offset must be a multiple of 0x1000 (a flash sector), got {text}")
    return value


def cmd_flash(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.cli.calls import _client_token
    from gateway.flash.firmware import default_firmware_dir
    from gateway.flash.handover import GatewayHandover, Stopped, stop_signals
    from gateway.flash.procedure import FlashRequest, flash
    from gateway.flash.progress import JsonLines, Lines, Reporter, Seen, interrupted_event

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
    seen = Seen(reporter)
    try:
        with stop_signals():  # SIGTERM and SIGHUP end it as Ctrl-C does: a released port is given back
            return flash(request, seen, handover)
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
    gateway_url_option(sub, "the running gateway to ask for the port")
    sub.add_argument(
        "--token-file", metavar="FILE", help="a file holding the client token (default: $MCP_GATEWAY_TOKEN)"
    )
    sub.add_argument("--no-handover", action="store_true", help="do not ask a running gateway to release the port")
    sub.set_defaults(func=cmd_flash)
