"""`mcp-gateway stdio`: serve MCP on stdin/stdout for hosts that launch a command, forwarding to a gateway."""

from __future__ import annotations

import argparse
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
from gateway.config.base import ENV_CLIENT_URL


def cmd_stdio(args: argparse.Namespace) -> int:
    """Serve MCP on stdin/stdout, forwarding every message to a running gateway's /<slot>/mcp."""
    import os

    from gateway.config.auth import read_secret_file, secret_file_readable_warning
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
    if args.slot not in (ALL_SLOT, BROKER_SLOT):
        try:
            check_slot_name(args.slot)
        except SlotNameError as exc:
            return refuse(f"--slot: {exc}")
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
            credentials = HmacKey(args.hmac_key_id, secret.encode("utf-8"), args.hmac_secret_file)
        elif args.token_file is not None:
            credentials = BearerToken(_read_credential_file(args.token_file, "--token-file"))
        elif (token := client_token_from_env()) is not None:
            credentials = BearerToken(token)
        context = trusted_ca(args.ca_file) if args.ca_file else None
    except (ValueError, OSError) as exc:
        return refuse(str(exc))
    # stdout belongs to the MCP host: logs go to stderr only.
    setup_logging(args.log_level, "text")
    main(StdioBridge(args.url, args.slot, credentials, context))
    return 0


def add_stdio(commands: Commands) -> None:
    stdio = commands.add_parser(
        "stdio",
        help="serve MCP on stdin/stdout, forwarding to a running gateway (for hosts that launch a command)",
        description=cmd_stdio.__doc__,
    )
    stdio.add_argument("--slot", default="_all", help="the slot to serve (default _all: every opted-in provider)")
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
    stdio.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    stdio.set_defaults(func=cmd_stdio)
