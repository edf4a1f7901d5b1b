"""`mcp-gateway devices`: the boards in the device registry; `devices revoke ID`: withdraw a board's identity.

The registry (gateway/devices/registry.py) lists every board whose hello the gateway heard, by device
id (the MAC on an ESP32), and whether `mcp-gateway device install` adopted it. A revoked identity is
refused from the board's next dial (HTTP 401, "provider_identity_revoked"); the running gateway reads
the registry at each check, so neither a restart nor a reload is needed.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from gateway.cli.common import Commands

COLUMNS = ("device", "adopted", "seen", "last seen", "firmware", "schema", "transport", "slot")


def _registry(args: argparse.Namespace) -> Any:
    from gateway.devices.registry import DeviceRegistry, default_registry_path

    return DeviceRegistry(Path(args.registry).expanduser() if args.registry else default_registry_path())


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S") if epoch else "never"


def _adopted(row: Any) -> str:
    return "revoked" if row.revoked else ("yes" if row.adopted else "no")


def _cells(row: Any) -> tuple[str, ...]:
    firmware = f"{row.firmware} {row.version}" if row.firmware else "-"
    return (
        row.device_id,
        _adopted(row),
        str(row.seen),
        _when(row.last_seen),
        firmware,
        row.schema or "-",
        row.seen_transport or row.transport or "-",
        row.slot or row.seen_slot or "-",
    )


def render(rows: list[Any]) -> str:
    table = [COLUMNS, *(_cells(row) for row in rows)]
    widths = [max(len(line[column]) for line in table) for column in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )


def cmd_devices(args: argparse.Namespace) -> int:
    registry = _registry(args)
    if not registry.path.exists():
        print(f"no device registry at {registry.path} yet: the gateway records the boards it hears there")
        return 0
    try:
        rows = registry.devices()
    finally:
        registry.close()
    if args.json:
        for row in rows:
            record = {**vars(row), "adopted": _adopted(row)}
            record.pop("revoked")
            sys.stdout.write(orjson.dumps(record).decode() + "\n")
        return 0
    print(render(rows))
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    registry = _registry(args)
    try:
        revoked = registry.revoke(args.device_id) if registry.path.exists() else None
    finally:
        registry.close()
    if revoked is None:
        print(
            f"mcp-gateway: {args.device_id} has no identity in {registry.path} (see mcp-gateway devices)",
            file=sys.stderr,
        )
        return 1
    print(f"revoked {revoked.identity} (slot {revoked.slot}): the gateway refuses it from its next connection")
    print("a link it holds now stays up until it drops; to end it at once, restart the gateway or power the board off")
    return 0


def add_devices(commands: Commands) -> None:
    devices = commands.add_parser("devices", help="list the boards in the device registry; revoke one's identity")
    devices.add_argument(
        "--registry", metavar="PATH", help="the device registry (default: devices.db in the state directory)"
    )
    devices.add_argument("--json", action="store_true", help="one JSON object per board instead of the table")
    devices.set_defaults(func=cmd_devices)
    actions = devices.add_subparsers(dest="action")
    revoke = actions.add_parser("revoke", help="withdraw a board's own provider identity")
    revoke.add_argument("device_id", metavar="ID", help="the board's device id, as `mcp-gateway devices` lists it")
    revoke.add_argument(
        "--registry", metavar="PATH", help="the device registry (default: devices.db in the state directory)"
    )
    revoke.set_defaults(func=cmd_revoke)
