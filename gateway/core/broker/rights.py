"""Who may do what through `_broker`: the one place its operator rule and its slot filter live.

An operator of `_broker` may run its action tools (broker_reload, broker_providers_recheck,
broker_serial_release/resume) on a gateway without [policy], and reads the effective configuration in
`broker_guide index`. Without [policy]: when [auth] is configured, `[auth] required_scopes` gives
`_broker` scopes by its own entry and the caller holds them (no `_broker` entry, even with a pattern such as
"*" matching it: no authenticated caller is an operator);
with no [auth], every caller; the action tools are served besides only by a gateway bound to loopback.
Under [policy]: a caller the policy grants one of `_broker`'s action tools (tool.control on
/_system/broker).

The per-slot answers (providers_list, provider_status, broker_diagnose, the guide's slots, broker_info's
group members, serial ports and MQTT slots) show only the slots the caller may call, by the rule `_all`
lists them with: the slot's scopes (AggregateTarget.may_call), then under [policy] mcp.tools.list on the
slot. broker_serial_release/resume need that rule to pass for every slot the port carries, with or without
a policy. A gateway-wide problem of broker_diagnose that names slots, ports, addresses or configuration
values is shown in full to an operator and to a caller that may call every slot; to any other caller
with its id and severity only (withheld()).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gateway.core.broker import status
from gateway.core.broker.problems import GatewayView, Problem
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import BROKER_SLOT
from gateway.core.principal import Principal

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView

NO_OPERATOR_SCOPES = (
    '{tool}: no caller is an operator of _broker here: [auth] required_scopes gives "_broker" no scopes. Set '
    'e.g. "_broker" = ["admin"] under [auth.required_scopes] and give the operators\' tokens that scope, or give '
    "the gateway a policy that grants {tool} (tool.control on /_system/broker); see docs/security-auth.md"
)
PATTERN_ONLY = (
    "{tool}: no caller is an operator of _broker here: a pattern of [auth] required_scopes guards _broker but "
    'makes no operator; add an entry of its own, e.g. "_broker" = ["admin"], and give the operators\' tokens '
    "that scope, or give the gateway a policy that grants {tool} (tool.control on /_system/broker); see "
    "docs/security-auth.md"
)
NOT_HELD = (
    "{tool}: this caller is not an operator of _broker: it needs the scope(s) {needed} "
    '([auth] required_scopes "_broker"); see docs/security-auth.md'
)
PORT_SLOTS = (
    "{tool}: this caller may not call every slot on serial port {port}: it lacks the scopes of {count} of them "
    "([auth] required_scopes); release and resume need the scopes of each slot the port carries"
)
PORT_SLOTS_GOVERNED = (
    "{tool}: this caller may not call every slot on serial port {port}: {count} of them are not its to call "
    "(their [auth] required_scopes, or mcp.tools.list on them under the policy); release and resume need the "
    "right to call each slot the port carries"
)


def operator_refusal(gateway: BrokerView, principal: Principal, tool: str, off_loopback: str) -> str | None:
    """None when `principal` is an operator of `_broker` on a gateway without [policy]; else why not
    (`off_loopback` when the gateway listens beyond loopback)."""
    if not gateway.config.is_loopback:
        return off_loopback
    return _caller_refusal(gateway, principal, tool)


def _caller_refusal(gateway: BrokerView, principal: Principal, tool: str) -> str | None:
    """The caller's part of the rule: `_broker`'s own required scopes configured and held. Its own entry
    only: a pattern such as "*" guards the endpoint too, but was written for devices and makes no
    operator (who may reload the gateway and take boards off their ports)."""
    slot_scopes, exact_scopes = gateway.aggregate.slot_scopes, gateway.aggregate.exact_scopes
    if slot_scopes is None or exact_scopes is None:  # no [auth]: every caller of a loopback gateway is on its machine
        return None
    needed = exact_scopes(BROKER_SLOT)
    if not needed:
        if slot_scopes(BROKER_SLOT):
            return PATTERN_ONLY.format(tool=tool)
        return NO_OPERATOR_SCOPES.format(tool=tool)
    if not principal.has_scopes(needed):
        return NOT_HELD.format(tool=tool, needed=" ".join(needed))
    return None


def port_refusal(gateway: BrokerView, principal: Principal, tool: str, port: str) -> str | None:
    """None when `principal` may call every slot serial `port` carries now or has carried (a resume brings
    those back), by slot_filter's rule (under [policy] too); else why not, without naming the slots."""
    status = gateway.serial_status() if gateway.serial_status is not None else {}
    slots: set[str] = set()
    real = os.path.realpath(port)
    for entry in status.get("ports") or []:
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and (path == port or os.path.realpath(path) == real):
            slots.update(entry.get("slots") or [])
            slots.update(entry.get("slots_seen") or {})
    may_call = slot_filter(gateway, principal)
    hidden = [slot for slot in slots if may_call is not None and not may_call(slot)]
    if not hidden:
        return None
    text = PORT_SLOTS if gateway.governance is None else PORT_SLOTS_GOVERNED
    return text.format(tool=tool, port=port, count=len(hidden))


def is_operator(gateway: BrokerView, principal: Principal, action_tools: Iterable[JsonObject]) -> bool:
    """Whether `principal` is an operator of `_broker` (see the module's docstring)."""
    governance = gateway.governance
    if governance is not None:
        return bool(governance.visible_tools(principal, BROKER_SLOT, list(action_tools)))
    return _caller_refusal(gateway, principal, "") is None


def slot_filter(gateway: BrokerView, principal: Principal) -> Callable[[str], bool] | None:
    """Whether `principal` may call a slot (as `_all` decides it); None when it may call every slot."""
    aggregate, governance = gateway.aggregate, gateway.governance
    if aggregate.slot_scopes is None and governance is None:
        return None

    def may_call(slot: str) -> bool:
        if not aggregate.may_call(principal, slot):
            return False
        return governance is None or governance.permits(principal, slot, "tools/list") is None

    return may_call


def providers_list(gateway: BrokerView, principal: Principal) -> JsonObject:
    """providers_list with only the slots `principal` may call."""
    listed = status.providers_list(gateway)
    may_call = slot_filter(gateway, principal)
    if may_call is None:
        return listed
    providers = [entry for entry in listed["providers"] if may_call(entry["name"])]
    connected = sum(1 for entry in providers if entry["connected"])
    return {"count": len(providers), "connected": connected, "providers": providers}


def diagnose_for(
    gateway: BrokerView,
    principal: Principal | None,
    diagnose: Callable[[GatewayView, str | None], list[Problem]],
    slot: str | None,
    operator: bool = False,
) -> list[Problem]:
    """The problems `principal` is shown (None: every one): of the slots it may call and of the gateway;
    a slot it may not call is diagnosed as a name never seen. Gateway-wide problems that name what the
    caller may not see are withheld (withheld()) unless it is an `operator` or may call every slot."""
    view = status.diagnosis_view(gateway)
    may_call = None if principal is None else slot_filter(gateway, principal)
    if may_call is None:
        return diagnose(view, slot)
    every_slot = all(may_call(entry.name) for entry in view.slots)
    view = dataclasses.replace(
        view,
        slots=[entry for entry in view.slots if may_call(entry.name)],
        aggregate_members=[name for name in view.aggregate_members if may_call(name)],
        groups=[
            dataclasses.replace(group, members=[name for name in group.members if may_call(name)])
            for group in view.groups
        ],
    )
    # The asked name stays: a hidden one is answered as unknown (the view no longer has it).
    shown = [problem for problem in diagnose(view, slot) if problem.slot in (None, slot) or may_call(problem.slot)]
    if operator or every_slot:
        return shown
    return withheld(shown, view, _shown_ports(gateway, may_call))


def _shown_ports(gateway: BrokerView, may_call: Callable[[str], bool]) -> frozenset[str]:
    """The serial ports broker_info shows the caller (_port_shown): their problems name nothing hidden."""
    status = gateway.serial_status() if gateway.serial_status is not None else {}
    ports = [port for port in status.get("ports") or [] if isinstance(port, dict)]
    return frozenset(str(port.get("path")) for port in ports if _port_shown(port, may_call))


PUBLIC_PROBLEMS = frozenset(
    {
        "security.insecure_lan",
        "security.providers_unauthenticated",
        "security.static_tokens_without_tls",
        "security.no_origins_configured",
        "config.public_url_missing",
        "sessions.near_cap",
        "subscriptions.near_cap",
        "slots.near_cap",
        "providers.none",
        "aggregate.empty",
    }
)
"""Gateway-wide problems shown to every caller as they are: they name only the gateway's own address
(which broker_info shows every caller) and counts."""
PLAIN_SUMMARIES = frozenset(
    {
        "audit.unavailable",
        "auth.oauth_keys_unavailable",
        "auth.oauth_keys_stale",
        "governance.approvals_unanswerable",
        "limits.refused",
        "limits.ledger_full",
        "limits.argument_not_taken",
        "mdns.failed",
        "mdns.not_advertised",
    }
)
"""Withheld problems whose summary names nothing and is kept."""
SUMMARIES = {
    "serial.port_unavailable": "A serial port cannot be opened: the slots of a board on it are detached",
    "serial.frames_damaged": "A serial port loses frames to line damage",
    "serial.frames_oversize": "A serial port dropped messages larger than its frame cap",
    "serial.no_board": "A serial port is open but no board has registered on it",
    "serial.port_held": "A serial port is let go of for another program: the slots of a board on it are detached",
    "mqtt.broker_unreachable": "An MQTT broker is not connected: its boards and servers are detached",
    "mqtt.subscription_refused": "An MQTT broker refused some of the gateway's subscriptions",
    "mqtt.messages_dropped": "MQTT messages were dropped",
    "mqtt.publish_refused": "An MQTT broker refuses the gateway's publishes: requests there fail",
    "mqtt.broker_anonymous": "An MQTT broker accepts clients without a password",
    "mqtt.broker_packet_size": "An MQTT broker accepts larger packets than the gateway reads",
    "group.no_members": "A tool group has no members",
    "group.no_tools": "A tool group lists no tool although it has members",
    "limits.keys_full": "An execution limit counts as many groups as it may: calls of a new group are refused",
    "devices.registry_unreadable": "The device registry cannot be read: adopted boards are refused",
    "auth.token_file_unusable": "A token file changed but cannot be used: the gateway keeps its previous tokens",
    "state.unlocked": "The gateway's state directory is not locked",
}
"""What a withheld problem's summary says instead of one that names a port, a broker, a group or a file."""
WITHHELD_EVIDENCE = (
    "withheld: it names serial ports, MQTT brokers, slots, files or configuration values, which only an operator "
    "of _broker or a caller that may call every slot is shown"
)
WITHHELD_FIX = "Ask an operator of _broker to call broker_diagnose; docs/operations.md describes {id}."
AUDIT_PATH = "<[audit] path>"
AUDIT_DIRECTORY = "<the [audit] path's directory>"


def withheld(problems: list[Problem], view: GatewayView, ports: frozenset[str] = frozenset()) -> list[Problem]:
    """`problems` as a caller that may not call every slot and is no operator is shown them: a slot's as
    they are, a gateway-wide one that names nothing (PUBLIC_PROBLEMS) as it is, one of a serial port in
    `ports` (carrying only slots it may call, as broker_info shows it) as it is, any other once per id
    with its worst severity, a summary that names nothing and no evidence, so that the health of
    the gateway stays visible without its ports, addresses, slots or configuration. The audit trail's
    error is kept (a full disk concerns every governed caller), its file and directory left out."""
    shown: list[Problem] = []
    seen: set[str] = set()
    for problem in problems:  # worst first: the first of an id carries its worst severity
        if problem.slot is not None or problem.id in PUBLIC_PROBLEMS or _of_ports(problem, ports):
            shown.append(problem)
        elif problem.id not in seen:  # one per id: their number would count ports or brokers
            seen.add(problem.id)
            shown.append(_withheld(problem, view))
    return shown


def _of_ports(problem: Problem, ports: frozenset[str]) -> bool:
    """Whether `problem` is about one of the serial ports in `ports`."""
    return problem.port is not None and problem.port in ports


def _withheld(problem: Problem, view: GatewayView) -> Problem:
    if problem.id == "audit.unavailable":
        audit = (view.governance or {}).get("audit")
        path = str(audit.get("path") or "") if isinstance(audit, dict) else ""
        folder = os.path.dirname(path)

        def scrub(text: str) -> str:
            text = text.replace(path, AUDIT_PATH) if path else text
            return text.replace(folder, AUDIT_DIRECTORY) if folder else text

        return dataclasses.replace(problem, evidence=scrub(problem.evidence), fix=scrub(problem.fix))
    summary = problem.summary if problem.id in PLAIN_SUMMARIES else SUMMARIES.get(problem.id)
    return Problem(
        problem.id,
        problem.severity,
        summary or f"A gateway-wide problem ({problem.id})",
        WITHHELD_EVIDENCE,
        WITHHELD_FIX.format(id=problem.id),
    )


def broker_info(gateway: BrokerView, principal: Principal | None, operator: bool = False) -> JsonObject:
    """broker_info as `principal` is shown it (None, an `operator`, a caller that may call every slot: all
    of it): tool groups' members, serial ports and the slots MQTT brokers carry only as far as they are
    slots it may call; a port that carries or carried a slot it may not call is left out, its path naming
    a board it may not see."""
    info = status.broker_info(gateway)
    may_call = None if principal is None or operator else slot_filter(gateway, principal)
    if may_call is None or all(may_call(slot) for slot in gateway.registry.slots):
        return info
    groups = dict(info["groups"])
    groups["configured"] = [
        {**group, "members": [name for name in group.get("members") or [] if may_call(name)]}
        for group in groups.get("configured") or []
    ]
    serial = dict(info["serial"])
    serial["ports"] = [port for port in serial.get("ports") or [] if _port_shown(port, may_call)]
    info["groups"], info["serial"] = groups, serial
    info["mqtt"] = [_mqtt_shown(broker, may_call) for broker in info["mqtt"]]
    info["security"] = _security_shown(info["security"])
    return info


OAUTH_KEYS_SHOWN = ("loaded", "keys", "last_fetch_failed")
"""What a filtered caller is shown of the OAuth key set: its health, not where it comes from or the error
of the last fetch (a host name or address of the plant's network)."""


def _security_shown(security: JsonObject) -> JsonObject:
    auth = security.get("auth")
    keys = auth.get("oauth_keys") if isinstance(auth, dict) else None
    if not isinstance(auth, dict) or not isinstance(keys, dict):
        return security
    shown = {name: keys.get(name) for name in OAUTH_KEYS_SHOWN}
    return {**security, "auth": {**auth, "oauth_keys": shown}}


def _port_shown(port: JsonObject, may_call: Callable[[str], bool]) -> bool:
    slots = [*(port.get("slots") or []), *(port.get("slots_seen") or {})]
    return all(may_call(slot) for slot in slots)


def _mqtt_shown(broker: JsonObject, may_call: Callable[[str], bool]) -> JsonObject:
    """One MQTT broker's status with only the slots `may_call` lets through; its dropped messages'
    examples (topics that name slots) left out."""
    shown = dict(broker)
    seen = shown.get("slots_seen")
    if isinstance(seen, dict):
        shown["slots_seen"] = {slot: entry for slot, entry in seen.items() if may_call(slot)}
    if isinstance(shown.get("dropped_examples"), dict):
        shown["dropped_examples"] = {}
    for part, key in (("plain", "boards"), ("mcp", "bridged")):
        section = shown.get(part)
        if isinstance(section, dict) and isinstance(section.get(key), list):
            shown[part] = {**section, key: [slot for slot in section[key] if may_call(slot)]}
    return shown


def guide_config(config: JsonObject) -> JsonObject:
    """The configuration the guide pages are written from for a caller that is not an operator: the
    limits and provider settings they quote, without tokens, scopes, policy rules or slot names."""
    providers = {key: value for key, value in (config.get("providers") or {}).items() if key != "auth"}
    slots = {"only_declared": (config.get("slots") or {}).get("only_declared", False)}
    serial = {"hotplug": (config.get("serial") or {}).get("hotplug") or {}}
    return {"limits": config.get("limits") or {}, "providers": providers, "serial": serial, "slots": slots}
