"""The `mcp-gateway` command: run the gateway, check its configuration, talk to a running one."""

# One module per subcommand group (run, config_cmd, calls, stdio, tokens, sim, tls, discover, policy, reload,
# audit, approve, flash, device_install, devices, backup, restore), what they share in common.py (backup and
# restore also in backup_files.py), what `run` and `config check` refuse before binding in startup.py; this file
# assembles the parser and runs a command. A command imports what
# only it needs inside its function, so that `mcp-gateway --help` loads no more than the parser.

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli.approve import add_approve
from gateway.cli.audit import add_audit
from gateway.cli.backup import add_backup
from gateway.cli.calls import add_calls
from gateway.cli.common import _config_flags, refuse_insecure_bind
from gateway.cli.config_cmd import add_config
from gateway.cli.device_install import add_device
from gateway.cli.devices import add_devices
from gateway.cli.discover import add_discover
from gateway.cli.flash import add_flash
from gateway.cli.parsing import commands as command_parsers
from gateway.cli.policy import add_policy
from gateway.cli.process import reopen_standard_descriptors, utf8_arguments
from gateway.cli.reload import add_reload
from gateway.cli.restore import add_restore
from gateway.cli.run import add_run
from gateway.cli.sim import add_sim, add_sim_fault_and_status
from gateway.cli.stdio import add_stdio
from gateway.cli.tls import add_tls
from gateway.cli.tokens import add_token
from gateway.client import GatewayCallError
from gateway.config import ConfigError

__all__ = ["_config_flags", "build_parser", "main", "refuse_insecure_bind"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-gateway", description="Edge MCP broker for plants and labs.")
    parser.add_argument("--version", action="version", version=f"mcp-gateway {__version__}")
    commands = command_parsers(parser)
    # The order here is the order `mcp-gateway --help` lists the commands in.
    add_run(commands)
    add_config(commands)
    add_calls(commands)  # slots, call, schema-hash
    add_stdio(commands)
    add_token(commands)
    add_policy(commands)
    add_reload(commands)
    add_sim(commands)
    add_tls(commands)
    add_sim_fault_and_status(commands)
    add_discover(commands)
    add_audit(commands)
    add_approve(commands)
    add_flash(commands)
    add_device(commands)
    add_devices(commands)
    add_backup(commands)
    add_restore(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    reopen_standard_descriptors()  # first: a closed 0-2 would be taken by the next file or socket opened
    parser = build_parser()
    args = parser.parse_args(utf8_arguments(sys.argv[1:] if argv is None else argv))
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"mcp-gateway: {_said(exc)}", file=sys.stderr)
        return 2
    except GatewayCallError as exc:
        print(f"mcp-gateway: {_said(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped early (`mcp-gateway audit --format csv | head`): what it read is what it
        # wanted. stdout goes to /dev/null so the interpreter's last flush has nowhere to fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"mcp-gateway: {_said(exc)}", file=sys.stderr)
        return 1
    return code


def _said(exc: BaseException) -> str:
    """An exception's message, else its class's name (a TimeoutError says nothing): never an empty line."""
    return str(exc) or type(exc).__name__
