"""Views of the running gateway as plain JSON: broker_info, provider_status, and the diagnosis snapshot.

One place reads the live objects (registry, sessions, configuration); `_broker`'s tools, its
resources, the guide and diagnosis all render from what these functions return.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

from gateway import __version__
from gateway.config import lan_sides_text
from gateway.core.broker.problems import GatewayView, GroupCheck, SlotView
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import ALL_SLOT, BROKER_SLOT
from gateway.core.provider_hello import schema_mismatch
from gateway.core.slots import Slot
from gateway.core.timestamps import iso
from gateway.core.versions import HANDSHAKE_VERSIONS, STATELESS_VERSIONS
from gateway.event_loop import running_loop_name

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView

PROVIDER_PATH = "/provider/<slot>"
PROVIDERS_PATH = "/providers"
CLIENT_PATH = "/<slot>/mcp"
ALL_PATH = f"/{ALL_SLOT}/mcp"
BROKER_PATH = f"/{BROKER_SLOT}/mcp"
PATHS = {
    "provider": PROVIDER_PATH,
    "providers": PROVIDERS_PATH,
    "client": CLIENT_PATH,
    "all": ALL_PATH,
    "broker": BROKER_PATH,
    "mcp": "/mcp",
    "mcp_group": "/mcp/<group>",
    "groups": "/groups",
    "mcp_servers": "/mcp-servers",
    "sse": "/<slot>/sse",
    "messages": "/<slot>/messages?sessionId=<id>",
    "client_websocket": "/<slot>",
    "healthz": "/healthz",
    "readyz": "/readyz",
    "metrics": "/metrics",
}
INSECURE_LAN_WARNING = (
    "INSECURE-LAN: listening on the network without authentication; anyone who can reach this address can "
    "call every device"
)


def insecure_lan_warning(open_sides: Sequence[str]) -> str:
    """The INSECURE-LAN warning naming the open sides, e.g. "... without provider authentication; ..."."""
    if not open_sides:
        return INSECURE_LAN_WARNING
    off, can = lan_sides_text(open_sides)
    return f"INSECURE-LAN: listening on the network without {off}; anyone who can reach this address can {can}"


def ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)


def client_url(gateway: BrokerView, slot: str) -> str:
    return f"{gateway.base_url()}/{quote(slot, safe='')}/mcp"


def provider_url(gateway: BrokerView, slot: str) -> str:
    return f"{ws_url(gateway.base_url())}/provider/{quote(slot, safe='')}"


def insecure_lan(gateway: BrokerView) -> bool:
    return gateway.config.lan_without_auth


NO_CLIENT_AUTH: JsonObject = {"static_tokens": 0, "oauth": None, "hmac_keys": 0}


def client_auth(gateway: BrokerView) -> JsonObject:
    """Which client credentials the gateway accepts: counts and the OAuth issuer, never a secret."""
    return gateway.auth_posture() if gateway.auth_posture is not None else dict(NO_CLIENT_AUTH)


def authentication_modes(auth: JsonObject) -> str:
    """'none', or the accepted kinds joined by '+', e.g. 'static_tokens+oauth'."""
    modes = [mode for mode in ("static_tokens", "oauth", "hmac_keys") if auth.get(mode)]
    return "+".join(modes) or "none"


MDNS_OFF: JsonObject = {"enabled": False, "state": "off"}


def mdns_status(gateway: BrokerView) -> JsonObject:
    """What the gateway advertises on the local network ([mdns]): names, addresses, TXT keys; never a secret."""
    return gateway.discovery() if gateway.discovery is not None else dict(MDNS_OFF)


def mqtt_status(gateway: BrokerView) -> list[JsonObject]:
    """Each MQTT broker connection ([[mqtt.brokers]]): state, subscriptions, dropped messages; never a secret."""
    return gateway.mqtt_status() if gateway.mqtt_status is not None else []


SERIAL_OFF: JsonObject = {"ports": [], "hotplug": {"enabled": False}}


def serial_status(gateway: BrokerView) -> JsonObject:
    """Each serial port ([serial]): state, slots, frames in and out, dropped frames by reason; and hot-plug."""
    return gateway.serial_status() if gateway.serial_status is not None else dict(SERIAL_OFF)


SERIAL_TRANSPORTS = frozenset({"serial"})
MQTT_TRANSPORTS = frozenset({"mqtt", "mqtt-mcp"})


def provider_way_in(gateway: BrokerView, slot: Slot) -> tuple[str, str]:
    """How the slot's provider comes in, as (way, address) for provider_url and diagnosis's fix texts.

    ("upstream", its command or URL) for a configured stdio or remote upstream; ("serial", the port's
    path) or ("mqtt", broker and topic as the link names them) while such a link holds the slot, and
    after it left as long as no other link has held it since; ("websocket", the /providers URL) for a
    slot on a multiplexed socket; else ("websocket", the slot's provider URL)."""
    manager = gateway.registry.managers.get(slot.name)
    if manager is not None:  # a configured upstream: its command or URL, whether or not it runs now
        extra = manager.status_extra()
        command = extra.get("command")
        if isinstance(command, list):
            return "upstream", "stdio: " + " ".join(str(part) for part in command)
        return "upstream", f"{extra.get('kind', 'remote')}: {extra.get('url', '')}"
    session = slot.live
    info = session.link.info if session is not None else slot.last_link
    if info is not None and info.remote:
        if info.transport in SERIAL_TRANSPORTS:
            return "serial", info.remote
        if info.transport in MQTT_TRANSPORTS:
            return "mqtt", info.remote
    if info is not None and info.transport == "websocket-mux":  # the one socket for several slots
        return "websocket", f"{ws_url(gateway.base_url())}/providers"
    return "websocket", provider_url(gateway, slot.name)


def slot_state(slot: Slot) -> str:
    session = slot.live
    if session is None:
        return "empty"
    return "ready" if session.ready else "initializing"


def upstream_status(gateway: BrokerView, slot: Slot) -> JsonObject | None:
    """What a configured upstream's manager (or, failing one, the live link) knows beyond the core.

    The manager answers whether or not a link is up, so a child that keeps crashing still shows its
    restarts and stderr tail; a link may offer its own `status_extra()` (strings, numbers, lists)."""
    manager = gateway.registry.managers.get(slot.name)
    if manager is not None:
        return manager.status_extra()
    session = slot.live
    hook = getattr(session.link, "status_extra", None) if session is not None else None
    if callable(hook):
        extra = hook()
        return extra if isinstance(extra, dict) else None
    return None


def last_provider(slot: Slot) -> JsonObject | None:
    """Who held the slot last, once it left: how it came in and what it said it was (its hello), so a
    departed board is still named (device id, firmware) while its slot stays vacant."""
    info = slot.last_link
    if info is None:
        return None
    return {
        "transport": info.transport,
        "remote": info.remote or None,
        "identity": info.identity,
        "hello": slot.last_hello,
    }


def client_sessions_of(gateway: BrokerView, name: str) -> int:
    return sum(1 for session in gateway.sessions.sessions.values() if session.target.name == name)


def provider_status(gateway: BrokerView, slot: Slot) -> JsonObject:
    """Everything known about one slot and its provider; every key is present, null when unknown.
    Durations are on the monotonic clock; instants are shown on the wall clock as it reads now."""
    now = time.monotonic()
    session = slot.live
    settings = session.settings if session is not None else None
    per_slot = gateway.config.slot_settings(slot.name)
    providers = gateway.config.providers
    totals = slot.counter_totals()
    # The live link's own error; with no link, why the last one ended badly (e.g. initialize failed).
    last_error = session.last_error if session is not None else slot.last_error
    status: JsonObject = {
        "name": slot.name,
        "connected": session is not None,
        "state": slot_state(slot),
        "declared": slot.declared,
        "transport": session.link.info.transport if session else None,
        "remote": (session.link.info.remote or None) if session else None,
        "identity": session.link.info.identity if session else None,
        "connected_since": iso(session.connected_at) if session else None,
        "connected_for_s": round(now - session.connected_monotonic, 3) if session else None,
        "pending": session.in_flight if session else 0,
        "max_pending": gateway.config.limits.max_pending_per_slot,
        "aggregate": session.aggregate if session else False,
        "in_aggregate": session is not None and session.ready and session.aggregate,
        "hello": session.hello if session else None,
        "last_provider": last_provider(slot) if session is None else None,
        "server_info": session.server_info if session and session.ready else None,
        "protocol_version": (session.protocol_version or None) if session else None,
        "era": session.era if session and session.ready else None,
        "listen": session.listen.status() if session and session.modern else None,
        "tools": len(session.tools) if session and session.ready else 0,
        "tools_hash": (session.tools_hash or None) if session else None,
        "tools_left_out": session.tool_listing.status() if session else None,
        "heartbeat_misses": totals.get("heartbeat_misses", 0),
        "last_seen_s_ago": round(now - session.last_seen, 3) if session else None,
        "id_style": ("numeric" if session.numeric_ids else "brk")
        if session
        else ((per_slot.id_style if per_slot and per_slot.id_style else None) or providers.id_style),
        "request_timeout_ms": settings.request_timeout_ms
        if settings
        else ((per_slot.request_timeout_ms if per_slot else None) or providers.request_timeout_ms),
        "tool_timeouts_ms": dict(per_slot.tool_timeouts_ms) if per_slot else {},
        "takeover": gateway.registry.takeover_policy(slot.name),
        "counters": vars(session.counters).copy() if session else None,
        "counters_total": totals,
        "last_error": last_error or None,
        "connects": slot.connects,
        "last_disconnect": iso(slot.last_disconnect),
        "last_disconnect_reason": slot.last_disconnect_reason or None,
        "listeners": len(slot.listeners),
        "client_sessions": client_sessions_of(gateway, slot.name),
        "resource_subscriptions": len(slot.upstream.subscribers),
        "client_url": client_url(gateway, slot.name),
        "provider_url": provider_way_in(gateway, slot)[1],
        "upstream": upstream_status(gateway, slot),
    }
    return status


def providers_list(gateway: BrokerView) -> JsonObject:
    slots = gateway.registry.slots
    providers = [provider_status(gateway, slots[name]) for name in sorted(slots)]
    return {
        "count": len(providers),
        "connected": sum(1 for entry in providers if entry["connected"]),
        "providers": providers,
    }


def broker_info(gateway: BrokerView) -> JsonObject:
    config = gateway.config
    started = gateway.started_at  # the wall clock now, less the uptime measured on the monotonic clock
    slots = gateway.registry.slots.values()
    base = gateway.base_url()
    lan = insecure_lan(gateway)
    auth = client_auth(gateway)
    return {
        "name": "mcp-gateway",
        "version": __version__,
        "started_at": iso(started),
        "uptime_s": round(time.time() - started, 3),
        "host": config.host,
        "port": gateway.bound_port if gateway.bound_port is not None else config.port,
        "url": base,
        "public_url": config.public_url,
        "tls": base.startswith("https://"),
        "event_loop": running_loop_name(),
        "insecure_lan": lan,
        "insecure_lan_open": list(config.insecure_lan_open),
        "warnings": [insecure_lan_warning(config.insecure_lan_open)] if lan else [],
        "paths": dict(PATHS),
        "urls": {
            "provider": f"{ws_url(base)}{PROVIDER_PATH}",
            "providers": f"{ws_url(base)}{PROVIDERS_PATH}",
            "client": f"{base}{CLIENT_PATH}",
            "all": f"{base}{ALL_PATH}",
            "broker": f"{base}{BROKER_PATH}",
            "mcp": f"{base}/mcp",
            "groups": f"{base}/groups",
            "mcp_servers": f"{base}/mcp-servers",
            "sse": f"{base}/<slot>/sse",
            "client_websocket": f"{ws_url(base)}/<slot>",
            "healthz": f"{base}/healthz",
            "readyz": f"{base}/readyz",
            "metrics": f"{base}/metrics",
        },
        "security": {
            "loopback_only": config.is_loopback,
            "authentication": authentication_modes(auth),
            "auth": auth,
            "insecure_lan": lan,
            "insecure_lan_open": list(config.insecure_lan_open),
            "allowed_origins": list(config.allowed_origins),
            "allowed_hosts": list(config.allowed_hosts),
            "provider_auth": config.providers.auth.mode,
            "tls_listener": config.tls.enabled,
        },
        "counts": {
            "slots": len(gateway.registry.slots),
            "declared": sum(1 for slot in slots if slot.declared),
            "connected": sum(1 for slot in slots if slot.live is not None),
            "ready": sum(1 for slot in slots if slot.live is not None and slot.live.ready),
            "aggregate_members": len(gateway.aggregate.members()),
            "aggregate_tools": len(gateway.aggregate.tools),
            "sessions": len(gateway.sessions.sessions),
            "sessions_expired": gateway.sessions.expired,
            "subscriptions": gateway.open_subscriptions,
            "client_streams": len(gateway.client_streams),
        },
        "limits": config.limits.model_dump(),
        "connections": gateway.connections.status(),
        "governance": gateway.governance.status() if gateway.governance is not None else None,
        "providers": {
            "heartbeat_interval_s": config.providers.heartbeat_interval_s,
            "takeover": config.providers.takeover,
            "request_timeout_ms": config.providers.request_timeout_ms,
            "initialize_timeout_ms": config.providers.initialize_timeout_ms,
            "register_wait_ms": config.providers.register_wait_ms,
            "id_style": config.providers.id_style,
            "only_declared": config.slots.only_declared,
        },
        "protocol_versions": {"session": list(HANDSHAKE_VERSIONS), "stateless": list(STATELESS_VERSIONS)},
        "groups": gateway.groups.info(),
        "mdns": mdns_status(gateway),
        "mqtt": mqtt_status(gateway),
        "serial": serial_status(gateway),
        "reload": gateway.reloading.status() if gateway.reloading is not None else None,
    }


def diagnosis_view(gateway: BrokerView) -> GatewayView:
    """The snapshot `diagnose` works on, taken now."""
    config = gateway.config
    now = time.monotonic()
    slots: list[SlotView] = []
    for name in sorted(gateway.registry.slots):
        slot = gateway.registry.slots[name]
        session = slot.live
        status = provider_status(gateway, slot)
        slots.append(
            SlotView(
                name=name,
                declared=slot.declared,
                connected=session is not None,
                state=status["state"],
                transport=status["transport"],
                id_style=status["id_style"],
                pending=status["pending"],
                max_pending=session.settings.max_pending if session else config.limits.max_pending_per_slot,
                connects=slot.connects,
                connected_for_s=status["connected_for_s"],
                last_disconnect_ago_s=now - slot.disconnected_at if slot.disconnected_at is not None else None,
                last_disconnect_reason=slot.last_disconnect_reason,
                last_error=status["last_error"] or "",
                request_timeout_ms=status["request_timeout_ms"],
                counters=status["counters_total"],
                upstream=status["upstream"],
                way_in=provider_way_in(gateway, slot)[0],
                provider_url=status["provider_url"],
                schema_announced=schema_mismatch(session) if session else None,
                tools_hash=session.tools_hash if session else "",
            )
        )
    auth = client_auth(gateway)
    return GatewayView(
        url=gateway.base_url(),
        host=config.host,
        is_loopback=config.is_loopback,
        insecure_lan="clients" in config.insecure_lan_open,
        public_url=config.public_url,
        allowed_origins=tuple(config.allowed_origins),
        provider_auth=config.providers.auth.mode,
        static_tokens=int(auth.get("static_tokens") or 0),
        oauth_keys=auth.get("oauth_keys"),
        tls=config.tls.enabled,
        heartbeat_interval_s=config.providers.heartbeat_interval_s,
        initialize_timeout_ms=config.providers.initialize_timeout_ms,
        sessions=len(gateway.sessions.sessions),
        max_sessions=config.limits.max_sessions,
        subscriptions=gateway.open_subscriptions,
        max_subscriptions=config.limits.max_subscriptions,
        max_slots=config.limits.max_slots,
        aggregate_members=tuple(gateway.aggregate.members()),
        mdns=mdns_status(gateway),
        mqtt=tuple(mqtt_status(gateway)),
        serial=serial_status(gateway),
        governance=gateway.governance.status() if gateway.governance is not None else None,
        groups=tuple(
            GroupCheck(
                name=spec.name,
                slot_patterns=spec.slot_patterns,
                prefixes=spec.prefixes,
                members=tuple(slot for slot in gateway.groups.ready_slots() if spec.has_slot(slot)),
                tools=sum(1 for tool in gateway.groups.tools if spec.name in tool.enabled_groups),
            )
            for spec in gateway.groups.enabled
        ),
        slots=tuple(slots),
    )
