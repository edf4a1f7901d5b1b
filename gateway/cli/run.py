"""`mcp-gateway run`: serve the gateway, with its flags (--stdio, --remote, --mqtt, --serial, --sim-pumps, --mdns)."""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from gateway import event_loop
from gateway.cli.common import (
    PORT_NUMBER,
    Commands,
    _config_flags,
    _load,
    mqtt_url_flag,
    serial_port_flag,
    whole_number,
    with_config,
)
from gateway.cli.startup import startup_refusal
from gateway.config import DEFAULT_PORT
from sim import DEFAULT_CONTROL_PORT as SIM_CONTROL_PORT
from sim import MAX_PUMPS as SIM_MAX_PUMPS


def remote_upstream_flag(text: str) -> dict[str, Any]:
    """--remote NAME=URL: a remote upstream without credentials, transport auto (the rest needs the config file)."""
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=URL, e.g. files=https://files.plant.lan/mcp, got {text!r}")
    return {"name": name.strip(), "url": url.strip()}


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


def hold_signals() -> list[int]:
    """SIGTERM, SIGINT and SIGHUP from now until the event loop takes them over: kept, for
    until_stopped to replay, instead of their default actions (SIGTERM and SIGHUP kill the process,
    SIGINT raises KeyboardInterrupt). Loading the gateway's modules and configuration comes before
    the loop and takes a noticeable time on a small board."""
    held: list[int] = []
    if threading.current_thread() is threading.main_thread():  # signal handlers belong to the main thread
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda number, _frame: held.append(number))
    return held


async def until_stopped(main: Callable[[], Coroutine[Any, Any, None]], held: Sequence[int] = ()) -> None:
    """main() with SIGTERM, SIGINT and SIGHUP handled from the loop's first step: a stop during start-up
    (the simulator's control port, the listener) stops what was started and exits 0, not 143; a
    SIGHUP reloads once the gateway is up instead of killing it (129). `held`: the signals that came
    before the loop (hold_signals), acted on now."""
    from gateway.app import start_signals

    signals = start_signals()  # serve() finds these handlers and their events (gateway/app.py)
    for signum in held:
        (signals.reload if signum == signal.SIGHUP else signals.stop).set()
    await main()


def cmd_run(args: argparse.Namespace) -> int:
    signals = hold_signals()  # first: the imports and checks below take a while
    from gateway.app import serve
    from gateway.cli.state_lock import StateInUse, hold_state
    from gateway.logs import setup_logging
    from gateway.reload import ConfigSource

    config = _load(args)
    # A reload (SIGHUP, `mcp-gateway reload`) loads it again the same way: file, environment, these flags.
    source = ConfigSource(getattr(args, "config", None), _config_flags(args))
    refusal = startup_refusal(config, warn=False)  # what `config check` asks too (gateway/cli/startup.py)
    if refusal is not None:
        print(f"mcp-gateway: {refusal}", file=sys.stderr)
        return 2
    sim_pumps = getattr(args, "sim_pumps", 0) or 0
    setup_logging(
        config.logging.level, config.logging.format, config.insecure_lan_open, config.logging.repeat_interval_s
    )
    # Entries that load but no request can match; token files others can read.
    for warning in config.warnings():
        logging.getLogger("gateway.config").warning("config: %s", warning)
    try:
        held = hold_state(config)  # one gateway per state directory and audit file (gateway/cli/state_lock.py)
    except StateInUse as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 2
    # Made once the loop runs (until_stopped): an unavailable loop leaves no coroutine never awaited.
    main: Callable[[], Coroutine[Any, Any, None]]
    if sim_pumps:
        from sim.embedded import serve_with_simulator

        main = functools.partial(serve_with_simulator, config, sim_pumps, args.sim_control_port, source)
    else:
        main = functools.partial(serve, config, source=source)
    try:
        with held:  # until run returns; a killed process's locks go with it (the kernel closes its files)
            event_loop.run(until_stopped(main, signals), config.event_loop)
    except event_loop.EventLoopUnavailable as exc:
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        # The bare errno names the address but not the usual cause, nor the way out.
        also = " or the simulator's with --sim-control-port" if sim_pumps else ""
        print(
            f"mcp-gateway: {exc} (another gateway running? choose another port with --port or MCP_GATEWAY_PORT{also})",
            file=sys.stderr,
        )
        return 1
    return 0


def add_run(commands: Commands) -> None:
    run = commands.add_parser("run", help="run the gateway")
    add_gateway_flags(run)
    run.add_argument(
        "--sim-pumps",
        type=whole_number(0, SIM_MAX_PUMPS),
        default=0,
        metavar="N",
        help=f"also publish N simulated pumps (pump-1 ... pump-N, at most {SIM_MAX_PUMPS}) into this gateway over "
        "WebSocket, with limits.max_slots_per_peer raised to N when it is lower (default 0)",
    )
    run.add_argument(
        "--sim-control-port",
        type=PORT_NUMBER,
        default=SIM_CONTROL_PORT,
        metavar="PORT",
        help=f"loopback port of the simulator's control endpoint (default {SIM_CONTROL_PORT}; 0: any free port)",
    )
    run.set_defaults(func=cmd_run)


def add_gateway_flags(run: argparse.ArgumentParser) -> None:
    """The flags that change the configuration `run` starts with; `config check` and `config show`
    take the same, so they judge what that very command line would run."""
    with_config(run)
    run.add_argument("--host", help="address to bind (default 127.0.0.1)")
    run.add_argument(
        "--port", type=PORT_NUMBER, help=f"port to bind, 0 to 65535 (default {DEFAULT_PORT}; 0: any free port)"
    )
    run.add_argument(
        "--insecure-lan", action="store_true", help="allow a LAN bind without client or provider authentication"
    )
    run.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log level (default: [logging] level, info)"
    )
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
        "--mdns",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="advertise the gateway on the local network with mDNS, or not (default: [mdns] enabled, off unless "
        "configured; see docs/discovery.md)",
    )
