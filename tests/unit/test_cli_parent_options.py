"""An option a command takes before its subcommand (`devices --registry PATH flashes`) reaches the
subcommand: a subcommand that takes the same option too has no default of its own for it, which
argparse would write over the value given before the subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from gateway.cli import build_parser


def shadowing_options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[str]:
    """`command subcommand --option` for each subcommand option whose default hides its parent's."""
    parent = {action.dest for action in parser._actions if action.option_strings and action.dest != "help"}
    for group in parser._actions:
        if not isinstance(group, argparse._SubParsersAction):
            continue
        for name, child in group.choices.items():
            for action in child._actions:
                if action.dest in parent and action.default is not argparse.SUPPRESS:
                    yield " ".join([*path, name, action.option_strings[0]])
            yield from shadowing_options(child, (*path, name))


def test_no_subcommand_option_hides_the_same_option_given_before_it() -> None:
    assert list(shadowing_options(build_parser())) == []


def test_devices_options_before_the_subcommand_reach_it() -> None:
    parser = build_parser()
    flashes = parser.parse_args(["devices", "--registry", "plant.db", "--json", "flashes"])
    assert (flashes.registry, flashes.json) == ("plant.db", True)
    revoke = parser.parse_args(["devices", "--registry", "plant.db", "revoke", "34:85:18:0a:0b:0c"])
    assert revoke.registry == "plant.db"
    after = parser.parse_args(["devices", "flashes", "--registry", "other.db", "--json"])
    assert (after.registry, after.json) == ("other.db", True)
    neither = parser.parse_args(["devices", "flashes"])
    assert (neither.registry, neither.json) == (None, False)
