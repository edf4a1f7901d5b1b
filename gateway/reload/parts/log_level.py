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

    def swap(self) -> None:
        logging.getLogger().setLevel(self.level.upper())


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.logging.level == new.logging.level:
        return None
    return LevelSwap([change_text("logging.level", old.logging.level, new.logging.level)], new.logging.level)
