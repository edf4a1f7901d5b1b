"""The `mcp-gateway` command: run the gateway, check its configuration, talk to a running one."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from gateway import __version__, event_loop
from gateway.client import GatewayCallError
from gateway.config import (
    DEFAULT_PORT,
    ConfigError,
    GatewayConfig,
    lan_sides_text,
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
    if getattr(args, "stdio", None):
        flags["upstreams.stdio"] = list(args.stdio)  # added to the [[upstreams.stdio]] of the file
    if getattr(args, "remote", None):
        flags["upstreams.remote"] = list(args.remote)  # added to the [[upstreams.remote]] of the file
    if getattr(args, "mqtt", None):
        flags["mqtt.brokers"] = [{"url": url} for url in args.mqtt]  # added to the [[mqtt.brokers]] of the file
    if getattr(args, "mdns", None) is not None:
        flags["mdns.enabled"] = args.mdns
    if getattr(args, "serial", None):
        flags["serial.ports"] = list(args.serial)  # added to the [[serial.ports]] of the file
    return flags


def remote_upstream_flag(text: str) -> dict[str, Any]:
    """--remote NAME=URL: a remote upstream without credentials, transport auto (the rest needs the config file)."""
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=URL, e.g. files=https://files.plant.lan/mcp, got {text!r}")
    return {"name": name.strip(), "url": url.strip()}


def serial_port_flag(text: str) -> dict[str, Any]:
    """--serial PATH[@BAUD]: a serial port to serve, at BAUD (default 115200; the rest in the config file)."""
    path, sep, baud = text.rpartition("@")
    if not sep or not baud.isdigit():
        path = text
        baud = ""
    if not path.strip():
        raise argparse.ArgumentTypeError(f"expected PATH[@BAUD], e.g. /dev/ttyUSB0@921600, got {text!r}")
    return {"path": path.strip(), **({"baud": int(baud)} if baud else {})}


def mqtt_url_flag(text: str) -> str:
    """--mqtt URL: mqtt://HOST[:PORT] or mqtts://HOST[:PORT]."""
    if not text.startswith(("mqtt://", "mqtts://")):
        raise argparse.ArgumentTypeError(f"expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got {text!r}")
    return text


def stdio_upstream_flag(text: str) -> dict[str, Any]:
    """--stdio NAME=COMMAND: a stdio upstream; COMMAND is split like a shell would split it (no shell runs it)."""
    import shlex

    name, sep, command = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(
            f"expected NAME=COMMAND, e.g. memory='npx -y @modelcontextprotocol/server-memory', got {text!r}"
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: COMMAND cannot be split: {exc}") from None
    if not argv:
        raise argparse.ArgumentTypeError(f"{name}: COMMAND is empty")
    return {"name": name.strip(), "command": argv}


def _load(args: argparse.Namespace) -> GatewayConfig:
    return load_config(getattr(args, "config", None), flags=_config_flags(args))


def refuse_insecure_bind(config: GatewayConfig) -> str | None:
    """The reason `run` must not start, or None. A LAN bind needs client AND provider authentication."""
    missing = config.lan_open_sides  # empty on loopback
    if not missing or config.insecure_lan:
        return None
    what, risk = lan_sides_text(missing)
    return (
        f"refusing to listen on {config.host} without {what}: anyone on the network could {risk}. "
        "A LAN bind needs both: client authentication ([auth] tokens, token_files or oauth) and provider "
        'authentication ([providers.auth] mode = "shared" or "identities"). Configure what is missing, '
        "bind to 127.0.0.1, or pass --insecure-lan to accept the risk."
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
    setup_logging(config.logging.level, config.logging.format, config.insecure_lan_open)
    if sim_pumps:
        from sim.embedded import serve_with_simulator

        main = serve_with_simulator(config, sim_pumps, args.sim_control_port)
    else:
        main = serve(config)
    try:
        event_loop.run(main, config.event_loop)
    except event_loop.EventLoopUnavailable as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    """Publish simulated pumps (pump-<first> ...) into a gateway, or through an MQTT broker, until SIGTERM or SIGINT."""
    if args.mqtt is None and (args.profile is not None or args.mqtt_username or args.mqtt_password_file):
        print("mcp-gateway sim: --profile and --mqtt-* options need --mqtt URL", file=sys.stderr)
        return 2
    serial_choices = [flag for flag, given in (("--serial", args.serial), ("--serial-pty", args.serial_pty)) if given]
    if len(serial_choices) > 1 or (serial_choices and args.mqtt is not None):
        print("mcp-gateway sim: choose one of --serial PATH[@BAUD], --serial-pty and --mqtt URL", file=sys.stderr)
        return 2
    if args.serial_link is not None and not args.serial_pty:
        print("mcp-gateway sim: --serial-link names the pseudo-terminal of --serial-pty", file=sys.stderr)
        return 2
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
    from gateway.publish.websocket import client_ssl
    from sim.link import LinkSecurity, provider_token
    from sim.mqtt import MqttTarget
    from sim.pump import PumpSettings
    from sim.simulator import SimulatorSettings, run

    mqtt = None
    if args.mqtt is not None:
        try:
            mqtt = MqttTarget(
                url=args.mqtt,
                profile=args.profile or "plain",
                topic_prefix=args.topic_prefix,
                username=args.mqtt_username,
                password_file=args.mqtt_password_file,
                ca_file=args.ca_file,
            )
            from sim.mqtt import check_target

            check_target(mqtt)
        except ValueError as exc:
            print(f"mcp-gateway sim: {exc}", file=sys.stderr)
            return 2

    try:
        token = provider_token(args.provider_token_file)
        trust = client_ssl(None, args.ca_file)
    except (OSError, ssl.SSLError) as exc:
        print(f"mcp-gateway sim: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, "auto")
    pump = PumpSettings(deadman_s=args.deadman_s, dry_run_s=args.dry_run_s)
    settings = SimulatorSettings(pumps=args.pumps, first=args.first, pump=pump)
    serial = None
    if args.serial is not None or args.serial_pty:
        from sim.serial_line import SerialTarget

        line = args.serial or {}
        serial = SerialTarget(
            path=line.get("path"), pty=args.serial_pty, link=args.serial_link, baud=line.get("baud", 115_200)
        )
    asyncio.run(run(args.gateway, settings, args.control_port, LinkSecurity(token, trust), mqtt, serial))
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


def _client_token(args: argparse.Namespace) -> str | None:
    """The client token for slots/call/schema-hash: --token-file, else $MCP_GATEWAY_TOKEN, else none."""
    import os

    from gateway.config import ENV_CLIENT_TOKEN

    if getattr(args, "token_file", None):
        try:
            return _read_credential_file(args.token_file, "--token-file")
        except ValueError as exc:
            raise GatewayCallError(str(exc)) from None
    return os.environ.get(ENV_CLIENT_TOKEN, "").strip() or None


def cmd_slots(args: argparse.Namespace) -> int:
    from gateway.client import GatewayClient, render_slots

    async def go() -> int:
        async with GatewayClient(args.url, "_broker", token=_client_token(args)) as client:
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
        async with GatewayClient(args.url, args.slot, token=_client_token(args)) as client:
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
        async with GatewayClient(args.url, args.slot, token=_client_token(args)) as client:
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


def _read_credential_file(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {path}: cannot be read ({exc})") from None
    if not text:
        raise ValueError(f"{what} {path} is empty")
    return text


def cmd_stdio(args: argparse.Namespace) -> int:
    """Serve MCP on stdin/stdout, forwarding every message to a running gateway's /<slot>/mcp."""
    import os

    from gateway.config import ENV_CLIENT_TOKEN
    from gateway.core.names import ALL_SLOT, BROKER_SLOT, SlotNameError, check_slot_name
    from gateway.logs import setup_logging
    from gateway.northbound.stdio_bridge import BearerToken, Credentials, HmacKey, StdioBridge, main

    def refuse(reason: str) -> int:
        print(f"mcp-gateway stdio: {reason}", file=sys.stderr)
        return 2

    if not args.url.startswith(("http://", "https://")):
        return refuse(f"--url must start with http:// or https://, got {args.url!r}")
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
            secret = _read_credential_file(args.hmac_secret_file, "--hmac-secret-file")
            credentials = HmacKey(args.hmac_key_id, secret.encode("utf-8"))
        elif args.token_file is not None:
            credentials = BearerToken(_read_credential_file(args.token_file, "--token-file"))
        elif os.environ.get(ENV_CLIENT_TOKEN, "").strip():
            credentials = BearerToken(os.environ[ENV_CLIENT_TOKEN].strip())
        context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    except (ValueError, OSError, ssl.SSLError) as exc:
        return refuse(str(exc))
    # stdout belongs to the MCP host: logs go to stderr only.
    setup_logging(args.log_level, "text")
    main(StdioBridge(args.url, args.slot, credentials, context))
    return 0


def cmd_tls_self_signed(args: argparse.Namespace) -> int:
    """Create a local CA and a server certificate signed by it, then print where each file goes."""
    from pathlib import Path

    from gateway.policy.tls_self_signed import SelfSignedError, create, default_names, instructions

    hosts, ips = default_names()
    if args.host or args.ip:
        hosts, ips = args.host or [], args.ip or []
    try:
        issued = create(Path(args.dir), hosts, ips, days=args.days, force=args.force, new_ca=args.new_ca)
    except SelfSignedError as exc:
        print(f"mcp-gateway tls self-signed: {exc}", file=sys.stderr)
        return 2
    print(instructions(issued, args.port))
    return 0


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
    run.add_argument(
        "--insecure-lan", action="store_true", help="allow a LAN bind without client or provider authentication"
    )
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    run.add_argument(
        "--stdio",
        action="append",
        type=stdio_upstream_flag,
        metavar="NAME=COMMAND",
        help="run COMMAND as a stdio MCP server in slot NAME, supervised by the gateway (repeatable; adds to "
        "[[upstreams.stdio]]; e.g. --stdio memory='npx -y @modelcontextprotocol/server-memory')",
    )
    run.add_argument(
        "--remote",
        action="append",
        type=remote_upstream_flag,
        metavar="NAME=URL",
        help="serve the MCP server at URL (Streamable HTTP, either era) in slot NAME (repeatable; adds to "
        "[[upstreams.remote]]; credentials and other transports only in the config file)",
    )
    run.add_argument(
        "--mqtt",
        action="append",
        type=mqtt_url_flag,
        metavar="URL",
        help="connect to the MQTT broker at URL (mqtt://HOST:PORT or mqtts://) for boards (plain profile) and "
        "MCP over MQTT servers (repeatable; adds to [[mqtt.brokers]]; credentials only in the config file)",
    )
    run.add_argument(
        "--serial",
        action="append",
        type=serial_port_flag,
        metavar="PATH[@BAUD]",
        help="serve the board on this serial port (e.g. /dev/ttyUSB0@921600; default baud 115200; repeatable; "
        "adds to [[serial.ports]]; slot patterns, frame cap and debug mode only in the config file)",
    )
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
    run.add_argument(
        "--mdns",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="advertise the gateway on the local network with mDNS, or not (default: [mdns] enabled, off unless "
        "configured; see docs/discovery.md)",
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
    token_help = "a file holding a client token, for a gateway with [auth] (default: $MCP_GATEWAY_TOKEN, if set)"
    slots = commands.add_parser("slots", help="list the slots of a running gateway")
    slots.add_argument("--url", default=default_url, help=f"gateway URL (default {default_url})")
    slots.add_argument("--token-file", metavar="FILE", help=token_help)
    slots.set_defaults(func=cmd_slots)

    call = commands.add_parser("call", help="call a tool on a slot of a running gateway")
    call.add_argument("slot")
    call.add_argument("tool")
    call.add_argument("arguments", nargs="*", metavar="key=value", help="arguments; values are JSON or text")
    call.add_argument("--url", default=default_url, help=f"gateway URL (default {default_url})")
    call.add_argument("--token-file", metavar="FILE", help=token_help)
    call.set_defaults(func=cmd_call)

    schema_hash = commands.add_parser(
        "schema-hash", help="canonical hash of a tools schema file, or of the tools a live slot lists"
    )
    schema_hash.add_argument("file", nargs="?", help="schema file: the tools array (e.g. device/schemas/pump-1.json)")
    schema_hash.add_argument("--slot", help="hash the tools/list of this slot on a running gateway instead")
    schema_hash.add_argument("--url", default=default_url, help=f"gateway URL for --slot (default {default_url})")
    schema_hash.add_argument("--token-file", metavar="FILE", help=token_help)
    schema_hash.set_defaults(func=cmd_schema_hash)

    stdio = commands.add_parser(
        "stdio",
        help="serve MCP on stdin/stdout, forwarding to a running gateway (for hosts that launch a command)",
        description=cmd_stdio.__doc__,
    )
    stdio.add_argument("--slot", default="_all", help="the slot to serve (default _all: every opted-in provider)")
    stdio.add_argument("--url", default=default_url, help=f"the gateway's base URL (default {default_url})")
    stdio.add_argument(
        "--token-file", metavar="FILE", help="a file holding the bearer token (default: $MCP_GATEWAY_TOKEN, if set)"
    )
    stdio.add_argument("--hmac-key-id", metavar="ID", help="sign every request with this [auth.hmac] key id")
    stdio.add_argument("--hmac-secret-file", metavar="FILE", help="a file holding that key's secret")
    stdio.add_argument("--ca-file", metavar="FILE", help="CA certificate(s) to trust for an https:// gateway")
    stdio.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    stdio.set_defaults(func=cmd_stdio)

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
    sim.add_argument(
        "--provider-token-file",
        metavar="FILE",
        help="file holding the provider secret, sent as X-Provider-Token when the gateway has [providers.auth] "
        "(default: $MCP_SIM_PROVIDER_TOKEN, else none)",
    )
    sim.add_argument(
        "--ca-file",
        metavar="FILE",
        help="CA certificate to trust for a wss:// gateway or mqtts:// broker (e.g. tls/ca.pem)",
    )
    sim.add_argument(
        "--mqtt",
        type=mqtt_url_flag,
        metavar="URL",
        help="publish through the MQTT broker at URL (mqtt://HOST:PORT) instead of a WebSocket to --gateway",
    )
    sim.add_argument(
        "--profile",
        choices=["plain", "mcp"],
        help="with --mqtt: plain (mcpb/<slot>/..., MQTT 3.1.1, default) or mcp (MCP over MQTT, EMQX specification)",
    )
    sim.add_argument(
        "--topic-prefix", default="mcpb", metavar="PREFIX", help="plain profile topic prefix (default mcpb)"
    )
    sim.add_argument("--mqtt-username", metavar="NAME", help="broker username (e.g. the slot, with the appliance ACL)")
    sim.add_argument("--mqtt-password-file", metavar="FILE", help="file holding the broker password")
    sim.add_argument(
        "--serial",
        type=serial_port_flag,
        metavar="PATH[@BAUD]",
        help="put the pumps on this serial line instead (a tty wired to the gateway's port; one pump registers "
        "its slot, several share the line with envelopes)",
    )
    sim.add_argument(
        "--serial-pty",
        action="store_true",
        help="put the pumps on a new pseudo-terminal and print the path the gateway opens "
        "(mcp-gateway run --serial PATH); see docs/device-serial.md",
    )
    sim.add_argument(
        "--serial-link",
        metavar="PATH",
        help="with --serial-pty: also make a symbolic link at PATH to the gateway's end (a name that stays the same)",
    )
    sim.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sim.set_defaults(func=cmd_sim)

    tls = commands.add_parser("tls", help="TLS certificates for the gateway")
    tls_commands = tls.add_subparsers(dest="tls_command", required=True)
    self_signed = tls_commands.add_parser(
        "self-signed",
        help="create a local CA and a server certificate for a site without a PKI",
        description=cmd_tls_self_signed.__doc__,
    )
    self_signed.add_argument("--dir", default="tls", help="where to write the files (default ./tls)")
    self_signed.add_argument(
        "--host",
        action="append",
        metavar="NAME",
        help="a DNS name the certificate is valid for (repeat; default: this machine's hostname, "
        "<hostname>.local, localhost, and 127.0.0.1, ::1)",
    )
    self_signed.add_argument("--ip", action="append", metavar="ADDR", help="an IP address it is valid for (repeat)")
    self_signed.add_argument(
        "--days", type=int, default=825, metavar="N", help="validity of the server certificate (default 825)"
    )
    self_signed.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port shown in the printed URLs (default {DEFAULT_PORT})"
    )
    self_signed.add_argument("--force", action="store_true", help="overwrite existing files")
    self_signed.add_argument(
        "--new-ca", action="store_true", help="make a new CA even if DIR has one (boards then need the new ca.pem)"
    )
    self_signed.set_defaults(func=cmd_tls_self_signed)

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
