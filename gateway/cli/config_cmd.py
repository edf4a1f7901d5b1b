"""`mcp-gateway config check|show`: load the configuration as `run` would, and check or print it."""

from __future__ import annotations

import argparse
import sys

import orjson

from gateway.cli.common import Commands, _load, refuse_insecure_bind, with_config
from gateway.config import masked_dump


def cmd_config(args: argparse.Namespace) -> int:
    config = _load(args)
    if args.action == "check":
        refusal = refuse_insecure_bind(config)
        if refusal is not None:
            print(f"mcp-gateway: configuration loads, but `run` would refuse it: {refusal}", file=sys.stderr)
            return 2
        from gateway.policy.client_auth import check_client_auth

        check_client_auth(config)  # token files and a JWKS file are read as `run` reads them
        print("configuration OK")
        return 0
    sys.stdout.write(orjson.dumps(masked_dump(config), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def add_config(commands: Commands) -> None:
    config = commands.add_parser("config", help="check or show the effective configuration")
    config.add_argument(
        "action",
        choices=["check", "show"],
        help="check: load it as `run` would and say whether run would start; show: print it as JSON, secrets masked",
    )
    with_config(config)
    config.add_argument("--host", help="address to bind, as run --host (default 127.0.0.1)")
    config.add_argument("--port", type=int, help="port to bind, as run --port")
    config.add_argument(
        "--insecure-lan", action="store_true", help="as run --insecure-lan: accept a LAN bind without authentication"
    )
    config.set_defaults(func=cmd_config)
