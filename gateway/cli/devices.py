"""`mcp-gateway devices`: the boards in the device registry; `devices revoke ID`: withdraw a board's identity.

The registry (gateway/devices/registry.py) lists every board whose hello the gateway heard, by device
id (the MAC on an ESP32), whether `mcp-gateway device install` adopted it, and its last flash
(`mcp-gateway flash`; a board flashed but never heard is listed too; the whole history:
`devices flashes`, gateway/cli/devices_flashes.py). The table escapes text that does not print
(devices_flashes.cell), --json writes it as its JSON escape (terminal_text): hellos and flash records
hold what boards and files said. A revoked identity is
refused from the board's next dial (HTTP 401, "provider_identity_revoked"); the running gateway reads
the registry at each check, so neither a restart nor a reload is needed. An MQTT board's credential is
its user in mosquitto's password file: revoking removes that user (then mosquitto must be reloaded,
which the command says: the gateway cannot reload mosquitto), unless it is no longer the board's: a
board another one replaced (`device install --replace`) leaves the user to the slot's board now.

After the registry change, revoke asks the running gateway at --url (its `_broker` tool
broker_providers_recheck, as a client: --token-file, else $MCP_GATEWAY_TOKEN) to end at once the links
whose credential no longer stands: a WebSocket board's socket is closed with 1008 and its slot
detached; an MQTT board's retained status is emptied on its broker and its slot detached. It prints
which links the gateway ended. A gateway that cannot be reached or refuses is said in one line, with
what still holds; the revocation stands and the exit code is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from gateway.cli.columns import aligned
from gateway.cli.common import Commands
from gateway.cli.device_install import _registry, broker_call, gateway_options, registry_errors
from gateway.cli.device_install_mqtt import RELOAD_MOSQUITTO
from gateway.cli.devices_flashes import add_flashes, cell
from gateway.cli.parsing import subcommands
from gateway.devices.mosquitto_passwd import DEFAULT_PASSWORD_FILE

COLUMNS = ("device", "adopted", "seen", "last seen", "firmware", "schema", "transport", "slot", "last flash")
"""`last flash` is last: its cell holds spaces, and the columns before it keep their places."""


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S") if epoch else "never"


def _adopted(row: Any) -> str:
    return "revoked" if row.revoked else ("yes" if row.adopted else "no")


def _last_flash(flash: Any) -> str:
    """A board's last flash as a cell: the image and when (UTC), and the outcome unless it worked."""
    if flash is None:
        return "-"
    outcome = "" if flash.outcome == "ok" else f" [{cell(flash.outcome)}]"
    image = cell(flash.image) if flash.image else "(no image chosen)"
    return f"{image} {cell(flash.flashed_at)}{outcome}"


def _cells(row: Any, flash: Any) -> tuple[str, ...]:
    """The row's text, escaped where it does not print (`cell`): hellos and records come from boards and files."""
    firmware = cell(row.firmware) if row.firmware else "-"
    if row.firmware and row.version:
        firmware += f" {cell(row.version)}"
    transport = row.seen_transport or row.transport
    slot = row.slot or row.seen_slot
    return (
        cell(row.device_id),
        _adopted(row),
        str(row.seen),
        _when(row.last_seen),
        firmware,
        cell(row.schema) if row.schema else "-",
        cell(transport) if transport else "-",
        cell(slot) if slot else "-",
        _last_flash(flash),
    )


def render(rows: list[Any], flashes: dict[str, Any] | None = None) -> str:
    return aligned(COLUMNS, [_cells(row, (flashes or {}).get(row.device_id)) for row in rows])


def cmd_devices(args: argparse.Namespace) -> int:
    from gateway.client import terminal_text
    from gateway.devices.flashes import last_flashes

    registry = _registry(args)
    if not registry.path.exists():
        # No boards: with --json, nothing on stdout (no object), the note for the person on stderr.
        note = f"no device registry at {registry.path} yet: the gateway records the boards it hears there"
        print(note, file=sys.stderr if args.json else sys.stdout)
        return 0
    try:
        rows = registry.devices()
        flashes = last_flashes(registry)
    finally:
        registry.close()
    # A board flashed but never heard by the gateway is listed too, seen 0 times.
    listed = {row.device_id for row in rows}
    rows += [only_flashed(device_id) for device_id in flashes if device_id not in listed]
    rows.sort(key=lambda row: row.device_id)
    if args.json:
        for row in rows:
            record = {**vars(row), "adopted": _adopted(row)}
            record.pop("revoked")
            flash = flashes.get(row.device_id)
            record["last_flash"] = vars(flash) if flash is not None else None
            # Escaped where it does not print (the same JSON): hellos and records hold what boards said.
            sys.stdout.write(terminal_text(orjson.dumps(record).decode()) + "\n")
        return 0
    print(render(rows, flashes))
    return 0


def only_flashed(device_id: str) -> Any:
    from gateway.devices.registry import DeviceRow

    return DeviceRow(device_id, None, None, None, False, False, 0, None, None, None, None, None, None, None)


CLEAR_STATUS = (
    'mosquitto_pub -h 127.0.0.1 -p 1884 -u mcp-gateway -P "$(sudo cat /etc/mcp-gateway/mqtt-password)" '
    "-t mcpb/{slot}/status -r -n"
)
"""The appliance's loopback listener and the gateway's own credential (image/mosquitto/mcp-gateway.conf):
clearing a board's retained status by hand, when the gateway cannot be asked to."""


def _fail(text: str) -> int:
    print(f"mcp-gateway: {text}", file=sys.stderr)
    return 1


RECHECK = "broker_providers_recheck"


def _end_links(args: argparse.Namespace, revoked: Any, mqtt: bool) -> None:
    """Ask the running gateway to end the links whose credential no longer stands (broker_providers_recheck)
    and say which it ended; one line when it cannot be asked (the revocation stands either way)."""
    from gateway.client import GatewayCallError, terminal_text

    result: dict[str, Any] = {}
    try:
        result = asyncio.run(broker_call(args, RECHECK, {}))
        texts = [block.get("text", "") for block in result.get("content", []) if isinstance(block, dict)]
        refusal = " ".join(texts) if result.get("isError") else None
    except (GatewayCallError, OSError, TimeoutError) as exc:
        refusal = str(exc) or type(exc).__name__
    if refusal is not None:
        if mqtt:
            still = (
                "mosquitto refuses the board once reloaded, and the gateway keeps its slot until its retained status "
                f"is cleared, with the gateway's credential: {CLEAR_STATUS.format(slot=revoked.slot)}"
            )
        else:
            still = "the board is refused from its next dial; a link it holds now ends when the gateway restarts"
        print(f"the gateway at {args.url} could not end the board's link now ({terminal_text(refusal)}): {still}")
        return
    found = result.get("structuredContent")
    report = found if isinstance(found, dict) else {}
    ended = [entry for entry in report.get("ended", []) if isinstance(entry, dict)]
    if not any(entry.get("slot") == revoked.slot for entry in ended):
        print(f"the gateway at {args.url} holds no link of it now: nothing to end")
    # The report carries what boards sent (a device_id from a board's hello): escaped like a provider's words.
    for entry in ended:
        who = terminal_text(str(entry.get("identity") or entry.get("device_id") or "no identity"))
        slot = terminal_text(str(entry.get("slot") or "a /providers socket without a slot"))
        transport, how = terminal_text(str(entry.get("transport"))), terminal_text(str(entry.get("how")))
        print(f"the gateway at {args.url} ended {slot} ({transport}, {who}): {how}")
    for problem in report.get("problems", []):
        print(f"the gateway at {args.url}: {terminal_text(str(problem))}")


def _user_kept_for(registry: Any, row: Any, passwd: Path) -> str | None:
    """Why the MQTT board's slot user is not the board's to remove, else None: another board holds the
    slot now (it replaced this one), or this board was revoked before and the user came after."""
    from gateway.devices.mosquitto_passwd import read

    holder = registry.slot_holder(row.slot, row.device_id)
    if holder is not None:
        return f"it is the credential of {holder.device_id}, adopted for {row.slot} now"
    if row.revoked and row.slot in read(passwd, "--mosquitto-passwd"):
        return (
            f"{row.device_id} was revoked before, and no adoption owns the user (remove it by hand when it may go: "
            f"sudo mosquitto_passwd -D {passwd} {row.slot})"
        )
    return None


def cmd_revoke(args: argparse.Namespace) -> int:
    from gateway.devices.mosquitto_passwd import PasswordFileError, remove_user

    registry = _registry(args)
    removed: bool | None = None
    kept: str | None = None
    try:
        rows = registry.devices() if registry.path.exists() else []
        row = next((row for row in rows if row.device_id == args.device_id and row.adopted), None)
        # The slot's user is the board's only while no other board holds the slot: a board replaced
        # (--replace) leaves the user to the board that holds the slot now.
        if row is not None and row.transport == "mqtt" and row.slot:
            # The broker's password file first: a board still in it could still connect, whatever the
            # registry says, so a failure here leaves the registry as it was (run the command again).
            try:
                kept = _user_kept_for(registry, row, Path(args.mosquitto_passwd))
                if kept is None:
                    removed = remove_user(Path(args.mosquitto_passwd), row.slot, "--mosquitto-passwd")
            except PasswordFileError as exc:
                return _fail(f"{args.device_id} is not revoked: {exc}")
        revoked = registry.revoke(args.device_id) if row is not None else None
    finally:
        registry.close()
    if revoked is None:
        return _fail(f"{args.device_id} has no identity in {registry.path} (see mcp-gateway devices)")
    if kept is not None:
        print(
            f"revoked {revoked.device_id} (slot {revoked.slot}, MQTT): user {revoked.slot} kept in the mosquitto "
            f"password file {args.mosquitto_passwd}: {kept}"
        )
        _end_links(args, revoked, mqtt=False)
        return 0
    if removed is None:
        print(f"revoked {revoked.identity} (slot {revoked.slot}): the gateway refuses it from its next connection")
        _end_links(args, revoked, mqtt=False)
        return 0
    if removed:
        print(
            f"revoked {revoked.device_id} (slot {revoked.slot}, MQTT): removed user {revoked.slot} from the "
            f"mosquitto password file {args.mosquitto_passwd}"
        )
    else:
        print(
            f"revoked {revoked.device_id} (slot {revoked.slot}, MQTT): user {revoked.slot} was not in the "
            f"mosquitto password file {args.mosquitto_passwd} (already removed)"
        )
    _end_links(args, revoked, mqtt=True)
    print(f"reload mosquitto (it ends the board's connection and refuses it from then on): {RELOAD_MOSQUITTO}")
    return 0


def add_devices(commands: Commands) -> None:
    devices = commands.add_parser(
        "devices", help="list the boards in the device registry and their flashes; revoke one's identity"
    )
    devices.add_argument(
        "--registry", metavar="PATH", help="the device registry (default: devices.db in the state directory)"
    )
    devices.add_argument("--json", action="store_true", help="one JSON object per board instead of the table")
    devices.set_defaults(func=registry_errors("devices", cmd_devices))
    actions = subcommands(devices, "action", required=False)
    revoke = actions.add_parser(
        "revoke",
        help="withdraw a board's own provider identity (an MQTT board: its user in mosquitto's password file) and "
        "have the running gateway end the link the board holds now",
    )
    revoke.add_argument("device_id", metavar="ID", help="the board's device id, as `mcp-gateway devices` lists it")
    # Also `devices`' own option: no default here, or it would hide one given before the subcommand.
    revoke.add_argument(
        "--registry",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the device registry (default: devices.db in the state directory)",
    )
    revoke.add_argument(
        "--mosquitto-passwd",
        metavar="PATH",
        default=str(DEFAULT_PASSWORD_FILE),
        help=f"mosquitto's password file, for a board adopted over MQTT (default {DEFAULT_PASSWORD_FILE})",
    )
    gateway_options(revoke)
    revoke.set_defaults(func=registry_errors("devices revoke", cmd_revoke))
    add_flashes(actions)
