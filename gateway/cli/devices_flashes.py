"""`mcp-gateway devices flashes`: the flashes recorded in the device registry, newest first.

Each `mcp-gateway flash` that identified its board records one row (gateway/devices/flashes.py): when
(UTC), the board's device id (its MAC), chip and revision, the port, the image's name, size, SHA-256
and offset, the outcome, and who ran it. The table escapes what does not print (`cell`); --json gives
the values as they are. Exit 0 when listed (also none), 1 when the registry cannot be read, 2 for a
usage mistake.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from gateway.cli.columns import aligned
from gateway.cli.device_install import registry_errors
from gateway.client import slot_cell, terminal_text
from gateway.flash.shown import printable

COLUMNS = ("flashed (UTC)", "device", "chip", "image", "size", "sha-256", "offset", "outcome", "port", "by")


def cell(text: str) -> str:
    """Text from the registry as a table shows it: as it is, or as a JSON string (`"pump 1.bin"`) when it
    holds a space, a quote or a character that does not print, each of those escaped, so that no control
    character reaches the terminal (an escape sequence, a newline that would start a row of its own)."""
    return printable(slot_cell(text))


def _by(flash: Any) -> str:
    if flash.sudo_user:
        return f"{cell(flash.sudo_user)} via sudo as {cell(flash.user or '?')}"
    return cell(flash.user) if flash.user else "-"


def _cells(flash: Any) -> tuple[str, ...]:
    chip = f"{cell(flash.chip)} {cell(flash.revision)}" if flash.revision else cell(flash.chip) if flash.chip else "-"
    return (
        cell(flash.flashed_at),
        cell(flash.device_id),
        chip,
        cell(flash.image) if flash.image else "-",
        f"{flash.image_size:,}" if flash.image_size is not None else "-",
        f"{cell(flash.image_sha256[:16])}…" if flash.image_sha256 else "-",
        f"0x{flash.image_offset:X}" if flash.image_offset is not None else "-",
        cell(flash.outcome),
        cell(flash.port) if flash.port else "-",
        _by(flash),
    )


def render(flashes: list[Any]) -> str:
    return aligned(COLUMNS, [_cells(flash) for flash in flashes])


def cmd_flashes(args: argparse.Namespace) -> int:
    from gateway.cli.device_install import _registry
    from gateway.devices.flashes import flash_history

    registry = _registry(args)
    if not registry.path.exists():
        note = f"no device registry at {registry.path} yet: mcp-gateway flash records each flash there"
        print(note, file=sys.stderr if args.json else sys.stdout)
        return 0
    try:
        flashes = flash_history(registry, args.device)
    finally:
        registry.close()
    if args.json:
        for flash in flashes:
            # JSON leaves C1 controls, bidi overrides and DEL raw: escaped as the other --json outputs are.
            sys.stdout.write(terminal_text(orjson.dumps(vars(flash)).decode(), lines=True) + "\n")
        return 0
    if not flashes:
        which = f" of {args.device}" if args.device else ""
        print(f"no flash{which} recorded in {registry.path}")
        return 0
    print(render(flashes))
    return 0


def add_flashes(actions: Any) -> None:
    """`devices flashes` under `devices`' own subcommands."""
    flashes = actions.add_parser(
        "flashes", help="list the flashes recorded in the device registry (mcp-gateway flash), newest first"
    )
    flashes.add_argument("--device", metavar="ID", help="only this board's (its device id: the MAC)")
    # Also `devices`' own options: no defaults here, or they would hide those given before the subcommand.
    flashes.add_argument(
        "--registry",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the device registry (default: devices.db in the state directory)",
    )
    flashes.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="one JSON object per flash instead of the table",
    )
    flashes.set_defaults(func=registry_errors("devices flashes", cmd_flashes))
