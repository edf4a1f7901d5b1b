"""`mcp-gateway stdio`: serve MCP on stdin/stdout for hosts that launch a command, forwarding to a gateway."""

from __future__ import annotations

import argparse
import math
import sys

from gateway.cli.common import (
    DEFAULT_URL,
    Commands,
    _read_credential_file,
    check_base_url,
    client_token_from_env,
    env_default,
    trusted_ca,
)
from gateway.config.base import ENV_CLIENT_TOKEN, ENV_CLIENT_URL
from gateway.northbound.bridge_wait import DEFAULT_READ_TIMEOUT_S  # no aiohttp: cheap for every command


def cmd_stdio(args: argparse.Namespace) -> int:
    """Serve MCP on stdin/stdout, forwarding every message to a running gateway's /<slot>/mcp (or, with
    --group, a tool group's /mcp/<group>)."""
    import os

    from gateway.config.auth import read_secret_file, secret_file_readable_warning
    from gateway.config.credentials import header_safe
    from gateway.config.groups import GROUP_NAME, RESERVED_GROUP_NAMES
    from gateway.core.names import ALL_SLOT, BROKER_SLOT, SlotNameError, check_slot_name
    from gateway.logs import setup_logging
    from gateway.northbound.stdio_bridge import BearerToken, Credentials, HmacKey, StdioBridge, main

    def refuse(reason: str) -> int:
        print(f"mcp-gateway stdio: {reason}", file=sys.stderr)
        return 2

    # Checked here, not by argparse, so that every refusal of the bridge is its own line and exit 2.
    try:
        check_base_url(args.url, "the gateway's base URL", "http://HOST:PORT", token_flag="--token-file")
    except ValueError as exc:
        variable = getattr(args.url, "variable", None)
        return refuse(f"--url {'(from $' + variable + ') ' if variable else ''}{exc}")
    if args.slot is not None and args.group is not None:
        return refuse("give --slot or --group, not both")
    if (
        args.group is not None
        and args.group
        and (not GROUP_NAME.fullmatch(args.group) or args.group in RESERVED_GROUP_NAMES)
    ):
        return refuse(
            f"--group {args.group!r} is not a tool group's name (1 to 64 letters, digits, _ or -, starting with "
            f"a letter or digit, and none of {', '.join(sorted(RESERVED_GROUP_NAMES))}); "
            '--group "" serves /mcp, every enabled group'
        )
    slot = ALL_SLOT if args.slot is None else args.slot
    if _path_like(slot):
        return refuse(
            f"--slot {slot!r} is a path, not a slot name: for a tool group give --group NAME (it serves "
            '/mcp/NAME; --group "" serves /mcp), for a slot its name alone, e.g. --slot pump-1'
        )
    if slot not in (ALL_SLOT, BROKER_SLOT):
        try:
            check_slot_name(slot)
        except SlotNameError as exc:
            return refuse(f"--slot: {exc}")
    if not math.isfinite(args.read_timeout) or args.read_timeout < 0:
        return refuse(f"--read-timeout {args.read_timeout:g}: give seconds, 0 or more (0 waits without limit)")
    if (args.hmac_key_id is None) != (args.hmac_secret_file is None):
        return refuse("request signing needs both --hmac-key-id and --hmac-secret-file")
    if args.hmac_key_id is not None and args.token_file is not None:
        return refuse("give --token-file or the --hmac-* options, not both")
    credentials: Credentials | None = None
    try:
        if args.hmac_key_id is not None:
            # The rule of the gateway's own secret files: refused when others may write it (they would
            # choose the secret), named when others may read it.
            secret = read_secret_file(args.hmac_secret_file, "--hmac-secret-file")
            warning = secret_file_readable_warning(args.hmac_secret_file, os.stat(args.hmac_secret_file).st_mode)
            if warning is not None:
                print(f"mcp-gateway stdio: warning: --hmac-secret-file: {warning}", file=sys.stderr)
            header_safe(args.hmac_key_id, "--hmac-key-id")
            credentials = HmacKey(args.hmac_key_id, secret.encode("utf-8"), args.hmac_secret_file)
        elif args.token_file is not None:
            token = _read_credential_file(args.token_file, "--token-file")
            credentials = BearerToken(header_safe(token, f"--token-file {args.token_file}"))
        elif (from_env := client_token_from_env()) is not None:
            credentials = BearerToken(header_safe(from_env, f"${ENV_CLIENT_TOKEN}"))
        context = trusted_ca(args.ca_file) if args.ca_file else None
    except (ValueError, OSError) as exc:
        return refuse(str(exc))
    # stdout belongs to the MCP host: logs go to stderr only.
    setup_logging(args.log_level, "text")
    bridge = StdioBridge(
        args.url, slot, credentials, context, group=args.group, read_timeout_s=args.read_timeout or None
    )
    return main(bridge)


def _path_like(slot: str) -> bool:
    """A --slot value written as a path (`mcp/pumps`, `/pump-1/mcp`): a slot's own name may hold "/" (the
    slot `a/b`, docs/protocol.md), but not an empty step nor a step `mcp`, which are the URL's."""
    steps = slot.split("/")
    return len(steps) > 1 and any(step in ("", "mcp") for step in steps)


def add_stdio(commands: Commands) -> None:
    stdio = commands.add_parser(
        "stdio",
        help="serve MCP on stdin/stdout, forwarding to a running gateway (for hosts that launch a command)",
        description=cmd_stdio.__doc__,
    )
    stdio.add_argument(
        "--slot", default=None, help="the slot to serve (default _all: every opted-in provider); not with --group"
    )
    stdio.add_argument(
        "--group",
        metavar="NAME",
        help='a tool group to serve, /mcp/NAME ("" for /mcp: every enabled group); not with --slot',
    )
    stdio.add_argument(
        "--url",
        default=env_default(ENV_CLIENT_URL, DEFAULT_URL),
        metavar="URL",
        help=f"the gateway's base URL, http(s)://HOST:PORT (default: ${ENV_CLIENT_URL}, else {DEFAULT_URL})",
    )
    stdio.add_argument(
        "--token-file", metavar="FILE", help="a file holding the bearer token (default: $MCP_GATEWAY_TOKEN, if set)"
    )
    stdio.add_argument("--hmac-key-id", metavar="ID", help="sign every request with this [auth.hmac] key id")
    stdio.add_argument("--hmac-secret-file", metavar="FILE", help="a file holding that key's secret")
    stdio.add_argument("--ca-file", metavar="FILE", help="CA certificate(s) to trust for an https:// gateway")
    stdio.add_argument(
        "--read-timeout",
        type=float,
        default=DEFAULT_READ_TIMEOUT_S,
        metavar="S",
        help="answer a request with an error when the gateway sends nothing for S seconds (a working gateway "
        f"sends keepalives; default {DEFAULT_READ_TIMEOUT_S:g}, 0: no limit)",
    )
    stdio.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    stdio.set_defaults(func=cmd_stdio)
