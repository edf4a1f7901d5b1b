"""`mcp-gateway devices flashes`: the flashes recorded in the device registry, newest first.

Each `mcp-gateway flash` that identified its board records one row (gateway/devices/flashes.py): when
(UTC), the board's device id (its MAC), chip and revision, the port, the image's name, size, SHA-256
and offset, the outcome, and who ran it. Exit 0 when listed (also none), 1 when the registry cannot be
read, 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from gateway.cli.device_install import registry_errors

COLUMNS = ("flashed (UTC)", "device", "chip", "image", "size", "sha-256", "offset", "outcome", "port", "by")


def _by(flash: Any) -> str:
    return f"{flash.sudo_user} via sudo as {flash.user}" if flash.sudo_user else flash.user or "-"


def _cells(flash: Any) -> tuple[str, ...]:
    chip = f"{flash.chip} {flash.revision}" if flash.revision else flash.chip or "-"
    return (
        flash.flashed_at,
        flash.device_id,
        chip,
        flash.image or "-",
        f"{flash.image_size:,}" if flash.image_size is not None else "-",
        f"{flash.image_sha256[:16]}…" if flash.image_sha256 else "-",
        f"0x{flash.image_offset:X}" if flash.image_offset is not None else "-",
        flash.outcome,
        flash.port or "-",
        _by(flash),
    )


def render(flashes: list[Any]) -> str:
    table = [COLUMNS, *(_cells(flash) for flash in flashes)]
    widths = [max(len(line[column]) for line in table) for column in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )


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
            sys.stdout.write(orjson.dumps(vars(flash)).decode() + "\n")
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
    flashes.add_argument(
        "--registry", metavar="PATH", help="the device registry (default: devices.db in the state directory)"
    )
    flashes.add_argument("--json", action="store_true", help="one JSON object per flash instead of the table")
    flashes.set_defaults(func=registry_errors("devices flashes", cmd_flashes))
