"""The MQTT steps of `mcp-gateway device install` (gateway/cli/device_install.py, docs/field-devices.md
"MQTT boards"): an MQTT board's credential is its user in mosquitto's password file, username = its slot.

Checked before the board is touched: the slot can be a username (nothing the ACL or mosquitto's reading
of the file treats specially: no `/`, `+`, `#`, `:`, no blank at its ends, which mosquitto trims), it
is not the gateway's own broker user ([gateway-user]), and a user of that name in the file belongs to
a board adopted for the slot unless --replace-user ([user-exists]).
The install: config.json on the board, then the adoption in the registry (an install that lost the
slot to another meanwhile stops there, [slot-taken], its password never in the file), then the user's
line. A board adopted over MQTT that moves to another slot or transport loses its earlier user, and so
does an MQTT board that --replace revokes for a board on another transport (no new line replaces it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.cli.board_left import Progress
from gateway.devices.mosquitto_passwd import MOSQUITTO_BLANKS, PasswordFileError

if TYPE_CHECKING:
    from gateway.devices.registry import Adopted

GATEWAY_USERNAME = "mcp-gateway"  # the gateway's broker user on the appliance (image/mosquitto/acl)
APPLIANCE_CONFIG = Path("/etc/mcp-gateway/mcp-gateway.toml")  # image/systemd/mcp-gateway.service runs it
RELOAD_MOSQUITTO = "sudo systemctl reload mosquitto"
"""What makes the appliance's mosquitto read its password file again (SIGHUP)."""


def _say(text: str) -> None:
    print(text, flush=True)


def mqtt_username_problem(args: argparse.Namespace) -> str | None:
    """Why the slot cannot be an MQTT board's username (the ACL puts it in its topics; mosquitto trims
    blanks; the gateway's own)."""
    slot = args.slot
    bad = [char for char in "/+#:" if char in slot]
    if bad or not slot or any(ord(char) < 32 for char in slot):
        shown = " or ".join(bad) if bad else "a control character"
        return (
            f"--slot {slot!r} cannot be an MQTT board's username (it holds {shown}): the broker's ACL puts the "
            "username in the board's topics, mcpb/<slot>/..."
        )
    trimmed = slot.strip(MOSQUITTO_BLANKS)
    if trimmed != slot:
        return (
            f"--slot {slot!r} cannot be an MQTT board's username: it starts or ends with a blank, which mosquitto "
            f"trims from the usernames of its password file, so the board would log in as {trimmed!r}; give the "
            "slot without blanks at its ends"
        )
    from gateway.config import ConfigError

    try:  # the gateway's own: its password replaced, mosquitto refuses the gateway, the board reads every topic
        config, configured = _gateway_usernames(args)
    except ConfigError as exc:
        return f"{exc}: the gateway's own broker username cannot be learnt; give a readable --config [gateway-user]"
    if slot in {name.strip(MOSQUITTO_BLANKS) for name in configured} | {GATEWAY_USERNAME}:
        from_config = slot in {name.strip(MOSQUITTO_BLANKS) for name in configured}
        where = (
            f"[[mqtt.brokers]] username in {config}" if from_config else f"the appliance's default, {GATEWAY_USERNAME}"
        )
        return (
            f"--slot {slot!r} is the gateway's own broker username ({where}): its password in "
            f"{args.mosquitto_passwd} would be replaced, mosquitto would refuse the gateway after its reload, and "
            "the board would read every board's topics; give the board another --slot [gateway-user]"
        )
    return None


def _gateway_usernames(args: argparse.Namespace) -> tuple[str | None, set[str]]:
    """The config file read (--config, $MCP_GATEWAY_CONFIG, the appliance's) and each [[mqtt.brokers]]
    username there; plain TOML, as `token create` reads it (its secrets need not be)."""
    from gateway.config import ENV_CONFIG_FILE, read_toml

    appliance = str(APPLIANCE_CONFIG) if APPLIANCE_CONFIG.is_file() else None
    config = args.config or os.environ.get(ENV_CONFIG_FILE) or appliance
    mqtt = read_toml(Path(config)).get("mqtt") if config else None
    brokers = mqtt.get("brokers") if isinstance(mqtt, dict) else None
    found = [b.get("username") for b in brokers if isinstance(b, dict)] if isinstance(brokers, list) else []
    return config, {name for name in found if isinstance(name, str)}


def user_exists_problem(args: argparse.Namespace, registry: Any) -> str | None:
    """Why the slot's user is kept: no adoption of the slot owns it, no --replace-user; raises as read() does.
    read() names users as mosquitto does (blanks at the ends trimmed)."""
    from gateway.devices.mosquitto_passwd import read

    if args.replace_user or args.slot not in read(Path(args.mosquitto_passwd), "--mosquitto-passwd"):
        return None
    with registry.read_only() as db:  # nothing made or changed: a dry run asks it too
        query = "SELECT 1 FROM devices WHERE slot = ? AND adopted_at IS NOT NULL AND revoked_at IS NULL"
        if db is not None and db.execute(query, (args.slot,)).fetchone():
            return None
    return (
        f"the mosquitto password file {args.mosquitto_passwd} has a user {args.slot} that no board adopted for "
        f"{args.slot} in the registry {registry.path} owns (made by hand, or another program's): the install would "
        "replace its password and lock out whoever logs in with it. Give the board another --slot, or pass "
        "--replace-user when that user may go [user-exists]"
    )


def password_file_problem(args: argparse.Namespace) -> str | None:
    from gateway.devices.mosquitto_passwd import check_writable

    try:
        check_writable(Path(args.mosquitto_passwd), "--mosquitto-passwd")
    except PasswordFileError as exc:
        return str(exc)
    return None


def install_mqtt(
    args: argparse.Namespace, repl: Any, registry: Any, device_id: str, config_with: Any, progress: Progress
) -> tuple[dict[str, Any], Adopted]:
    """The board's own broker credential: on the board first (a failed write leaves it the password it
    had, still in the file), then the adoption in the registry, then the user in mosquitto's password
    file. The adoption before the file: an install that lost the slot to another one meanwhile
    ([slot-taken]) never puts its password in place of the winner's."""
    from gateway.devices import mosquitto_passwd
    from gateway.devices.registry import issue_secret
    from gateway.provision import board

    password = issue_secret()
    config: dict[str, Any] = config_with(None, password)
    board.write_config(repl, config)
    progress.config = True
    _say(f"wrote config.json: {board.shown(config)}")
    adopted = registry.adopt(device_id, args.slot, "mqtt", args.port, None, replace=args.replace)
    progress.adopted = True
    progress.broker_user = False
    _say(f"adopted {device_id}: MQTT username {args.slot}, slot {args.slot} (registry {registry.path})")
    path = Path(args.mosquitto_passwd)
    replaced = mosquitto_passwd.set_user(path, args.slot, password, "--mosquitto-passwd")
    progress.broker_user = True
    del password, config["mqtt"]["password"]
    what = "replaced its earlier password" if replaced else "a new user"
    _say(f"set user {args.slot} in the mosquitto password file {path} ({what})")
    return config, adopted


def drop_earlier_user(
    args: argparse.Namespace, registry: Any, device_id: str, earlier: tuple[str, str] | None, transport: str
) -> bool:
    """Remove the broker user of the board's earlier MQTT adoption (`earlier`: its slot and transport
    before this install) when the board moved to another slot or transport and no other board holds
    that slot: its old password would log in still. True when the password file was changed."""
    from gateway.devices.mosquitto_passwd import remove_user

    if earlier is None or earlier[1] != "mqtt" or not earlier[0]:
        return False
    slot = earlier[0]
    if (slot, transport) == (args.slot, "mqtt") or registry.slot_holder(slot, device_id) is not None:
        return False
    path = Path(args.mosquitto_passwd)
    try:
        removed = remove_user(path, slot, "--mosquitto-passwd")
    except PasswordFileError as exc:
        raise PasswordFileError(
            f"{exc}; user {slot} of this board's earlier MQTT adoption stays in the file and its password still "
            f"logs in: remove it (sudo mosquitto_passwd -D {path} {slot}) and reload mosquitto"
        ) from None
    if removed:
        _say(f"removed user {slot} (this board's earlier MQTT slot) from the mosquitto password file {path}")
    else:
        _say(f"user {slot} (this board's earlier MQTT slot) was not in the mosquitto password file {path}")
    return removed


def drop_replaced_user(args: argparse.Namespace, registry: Any, replaced: tuple[str, ...], transport: str) -> bool:
    """Remove the slot's broker user when --replace revoked a board adopted for it over MQTT and this board
    is on another transport: no new password replaces that user's line, so the revoked board would still
    log in and publish the slot's topics (as `devices revoke` removes it). True when the file was changed."""
    from gateway.devices.mosquitto_passwd import remove_user

    if transport == "mqtt" or not replaced:  # an MQTT install's own line replaced the revoked board's password
        return False
    earlier = [row.device_id for row in registry.devices() if row.device_id in replaced and row.transport == "mqtt"]
    if not earlier:
        return False
    path, who = Path(args.mosquitto_passwd), ", ".join(earlier)
    try:
        removed = remove_user(path, args.slot, "--mosquitto-passwd")
    except PasswordFileError as exc:
        raise PasswordFileError(
            f"{exc}; user {args.slot}, the MQTT credential of {who}, which this install replaced, stays in the file "
            f"and its password still logs in: remove it (sudo mosquitto_passwd -D {path} {args.slot}) and reload "
            "mosquitto"
        ) from None
    if removed:
        _say(
            f"removed user {args.slot} (the MQTT credential of {who}, which this install replaced) from the mosquitto "
            f"password file {path}"
        )
    return removed
