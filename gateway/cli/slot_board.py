"""Which board `mcp-gateway device update SLOT` may write to: the one that serves SLOT.

The update probes the board on the port (its device id, read as the install reads it) and compares it
with the slot's board before anything is written: another board (a wrong --port, a board plugged in
where the slot's board was installed) is left untouched, [wrong-board] (docs/field-devices.md, "Update").
"""

from __future__ import annotations

import argparse
from typing import Any


class WrongBoard(Exception):
    """The board on the port is not the one that serves the slot: nothing is written to it."""

    def __init__(self, found: str, expected: tuple[str, str]) -> None:
        super().__init__(found)
        self.found = found
        self.expected, self.source = expected


def slot_board(args: argparse.Namespace, registry: Any, known: Any, before: dict[str, Any]) -> tuple[str, str] | None:
    """The device id of the board that serves the slot and where it is known from: the slot's standing
    adoption in the registry (the id the install read from the board, as the probe reads it), else the
    hello of the board connected now, else the board last seen serving it; None when none knows one (a
    board installed elsewhere, never heard): the update then writes to the port's board."""
    if known is not None and known.adopted and not known.revoked and known.slot == args.slot:
        return known.device_id, f"its adoption in the registry {registry.path}"
    hello = before.get("hello")
    if before.get("connected") and isinstance(hello, dict) and isinstance(hello.get("device_id"), str):
        return hello["device_id"], f"its hello to the gateway at {args.url}"
    if known is not None and not known.revoked and known.seen_slot == args.slot:
        return known.device_id, f"the board last seen serving it, in the registry {registry.path}"
    return None
