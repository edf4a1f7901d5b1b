"""`mcp-gateway device install` and `device update`: the pump-1 application onto a MicroPython board.

install: through the board's raw REPL on PORT, the application compiled for the board, its schema and
a config.json with the board's own provider secret, which the device registry adopts for exactly one
slot (docs/field-devices.md). An MQTT board gets its own broker credential instead: username = its
slot, a new random password, set in the appliance's mosquitto password file (the broker's ACL confines
that username to the slot's topics); mosquitto must then be reloaded, which the command says.
update: new code onto the board that serves SLOT, its config.json kept, refused while a call to SLOT
is in flight; waits until the board is back with the new version.
Secrets are never printed: --dry-run and every message show *** instead.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.cli.common import Commands, _read_credential_file, decimal_number, gateway_url_option, whole_number
from gateway.devices.mosquitto_passwd import DEFAULT_PASSWORD_FILE, PasswordFileError

if TYPE_CHECKING:
    from gateway.provision.bundle import Application

TRANSPORTS = {"ws": "websocket", "mqtt": "mqtt", "serial": "serial"}
SERIAL_UARTS = ("1", "2", "console")
"""What the board takes as serial.uart (pump1/config.py): UART 1 or 2 on its own pins, or the REPL's port."""
PACE_MAX_MS = 1000.0
"""A longer pause per 256 bytes would make a copy of the application take hours."""


def _registry(args: argparse.Namespace) -> Any:
    from gateway.devices.registry import DeviceRegistry, default_registry_path

    return DeviceRegistry(Path(args.registry).expanduser() if args.registry else default_registry_path())


def registry_errors(command: str, run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`run`, with a device registry that cannot be used (not a database, damaged, unreadable) said
    in one line and exit 1 instead of a traceback."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except sqlite3.DatabaseError as exc:
            where = args.registry or "devices.db in the state directory"
            print(f"mcp-gateway {command}: the device registry ({where}) cannot be used: {exc}", file=sys.stderr)
            return 1

    return guarded


def _source(args: argparse.Namespace) -> Application:
    from gateway.provision.bundle import Application

    return Application.folder(Path(args.source).expanduser()) if args.source else Application.installed()


RELOAD_MOSQUITTO = "sudo systemctl reload mosquitto"
"""What makes the appliance's mosquitto read its password file again (SIGHUP)."""


def _say(text: str) -> None:
    print(text, flush=True)


def _dial_text(config: dict[str, Any]) -> str:
    if config["transport"] == "websocket":
        return f"dials {config['gateway_url'].rstrip('/')}/provider/{config['slot']}"
    if config["transport"] == "mqtt":
        return f"publishes {config['slot']} through the MQTT broker {config['mqtt']['broker']}"
    return f"serves {config['slot']} on its serial port"


def cmd_install(args: argparse.Namespace) -> int:
    from gateway.provision import board
    from gateway.provision.bundle import ProvisionError, build
    from gateway.provision.raw_repl import BoardError, RawRepl, open_port

    transport = TRANSPORTS[args.transport]
    if transport == "websocket" and not args.gateway_url:
        return _fail("--gateway-url is needed for --transport ws, e.g. --gateway-url ws://192.168.1.10:3000")
    if transport == "mqtt" and not args.mqtt_broker:
        return _fail("--mqtt-broker is needed for --transport mqtt, e.g. --mqtt-broker 192.168.1.10")
    problem = _slot_problem(args.slot)
    if problem is None and transport == "websocket":
        from gateway.provision.config_check import gateway_url_problem

        problem = gateway_url_problem(args.gateway_url)
    if problem is not None:
        return _fail(problem)
    passwd_problem = None
    if transport == "mqtt":
        passwd_problem = _mqtt_username_problem(args.slot) or _password_file_problem(args)
        if passwd_problem and not args.dry_run:
            return _fail(passwd_problem)
    if bool(args.wifi_ssid) != bool(args.wifi_password_file):
        return _fail("give --wifi-ssid and --wifi-password-file together")
    try:
        wifi_password = (
            _read_credential_file(args.wifi_password_file, "--wifi-password-file") if args.wifi_ssid else None
        )
    except ValueError as exc:
        return _fail(str(exc))

    def config_with(token: str | None, mqtt_password: str | None = None) -> dict[str, Any]:
        return board.board_config(
            slot=args.slot,
            transport=transport,
            gateway_url=args.gateway_url,
            provider_token=token,
            wifi_ssid=args.wifi_ssid,
            wifi_password=wifi_password,
            watchdog_s=args.watchdog_s,
            mqtt_broker=args.mqtt_broker,
            serial_uart=args.serial_uart,
            mqtt_port=args.mqtt_port,
            mqtt_user=args.slot if mqtt_password else None,
            mqtt_password=mqtt_password,
        )

    # The board's own check of the config.json it would get (its secrets stand-ins), before the port,
    # the registry or the password file is touched.
    from gateway.provision.config_check import board_refusal

    issued = "(issued at install)"
    problem = board_refusal(config_with(None, issued) if transport == "mqtt" else config_with(issued))
    if problem is not None:
        return _fail(problem)
    registry = _registry(args)
    try:
        if args.dry_run:
            bundle = build(_source(args), None, compile_modules=not args.no_compile)
            _say(f"dry run: nothing is written to {args.port} or to the registry")
            # Checked without opening the port: opening it pulses DTR/RTS, which resets many boards.
            from gateway.flash.port import diagnose

            port_problem = diagnose(args.port)
            if port_problem is None:
                _say(f"would open {args.port}: it is there, free, and this user may read and write it")
            how = "compile with mpy-cross -march=<the board's>" if bundle.compiled else "copy the sources"
            _say(f"would {how}: {bundle.firmware} {bundle.version}, {len(bundle.files)} files, {bundle.size} bytes")
            for path, content in bundle.files:
                _say(f"  {path} ({len(content)} bytes)")
            _say(f"would adopt the board (its device id, read from it) for slot {args.slot} in {registry.path}")
            if transport == "mqtt":
                _say(f"would set user {args.slot} in the mosquitto password file {args.mosquitto_passwd}")
                _say(f"would write config.json: {board.shown(config_with(None, '(issued at install)'))}")
            else:
                _say(f"would write config.json: {board.shown(config_with('(issued at install)'))}")
            problems = [passwd_problem] if passwd_problem else []
            if port_problem is not None:
                problems.append(f"{port_problem.message} [{port_problem.code}]")
            for problem in problems:
                _fail(f"the install would stop: {problem}")
            return 1 if problems else 0
        with RawRepl(
            open_port(args.port, args.baud), name=f"the board on {args.port}", pace_s=args.pace_ms / 1000
        ) as repl:
            info = board.probe(repl)
            device_id = info.device_id(args.slot)
            _say(f"{args.slot}: MicroPython on {args.port} ({info.describe()}), device id {device_id}")
            bundle = build(_source(args), info, compile_modules=not args.no_compile)
            _say(_built_text(bundle))
            board.write_files(repl, bundle.files)
            _say(f"copied {len(bundle.files)} files, {bundle.size} bytes")
            if transport == "mqtt":
                config = _install_mqtt(args, repl, registry, device_id, config_with)
            else:
                from gateway.devices.registry import issue_secret, secret_digest

                token = issue_secret()
                config = config_with(token)
                board.write_config(repl, config)
                _say(f"wrote config.json: {board.shown(config)}")
                adopted = registry.adopt(device_id, args.slot, transport, args.port, secret_digest(token))
                del token, config["provider_token"]
                _say(f"adopted {device_id}: identity {adopted.identity}, slot {args.slot} (registry {registry.path})")
            if args.no_reset:
                _say("not reset (--no-reset): the board runs the new code at its next reset")
            else:
                repl.soft_reset()
                _say(f"reset: the board starts {bundle.firmware} {bundle.version} and {_dial_text(config)}")
    except (BoardError, ProvisionError, PasswordFileError) as exc:
        return _fail(str(exc))
    finally:
        registry.close()
    return 0


def _slot_problem(slot: str) -> str | None:
    """Why the gateway would refuse the board's slot (its own rules, docs/protocol.md "Slot names"), or None."""
    from gateway.core.names import SlotNameError, check_slot_name

    try:
        check_slot_name(slot)
    except SlotNameError as exc:
        return f"--slot {slot!r}: {exc} (the gateway refuses a board by that name)"
    return None


def _mqtt_username_problem(slot: str) -> str | None:
    """Why `slot` cannot be an MQTT board's username (the appliance's ACL puts it in its topics)."""
    bad = [char for char in "/+#:" if char in slot]
    if bad or not slot or any(ord(char) < 32 for char in slot):
        shown = " or ".join(bad) if bad else "a control character"
        return (
            f"--slot {slot!r} cannot be an MQTT board's username (it holds {shown}): the broker's ACL puts the "
            "username in the board's topics, mcpb/<slot>/..."
        )
    return None


def _password_file_problem(args: argparse.Namespace) -> str | None:
    from gateway.devices.mosquitto_passwd import check_writable

    try:
        check_writable(Path(args.mosquitto_passwd), "--mosquitto-passwd")
    except PasswordFileError as exc:
        return str(exc)
    return None


def _install_mqtt(
    args: argparse.Namespace, repl: Any, registry: Any, device_id: str, config_with: Any
) -> dict[str, Any]:
    """The board's own broker credential: on the board first (a failed write leaves it the password it
    had, still in the file), then in mosquitto's password file, then the adoption in the registry."""
    from gateway.devices import mosquitto_passwd
    from gateway.devices.registry import issue_secret
    from gateway.provision import board

    password = issue_secret()
    config: dict[str, Any] = config_with(None, password)
    board.write_config(repl, config)
    _say(f"wrote config.json: {board.shown(config)}")
    path = Path(args.mosquitto_passwd)
    replaced = mosquitto_passwd.set_user(path, args.slot, password, "--mosquitto-passwd")
    del password, config["mqtt"]["password"]
    what = "replaced its earlier password" if replaced else "a new user"
    _say(f"set user {args.slot} in the mosquitto password file {path} ({what})")
    registry.adopt(device_id, args.slot, "mqtt", args.port, None)
    _say(f"adopted {device_id}: MQTT username {args.slot}, slot {args.slot} (registry {registry.path})")
    _say(f"reload mosquitto so that it reads the password file again: {RELOAD_MOSQUITTO}")
    return config


def _built_text(bundle: Any) -> str:
    if bundle.compiled:
        march = f" -march={bundle.march}" if bundle.march else ""
        return f"compiled {bundle.compiled} modules with mpy-cross{march} ({bundle.firmware} {bundle.version})"
    return f"copying the sources ({bundle.firmware} {bundle.version}, --no-compile)"


def _fail(text: str) -> int:
    print(f"mcp-gateway: {text}", file=sys.stderr)
    return 1


async def broker_call(args: argparse.Namespace, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One `_broker` tool of the running gateway at --url, as a client (--token-file, else $MCP_GATEWAY_TOKEN);
    GatewayCallError or OSError when the gateway cannot be reached or refuses."""
    from gateway.cli.calls import _client_token
    from gateway.client import GatewayClient

    async with GatewayClient(args.url, "_broker", timeout_s=10, token=_client_token(args)) as client:
        return await client.call_tool(tool, arguments)


def gateway_options(sub: argparse.ArgumentParser) -> None:
    """--url and --token-file: how a device command reaches the running gateway (broker_call)."""
    gateway_url_option(sub, "the running gateway")
    sub.add_argument("--token-file", metavar="FILE", help="a client token for a gateway with [auth]")


async def _provider_status(args: argparse.Namespace) -> dict[str, Any]:
    result = await broker_call(args, "provider_status", {"name": args.slot})
    status = result.get("structuredContent")
    return status if isinstance(status, dict) else {}


def _firmware(status: dict[str, Any]) -> tuple[str | None, str | None]:
    """The firmware name and version of the slot's hello (None when it has none)."""
    hello = status.get("hello")
    firmware = hello.get("firmware") if isinstance(hello, dict) else None
    if not isinstance(firmware, dict):
        return None, None
    return firmware.get("name"), firmware.get("version")


def cmd_update(args: argparse.Namespace) -> int:
    from gateway.client import GatewayCallError
    from gateway.provision import board
    from gateway.provision.bundle import ProvisionError, build
    from gateway.provision.raw_repl import BoardError, RawRepl, open_port

    registry = _registry(args)
    try:
        known = registry.for_slot(args.slot)
    finally:
        registry.close()
    port = args.port or (known.port if known else None)
    if not port:
        return _fail(f"no serial port is known for {args.slot} (it was not installed from here): pass --port")
    try:
        before = asyncio.run(_provider_status(args))
    except (GatewayCallError, OSError) as exc:
        return _fail(f"cannot ask the gateway at {args.url} whether {args.slot} is busy ({exc}); pass --url")
    if before.get("pending"):
        return _fail(
            f"{args.slot} has {before['pending']} call(s) in flight: update refused (the board would stop mid-call); "
            "try again when they are done"
        )
    # A board whose link to the gateway is this serial line: the gateway lets go of the port for the
    # update (broker_serial_release) and takes it back after, as for a flash.
    handover = None
    if before.get("connected") and before.get("transport") == "serial":
        from gateway.cli.calls import _client_token
        from gateway.flash.handover import GatewayHandover

        handover = GatewayHandover(args.url, _client_token(args))
        if not handover.release(port):
            return _fail(
                f"{args.slot} is connected through the gateway's serial way in on {port}, and the gateway at "
                f"{args.url} did not let go of it (broker_serial_release; see docs/field.md): stop the gateway, "
                "then update"
            )
        _say(f"{args.slot}: the gateway let go of {port} for the update")
    _say(f"{args.slot}: no call in flight; updating the board on {port}")
    try:
        with RawRepl(open_port(port, args.baud), name=f"the board on {port}", pace_s=args.pace_ms / 1000) as repl:
            info = board.probe(repl)
            _say(f"{args.slot}: MicroPython on {port} ({info.describe()}), device id {info.device_id(args.slot)}")
            bundle = build(_source(args), info, compile_modules=not args.no_compile)
            _say(_built_text(bundle))
            board.write_files(repl, bundle.files)
            _say(f"copied {len(bundle.files)} files, {bundle.size} bytes; config.json kept")
            repl.soft_reset()
    except (BoardError, ProvisionError) as exc:
        return _fail(str(exc))
    finally:
        if handover is not None:
            handover.resume(port)
    _say(f"reset: waiting up to {args.wait_s:g} s for {args.slot} to come back with {bundle.firmware} {bundle.version}")
    return asyncio.run(_wait_back(args, before, bundle.version))


async def _wait_back(args: argparse.Namespace, before: dict[str, Any], version: str) -> int:
    from gateway.client import GatewayCallError

    deadline = time.monotonic() + args.wait_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status = await _provider_status(args)
        except (GatewayCallError, OSError):
            status = {}
        back = status.get("connected") and status.get("connected_since") != before.get("connected_since")
        if back and _firmware(status)[1] == version and status.get("state") == "ready":
            hello = status["hello"]
            _say(
                f"{args.slot} is back: {_firmware(status)[0]} {version}, device {hello.get('device_id')}, "
                f"schema {hello.get('schema')}"
            )
            return 0
        await asyncio.sleep(0.25)
    now = _firmware(status)[1] if status.get("connected") else None
    seen = f"it serves {now}" if now else "it is not connected"
    return _fail(
        f"{args.slot} did not come back with {version} within {args.wait_s:g} s ({seen}): "
        "look at the board's console (mpremote repl) for config_error or link_down"
    )


def _common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--registry", metavar="PATH", help="the device registry (default: devices.db in the state directory)"
    )
    sub.add_argument(
        "--source",
        metavar="DIR",
        help="a folder laid out like device/micropython to put on the board (default: the installed application)",
    )
    sub.add_argument(
        "--no-compile", action="store_true", help="copy the .py sources instead of compiling with mpy-cross"
    )
    sub.add_argument("--baud", type=whole_number(1), default=115200, help="the board's console speed (default 115200)")
    sub.add_argument(
        "--pace-ms",
        type=decimal_number(0, PACE_MAX_MS),
        default=10.0,
        help=f"pause after each 256 bytes written to the board, 0 to {PACE_MAX_MS:g} (default 10, as mpremote; "
        "0 for a PTY)",
    )


def add_device(commands: Commands) -> None:
    device = commands.add_parser("device", help="put the pump-1 application on a MicroPython board, or update it")
    actions = device.add_subparsers(dest="action", required=True)

    install = actions.add_parser(
        "install", help="install the application and a config.json with the board's own identity"
    )
    install.add_argument("port", metavar="PORT", help="the board's serial port, e.g. /dev/ttyUSB0")
    install.add_argument("--slot", required=True, help="the slot the board publishes, e.g. pump-7")
    install.add_argument(
        "--transport",
        choices=sorted(TRANSPORTS),
        default="ws",
        help="how the board reaches the gateway: ws (WebSocket, the default), mqtt or serial",
    )
    install.add_argument(
        "--gateway-url", metavar="URL", help="the gateway the board dials (ws), e.g. ws://192.168.1.10:3000"
    )
    install.add_argument("--wifi-ssid", metavar="S", help="the Wi-Fi network the board joins")
    install.add_argument("--wifi-password-file", metavar="F", help="a file holding the Wi-Fi password")
    install.add_argument("--mqtt-broker", metavar="HOST", help="the MQTT broker (--transport mqtt)")
    install.add_argument(
        "--mqtt-port",
        metavar="N",
        type=whole_number(1, 65535),
        help="the broker's port (--transport mqtt; the board's default: 1883)",
    )
    install.add_argument(
        "--mosquitto-passwd",
        metavar="PATH",
        default=str(DEFAULT_PASSWORD_FILE),
        help=f"mosquitto's password file, where an MQTT board's credential goes (default {DEFAULT_PASSWORD_FILE})",
    )
    install.add_argument(
        "--serial-uart",
        metavar="N",
        choices=SERIAL_UARTS,
        help="the board's UART: 1, 2 or console (--transport serial)",
    )
    install.add_argument(
        "--watchdog-s",
        type=whole_number(0, meaning=" (0: off)"),
        default=10,
        help="the board's hardware watchdog in seconds (default 10; 0: off)",
    )
    install.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be written (secrets masked) and check the port without opening it; touch nothing. "
        "Exits 1 when the install would stop",
    )
    install.add_argument("--no-reset", action="store_true", help="leave the board in its REPL instead of starting it")
    _common(install)
    install.set_defaults(func=registry_errors("device install", cmd_install))

    update = actions.add_parser(
        "update", help="push new code to the board serving SLOT over serial; its config.json stays"
    )
    update.add_argument("slot", metavar="SLOT")
    update.add_argument("--port", help="the board's serial port (default: the one it was installed on)")
    gateway_options(update)
    update.add_argument(
        "--wait-s",
        type=decimal_number(0, above=True),
        default=60.0,
        help="how long to wait for the board to come back (default 60)",
    )
    _common(update)
    update.set_defaults(func=registry_errors("device update", cmd_update))
