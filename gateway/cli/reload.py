"""`mcp-gateway reload`: ask a running gateway to load its whole configuration again (docs/reload.md)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.cli.common import Commands, gateway_timeout_option, gateway_url_option


def cmd_reload(args: argparse.Namespace) -> int:
    from gateway.cli.calls import gateway_client

    async def go() -> int:
        async with gateway_client(args, "_broker") as client:
            result = await client.call_tool("broker_reload", {})
        texts = [block.get("text", "") for block in result.get("content", []) if block.get("type") == "text"]
        if result.get("isError"):  # a refusal: on stderr, as every command's; stdout stays what changed
            print("mcp-gateway reload: " + "\n".join(texts), file=sys.stderr)
            return 1
        sys.stdout.write("\n".join(texts) + "\n")
        return 0

    return asyncio.run(go())


def add_reload(commands: Commands) -> None:
    reload = commands.add_parser(
        "reload",
        help="make a running gateway load its whole configuration again",
        description="Ask a running gateway (its _broker tool broker_reload) to load its configuration again, "
        "from the same file, environment and flags it started with, as SIGHUP does. Prints what changed. A "
        "configuration with a mistake, or a change that needs a restart (the port, the address), is refused "
        "whole: nothing changes, the answer names every reason, and the command exits 1. Without a [policy] "
        "only a gateway bound to loopback serves this (with [auth], to a token holding _broker's required_scopes); "
        "with one, the policy must grant broker_reload (an action on /_system/broker).",
    )
    gateway_url_option(reload)
    reload.add_argument(
        "--token-file", metavar="FILE", help="a file holding the client token (default: $MCP_GATEWAY_TOKEN)"
    )
    gateway_timeout_option(reload)
    reload.set_defaults(func=cmd_reload)
