"""The parser class of every subcommand: its own usage errors, worded for the person who typed the command."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from gateway.cli.common import Commands

REQUIRED = "the following arguments are required: "


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser. An option it does not know is refused with this subcommand's usage, not the
    top-level one that lists every command (argparse leaves such leftovers to the top parser); a missing
    subcommand is named as COMMAND with the choices it has (`COMMAND (create, list, revoke)`). One marked
    `intermixed` takes its options also among its positional arguments. A URL's query and fragment in a
    refusal are masked: `?token=…` may be a secret."""

    intermixed = False
    _mixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._mixing:  # a pass of parse_known_intermixed_args: it hands what is left to the next pass
            return super().parse_known_args(args, namespace)
        if self.intermixed:
            self._mixing = True
            try:
                parsed, extras = self.parse_known_intermixed_args(args, namespace)
            finally:
                self._mixing = False
        else:
            parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        message = URL_QUERY.sub(r"\1\2***", message)
        if message.startswith(REQUIRED):
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction) and action.metavar == COMMAND:
                    named = f"{COMMAND} ({', '.join(action.choices)})"
                    message = REQUIRED + ", ".join(
                        named if name == COMMAND else name for name in message.removeprefix(REQUIRED).split(", ")
                    )
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


URL_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"]*)([?#])[^\s'\"]*")
"""A URL's query or fragment (a scheme://, up to a quote or a space), which a refusal does not echo."""


def intermixed(parser: argparse.ArgumentParser) -> None:
    """Let `parser` (a CommandParser) take its options among its positional arguments, as
    `parse_intermixed_args` does (argparse stops a `nargs="*"` positional at the first option)."""
    if isinstance(parser, CommandParser):
        parser.intermixed = True


COMMAND = "COMMAND"
"""The metavar of a command's own subcommands (`token COMMAND`), which a missing one is named by."""


def subcommands(parser: argparse.ArgumentParser, dest: str, *, required: bool = True) -> Any:
    """`parser.add_subparsers` for a command's own subcommands (token create, tls self-signed, ...),
    shown and named as COMMAND; `dest` holds the one chosen."""
    return parser.add_subparsers(dest=dest, required=required, metavar=COMMAND)


def commands(parser: argparse.ArgumentParser) -> Commands:
    """The top-level `add_subparsers`, whose parsers (one per command) are CommandParsers. Typed as the
    Commands every add_* function takes: they only add parsers to it."""
    return cast("Commands", parser.add_subparsers(dest="command", required=True, parser_class=CommandParser))
