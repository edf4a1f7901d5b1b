"""`mcp-gateway discover`: list the gateways advertised on the local network (mDNS)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import orjson

from gateway.cli.common import Commands


def cmd_discover(args: argparse.Namespace) -> int:
    """Browse _mcp-broker._tcp and _mcp._tcp with mDNS and list every gateway found (exit 0 even if none)."""
    if not 0 < args.timeout <= 60:
        print("mcp-gateway discover: --timeout must be more than 0 and at most 60 seconds", file=sys.stderr)
        return 2
    from gateway.discovery.browse import browse, render

    found = asyncio.run(browse(args.timeout, args.interface))
    if args.json:
        sys.stdout.write(orjson.dumps([entry.to_json() for entry in found], option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render(found, args.timeout) + "\n")
    return 0


def add_discover(commands: Commands) -> None:
    discover = commands.add_parser(
        "discover",
        help="list the gateways advertised on the local network (mDNS)",
        description=cmd_discover.__doc__,
    )
    discover.add_argument(
        "--timeout", type=float, default=3.0, metavar="S", help="how long to browse, in seconds (default 3)"
    )
    discover.add_argument("--json", action="store_true", help="print a JSON array (empty when none is found)")
    discover.add_argument(
        "--interface",
        action="append",
        default=[],
        metavar="ADDR",
        help="browse only on the interface holding this address (repeat for several; default every interface)",
    )
    discover.set_defaults(func=cmd_discover)
