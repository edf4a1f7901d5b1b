"""Slots: which provider holds which name, who may take it over, and who listens to it."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.config import GatewayConfig
from gateway.core import errors, jsonrpc
from gateway.core.clock import wall_time_of
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import CLOSE_GOING_AWAY, CLOSE_POLICY, LinkInfo, ProviderLink
from gateway.core.names import SlotNameError, check_slot_name
from gateway.core.principal import Principal
from gateway.core.provider_broker import ProviderBroker
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import SessionCounters, SessionSettings
from gateway.core.relay import RelayMetrics
from gateway.core.shared_tools import SharedToolLists
from gateway.core.slot_flaps import SlotFlapLog, host_of
from gateway.core.timestamps import ago
from gateway.core.upstream_state import UpstreamState, level_rank
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.slots")


class Listener(Hashable, Protocol):
    """A client stream that wants a slot's notifications."""

    @property
    def principal(self) -> Principal:
        """The caller the stream belongs to: under a policy it receives only what it may know of."""
        ...

    def deliver(self, message: JsonObject) -> None: ...

    def slot_reclaimed(self) -> None:
        """Its slot, a name only clients asked for, was reclaimed for a provider: the stream ends (a
        session-era session with it, so its next request gets 404 unknown or expired session)."""
        ...


Receives = Callable[[Principal, str, str], bool]
"""Whether a caller receives a slot's notification: (principal, slot, notification method) -> bool."""


class UpstreamManager(Protocol):
    """Who runs a slot's provider when it is a configured upstream (a stdio child, a remote server).

    A managed slot is refused to every other provider; its manager attaches its own links with
    `attach(..., manager=self)` and its state is shown in provider_status as "upstream"."""

    kind: str
    """Shown in the refusal: 'Provider "<slot>" is managed by a <kind>', e.g. "stdio upstream"."""

    def status_extra(self) -> JsonObject:
        """What the manager knows (process, restarts, stderr tail, ...), present whether or not a link is up."""
        ...

    def absence(self) -> str:
        """Why the slot has no provider yet, for its callers: who starts or reaches it, and the last failure."""
        ...


class SlotRefused(Exception):
    """A provider may not have this slot; `reason` fits a close frame, `code` an error envelope."""

    def __init__(self, reason: str, code: int = jsonrpc.UNAVAILABLE, kind: str = "refused") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.kind = kind


@dataclass
class Slot:
    name: str
    declared: bool = False
    session: ProviderSession | None = None
    listeners: set[Listener] = field(default_factory=set)
    last_tools_hash: str = ""
    warned_faults: set[str] = field(default_factory=set)
    """The kinds of provider fault warned of for this slot (ProviderSession.warn_once), across its links."""
    connects: int = 0
    disconnected_at: float | None = None
    """Monotonic time its last provider left (None: none has); `last_disconnect` on the wall clock."""
    last_disconnect_reason: str = ""
    last_error: str = ""
    last_link: LinkInfo | None = None  # how the last provider that left came in (provider_url after it)
    last_hello: JsonObject | None = None  # what it said it was (device id, firmware): provider_status after it
    # Counters of this slot's links that have ended; with the live link's they give totals since start
    # (a link dropped for a missed heartbeat or a failed initialize takes its evidence with it otherwise).
    history: SessionCounters = field(default_factory=SessionCounters)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    upstream: UpstreamState = field(default_factory=UpstreamState)
    vacant_since: float = field(default_factory=time.monotonic)
    """Monotonic time the slot last lost its provider (or, never held, was first asked for)."""
    manager: UpstreamManager | None = None
    """Who runs its provider when it is a configured upstream (see Registry.manage)."""

    @property
    def last_disconnect(self) -> float | None:
        """When its last provider left, on the wall clock as it reads now (right once the clock is set)."""
        return wall_time_of(self.disconnected_at) if self.disconnected_at is not None else None

    @property
    def live(self) -> ProviderSession | None:
        session = self.session
        return session if session is not None and session.state != "closed" else None

    def provider_history(self, managed: bool) -> str:
        """What the gateway knows of this slot's providers, for a caller that finds none.

        `managed`: the gateway runs the slot's provider itself (a stdio or remote upstream)."""
        if self.connects == 0:
            if managed and self.manager is not None:
                return self.manager.absence()
            if managed:
                return "its provider, which the gateway runs itself, has not connected yet (provider_status on _broker)"
            if self.declared:
                return "the slot is declared, but no provider has connected to it yet"
            return "no provider has connected to this slot"
        gone = self.disconnected_at
        left = ago(time.monotonic() - gone) if gone is not None else ago(None)
        reason = f" ({self.last_disconnect_reason})" if self.last_disconnect_reason else ""
        return f"its provider left {left}{reason}"

    def counter_totals(self) -> dict[str, int]:
        """Every counter summed over all links this slot has had since the gateway started."""
        totals = vars(self.history).copy()
        session = self.session
        if session is not None:
            for key, value in vars(session.counters).items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def broadcast(self, message: JsonObject, may_receive: Receives | None = None) -> None:
        """Send a provider notification to the listeners that asked for it and, under a policy
        (`may_receive`), may know what it concerns on this slot."""
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        listeners = list(self.listeners)
        if may_receive is not None and listeners:
            # Asked per message, not at attach: a policy reload applies to the very next notification.
            name, kind = self.name, str(method)
            listeners = [listener for listener in listeners if may_receive(listener.principal, name, kind)]
        if method == "notifications/resources/updated":
            uri = params.get("uri")
            for listener in listeners:
                if isinstance(uri, str) and self.upstream.subscribed(uri, listener):
                    listener.deliver(message)
            return
        if method == "notifications/message":
            rank = level_rank(params.get("level"))
            for listener in listeners:
                wanted = self.upstream.log_levels.get(listener)
                if wanted is None or rank >= level_rank(wanted):
                    listener.deliver(message)
            return
        for listener in listeners:
            listener.deliver(message)


TOOLS_CHANGED = jsonrpc.notification("notifications/tools/list_changed")
ROOM_SLACK_SHARE = 64
"""Room made in a full table: the vacant slots needed, and this share of limits.max_slots more."""
PEER_CAPPED_TRANSPORTS = ("websocket", "websocket-mux")
"""Links anyone who reaches /providers can open; the other transports are configured by the operator
(serial ports, upstreams) or bounded by their broker's ACL (MQTT: docs/security-auth.md, "MQTT: what the
broker's ACL guarantees, and what it does not")."""


def claimant(info: LinkInfo) -> str | None:
    """Who limits.max_slots_per_peer counts a provider link against: its authenticated identity, else
    its IP address (not the port: every connection has its own). None for operator-configured links."""
    if info.transport not in PEER_CAPPED_TRANSPORTS:
        return None
    if info.identity:
        return f"identity {info.identity}"
    host, _, port = info.remote.rpartition(":")
    return f"peer {host if host and port.isdigit() else info.remote}"


class SlotRegistry:
    """Owns every slot and every provider session; implements the session observer."""

    def __init__(self, config: GatewayConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.slots: dict[str, Slot] = {}
        self.membership_listeners: list[Callable[[str | None], None]] = []
        self.may_receive: Receives | None = None
        """Under [policy], which listeners receive each of a slot's notifications (Governance.may_receive);
        None: every listener does. Set by the gateway."""
        self.relay_metrics = RelayMetrics(metrics)
        self.shared_tools = SharedToolLists()
        """Tool lists held once for every session that lists the same (boards of one model)."""
        self.held_by: Counter[str] = Counter()
        """Slots each claimant (see `claimant`) holds now; limits.max_slots_per_peer bounds it."""
        self.on_hello: Callable[[object, str, str | None], None] | None = None
        """Told each ready session's hello, slot and transport (the device registry's sightings,
        gateway/devices/sightings.py); set by the composition root. Must not block."""
        self._claims: dict[ProviderSession, str] = {}
        self.handshake_turns = asyncio.Semaphore(config.providers.max_concurrent_handshakes)
        """Handshakes running at once, across every provider (ProviderSession.handshake_turns)."""
        self.broker = ProviderBroker(None, config.providers.declarations.max_pending_requests)
        """Answers providers' broker/* requests; the gateway gives it the policy layer's answers."""
        self.managers: dict[str, UpstreamManager] = {}
        """Slots whose provider is a configured upstream, and who runs it (see `manage`)."""
        self.started_monotonic = time.monotonic()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._closing = False
        self.flaps = SlotFlapLog(
            lambda: self.config.logging.repeat_interval_s,
            lambda name: name in self.slots and self.slots[name].session is not None,
        )
        """Which attach and leave lines are written: a slot that flaps is summarized once per interval."""
        for name in config.slots.declared:
            self.slots[name] = Slot(name, declared=True)

    # -- lookup -------------------------------------------------------------------------------

    def check_name(self, name: str) -> None:
        """Raise SlotNameError / SlotRefused for a name nobody may use here."""
        check_slot_name(name)
        if self.config.slots.only_declared and name not in self.config.slots.declared:
            raise SlotRefused(
                # The fix first and the name last: a close reason is cut at 123 bytes, and a 64-byte
                # name must cut itself, not the fix.
                f"Slot not declared on this gateway; add it under [slots.declared] or fix the name. Slot: {name}",
                jsonrpc.FORBIDDEN,
                "undeclared",
            )

    def slot(self, name: str, *, for_provider: bool = False) -> Slot:
        """The slot called `name`, created on first reference (bounded by limits.max_slots).
        `for_provider`: a provider (or an upstream) needs it, and may reclaim a client-only name."""
        existing = self.slots.get(name)
        if existing is not None:
            return existing
        self.check_name(name)
        if len(self.slots) >= self.config.limits.max_slots:
            self._make_room()
            if for_provider and len(self.slots) >= self.config.limits.max_slots:
                self._reclaim_client_names(name)
            if len(self.slots) >= self.config.limits.max_slots:
                self.metrics.limit_hit("max_slots")
                raise SlotRefused(
                    f"Too many slots (limit {self.config.limits.max_slots}); raise limits.max_slots. Slot: {name}",
                    jsonrpc.UNAVAILABLE,
                    "slot_limit",
                )
        created = Slot(name)
        self.slots[name] = created
        return created

    def connected_names(self) -> list[str]:
        """The slots whose provider is ready now, by name."""
        return sorted(name for name, slot in self.slots.items() if slot.session is not None and slot.session.ready)

    def manage(self, name: str, manager: UpstreamManager) -> Slot:
        """Reserve `name` for a configured upstream before the gateway listens (so no board claims it)."""
        slot = self.slot(name, for_provider=True)
        self.managers[name] = manager
        slot.manager = manager
        return slot

    def unmanage(self, name: str, manager: UpstreamManager) -> None:
        """Free `name` of `manager` (an upstream removed by a reload): any provider may claim it again.
        A manager that has since been replaced (an upstream restarted under the same name) changes nothing."""
        if self.managers.get(name) is not manager:
            return
        del self.managers[name]
        slot = self.slots.get(name)
        if slot is not None:
            slot.manager = None
        if slot is not None and slot.session is None:
            slot.vacant_since = time.monotonic()

    def _vacant(self) -> list[Slot]:
        """Slots nobody needs kept: no provider, no listener, neither declared nor configured."""
        return [
            slot
            for name, slot in self.slots.items()
            if slot.session is None
            and not slot.listeners
            and not slot.declared
            and name not in self.managers
            and not slot.lock.locked()  # a provider is being attached to it right now
        ]

    def vacant_names(self) -> list[str]:
        """The slots admission may forget to make room for a new one (see `_vacant`), by name."""
        return [slot.name for slot in self._vacant()]

    def forget(self, name: str) -> None:
        """Forget `name` if it is vacant (a slot a reload made, then undid); else nothing."""
        slot = self.slots.get(name)
        if slot is not None and slot in self._vacant():
            self._forget(slot)

    def _make_room(self) -> None:
        """Forget vacant slots, oldest first, until one more fits: a slot a provider held once counts
        no more than a name a client only asked for, so no past claim keeps a board out for good."""
        vacant = self._vacant()
        cap = self.config.limits.max_slots
        excess = len(self.slots) - cap + 1
        if excess <= 0 or not vacant:
            return
        # A few more than needed go (1/ROOM_SLACK_SHARE of the table): the scan of every slot is then paid
        # once per that many new names, not by each (made-up names one after another would each pay it).
        for slot in heapq.nsmallest(excess + cap // ROOM_SLACK_SHARE, vacant, key=lambda slot: slot.vacant_since):
            self._forget(slot)

    def _reclaim_client_names(self, wanted: str) -> None:
        """Room for a provider's slot `wanted` when no vacant slot could go: forget the oldest slot
        that only clients ever asked for (no provider held it, neither declared nor configured), and
        end its listeners. Their open streams would otherwise keep made-up names, and a board, out."""
        names = [
            slot
            for name, slot in self.slots.items()
            if slot.connects == 0
            and slot.session is None
            and not slot.declared
            and name not in self.managers
            and not slot.lock.locked()
        ]
        if not names:
            return
        oldest = min(names, key=lambda slot: slot.vacant_since)
        listeners = list(oldest.listeners)
        oldest.listeners.clear()
        self._forget(oldest)
        self.metrics.limit_hit("max_slots")
        log.info(
            "slot %s reclaimed for provider slot %s (limits.max_slots %d): no provider ever held it; "
            "%d client stream(s) on it ended",
            oldest.name,
            wanted,
            self.config.limits.max_slots,
            len(listeners),
            extra={"slot": oldest.name},
        )
        for listener in listeners:
            listener.slot_reclaimed()

    def forget_vacant(self, now: float | None = None) -> int:
        """Forget slots vacant for longer than limits.vacant_slot_ttl_s; how many went."""
        ttl = self.config.limits.vacant_slot_ttl_s
        if ttl <= 0:
            return 0
        cutoff = (time.monotonic() if now is None else now) - ttl
        stale = [slot for slot in self._vacant() if slot.vacant_since <= cutoff]
        for slot in stale:
            self._forget(slot)
        return len(stale)

    def _forget(self, slot: Slot) -> None:
        """The slot and its gauges go: set at attach and leave, they would outlive a slot made and
        forgotten between two scrapes of /metrics."""
        del self.slots[slot.name]
        self.metrics.forget_slot(slot.name)

    def live_sessions(self) -> list[ProviderSession]:
        return [slot.session for slot in self.slots.values() if slot.live is not None]  # type: ignore[misc]

    def settings_for(self, name: str, link: ProviderLink) -> SessionSettings:
        providers = self.config.providers
        per_slot = self.config.slot_settings(name)
        id_style = (per_slot.id_style if per_slot and per_slot.id_style else None) or providers.id_style
        # An upstream may give its handshake its own deadline (a child process can start slowly);
        # a manager that has none (no `startup_timeout_ms` attribute) gets the providers' one.
        startup_ms = getattr(self.managers.get(name), "startup_timeout_ms", None)
        startup_setting = getattr(self.managers.get(name), "startup_timeout_setting", None)
        if not isinstance(startup_ms, int) or not isinstance(startup_setting, str):
            startup_setting = "providers.initialize_timeout_ms"  # what a handshake past the deadline is told
        # Likewise its own call deadline (a remote upstream's request_timeout_ms); [slots.declared] wins.
        upstream_ms = getattr(self.managers.get(name), "request_timeout_ms", None)
        # The protocol era: [slots.declared] wins, then the upstream's own setting, then [providers].
        upstream_era = getattr(self.managers.get(name), "era_setting", None)
        era = (per_slot.era if per_slot and per_slot.era else None) or upstream_era or providers.era
        poll_s = getattr(self.managers.get(name), "tools_poll_s", None)
        return SessionSettings(
            request_timeout_ms=(per_slot.request_timeout_ms if per_slot else None)
            or (upstream_ms if isinstance(upstream_ms, int) else None)
            or providers.request_timeout_ms,
            tool_timeouts_ms=dict(per_slot.tool_timeouts_ms) if per_slot else {},
            initialize_timeout_ms=startup_ms if isinstance(startup_ms, int) else providers.initialize_timeout_ms,
            initialize_timeout_setting=startup_setting,
            max_pending=self.config.limits.max_pending_per_slot,
            numeric_ids=id_style == "numeric" or link.info.numeric_ids,
            max_tools_pages=providers.max_tools_pages,
            register_wait_ms=providers.register_wait_ms if link.info.register_frame_follows else 0,
            era=era,
            tools_poll_s=float(poll_s) if isinstance(poll_s, int | float) else 0.0,
            max_input_rounds=self.config.limits.max_input_rounds,
            max_json_depth=self.config.limits.max_json_depth,
        )

    def takeover_policy(self, name: str) -> str:
        per_slot = self.config.slot_settings(name)
        return (per_slot.takeover if per_slot and per_slot.takeover else None) or self.config.providers.takeover

    # -- providers ----------------------------------------------------------------------------

    async def attach(
        self,
        name: str,
        link: ProviderLink,
        *,
        aggregate: bool = False,
        hello: JsonObject | None = None,
        manager: UpstreamManager | None = None,
    ) -> ProviderSession:
        """Give `name` to a newly connected provider, or raise SlotRefused."""
        if self._closing:
            raise SlotRefused("Gateway is shutting down; reconnect later", jsonrpc.UNAVAILABLE, "shutdown")
        try:
            slot = self.slot(name, for_provider=True)
        except SlotNameError as exc:
            self.metrics.provider_refusals.labels("bad_name").inc()
            raise SlotRefused(f"{exc}", jsonrpc.UNAVAILABLE, "bad_name") from exc
        except SlotRefused as exc:
            self.metrics.provider_refusals.labels(exc.kind).inc()
            raise
        owner = self.managers.get(name)
        if owner is not None and owner is not manager:
            # mcp-broker's wording: the slot belongs to a configured upstream, not to whoever dials in.
            self.metrics.provider_refusals.labels("managed").inc()
            raise SlotRefused(f'Provider "{name}" is managed by a {owner.kind}', jsonrpc.UNAVAILABLE, "managed")
        who = claimant(link.info)
        async with slot.lock:
            incumbent = slot.live
            if who is not None:
                self._check_claims(who, name, incumbent)
            if incumbent is not None:
                await self._resolve_takeover(slot, incumbent, link)
            session = ProviderSession(name, link, self.settings_for(name, link), self, aggregate=aggregate, hello=hello)
            session.requests.metrics = self.relay_metrics
            session.requests.broker = self.broker
            session.shared_tools = self.shared_tools
            session.handshake_turns = self.handshake_turns
            session.tool_listing.configure(
                self.config.limits.max_tools_per_slot,
                self.metrics,
                max_bytes=self.config.limits.max_tool_list_bytes_per_slot,
            )
            upstream = slot.upstream
            session.listen_uris = lambda: sorted(upstream.subscribers)
            session.log_level_of = lambda listener: upstream.log_levels.get(listener) if listener is not None else None
            session.warned_faults = slot.warned_faults
            slot.session = session
            slot.connects += 1
            if who is not None:
                self._claims[session] = who
                self.held_by[who] += 1
        self.metrics.provider_connects.labels(name, link.info.transport).inc()
        self.metrics.slot_connected.labels(name).set(1)
        came_from = f"{link.info.remote} over {link.info.transport}"
        if self.flaps.attached(name, slot.disconnected_at, came_from, host_of(link.info.remote)):
            log.info(
                "provider attached to slot %s over %s from %s",
                name,
                link.info.transport,
                link.info.remote,
                extra={"slot": name},
            )
        session.start()
        return session

    def _check_claims(self, who: str, name: str, incumbent: ProviderSession | None) -> None:
        cap = self.config.limits.max_slots_per_peer
        if not cap or self.held_by[who] < cap:
            return
        if incumbent is not None and self._claims.get(incumbent) == who:
            return  # the same peer taking its own slot back holds no more than before
        self.metrics.limit_hit("max_slots_per_peer")
        self.metrics.provider_refusals.labels("peer_limit").inc()
        raise SlotRefused(
            f"Too many slots for one provider (limit {cap}); raise limits.max_slots_per_peer. Slot: {name}",
            jsonrpc.UNAVAILABLE,
            "peer_limit",
        )

    async def _resolve_takeover(self, slot: Slot, incumbent: ProviderSession, link: ProviderLink) -> None:
        policy = self.takeover_policy(slot.name)
        same_identity = link.info.identity is not None and link.info.identity == incumbent.link.info.identity
        probe_ms = self.config.providers.takeover_probe_ms
        # A holder that already missed a heartbeat fails the probe without being pinged (ProviderSession.probe).
        missed_heartbeat = incumbent.missed_heartbeats > 0
        if policy == "always" and same_identity:
            reason = "Replaced by a newer connection of the same provider identity"
        elif policy == "reject" or await incumbent.probe(probe_ms):
            self.metrics.provider_refusals.labels("held").inc()
            raise SlotRefused(
                f'Slot already held by a live provider; call provider_status on _broker. Slot: "{slot.name}"',
                jsonrpc.UNAVAILABLE,
                "held",
            )
        elif missed_heartbeat:
            reason = "Replaced: this link missed its heartbeat and a new provider claimed the slot"
        else:
            reason = (
                f"Replaced: no answer to the takeover probe within {probe_ms} ms (providers.takeover_probe_ms); "
                "a new provider took the slot"
            )
        log.info("slot %s taken over (%s)", slot.name, policy, extra={"slot": slot.name})
        await incumbent.close(CLOSE_POLICY, reason)

    # -- SessionObserver ----------------------------------------------------------------------

    def _owner(self, session: ProviderSession) -> Slot | None:
        slot = self.slots.get(session.slot)
        return slot if slot is not None and slot.session is session else None

    def session_ready(self, session: ProviderSession) -> None:
        slot = self._owner(session)
        if slot is None:
            return
        # A session-era provider is asked again to keep what clients asked of the previous one; a
        # 2026-07-28 provider gets the log level with each request and the subscriptions in its listen.
        replay = slot.upstream.replay() if not session.modern else []
        if replay:
            asyncio.get_running_loop().create_task(self._replay(session, replay))
        # Every (re)connect is announced, even with an unchanged tool list: a client that asked
        # while the slot was empty got "not connected" and must learn that the tools are back.
        slot.last_tools_hash = session.tools_hash
        slot.broadcast(TOOLS_CHANGED, self.may_receive)
        self._membership_changed()
        if self.on_hello is not None:
            self.on_hello(session.hello, session.slot, session.link.info.transport)

    async def _replay(self, session: ProviderSession, requests: list[tuple[str, JsonObject]]) -> None:
        for method, params in requests:
            try:
                await session.request(method, params, internal=True)
            except errors.RpcError as exc:
                session.warn_once("replay", "replaying %s to slot %s failed: %s", method, session.slot, exc.message)
                return

    def session_tools_changed(self, session: ProviderSession, *, noticed: bool = False) -> None:
        """The provider's tool list changed, or (`noticed`) the provider said it did: the slot's
        listeners hear it once, and so do the listeners of `_all` and of each tool group that
        includes the slot, whether or not their own catalog came out different."""
        slot = self._owner(session)
        if slot is None:
            return
        slot.last_tools_hash = session.tools_hash
        slot.broadcast(TOOLS_CHANGED, self.may_receive)
        # Every provider, not only _all's members: tool groups (/mcp) include any ready slot. A
        # catalog that does not contain this slot rebuilds to the same hash and announces nothing.
        self._membership_changed(session.slot if noticed else None)

    def session_notification(self, session: ProviderSession, message: JsonObject) -> None:
        slot = self._owner(session)
        if slot is not None:
            slot.broadcast(message, self.may_receive)

    def session_registered(self, session: ProviderSession) -> None:
        if self._owner(session) is not None and session.ready:
            self._membership_changed()

    def session_closed(self, session: ProviderSession, reason: str) -> None:
        who = self._claims.pop(session, None)
        if who is not None:
            self.held_by[who] -= 1
            if self.held_by[who] <= 0:
                del self.held_by[who]
        slot = self._owner(session)
        if slot is None:
            return
        slot.session = None
        slot.vacant_since = slot.disconnected_at = time.monotonic()
        slot.last_disconnect_reason = reason
        slot.last_error = session.last_error
        slot.last_link = session.link.info
        slot.last_hello = session.hello
        for key, value in vars(session.counters).items():
            setattr(slot.history, key, getattr(slot.history, key) + value)
        self.metrics.slot_connected.labels(session.slot).set(0)
        self.metrics.provider_disconnects.labels(session.slot).inc()
        if self.flaps.left(session.slot, reason):
            log.info("provider left slot %s: %s", session.slot, reason, extra={"slot": session.slot})
        # The session is already "closed" here, so `ready` cannot tell whether it was a member;
        # listeners rebuild from the live members and only announce a real change.
        self._membership_changed()

    def left_with_broker(self, name: str, info: LinkInfo, reason: str | None = None) -> bool:
        """The provider that the link described by `info` carried left slot `name` with its broker's
        connection (an MQTT broker that stopped or was lost), or, given `reason`, just before it (its
        will came as the broker closed): `reason` becomes the slot's leave reason, which not-connected
        answers and provider_status show, and the leave does not count toward the slot's flap warning
        (gateway/core/slot_flaps.py). False, and nothing changes, when the slot has had another provider since."""
        slot = self.slots.get(name)
        if slot is None or slot.session is not None or slot.last_link is not info:
            return False
        if reason is not None:
            slot.last_disconnect_reason = reason
        if self.flaps.excuse(name) or reason is not None:
            log.info(
                "provider left slot %s with its broker: %s", name, slot.last_disconnect_reason, extra={"slot": name}
            )
        return True

    def _membership_changed(self, noticed_slot: str | None = None) -> None:
        """Catalogs built from the ready slots rebuild; each announces a change of its own, and a
        change the provider of `noticed_slot` announced when that slot is part of it."""
        for listener in list(self.membership_listeners):
            listener(noticed_slot)

    # -- liveness and shutdown ----------------------------------------------------------------

    def start(self) -> None:
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        interval = self.config.providers.heartbeat_interval_s
        while True:
            await asyncio.sleep(interval)
            self.heartbeat_sweep()

    def heartbeat_sweep(self) -> None:
        self.forget_vacant()
        for session in self.live_sessions():
            if not session.heartbeat():
                self.metrics.heartbeat_misses.labels(session.slot).inc()
                session.warn_once("heartbeat", "provider for slot %s missed its heartbeat; dropping it", session.slot)
                interval = self.config.providers.heartbeat_interval_s
                asyncio.get_running_loop().create_task(
                    session.close(CLOSE_POLICY, f"No answer to heartbeat ping within {interval:g}s; reconnect")
                )

    async def shutdown(self) -> None:
        """Refuse newcomers, answer every pending request with a named error, close every link."""
        self._closing = True
        self.flaps.close()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
        sessions = self.live_sessions()
        for session in sessions:
            session.link_lost("gateway shutting down", errors.shutting_down(session.slot))
        for session in sessions:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.link.close(CLOSE_GOING_AWAY, "Gateway shutting down"), 2.0)
