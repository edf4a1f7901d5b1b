"""The `mcp-gateway` command: run the gateway, check its configuration, talk to a running one."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from gateway import __version__
from gateway.client import GatewayCallError
from gateway.config import (
    DEFAULT_PORT,
    ConfigError,
    GatewayConfig,
    is_loopback_host,
    load_config,
    masked_dump,
)
from sim import DEFAULT_CONTROL_PORT as SIM_CONTROL_PORT


def _config_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if getattr(args, "host", None) is not None:
        flags["host"] = args.host
    if getattr(args, "port", None) is not None:
        flags["port"] = args.port
    if getattr(args, "insecure_lan", False):
        flags["insecure_lan"] = True
    if getattr(args, "log_level", None) is not None:
        flags["logging.level"] = args.log_level
    return flags


def _load(args: argparse.Namespace) -> GatewayConfig:
    return load_config(getattr(args, "config", None), flags=_config_flags(args))


def refuse_insecure_bind(config: GatewayConfig) -> str | None:
    """The reason `run` must not start, or None."""
    if is_loopback_host(config.host) or config.auth_configured or config.insecure_lan:
        return None
    return (
        f"refusing to listen on {config.host} without authentication: anyone on the network could call "
        "devices. Bind to 127.0.0.1, configure authentication, or pass --insecure-lan to accept the risk."
    )


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import serve
    from gateway.logs import setup_logging

    config = _load(args)
    refusal = refuse_insecure_bind(config)
    if refusal is not None:
        print(f"mcp-gateway: {refusal}", file=sys.stderr)
        return 2
    sim_pumps = getattr(args, "sim_pumps", 0) or 0
    if sim_pumps < 0:
        print("mcp-gateway: --sim-pumps must be 0 or more", file=sys.stderr)
        return 2
    setup_logging(config.logging.level, config.logging.format, config.insecure_lan and not config.is_loopback)
    if sim_pumps:
        from sim.embedded import serve_with_simulator

        asyncio.run(serve_with_simulator(config, sim_pumps, args.sim_control_port))
    else:
        asyncio.run(serve(config))
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    """Publish simulated pumps (pump-<first> ...) into a gateway until SIGTERM or SIGINT."""
    if not args.gateway.startswith(("http://", "https://", "ws://", "wss://")):
        print(
            f"mcp-gateway sim: --gateway must start with http://, https://, ws:// or wss://, got {args.gateway!r}",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.pumps <= 1000 or args.first < 0 or args.deadman_s <= 0 or args.dry_run_s <= 0:
        print(
            "mcp-gateway sim: --pumps must be between 1 and 1000, --first 0 or more, --deadman-s and --dry-run-s "
            "greater than 0",
            file=sys.stderr,
        )
        return 2
    from gateway.logs import setup_logging
    from sim.pump import PumpSettings
    from sim.simulator import SimulatorSettings, run

    setup_logging(args.log_level, "auto")
    pump = PumpSettings(deadman_s=args.deadman_s, dry_run_s=args.dry_run_s)
    settings = SimulatorSettings(pumps=args.pumps, first=args.first, pump=pump)
    asyncio.run(run(args.gateway, settings, args.control_port))
    return 0


def cmd_sim_fault(args: argparse.Namespace) -> int:
    from sim.control_client import post_fault

    status, body = asyncio.run(post_fault(args.control, args.slot, args.fault, args.clear, args.seconds))
    if status != 200:
        print(f"mcp-gateway sim-fault: {body.get('error_description') or body}", file=sys.stderr)
        return 1
    sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_sim_status(args: argparse.Namespace) -> int:
    from sim.control_client import get_pumps, render_pumps

    status, body = asyncio.run(get_pumps(args.control))
    if status != 200:
        print(f"mcp-gateway sim-status: {body.get('error_description') or body}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_pumps(body) + "\n")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    config = _load(args)
    if args.action == "check":
        refusal = refuse_insecure_bind(config)
        if refusal is not None:
            print(f"mcp-gateway: configuration loads, but `run` would refuse it: {refusal}", file=sys.stderr)
            return 2
        print("configuration OK")
        return 0
    sys.stdout.write(orjson.dumps(masked_dump(config), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_slots(args: argparse.Namespace) -> int:
    from gateway.client import GatewayClient, render_slots

    async def go() -> int:
        async with GatewayClient(args.url, "_broker") as client:
            result = await client.call_tool("providers_list", {})
        sys.stdout.write(render_slots(result) + "\n")
        return 0

    return asyncio.run(go())


def cmd_call(args: argparse.Namespace) -> int:
    from gateway.client import GatewayClient, parse_arguments, render_result

    try:
        arguments = parse_arguments(args.arguments)
    except ValueError as exc:
        print(f"mcp-gateway call: {exc}", file=sys.stderr)
        return 2

    async def go() -> int:
        async with GatewayClient(args.url, args.slot) as client:
            result = await client.call_tool(args.tool, arguments)
        sys.stdout.write(render_result(result) + "\n")
        return 1 if result.get("isError") else 0

    return asyncio.run(go())


def cmd_schema_hash(args: argparse.Namespace) -> int:
    """The canonical tools hash (PUMP1.md) of a schema file, or of what a live slot lists."""
    from gateway.core.schema_hash import tools_hash

    if (args.file is None) == (args.slot is None):
        print("mcp-gateway schema-hash: give either a schema FILE or --slot SLOT", file=sys.stderr)
        return 2
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                document = orjson.loads(f.read())
        except orjson.JSONDecodeError as exc:
            print(f"mcp-gateway schema-hash: {args.file} is not valid JSON: {exc}", file=sys.stderr)
            return 2
        # The schema file is the tools array; a saved tools/list result ({"tools": [...]}) works too.
        tools = document.get("tools") if isinstance(document, dict) else document
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            print(f"mcp-gateway schema-hash: {args.file} holds no array of tool objects", file=sys.stderr)
            return 2
        print(tools_hash(tools))
        return 0

    from gateway.client import GatewayClient

    async def go() -> int:
        listed: list[dict[str, Any]] = []
        async with GatewayClient(args.url, args.slot) as client:
            params: dict[str, Any] = {}
            while True:
                result = await client.request("tools/list", params)
                listed.extend(result.get("tools", []))
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
                params = {"cursor": cursor}
        print(tools_hash(listed))
        return 0

    return asyncio.run(go())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-gateway", description="Edge MCP broker for plants and labs.")
    parser.add_argument("--version", action="version", version=f"mcp-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", help="TOML config file (default: $MCP_GATEWAY_CONFIG, else built-in defaults)")

    run = commands.add_parser("run", help="run the gateway")
    with_config(run)
    run.add_argument("--host", help="address to bind (default 127.0.0.1)")
    run.add_argument("--port", type=int, help=f"port to bind (default {DEFAULT_PORT})")
    run.add_argument("--insecure-lan", action="store_true", help="allow a LAN bind without authentication")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    run.add_argument(
        "--sim-pumps",
        type=int,
        default=0,
        metavar="N",
        help="also publish N simulated pumps (pump-1 ... pump-N) into this gateway over WebSocket (default 0)",
    )
    run.add_argument(
        "--sim-control-port",
        type=int,
        default=SIM_CONTROL_PORT,
        metavar="PORT",
        help=f"loopback port of the simulator's control endpoint (default {SIM_CONTROL_PORT}; 0: any free port)",
    )
    run.set_defaults(func=cmd_run)

    config = commands.add_parser("config", help="check or show the effective configuration")
    config.add_argument("action", choices=["check", "show"])
    with_config(config)
    config.add_argument("--host")
    config.add_argument("--port", type=int)
    config.add_argument("--insecure-lan", action="store_true")
    config.set_defaults(func=cmd_config)

    default_url = f"http://127.0.0.1:{DEFAULT_PORT}"
    slots = commands.add_parser("slots", help="list the slots of a running gateway")
    slots.add_argument("--url", default=default_url, help=f"gateway URL (default {default_url})")
    slots.set_defaults(func=cmd_slots)

    call = commands.add_parser("call", help="call a tool on a slot of a running gateway")
    call.add_argument("slot")
    call.add_argument("tool")
    call.add_argument("arguments", nargs="*", metavar="key=value", help="arguments; values are JSON or text")
    call.add_argument("--url", default=default_url, help=f"gateway URL (default {default_url})")
    call.set_defaults(func=cmd_call)

    schema_hash = commands.add_parser(
        "schema-hash", help="canonical hash of a tools schema file, or of the tools a live slot lists"
    )
    schema_hash.add_argument("file", nargs="?", help="schema file: the tools array (e.g. device/schemas/pump-1.json)")
    schema_hash.add_argument("--slot", help="hash the tools/list of this slot on a running gateway instead")
    schema_hash.add_argument("--url", default=default_url, help=f"gateway URL for --slot (default {default_url})")
    schema_hash.set_defaults(func=cmd_schema_hash)

    sim = commands.add_parser(
        "sim", help="publish simulated pump-1 devices into a gateway", description=cmd_sim.__doc__
    )
    sim.add_argument(
        "--gateway",
        default=default_url,
        metavar="URL",
        help=f"the gateway's base URL, http(s):// or ws(s):// (default {default_url})",
    )
    sim.add_argument("--pumps", type=int, default=1, metavar="N", help="how many pumps (default 1)")
    sim.add_argument("--first", type=int, default=1, metavar="K", help="number of the first slot, pump-K (default 1)")
    sim.add_argument(
        "--control-port",
        type=int,
        default=SIM_CONTROL_PORT,
        metavar="PORT",
        help=f"loopback port of the control endpoint (default {SIM_CONTROL_PORT}; 0: any free port)",
    )
    sim.add_argument(
        "--deadman-s",
        type=float,
        default=90.0,
        metavar="S",
        help="silence from the gateway after which a turning pump stops with link_lost (default 90)",
    )
    sim.add_argument(
        "--dry-run-s",
        type=float,
        default=5.0,
        metavar="S",
        help="how long a pump runs dry before it latches dry_run (default 5)",
    )
    sim.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sim.set_defaults(func=cmd_sim)

    default_control = f"http://127.0.0.1:{SIM_CONTROL_PORT}"
    sim_fault = commands.add_parser("sim-fault", help="inject or clear a fault on a simulated pump")
    sim_fault.add_argument("slot", help="the simulated pump, e.g. pump-1")
    sim_fault.add_argument("fault", help="dry_run, overtemp, sensor_failure, reboot or link_drop")
    sim_fault.add_argument("--clear", action="store_true", help="clear the condition (link_drop: reconnect now)")
    sim_fault.add_argument("--seconds", type=float, help="link_drop: stay offline this long before dialling again")
    sim_fault.add_argument(
        "--control",
        default=default_control,
        metavar="URL",
        help=f"the simulator's control endpoint (default {default_control})",
    )
    sim_fault.set_defaults(func=cmd_sim_fault)

    sim_status = commands.add_parser("sim-status", help="show the simulated pumps, their links and faults")
    sim_status.add_argument(
        "--control",
        default=default_control,
        metavar="URL",
        help=f"the simulator's control endpoint (default {default_control})",
    )
    sim_status.add_argument("--json", action="store_true", help="print the control endpoint's JSON")
    sim_status.set_defaults(func=cmd_sim_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 2
    except GatewayCallError as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
