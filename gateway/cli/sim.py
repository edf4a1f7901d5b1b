"""`mcp-gateway sim`, `sim-fault` and `sim-status`: simulated pump-1 devices, their faults and their state."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys

import orjson

from gateway.cli.common import (
    DEFAULT_URL,
    PORT_NUMBER,
    Commands,
    _read_credential_file,
    check_base_url,
    control_url_option,
    decimal_number,
    mqtt_url_flag,
    serial_port_flag,
    trusted_ca,
)
from gateway.cli.numbers import finite_number
from gateway.cli.run import hold_signals
from gateway.config.base import ENV_SIM_CONTROL_URL
from gateway.config.limits import LimitsConfig
from gateway.core.names import MAX_SLOT_BYTES
from sim import DEFAULT_CONTROL_PORT as SIM_CONTROL_PORT
from sim import FAULT_NAMES, MAX_OFFLINE_S, MAX_PUMPS, max_first

MAX_PERIOD_S = 86400
"""The most --deadman-s, --dry-run-s and --telemetry-period-s take: a day, as the C board and the
MicroPython config bound them (the board's millisecond counters stay small)."""
MAX_SLOTS_PER_PEER_DEFAULT = LimitsConfig.model_fields["max_slots_per_peer"].default


def cmd_sim(args: argparse.Namespace) -> int:
    """Publish simulated pumps (pump-<first> ...) into a gateway, or through an MQTT broker, until SIGTERM or SIGINT."""
    signals = hold_signals()  # first: a stop while the imports below load is acted on once the loop runs (exit 0)
    mqtt_options = (args.mqtt_username, args.mqtt_password_file, args.mqtt_cert_file, args.mqtt_key_file)
    if args.mqtt is None and (args.profile is not None or any(mqtt_options)):
        print("mcp-gateway sim: --profile and --mqtt-* options need --mqtt URL", file=sys.stderr)
        return 2
    serial_choices = [flag for flag, given in (("--serial", args.serial), ("--serial-pty", args.serial_pty)) if given]
    if len(serial_choices) > 1 or (serial_choices and args.mqtt is not None):
        print("mcp-gateway sim: choose one of --serial PATH[@BAUD], --serial-pty and --mqtt URL", file=sys.stderr)
        return 2
    if args.serial_link is not None and not args.serial_pty:
        print("mcp-gateway sim: --serial-link names the pseudo-terminal of --serial-pty", file=sys.stderr)
        return 2
    if args.serial_link is not None:
        from sim.serial_line import SerialLinkError, check_link_path

        try:
            check_link_path(args.serial_link)  # again when it is made: this says so before anything starts
        except SerialLinkError as exc:
            print(f"mcp-gateway sim: {exc}", file=sys.stderr)
            return 2
    try:
        check_base_url(
            args.gateway,
            "the gateway's base URL",
            "http://HOST:PORT",
            ("http", "https", "ws", "wss"),
            token_flag="--provider-token-file",
            require_port=True,  # a scheme's default port (80, 443) is seldom a gateway's: say which
        )
    except ValueError as exc:
        print(f"mcp-gateway sim: --gateway {exc}", file=sys.stderr)
        return 2
    out_of_range = [
        f"{flag} must be {rule}, got {_shown(value)}"
        for flag, value, fine, rule in (
            ("--pumps", args.pumps, 1 <= args.pumps <= MAX_PUMPS, f"between 1 and {MAX_PUMPS}"),
            ("--first", args.first, args.first >= 0, "0 or more"),
            (
                "--first",
                args.first,
                args.first < 0 or args.first <= max_first(max(args.pumps, 1)),
                f"at most {max_first(max(args.pumps, 1))} with --pumps {args.pumps}: the last slot, "
                f"pump-<first + pumps - 1>, must fit the gateway's {MAX_SLOT_BYTES}-byte slot names",
            ),
            ("--deadman-s", args.deadman_s, 0 < args.deadman_s <= MAX_PERIOD_S, f"above 0 and at most {MAX_PERIOD_S}"),
            ("--dry-run-s", args.dry_run_s, 0 < args.dry_run_s <= MAX_PERIOD_S, f"above 0 and at most {MAX_PERIOD_S}"),
            (
                "--telemetry-period-s",
                args.telemetry_period_s,
                0 <= args.telemetry_period_s <= MAX_PERIOD_S,
                f"0 (no samples) or more, at most {MAX_PERIOD_S}",
            ),
        )
        if not fine
    ]
    if out_of_range:  # each bad value named, not every rule listed
        print(f"mcp-gateway sim: {'; '.join(out_of_range)}", file=sys.stderr)
        return 2
    if args.pumps > MAX_SLOTS_PER_PEER_DEFAULT and args.mqtt is None and args.serial is None and not args.serial_pty:
        # The gateway's value is not known here; its default refuses the pumps past it, which retry forever.
        print(
            f"mcp-gateway sim: warning: --pumps {args.pumps} is over the {MAX_SLOTS_PER_PEER_DEFAULT} slots a gateway "
            "admits from one peer by default: raise limits.max_slots_per_peer in the gateway's configuration to at "
            f"least {args.pumps}, or the pumps past it are refused and retry",
            file=sys.stderr,
        )
    from gateway.config.credentials import header_safe
    from gateway.logs import setup_logging
    from sim.link import LinkSecurity, provider_token
    from sim.mqtt import MqttTarget
    from sim.pump import PumpSettings
    from sim.simulator import SimulatorSettings, run

    try:
        # Checked here, before the MQTT target's check, whose refusal names neither the flag nor the problem.
        trust: ssl.SSLContext | bool = trusted_ca(args.ca_file) if args.ca_file else True  # True: the system's CAs
        token = (
            header_safe(
                _read_credential_file(args.provider_token_file, "--provider-token-file"),
                f"--provider-token-file {args.provider_token_file}",
            )
            if args.provider_token_file
            else provider_token(None)  # $MCP_SIM_PROVIDER_TOKEN, checked as a file's secret is
        )
    except ValueError as exc:
        print(f"mcp-gateway sim: {exc}", file=sys.stderr)
        return 2
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
                cert_file=args.mqtt_cert_file,
                key_file=args.mqtt_key_file,
            )
            from sim.mqtt import check_target

            check_target(mqtt)
        except ValueError as exc:
            print(f"mcp-gateway sim: {exc}", file=sys.stderr)
            return 2

    setup_logging(args.log_level, "auto")
    pump = PumpSettings(
        deadman_s=args.deadman_s,
        dry_run_s=args.dry_run_s,
        telemetry=args.telemetry,
        telemetry_period_s=args.telemetry_period_s,
    )
    settings = SimulatorSettings(pumps=args.pumps, first=args.first, pump=pump)
    serial = None
    if args.serial is not None or args.serial_pty:
        from sim.serial_line import SerialTarget

        line = args.serial or {}
        serial = SerialTarget(
            path=line.get("path"), pty=args.serial_pty, link=args.serial_link, baud=line.get("baud", 115_200)
        )
    from sim.serial_line import SerialLinkError

    try:
        asyncio.run(run(args.gateway, settings, args.control_port, LinkSecurity(token, trust), mqtt, serial, signals))
    except SerialLinkError as exc:  # the path was taken between the check above and the link
        print(f"mcp-gateway sim: {exc}", file=sys.stderr)
        return 2
    return 0


def _shown(value: float) -> str:
    """A number in a usage error: whole, unless it is too long to read (--first takes any integer)."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 64 else f"a number of {len(text)} digits"


def cmd_sim_fault(args: argparse.Namespace) -> int:
    """Inject or clear a fault on a simulated pump through the simulator's control endpoint; print its state."""
    from gateway.cli.calls import refused_as_not_utf8
    from gateway.client import terminal_text
    from sim.control_client import ControlUnreachable, NotASimulator, post_fault

    if refused_as_not_utf8("sim-fault", [("the slot", args.slot), ("--control", args.control)]):
        return 2
    # What the endpoint would refuse for any pump, refused here as usage errors (exit 2), before asking it.
    if args.seconds is not None and args.fault != "link_drop":
        print(
            "mcp-gateway sim-fault: --seconds applies to link_drop only (how long the pump stays offline)",
            file=sys.stderr,
        )
        return 2
    if args.clear and args.seconds is not None:
        print(
            "mcp-gateway sim-fault: --clear and --seconds do not go together: --clear dials now, --seconds keeps "
            "the pump offline",
            file=sys.stderr,
        )
        return 2
    if args.clear and args.fault == "reboot":
        print("mcp-gateway sim-fault: reboot is an event, there is nothing to --clear", file=sys.stderr)
        return 2
    try:
        status, body = asyncio.run(post_fault(args.control, args.slot, args.fault, args.clear, args.seconds))
    except (NotASimulator, ControlUnreachable) as exc:  # named by the command, not the bare program
        print(f"mcp-gateway sim-fault: {terminal_text(str(exc))}", file=sys.stderr)
        return 1
    # What the endpoint wrote reaches the terminal escaped where it does not print: the same JSON.
    if status != 200:
        print(f"mcp-gateway sim-fault: {terminal_text(body['error_description'])}", file=sys.stderr)
        return 1
    sys.stdout.write(terminal_text(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode(), lines=True) + "\n")
    return 0


def cmd_sim_status(args: argparse.Namespace) -> int:
    from gateway.cli.calls import refused_as_not_utf8
    from gateway.client import terminal_text
    from sim.control_client import ControlUnreachable, NotASimulator, get_pumps, render_pumps

    if refused_as_not_utf8("sim-status", [("--control", args.control)]):
        return 2
    try:
        status, body = asyncio.run(get_pumps(args.control))
    except (NotASimulator, ControlUnreachable) as exc:
        print(f"mcp-gateway sim-status: {terminal_text(str(exc))}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"mcp-gateway sim-status: {terminal_text(body['error_description'])}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(terminal_text(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode(), lines=True) + "\n")
    else:
        sys.stdout.write(render_pumps(body) + "\n")
    return 0


def add_sim(commands: Commands) -> None:
    sim = commands.add_parser(
        "sim", help="publish simulated pump-1 devices into a gateway", description=cmd_sim.__doc__
    )
    sim.add_argument(
        "--gateway",
        default=DEFAULT_URL,
        metavar="URL",
        help=f"the gateway's base URL, http(s):// or ws(s):// (default {DEFAULT_URL})",
    )
    sim.add_argument("--pumps", type=int, default=1, metavar="N", help="how many pumps (default 1)")
    sim.add_argument("--first", type=int, default=1, metavar="K", help="number of the first slot, pump-K (default 1)")
    sim.add_argument(
        "--control-port",
        type=PORT_NUMBER,
        default=SIM_CONTROL_PORT,
        metavar="PORT",
        help=f"loopback port of the control endpoint (default {SIM_CONTROL_PORT}; 0: any free port)",
    )
    sim.add_argument(
        "--deadman-s",
        type=finite_number,
        default=90.0,
        metavar="S",
        help="silence from the gateway after which a turning pump stops with link_lost (default 90)",
    )
    sim.add_argument(
        "--dry-run-s",
        type=finite_number,
        default=5.0,
        metavar="S",
        help="how long a pump runs dry before it latches dry_run (default 5)",
    )
    sim.add_argument(
        "--telemetry-period-s",
        type=finite_number,
        default=10.0,
        metavar="S",
        help="each pump's telemetry sample (broker/telemetry) this often; 0: state changes only (default 10)",
    )
    sim.add_argument(
        "--no-telemetry",
        dest="telemetry",
        action="store_false",
        help="send no broker/telemetry notifications (state changes, samples)",
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
        "--mqtt-cert-file",
        metavar="FILE",
        help="mqtts:// only: the pumps' PEM client certificate, for a broker that requires one (with --mqtt-key-file)",
    )
    sim.add_argument("--mqtt-key-file", metavar="FILE", help="the PEM private key of --mqtt-cert-file")
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


def add_sim_fault_and_status(commands: Commands) -> None:
    default_control = f"http://127.0.0.1:{SIM_CONTROL_PORT}"
    sim_fault = commands.add_parser(
        "sim-fault", help="inject or clear a fault on a simulated pump", description=cmd_sim_fault.__doc__
    )
    sim_fault.add_argument("slot", metavar="SLOT", help="the simulated pump, e.g. pump-1")
    sim_fault.add_argument("fault", choices=FAULT_NAMES, metavar="FAULT", help=", ".join(FAULT_NAMES))
    sim_fault.add_argument("--clear", action="store_true", help="clear the condition (link_drop: reconnect now)")
    sim_fault.add_argument(
        "--seconds",
        type=decimal_number(0, MAX_OFFLINE_S),
        metavar="S",
        help=f"link_drop: stay offline this long before dialling again (0 to {MAX_OFFLINE_S:g})",
    )
    control_url_option(sim_fault, ENV_SIM_CONTROL_URL, default_control)
    sim_fault.set_defaults(func=cmd_sim_fault)

    sim_status = commands.add_parser("sim-status", help="show the simulated pumps, their links and faults")
    control_url_option(sim_status, ENV_SIM_CONTROL_URL, default_control)
    sim_status.add_argument("--json", action="store_true", help="print the control endpoint's JSON")
    sim_status.set_defaults(func=cmd_sim_status)
