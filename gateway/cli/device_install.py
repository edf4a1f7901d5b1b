"""`mcp-gateway device install` and `device update`: the pump-1 application onto a MicroPython board.

install: through the board's raw REPL on PORT, the application compiled for the board, its schema and
a config.json with the board's own provider secret, which the device registry adopts for exactly one
slot (docs/field-devices.md). An MQTT board gets its own broker credential instead: username = its
slot, a new random password, set in the appliance's mosquitto password file (the broker's ACL confines
that username to the slot's topics); mosquitto must then be reloaded, which the command says. The MQTT
steps are gateway/cli/device_install_mqtt.py's.
A slot has one adopted board: another board already adopted for it stops the install ([slot-taken])
unless --replace revokes that board's identity. An MQTT install never takes the gateway's broker username
([gateway-user]), nor a user of the password file no adoption owns unless --replace-user ([user-exists]).
Before the board is written to, the source is built whole and the registry is opened and written to (a
rolled-back transaction), so that neither can fail after the board holds a secret the registry does not
know ([registry-unusable]).
update: new code onto the board that serves SLOT, its config.json kept, refused while a call to SLOT
is in flight, and stopped before anything is written when the board on the port is another board than
SLOT's ([wrong-board]); waits until the board is back with the new version.
A failure after the board was interrupted resets it, so that it runs the code it holds again, and so
does an install stopped by Ctrl-C, SIGTERM or SIGHUP ([interrupted]); a board that goes away midway
is said as such ([board-gone]), with what it may hold.
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

from gateway.cli.board_left import (
    BEFORE_THE_BOARD,
    SWAP,
    Progress,
    board_state,
    failed_text,
    gone_text,
    interrupted_text,
    restarted,
    stop_exit_code,
)
from gateway.cli.common import Commands, decimal_number, gateway_url_option, read_passphrase_file, whole_number
from gateway.cli.device_install_mqtt import (
    RELOAD_MOSQUITTO,
    drop_earlier_user,
    drop_replaced_user,
    install_mqtt,
    mqtt_username_problem,
    password_file_problem,
    user_exists_problem,
)
from gateway.cli.parsing import subcommands
from gateway.cli.slot_board import WrongBoard, slot_board
from gateway.devices.mosquitto_passwd import DEFAULT_PASSWORD_FILE, PasswordFileError
from gateway.devices.registry import SlotTaken
from gateway.provision.raw_repl import BoardGone

if TYPE_CHECKING:
    from gateway.provision.bundle import Application, Bundle

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

    transport = TRANSPORTS[args.transport]
    if transport == "websocket" and not args.gateway_url:
        return _usage("--gateway-url is needed for --transport ws, e.g. --gateway-url ws://192.168.1.10:3000")
    if transport == "mqtt" and not args.mqtt_broker:
        return _usage("--mqtt-broker is needed for --transport mqtt, e.g. --mqtt-broker 192.168.1.10")
    problem = _slot_problem(args.slot)
    if problem is None and transport == "websocket":
        from gateway.provision.config_check import gateway_url_problem

        problem = gateway_url_problem(args.gateway_url)
    if problem is not None:
        return _usage(problem)
    passwd_problem = None
    if transport == "mqtt":
        passwd_problem = mqtt_username_problem(args) or password_file_problem(args)
        if passwd_problem and not args.dry_run:
            return _usage(passwd_problem)
    if bool(args.wifi_ssid) != bool(args.wifi_password_file):
        return _usage("give --wifi-ssid and --wifi-password-file together")
    try:
        wifi_password = (
            read_passphrase_file(args.wifi_password_file, "--wifi-password-file") if args.wifi_ssid else None
        )
    except ValueError as exc:
        return _usage(str(exc))

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
        return _usage(problem)
    registry = _registry(args)
    try:
        if args.dry_run:
            return _dry_run(args, registry, transport, config_with, passwd_problem)
        from gateway.flash.handover import stop_signals

        # SIGTERM and SIGHUP (a dropped SSH session) stop it as Ctrl-C does: the board is reset, and said.
        with stop_signals():
            return _install(args, registry, transport, config_with)
    except KeyboardInterrupt as stop:  # before the port was opened
        return _fail(interrupted_text(args.port, stop, Progress(BEFORE_THE_BOARD), "", "install"), stop_exit_code(stop))
    finally:
        registry.close()


def _checked_build(args: argparse.Namespace) -> tuple[Application, Bundle]:
    """The application of --source (or the installed one), built whole once, before the board is
    touched: a folder that lacks a part or a module that does not compile stops here."""
    from gateway.provision.bundle import build

    application = _source(args)
    return application, build(application, None, compile_modules=not args.no_compile)


def _dry_run(
    args: argparse.Namespace, registry: Any, transport: str, config_with: Any, passwd_problem: str | None
) -> int:
    from gateway.flash.port import diagnose
    from gateway.provision import board
    from gateway.provision.bundle import ProvisionError

    try:
        bundle = _checked_build(args)[1]
    except ProvisionError as exc:
        return _fail(str(exc))
    _say(f"dry run: nothing is written to {args.port} or to the registry")
    # Checked without opening the port: opening it pulses DTR/RTS, which resets many boards. The check
    # is the install's own (gateway/provision/raw_repl.py open_port makes it first).
    port_problem = diagnose(args.port)
    if port_problem is None:
        _say(f"would open {args.port}: it is there, free, and this user may read and write it")
    how = "compile with mpy-cross -march=<the board's>" if bundle.compiled else "copy the sources"
    _say(f"would {how}: {bundle.firmware} {bundle.version}, {len(bundle.files)} files, {bundle.size} bytes")
    for path, content in bundle.files:
        _say(f"  {path} ({len(content)} bytes)")
    problems = [passwd_problem] if passwd_problem else []
    holder = None
    try:
        registry.check_readable()
        holder = registry.slot_holder(args.slot, read_only=True)
    except sqlite3.Error as exc:
        problems.append(_registry_text(registry, exc, "the board would not be touched"))
    _say(f"would adopt the board (its device id, read from it) for slot {args.slot} in {registry.path}")
    if holder is not None:
        then = (
            f"for another board it would revoke {holder.device_id}'s identity for {args.slot} (--replace)"
            if args.replace
            else "for another board it would stop [slot-taken] (--replace, or another --slot)"
        )
        _say(f"  {holder}: the install goes on if the board on {args.port} is {holder.device_id}; {then}")
    if transport == "mqtt":
        try:
            problems += [] if passwd_problem else [text for text in [user_exists_problem(args, registry)] if text]
        except (sqlite3.Error, PasswordFileError) as exc:
            problems.append(str(exc))
        _say(f"would set user {args.slot} in the mosquitto password file {args.mosquitto_passwd}")
        _say(f"would write config.json: {board.shown(config_with(None, '(issued at install)'))}")
    else:
        _say(f"would write config.json: {board.shown(config_with('(issued at install)'))}")
    if port_problem is not None:
        problems.append(f"{port_problem.message} [{port_problem.code}]")
    for problem in problems:
        _fail(f"the install would stop: {problem}")
    return 1 if problems else 0


def _install(args: argparse.Namespace, registry: Any, transport: str, config_with: Any) -> int:
    from gateway.provision.bundle import ProvisionError
    from gateway.provision.raw_repl import BoardError, RawRepl, open_port

    try:
        application = _checked_build(args)[0]
    except ProvisionError as exc:
        return _fail(str(exc))
    # The registry is opened and written to (a transaction rolled back) before the board: a registry
    # that fails after the board got its new secret would lock the board out.
    try:
        registry.check_writable()
        problem = user_exists_problem(args, registry) if transport == "mqtt" else None
    except PasswordFileError as exc:
        problem = str(exc)
    except sqlite3.Error as exc:
        return _fail(_registry_text(registry, exc, f"nothing was written to the board on {args.port}"))
    if problem is not None:
        return _fail(f"{problem}; nothing was written to the board on {args.port}")
    try:
        line = open_port(args.port, args.baud)
    except BoardError as exc:
        return _fail(str(exc))
    progress = Progress()
    repl = RawRepl(line, name=f"the board on {args.port}", pace_s=args.pace_ms / 1000)
    try:
        try:
            repl.enter()
            config, bundle = _install_on(args, repl, registry, transport, application, config_with, progress)
            progress.step = "its reset"
            if args.no_reset:
                _say("not reset (--no-reset): the board runs the new code at its next reset")
            else:
                repl.soft_reset()
                _say(f"reset: the board starts {bundle.firmware} {bundle.version} and {_dial_text(config)}")
        except BoardGone as exc:
            return _fail(gone_text(args.port, exc, progress, "install"))
        except SlotTaken as taken:
            return _fail(_slot_taken_text(args, taken, progress, restarted(repl, progress)))
        except sqlite3.Error as exc:
            return _fail(_registry_text(registry, exc, board_state(progress) + restarted(repl, progress)))
        except (BoardError, ProvisionError, PasswordFileError) as exc:
            after = restarted(repl, progress) if progress.step != "opening the raw REPL" else ""
            return _fail(failed_text(exc, progress, after, "install"))
        except KeyboardInterrupt as stop:
            reset = restarted(repl, progress)
            return _fail(interrupted_text(args.port, stop, progress, reset, "install"), stop_exit_code(stop))
        except Exception:  # a fault of this program: the board still runs its code again, then the traceback
            restarted(repl, progress)
            raise
    finally:
        repl.close()
    return 0


def _install_on(
    args: argparse.Namespace,
    repl: Any,
    registry: Any,
    transport: str,
    application: Application,
    config_with: Any,
    progress: Progress,
) -> tuple[dict[str, Any], Bundle]:
    """The install, the raw REPL entered: probe, the slot's one board, build, copy, config, adopt."""
    from gateway.provision import board
    from gateway.provision.bundle import build

    progress.step = "the probe"
    info = board.probe(repl)
    device_id = progress.device_id = info.device_id(args.slot)
    _say(f"{args.slot}: MicroPython on {args.port} ({info.describe()}), device id {device_id}")
    holder = registry.slot_holder(args.slot, device_id)
    if holder is not None and not args.replace:
        raise holder
    bundle = build(application, info, compile_modules=not args.no_compile)
    _say(_built_text(bundle))
    _copy(repl, bundle, progress)
    _say(f"copied {len(bundle.files)} files, {bundle.size} bytes")
    progress.step = "the config.json write"
    earlier = registry.standing_adoption(device_id)
    if transport == "mqtt":
        config, adopted = install_mqtt(args, repl, registry, device_id, config_with, progress)
    else:
        from gateway.devices.registry import issue_secret, secret_digest

        token = issue_secret()
        config = config_with(token)
        board.write_config(repl, config)
        progress.config = True
        _say(f"wrote config.json: {board.shown(config)}")
        adopted = registry.adopt(device_id, args.slot, transport, args.port, secret_digest(token), replace=args.replace)
        progress.adopted = True
        del token, config["provider_token"]
        _say(f"adopted {device_id}: identity {adopted.identity}, slot {args.slot} (registry {registry.path})")
    dropped = drop_earlier_user(args, registry, device_id, earlier, transport)
    dropped = drop_replaced_user(args, registry, adopted.replaced, transport) or dropped
    if dropped or transport == "mqtt":
        _say(f"reload mosquitto so that it reads the password file again: {RELOAD_MOSQUITTO}")
    if adopted.replaced:
        _say(
            f"revoked {', '.join(adopted.replaced)} for slot {args.slot} (--replace): the gateway refuses it from its "
            "next connection"
        )
        _end_replaced_links(args)
    return config, bundle


def _copy(repl: Any, bundle: Bundle, progress: Progress) -> None:
    """The new files copied and checked, then swapped in; `progress` names the swap from its start."""
    from gateway.provision import board

    progress.step = "the copy"
    board.copy_files(repl, bundle.files)
    progress.step = SWAP
    board.swap_files(repl, [path for path, _ in bundle.files])
    progress.files = True


def _end_replaced_links(args: argparse.Namespace) -> None:
    """Ask the running gateway to end the link of the board --replace revoked (broker_providers_recheck,
    as `devices revoke` does), so that the new board can take the slot; one line when it cannot be asked."""
    from gateway.client import GatewayCallError

    try:
        result = asyncio.run(broker_call(args, "broker_providers_recheck", {}))
        texts = [block.get("text", "") for block in result.get("content", []) if isinstance(block, dict)]
        refusal = " ".join(texts) if result.get("isError") else None
    except (GatewayCallError, OSError, TimeoutError) as exc:
        refusal = str(exc) or type(exc).__name__
    if refusal is not None:
        _say(
            f"the gateway at {args.url} could not end the replaced board's link now ({refusal}): it is refused from "
            "its next dial; a link it holds now ends when the gateway restarts"
        )
        return
    report = result.get("structuredContent")
    ended = report.get("ended", []) if isinstance(report, dict) else []
    ended = [entry for entry in ended if isinstance(entry, dict) and entry.get("slot") == args.slot]
    if not ended:
        _say(f"the gateway at {args.url} holds no link of it now: nothing to end")
    for entry in ended:
        who = entry.get("identity") or entry.get("device_id") or "no identity"
        _say(f"the gateway at {args.url} ended {args.slot} ({entry.get('transport')}, {who}): {entry.get('how')}")


def _slot_taken_text(args: argparse.Namespace, taken: SlotTaken, progress: Progress, reset: str) -> str:
    return (
        f"{taken}, and the board on {args.port} is {progress.device_id}: {board_state(progress, taken)}{reset}. "
        f"To move {args.slot} to this board, run the install again with --replace (it revokes "
        f"{taken.device_id}'s identity for {args.slot}), or give this board another --slot [slot-taken]"
    )


def _registry_text(registry: Any, exc: Exception, board_state: str) -> str:
    return (
        f"the device registry {registry.path} cannot be used ({exc}): {board_state}. Name a database file this "
        "user may read and write with --registry (default: devices.db in the state directory), or mend this one "
        "[registry-unusable]"
    )


def _slot_problem(slot: str) -> str | None:
    """Why the gateway would refuse the board's slot (its own rules, docs/protocol.md "Slot names"), or None."""
    from gateway.core.names import SlotNameError, check_slot_name

    try:
        check_slot_name(slot)
    except SlotNameError as exc:
        return f"--slot {slot!r}: {exc} (the gateway refuses a board by that name)"
    return None


def _built_text(bundle: Any) -> str:
    if bundle.compiled:
        march = f" -march={bundle.march}" if bundle.march else ""
        return f"compiled {bundle.compiled} modules with mpy-cross{march} ({bundle.firmware} {bundle.version})"
    return f"copying the sources ({bundle.firmware} {bundle.version}, --no-compile)"


def _fail(text: str, exit_code: int = 1) -> int:
    print(f"mcp-gateway: {text}", file=sys.stderr)
    return exit_code


def _usage(text: str) -> int:
    """A refusal of the command line before anything is touched (docs/cli.md, exit codes): exit 2."""
    print(f"mcp-gateway: {text}", file=sys.stderr)
    return 2


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
    from gateway.config import ConfigError
    from gateway.flash.handover import Stopped, stop_signals
    from gateway.provision.bundle import ProvisionError

    # The source whole, before anything else: a folder that lacks a part must not stop a running board.
    try:
        application = _checked_build(args)[0]
    except ProvisionError as exc:
        return _fail(f"{exc}; the board was not touched")
    registry = _registry(args)
    try:
        known = registry.for_slot(args.slot)
    except sqlite3.Error as exc:
        return _fail(_registry_text(registry, exc, "the board was not touched"))
    finally:
        registry.close()
    port = args.port or (known.port if known else None)
    if not port:
        return _fail(f"no serial port is known for {args.slot} (it was not installed from here): pass --port")
    try:
        before = asyncio.run(_provider_status(args))
    except ConfigError as exc:  # a token file that cannot be read: the question was never asked
        return _usage(
            f"cannot ask the gateway at {args.url} whether {args.slot} is busy ({exc}); "
            "give a --token-file that can be read"
        )
    except (GatewayCallError, OSError) as exc:
        return _fail(f"cannot ask the gateway at {args.url} whether {args.slot} is busy ({exc}); pass --url")
    if before.get("pending"):
        return _fail(
            f"{args.slot} has {before['pending']} call(s) in flight: update refused (the board would stop mid-call); "
            "try again when they are done"
        )
    expected = slot_board(args, registry, known, before)
    try:
        with stop_signals():  # SIGTERM and SIGHUP end it as Ctrl-C does: a released port is given back
            bundle = _update(args, port, before, application, expected)
    except Stopped as stopped:
        return stopped.exit_code
    if bundle is None:
        return 1
    _say(f"reset: waiting up to {args.wait_s:g} s for {args.slot} to come back with {bundle.firmware} {bundle.version}")
    return asyncio.run(_wait_back(args, before, bundle.version))


def _update(
    args: argparse.Namespace,
    port: str,
    before: dict[str, Any],
    application: Application,
    expected: tuple[str, str] | None,
) -> Bundle | None:
    """The update on the board, the port handed over by the gateway when it serves the board on it:
    what the board now runs, or None when it failed (said)."""
    from gateway.provision.bundle import ProvisionError
    from gateway.provision.raw_repl import BoardError, RawRepl, open_port

    # A board whose link to the gateway is this serial line: the gateway lets go of the port for the
    # update (broker_serial_release) and takes it back after, as for a flash.
    handover = None
    if before.get("connected") and before.get("transport") == "serial":
        from gateway.cli.calls import _client_token
        from gateway.flash.handover import GatewayHandover

        handover = GatewayHandover(args.url, _client_token(args))
        try:
            released = handover.release(port)
        except KeyboardInterrupt:  # the gateway may have let go already
            handover.resume(port)
            raise
        if not released:
            # The gateway's refusal (a token that is no operator of _broker) is what to act on: quoted.
            why = handover.why_not.get(port)
            advice = "Do as it says, or stop the gateway" if why else "Stop the gateway"
            _fail(
                f"{args.slot} is connected through the gateway's serial way in on {port}, and the gateway at "
                f"{args.url} {why or 'did not let go of it (broker_serial_release; see docs/field.md)'}. "
                f"{advice}, then update"
            )
            return None
        _say(f"{args.slot}: the gateway let go of {port} for the update")
    try:
        _say(f"{args.slot}: no call in flight; updating the board on {port}")
        try:
            line = open_port(port, args.baud)
        except BoardError as exc:
            _fail(str(exc))
            return None
        progress = Progress()
        repl = RawRepl(line, name=f"the board on {port}", pace_s=args.pace_ms / 1000)
        try:
            repl.enter()
            bundle = _update_on(args, port, repl, application, progress, expected)
        except BoardGone as exc:
            _fail(gone_text(port, exc, progress, "update"))
            return None
        except WrongBoard as wrong:
            from gateway.core.terminal_text import terminal_text

            # Both ids are what boards said (the probe's answer, a hello): escaped where they do not print.
            found, theirs = terminal_text(wrong.found), terminal_text(wrong.expected)
            _fail(
                f"the board on {port} is {found}, not {args.slot}'s board {theirs} ({wrong.source}): "
                f"{board_state(progress)}{restarted(repl, progress)}. Give the --port of {args.slot}'s board "
                "[wrong-board]"
            )
            return None
        except (BoardError, ProvisionError) as exc:
            after = restarted(repl, progress) if progress.step != "opening the raw REPL" else ""
            _fail(failed_text(exc, progress, after, "update"))
            return None
        except (KeyboardInterrupt, Exception):  # Ctrl-C, or a fault of this program: the board runs its code again
            restarted(repl, progress)
            raise
        finally:
            repl.close()
    finally:
        if handover is not None:
            handover.resume(port)
    return bundle


def _update_on(
    args: argparse.Namespace,
    port: str,
    repl: Any,
    application: Application,
    progress: Progress,
    expected: tuple[str, str] | None,
) -> Bundle:
    """The update, the raw REPL entered: probe, the slot's board (WrongBoard), build for the board, copy, reset."""
    from gateway.provision import board
    from gateway.provision.bundle import build

    progress.step = "the probe"
    info = board.probe(repl)
    progress.device_id = info.device_id(args.slot)
    _say(f"{args.slot}: MicroPython on {port} ({info.describe()}), device id {progress.device_id}")
    if expected is not None and progress.device_id != expected[0]:
        raise WrongBoard(progress.device_id, expected)
    bundle = build(application, info, compile_modules=not args.no_compile)
    _say(_built_text(bundle))
    _copy(repl, bundle, progress)
    _say(f"copied {len(bundle.files)} files, {bundle.size} bytes; config.json kept")
    progress.step = "its reset"
    repl.soft_reset()
    return bundle


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
    actions = subcommands(device, "action")

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
    install.add_argument(
        "--replace",
        action="store_true",
        help="when another board is adopted for --slot, revoke its identity for the slot and adopt this one "
        "(without it the install stops, [slot-taken])",
    )
    install.add_argument(
        "--replace-user",
        action="store_true",
        help="replace the password of a user of --mosquitto-passwd named --slot that no board adopted for the slot "
        "owns (without it the install stops, [user-exists]); never the gateway's own",
    )
    install.add_argument("--config", help="the gateway's config (default: $MCP_GATEWAY_CONFIG, else the appliance's)")
    gateway_url_option(install, "the running gateway, asked to end the link of a board --replace revokes")
    install.add_argument("--token-file", metavar="FILE", help="a client token for a gateway with [auth] (--replace)")
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
