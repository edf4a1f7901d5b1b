"""`mcp-gateway discover`: list the gateways advertised on the local network (mDNS)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import orjson

from gateway.cli.common import Commands

MAX_TIMEOUT_S = 60
"""The longest browse `discover --timeout` takes, in seconds."""
MAX_LISTED_DEFAULT = 64
"""How many instances `discover` lists without --max (gateway.discovery.browse.MAX_LISTED)."""
MAX_LISTED_BOUND = 10_000
"""The most instances `discover --max` may ask to list."""


def cmd_discover(args: argparse.Namespace) -> int:
    """Browse _mcp-broker._tcp and _mcp._tcp with mDNS and list every gateway found (exit 0 even if none)."""
    timeout = _seconds(args.timeout)
    if timeout is None:
        message = (
            f"--timeout must be a number of seconds, more than 0 and at most {MAX_TIMEOUT_S}, got {args.timeout!r}"
        )
        return _fail(args, "bad_timeout", message, 2)
    limit = _count(args.max)
    if limit is None:
        message = f"--max must be a whole number from 1 to {MAX_LISTED_BOUND}, got {args.max!r}"
        return _fail(args, "bad_max", message, 2)
    from gateway.discovery.browse import browse, left_out_line, render
    from gateway.discovery.interfaces import UnknownInterface

    try:
        browsed = asyncio.run(browse(timeout, args.interface, limit))
    except UnknownInterface as exc:
        return _fail(args, "unknown_interface", f"--interface: {exc}", 2)
    except (OSError, RuntimeError) as exc:  # zeroconf could not open or join the multicast sockets
        where = f" on {', '.join(args.interface)}" if args.interface else ""
        message = f"cannot browse{where}: {exc}; is multicast on there, and UDP port 5353 free to use?"
        return _fail(args, "browse_failed", message, 1)
    if args.json:
        listed = [entry.to_json() for entry in browsed.found]
        sys.stdout.write(orjson.dumps(listed, option=orjson.OPT_INDENT_2).decode() + "\n")
        if browsed.skipped or browsed.left_out:  # stdout stays the array scripts read
            print(f"mcp-gateway discover: {left_out_line(browsed.skipped, browsed.left_out)}", file=sys.stderr)
    else:
        sys.stdout.write(render(browsed.found, timeout, browsed.skipped, browsed.left_out) + "\n")
    return 0


def _count(text: str) -> int | None:
    """--max as a number of instances, or None when it is no whole number in [1, MAX_LISTED_BOUND]."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 1 <= value <= MAX_LISTED_BOUND else None


def _seconds(text: str) -> float | None:
    """--timeout as seconds, or None when it is no number in (0, MAX_TIMEOUT_S] (nan and inf included).

    Checked here rather than by an argparse type, so that under --json this refusal too is a JSON object
    on stdout, as every other refusal of the command is."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= MAX_TIMEOUT_S else None  # False for nan; inf is above the bound


def _fail(args: argparse.Namespace, error: str, message: str, code: int) -> int:
    """A refusal: the message on stderr; with --json also `{"error": ..., "message": ...}` on stdout, so a
    script reading stdout gets JSON either way."""
    if args.json:
        sys.stdout.write(orjson.dumps({"error": error, "message": message}).decode() + "\n")
    print(f"mcp-gateway discover: {message}", file=sys.stderr)
    return code


def add_discover(commands: Commands) -> None:
    discover = commands.add_parser(
        "discover",
        help="list the gateways advertised on the local network (mDNS)",
        description=cmd_discover.__doc__,
    )
    discover.add_argument(
        "--timeout",
        default="3",
        metavar="S",
        help=f"how long to browse, in seconds, more than 0 and at most {MAX_TIMEOUT_S} (default 3)",
    )
    discover.add_argument(
        "--max",
        default=str(MAX_LISTED_DEFAULT),
        metavar="N",
        help=f"list at most N instances, gateways first (default {MAX_LISTED_DEFAULT}, at most "
        f"{MAX_LISTED_BOUND}); the rest are counted in a last line (on stderr with --json)",
    )
    discover.add_argument("--json", action="store_true", help="print a JSON array (empty when none is found)")
    discover.add_argument(
        "--interface",
        action="append",
        default=[],
        metavar="IFACE",
        help="browse only on this interface: a name such as eth0, or one of its addresses, as [mdns] interfaces "
        "takes them (repeat for several; default every interface)",
    )
    discover.set_defaults(func=cmd_discover)
