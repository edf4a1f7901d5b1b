"""`mcp-gateway config check|show`: load the configuration as `run` would, and check or print it."""

from __future__ import annotations

import argparse
import sys

import orjson

from gateway.cli.common import Commands, _load
from gateway.cli.run import add_gateway_flags
from gateway.cli.startup import startup_refusal
from gateway.config import GatewayConfig, masked_dump


def cmd_config(args: argparse.Namespace) -> int:
    config = _load(args)
    if args.action == "check":
        for warning in [*config.warnings(), *policy_warnings(config)]:
            print(f"mcp-gateway config check: warning: {warning}", file=sys.stderr)
        # run's own check, on this machine: files read, the OTEL_* environment, udev, the host resolved.
        refusal = startup_refusal(config)
        if refusal is not None:
            print(f"mcp-gateway: configuration loads, but `run` would refuse it: {refusal}", file=sys.stderr)
            return 2
        print("configuration OK")
        return 0
    sys.stdout.write(orjson.dumps(masked_dump(config), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def policy_warnings(config: GatewayConfig) -> list[str]:
    """What `policy check` warns of in [policy] (its file, when it names one), named by where it is; `run`
    logs the same when it loads the policy. Mistakes were refused when the configuration loaded."""
    from gateway.policy.rules.checking import PolicyError, check_policy_config

    if config.policy is None:
        return []
    where = f"policy file {config.policy.file}" if config.policy.file is not None else "[policy]"
    try:
        return [f"{where}: {warning}" for warning in check_policy_config(config.policy).warnings]
    except PolicyError:
        return []


def add_config(commands: Commands) -> None:
    config = commands.add_parser("config", help="check or show the effective configuration")
    config.add_argument(
        "action",
        choices=["check", "show"],
        help="check: load it as `run` would and say whether run would start; show: print it as JSON, secrets masked",
    )
    add_gateway_flags(config)  # run's own: check and show judge the command line run would get
    config.set_defaults(func=cmd_config)
