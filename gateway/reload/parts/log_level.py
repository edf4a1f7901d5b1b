"""[logging] level at run time (and --log-level, which wins as at start); the format needs a restart."""

from __future__ import annotations

import logging

from gateway.config import GatewayConfig
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import change_text

OWNS = ("logging.level",)


class LevelSwap(Prepared):
    def __init__(self, changes: list[str], level: str) -> None:
        super().__init__(changes)
        self.level = level
        self.previous: int | None = None

    def swap(self) -> None:
        root = logging.getLogger()
        self.previous = root.level
        root.setLevel(self.level.upper())

    def undo(self) -> None:
        if self.previous is not None:
            logging.getLogger().setLevel(self.previous)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.logging.level == new.logging.level:
        return None
    return LevelSwap([change_text("logging.level", old.logging.level, new.logging.level)], new.logging.level)
