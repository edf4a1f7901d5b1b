"""The core as one object: slots, client sessions and the three kinds of target, with no transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.config import ConfigError, GatewayConfig, TelemetryConfigError
from gateway.core.aggregate import AggregateTarget
from gateway.core.broker.scrape import ScrapeSync
from gateway.core.broker.server import BrokerTarget
from gateway.core.clock import wall_time_of
from gateway.core.groups.catalog import GroupCatalog
from gateway.core.input_required import InputRequired
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import ALL_SLOT, BROKER_SLOT
from gateway.core.policy_interface import Policies
from gateway.core.provider_recheck import ProviderRecheck
from gateway.core.reloading import Reloading
from gateway.core.routing import SlotTarget, Target
from gateway.core.serial_handover import SerialHandover
from gateway.core.sessions import SessionStore
from gateway.core.slots import SlotRegistry
from gateway.core.streams import MessageQueue
from gateway.telemetry.exporting import Telemetry
from gateway.telemetry.metrics import Metrics

SHUTDOWN_GRACE_S = 1.0
"""At shutdown, how long client requests just answered by the core get to finish writing their answer."""


class Gateway:
    def __init__(self, config: GatewayConfig, policies: Policies, metrics: Metrics | None = None) -> None:
        """`policies`: the policy layer's answers (gateway/policy/limiters.py builds them from `config`)."""
        self.config = config
        self.metrics = metrics or Metrics()
        self.registry = SlotRegistry(config, self.metrics)
        try:
            self.telemetry = Telemetry(config.telemetry, self.metrics, config.limits.max_slots)
            """Trace context and OTLP export ([telemetry]); its `reload(TelemetryConfig)` swaps exporters."""
        except TelemetryConfigError as exc:
            raise ConfigError(str(exc)) from exc
        # Providers' broker/telemetry goes to the intake whether or not a policy is configured.
        self.registry.broker.telemetry = self.telemetry.intake
        limits = config.limits
        self.sessions = SessionStore(
            limits.max_sessions,
            limits.session_idle_timeout_s,
            self.metrics,
            limits.max_sessions_per_principal,
            limits.max_relayed_requests_per_client,
            limits.session_idle_when_full_s,
        )
        # Stateless-era calls whose provider asked the client something (gateway/core/input_required.py).
        self.input_required = InputRequired(
            limits.max_input_required_states,
            limits.max_input_required_states_per_caller,
            limits.max_relayed_requests_per_client,
            limits.input_required_gather_ms,
            self.metrics,
        )
        # The HTTP entry charges principals (and slots it can name), the aggregate and the groups
        # charge the slot a tools/call is routed to.
        self.rate_limiter = policies.rate_limits
        # Counted by the listener as each connection arrives (gateway/listener.py); read by broker_info.
        self.connections = policies.connections
        self.governance = policies.governance
        """[policy]: decides each request by what it asks; None without a policy."""
        if self.governance is not None:  # a slot's notifications reach only callers entitled to them
            self.registry.may_receive = self.governance.may_receive
        self.registry.broker.governance = policies.provider_governance
        self.aggregate = AggregateTarget(self.registry, self.metrics, self.rate_limiter, self.governance)
        # /mcp and /mcp/<group>: served by their own routes (gateway/northbound/groups_http.py), not by target().
        self.groups = GroupCatalog(self.registry, self.metrics, self.rate_limiter, self.base_url, self.governance)
        self.broker = BrokerTarget(self)
        self.started_monotonic = time.monotonic()
        """When the gateway started, on the monotonic clock: uptime is measured from it."""
        self.listening = False
        self.bound_port: int | None = None
        """The port actually bound (config.port may be 0, meaning any free port); set by the server."""
        self.open_subscriptions = 0
        self.client_streams: set[MessageQueue] = set()
        self.auth_posture: Callable[[], JsonObject] | None = None
        """Client authentication in force (static tokens, OAuth issuer, HMAC keys), for broker_info;
        set by the composition root when [auth] configures any (None: no client authentication)."""
        self.discovery: Callable[[], JsonObject] | None = None
        """The mDNS advertisement's state, for broker_info and diagnosis; set by the composition root
        when [mdns] is enabled (None: not advertising)."""
        self.mqtt_status: Callable[[], list[JsonObject]] | None = None
        """Each MQTT broker connection's state and dropped-message counters, for broker_info and diagnosis;
        set by the composition root when [[mqtt.brokers]] configures any (None: no MQTT)."""
        self.serial_status: Callable[[], JsonObject] | None = None
        """Each serial port's state and frame counters, and hot-plug, for broker_info and diagnosis; set by the
        composition root when [serial] configures ports or hot-plug (None: no serial lines)."""
        self.reloading: Reloading | None = None
        """The configuration reload (SIGHUP, broker_reload), for `_broker`; set by the composition root."""
        self.serial_handover: SerialHandover | None = None
        """Letting go of a serial port for a flash and taking it back (broker_serial_release/resume); set
        by the composition root when [serial] configures ports or hot-plug."""
        self.provider_recheck: ProviderRecheck | None = None
        """Ending the provider links whose credential no longer stands (broker_providers_recheck); set by
        the composition root."""
        self.device_revoked: Callable[[str], bool] | None = None
        """Whether a board's device id was revoked in the device registry (`mcp-gateway devices revoke`):
        an MQTT plain-profile board announcing with it is not attached. Set by the composition root."""
        self._slot_targets: dict[str, SlotTarget] = {}
        self.metrics.before_render.append(ScrapeSync(self))

    @property
    def started_at(self) -> float:
        """When the gateway started, on the wall clock as it reads now: right once NTP has set a clock
        that read 1970 or the last shutdown at start (broker_info started_at and uptime_s)."""
        return wall_time_of(self.started_monotonic)

    def base_url(self) -> str:
        """The URL clients and providers use: public_url if configured, else the bound address."""
        port = self.bound_port if self.bound_port is not None else self.config.port
        return self.config.model_copy(update={"port": port}).base_url()

    def target(self, name: str) -> Target:
        """What answers at /<name>/mcp; raises SlotNameError or SlotRefused for names nobody may use."""
        if name == ALL_SLOT:
            return self.aggregate
        if name == BROKER_SLOT:
            return self.broker
        target = self._slot_targets.get(name)
        slot = self.registry.slot(name)
        if target is None or target.slot is not slot:
            if len(self._slot_targets) >= self.config.limits.max_slots:
                # Forget targets of slots the registry pruned, so this map stays bounded too.
                slots = self.registry.slots
                self._slot_targets = {k: t for k, t in self._slot_targets.items() if slots.get(k) is t.slot}
            target = SlotTarget(self.registry, slot, self.metrics, self.aggregate.may_call, self.governance)
            self._slot_targets[name] = target
        return target

    def start(self) -> None:
        self.telemetry.start()
        self.registry.start()
        self.sessions.start()

    async def shutdown(self) -> None:
        # Providers first: every request still waiting on one is answered with the named
        # "shutting down" error while its client's exchange is open. Ending client sessions first
        # would cancel those requests, and clients would get a bare "Request cancelled" instead.
        await self.registry.shutdown()
        if self.governance is not None:
            # Calls held for a person's confirmation (or any other governed wait) get the same answer.
            self.governance.held.end_all()
        self.input_required.close()
        # Those requests now end on their own within a loop turn or two; let them finish before
        # their sessions are ended, or the ending would cancel them before they wrote their answer.
        in_flight = [entry.task for session in self.sessions.sessions.values() for entry in session.in_flight.values()]
        if in_flight:
            await asyncio.wait(in_flight, timeout=SHUTDOWN_GRACE_S)
        for queue in list(self.client_streams):
            queue.close()
        await self.sessions.shutdown()
        await self.telemetry.shutdown()  # last: the spans of the requests answered above are sent too
