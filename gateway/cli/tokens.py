"""`mcp-gateway token create`: a static client token, stored as its SHA-256 in a token file and printed once."""

from __future__ import annotations

import argparse
import sys

from gateway.cli.common import Commands, with_config


def _configured_token_file(args: argparse.Namespace) -> str | None:
    """The first auth.token_files entry of the config file named by --config or $MCP_GATEWAY_CONFIG.

    Read as plain TOML, not validated: the secrets the configuration names (environment variables of
    the service) need not exist in the shell of whoever creates a token."""
    import os
    from pathlib import Path

    from gateway.config import ENV_CONFIG_FILE, read_toml

    name = getattr(args, "config", None) or os.environ.get(ENV_CONFIG_FILE)
    if not name:
        return None
    files = read_toml(Path(name)).get("auth", {}).get("token_files")
    return files[0] if isinstance(files, list) and files and isinstance(files[0], str) else None


def cmd_token_create(args: argparse.Namespace) -> int:
    """Create a random token for NAME, store only its SHA-256 in the token file, print it once."""
    from pathlib import Path

    from gateway.policy.token_files import TokenFileError, create_token, default_token_file

    configured = _configured_token_file(args)
    path = Path(args.file or configured or default_token_file())
    try:
        token = create_token(path, args.name, args.scope, replace=args.replace)
    except (TokenFileError, OSError) as exc:
        print(f"mcp-gateway token create: {exc}", file=sys.stderr)
        return 2
    # The token alone on stdout (TOKEN=$(mcp-gateway token create ...) works); the notes on stderr.
    sys.stdout.write(token + "\n")
    sys.stdout.flush()
    scopes = " ".join(args.scope) or "none"
    notes = [
        f'Created token "{args.name}" (scopes: {scopes}) in {path}.',
        "The token is printed once, on standard output: only its SHA-256 is stored, so it cannot be shown again.",
        "Clients send it as the header:  Authorization: Bearer <token>",
    ]
    if configured is None or Path(configured).resolve() != path.resolve():
        notes.append(
            f'The gateway uses this file once the configuration lists it:  [auth] token_files = ["{path.resolve()}"]'
        )
    print("\n".join(notes), file=sys.stderr)
    return 0


def add_token(commands: Commands) -> None:
    token = commands.add_parser("token", help="manage static client tokens ([auth] token_files)")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    token_create = token_commands.add_parser(
        "create",
        help="create a client token and print it once",
        description="Create a random 256-bit client token for NAME with the given scopes. Only its SHA-256 is "
        "written to the token file (created mode 0600, replaced atomically); the token is printed once on "
        "standard output and cannot be shown again.",
    )
    token_create.add_argument("name", help="the caller the token stands for, e.g. scada")
    token_create.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="a scope to grant (repeat for several), e.g. pump-1 or metrics; see [auth] required_scopes",
    )
    token_create.add_argument(
        "--file",
        metavar="PATH",
        help="token file (default: the first [auth] token_files entry of --config / $MCP_GATEWAY_CONFIG, else "
        "/etc/mcp-gateway/tokens.toml when /etc/mcp-gateway exists, else ./tokens.toml)",
    )
    token_create.add_argument(
        "--replace", action="store_true", help="replace an existing token of that name (the old one stops working)"
    )
    with_config(token_create)
    token_create.set_defaults(func=cmd_token_create)
