"""Who may do what through `_broker`: the one place its operator rule and its slot filter live.

An operator of `_broker` may run its action tools (broker_reload, broker_providers_recheck,
broker_serial_release/resume) on a gateway without [policy], and reads the effective configuration in
`broker_guide index`. Without [policy]: when [auth] is configured, `[auth] required_scopes` gives
`_broker` scopes and the caller holds them (no `_broker` entry: no authenticated caller is an operator);
with no [auth], every caller; the action tools are served besides only by a gateway bound to loopback.
Under [policy]: a caller the policy grants one of `_broker`'s action tools (tool.control on
/_system/broker).

The per-slot answers (providers_list, provider_status, broker_diagnose, the guide's slots) show only the
slots the caller may call, by the rule `_all` lists them with: the slot's scopes (AggregateTarget.may_call),
then under [policy] mcp.tools.list on the slot.
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
NOT_HELD = (
    "{tool}: this caller is not an operator of _broker: it needs the scope(s) {needed} "
    '([auth] required_scopes "_broker"); see docs/security-auth.md'
)
PORT_SLOTS = (
    "{tool}: this caller may not call every slot on serial port {port}: it lacks the scopes of {count} of them "
    "([auth] required_scopes); release and resume need the scopes of each slot the port carries"
)


def operator_refusal(gateway: BrokerView, principal: Principal, tool: str, off_loopback: str) -> str | None:
    """None when `principal` is an operator of `_broker` on a gateway without [policy]; else why not
    (`off_loopback` when the gateway listens beyond loopback)."""
    if not gateway.config.is_loopback:
        return off_loopback
    return _caller_refusal(gateway, principal, tool)


def _caller_refusal(gateway: BrokerView, principal: Principal, tool: str) -> str | None:
    """The caller's part of the rule: `_broker`'s required scopes configured and held."""
    scopes_of = gateway.aggregate.slot_scopes
    if scopes_of is None:  # no [auth]: every caller of a loopback gateway is on its own machine
        return None
    needed = scopes_of(BROKER_SLOT)
    if not needed:
        return NO_OPERATOR_SCOPES.format(tool=tool)
    if not principal.has_scopes(needed):
        return NOT_HELD.format(tool=tool, needed=" ".join(needed))
    return None


def port_refusal(gateway: BrokerView, principal: Principal, tool: str, port: str) -> str | None:
    """None when `principal` may call every slot serial `port` carries now or has carried (a resume brings
    those back); else why not, without naming the slots."""
    status = gateway.serial_status() if gateway.serial_status is not None else {}
    slots: set[str] = set()
    real = os.path.realpath(port)
    for entry in status.get("ports") or []:
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and (path == port or os.path.realpath(path) == real):
            slots.update(entry.get("slots") or [])
            slots.update(entry.get("slots_seen") or {})
    hidden = [slot for slot in slots if not gateway.aggregate.may_call(principal, slot)]
    if hidden:
        return PORT_SLOTS.format(tool=tool, port=port, count=len(hidden))
    return None


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
) -> list[Problem]:
    """The problems `principal` is shown (None: every one): of the slots it may call and of the gateway;
    a slot it may not call is diagnosed as a name never seen."""
    view = status.diagnosis_view(gateway)
    may_call = None if principal is None else slot_filter(gateway, principal)
    if may_call is None:
        return diagnose(view, slot)
    view = dataclasses.replace(
        view,
        slots=[entry for entry in view.slots if may_call(entry.name)],
        aggregate_members=[name for name in view.aggregate_members if may_call(name)],
    )
    # The asked name stays: a hidden one is answered as unknown (the view no longer has it).
    shown = [problem for problem in diagnose(view, slot) if problem.slot in (None, slot) or may_call(problem.slot)]
    return shown


def guide_config(config: JsonObject) -> JsonObject:
    """The configuration the guide pages are written from for a caller that is not an operator: the
    limits and provider settings they quote, without tokens, scopes, policy rules or slot names."""
    providers = {key: value for key, value in (config.get("providers") or {}).items() if key != "auth"}
    slots = {"only_declared": (config.get("slots") or {}).get("only_declared", False)}
    serial = {"hotplug": (config.get("serial") or {}).get("hotplug") or {}}
    return {"limits": config.get("limits") or {}, "providers": providers, "serial": serial, "slots": slots}
