"""What `broker_diagnose` judges and what it finds: the snapshot of the gateway (GatewayView,
SlotView), the named Problem, and the wording every rule shares.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from gateway.core.timestamps import ago

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

NEAR_CAP = 0.8
"""A bounded resource counts as nearly exhausted at this share of its limit."""


@dataclass(frozen=True)
class SlotView:
    """One slot as diagnosis sees it."""

    name: str
    declared: bool = False
    connected: bool = False
    state: str = "empty"  # empty | initializing | ready
    transport: str | None = None
    id_style: str = "brk"
    pending: int = 0
    max_pending: int = 256
    connects: int = 0
    connected_for_s: float | None = None
    last_disconnect_ago_s: float | None = None
    last_disconnect_reason: str = ""
    last_error: str = ""
    request_timeout_ms: int = 60_000
    counters: Mapping[str, int] = field(default_factory=dict)
    """Totals over every link this slot has had since the gateway started."""
    upstream: Mapping[str, Any] | None = None
    """provider_status "upstream": what a configured upstream's manager knows (None for boards)."""
    way_in: str = "websocket"
    """How its provider comes in: websocket, serial (a board on a port) or mqtt (a broker), now or last."""
    provider_url: str = ""
    """Where: the provider URL, the serial port's path, or the MQTT link's broker and topic (provider_url)."""
    schema_announced: str | None = None
    """The schema hash the provider's hello announces, when it is not `tools_hash` (gateway/core/provider_hello.py)."""
    tools_hash: str = ""
    """The hash of the tools the connected provider lists."""


@dataclass(frozen=True)
class GroupCheck:
    """One enabled tool group ([groups.<name>]) as diagnosis sees it."""

    name: str
    slot_patterns: Sequence[str]
    prefixes: Sequence[str]
    members: Sequence[str]
    """Ready slots matching its patterns now."""
    tools: int


@dataclass(frozen=True)
class GatewayView:
    """The gateway as diagnosis sees it."""

    url: str
    host: str
    is_loopback: bool
    insecure_lan: bool
    """--insecure-lan with client authentication off (provider authentication off is its own finding)."""
    public_url: str | None = None
    allowed_origins: Sequence[str] = ()
    provider_auth: str = "none"
    """[providers.auth] mode: none, shared or identities."""
    static_tokens: int = 0
    """Static client tokens configured ([auth] tokens and token files)."""
    oauth_keys: Mapping[str, Any] | None = None
    """The authorization server's key set as the OAuth verifier holds it (None: no [auth.oauth])."""
    tls: bool = False
    """Whether the listener serves TLS."""
    heartbeat_interval_s: float = 30.0
    initialize_timeout_ms: int = 10_000
    sessions: int = 0
    max_sessions: int = 1024
    subscriptions: int = 0
    max_subscriptions: int = 256
    max_slots: int = 1024
    aggregate_members: Sequence[str] = ()
    slots: Sequence[SlotView] = ()
    groups: Sequence[GroupCheck] = ()
    """Enabled tool groups."""
    mdns: Mapping[str, Any] = field(default_factory=lambda: {"enabled": False, "state": "off"})
    """The mDNS advertisement's status (gateway.discovery.mdns: state, reason, addresses)."""
    mqtt: Sequence[Mapping[str, Any]] = ()
    """Each MQTT broker connection's status (gateway.southbound.mqtt.brokers: state, last_error, dropped counters)."""
    serial: Mapping[str, Any] = field(default_factory=lambda: {"ports": [], "hotplug": {"enabled": False}})
    governance: Mapping[str, Any] | None = None
    """[policy] and the audit trail (Governance.status); None: no policy is configured."""
    """The serial ports' status (gateway.southbound.serial.ports: state, failures, frames, dropped by reason, slots)."""


@dataclass(frozen=True)
class Problem:
    id: str
    severity: Severity
    summary: str
    evidence: str
    fix: str
    slot: str | None = None
    port: str | None = None
    """The serial port's path a problem is about: a caller shown that port (broker_info) is shown it whole."""

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": self.id, "severity": self.severity}
        if self.slot is not None:
            entry["slot"] = self.slot
        entry.update(summary=self.summary, evidence=self.evidence, fix=self.fix)
        return entry


MAX_STANDING = 32
"""Standing problems kept at most: one per place that reports (the state directory's lock, the audit
file's, the device registry); a report past it is dropped, the ones kept stay."""


class StandingProblems:
    """Problems found outside the snapshot diagnosis judges, by the parts that look after the gateway's
    files (the state lock, the device registry): each kept under its key from when it is found until
    the part finds it mended and withdraws it. `broker_diagnose` lists them with the gateway-wide ones.
    One process runs one gateway (`run` locks its state directory), so the process keeps one board,
    STANDING; reports may come from any thread."""

    def __init__(self, max_problems: int = MAX_STANDING) -> None:
        self.max_problems = max_problems
        self._problems: dict[str, Problem] = {}
        self._lock = threading.Lock()

    def report(self, key: str, problem: Problem) -> None:
        """Keep `problem` under `key` (replacing what was kept there) until withdrawn."""
        with self._lock:
            if key in self._problems or len(self._problems) < self.max_problems:
                self._problems[key] = problem

    def withdraw(self, key: str) -> None:
        with self._lock:
            self._problems.pop(key, None)

    def current(self) -> list[Problem]:
        with self._lock:
            return list(self._problems.values())


STANDING = StandingProblems()


def last_link(slot: SlotView) -> str:
    if slot.last_disconnect_reason:
        return f"the last provider left {ago(slot.last_disconnect_ago_s)}: {slot.last_disconnect_reason}"
    return "no provider has connected since the gateway started"


def ws_base(view: GatewayView) -> str:
    return view.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)


def provider_url(view: GatewayView, slot: str) -> str:
    name = slot if slot == "<slot>" else quote(slot, safe="")
    return f"{ws_base(view)}/provider/{name}"


def bring_back(view: GatewayView, slot: SlotView) -> str:
    """The fix's first sentence for a slot without its provider, by the way its provider comes in."""
    if slot.way_in == "serial":
        return (
            f"Check the board on serial port {slot.provider_url}: its power and cable, and the port's state and "
            "last_error in broker_info serial.ports. An open port asks an unregistered board to register "
            f'(broker/register); the board must answer with its register frame naming "{slot.name}".'
        )
    if slot.way_in == "upstream":
        return (
            f"The gateway runs this slot's provider itself ({slot.provider_url}): see provider_status upstream "
            "for its state, restarts and last error, and fix its entry under [upstreams]."
        )
    if slot.way_in == "mqtt":
        return (
            f"Check the device and its MQTT connection ({slot.provider_url}); broker_info mqtt shows the broker's "
            "state."
        )
    url = slot.provider_url or provider_url(view, slot.name)
    if slot.declared:
        return f"Power the device and check its network, then connect it to {url}."
    return f"Reconnect the provider to {url}."


# -- gateway-wide problems --------------------------------------------------------------------


def near(used: int, limit: int) -> bool:
    return limit > 0 and used >= limit * NEAR_CAP
