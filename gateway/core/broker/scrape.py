"""Before each /metrics scrape, copy into the metrics what is read from live state rather than counted.

Gauges (connected, pending, tools, sessions) are set from the registry so they can never drift, and
the per-slot fault counters of provider sessions become Prometheus counters by their increase since
the last scrape, so the hot path of a provider session needs no metrics code at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from gateway import __version__
from gateway.config import SERIAL_LIMIT_KEYS, LimitsConfig, MqttConfig, SerialConfig
from gateway.telemetry.metrics import PROVIDER_FAULT_KINDS

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView
    from gateway.core.slots import Slot


def limit_values(limits: LimitsConfig) -> dict[str, float]:
    """Every numeric bound under [limits] by its dotted key (rate.per_slot.burst ...), for mcpgw_limit."""
    values: dict[str, float] = {}

    def walk(prefix: str, section: BaseModel) -> None:
        for name in type(section).model_fields:
            value = getattr(section, name)
            if isinstance(value, BaseModel):
                walk(f"{prefix}{name}.", value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[prefix + name] = float(value)

    walk("", limits)
    return values


def serial_port_key(index: int) -> str:
    """The configuration key of the index-th [[serial.ports]] entry: the prefix of its bounds' labels."""
    return f"serial.ports[{index}]"


def serial_limit_values(serial: SerialConfig) -> dict[str, float]:
    """The serial way in's bounds, when it serves a port: [serial]-wide ones and each port's frame cap
    (serial.ports[<i>].frame_cap by the entry's index; serial.hotplug.frame_cap for every hot-plugged port)."""
    if not serial.ports and not serial.hotplug.enabled:
        return {}
    values = {f"serial.{key}": float(getattr(serial, key)) for key in SERIAL_LIMIT_KEYS}
    for index, port in enumerate(serial.ports):
        values[f"{serial_port_key(index)}.frame_cap"] = float(port.frame_cap)
    if serial.hotplug.enabled:
        values["serial.hotplug.frame_cap"] = float(serial.hotplug.frame_cap)
    return values


def mqtt_broker_key(index: int) -> str:
    """The configuration key of the index-th [[mqtt.brokers]] entry: the prefix of its bounds' labels."""
    return f"mqtt.brokers[{index}]"


def mqtt_limit_values(mqtt: MqttConfig) -> dict[str, float]:
    """Each broker's inbound bounds, e.g. mqtt.brokers[0].max_payload_bytes."""
    values: dict[str, float] = {}
    for index, broker in enumerate(mqtt.brokers):
        for name in ("max_payload_bytes", "max_backlog", "max_instances"):
            values[f"{mqtt_broker_key(index)}.{name}"] = float(getattr(broker, name))
    return values


class ScrapeSync:
    def __init__(self, gateway: BrokerView) -> None:
        self.gateway = gateway
        self._counted: dict[str, tuple[Slot, dict[str, int]]] = {}
        """What each slot's own counters stood at when last copied, with the slot they were read from:
        a slot forgotten and made again under its name (vacant_slot_ttl_s) counts from 0 again."""
        self._slots_shown: set[str] = set()
        metrics = gateway.metrics
        config = gateway.config
        metrics.info.labels(__version__, str(config.lan_without_auth).lower()).set(1)
        metrics.start_time.set(gateway.started_at)
        for name, value in limit_values(config.limits).items():
            metrics.limit.labels(name).set(value)
        if config.auth.hmac is not None:
            metrics.limit.labels("auth.hmac.nonce_cache").set(config.auth.hmac.nonce_cache)
            metrics.limit.labels("auth.hmac.max_skew_s").set(config.auth.hmac.max_skew_s)
        for name, value in serial_limit_values(config.serial).items():
            metrics.limit.labels(name).set(value)
        for name, value in mqtt_limit_values(config.mqtt).items():
            metrics.limit.labels(name).set(value)

    def __call__(self) -> None:
        gateway = self.gateway
        metrics = gateway.metrics
        slots = gateway.registry.slots
        for name in self._slots_shown - slots.keys():
            # The registry forgot its series with the slot: only a series a late event of its last link
            # set since then is left to forget, so no name is forgotten twice.
            if metrics.has_series(name):
                metrics.forget_slot(name)
            self._counted.pop(name, None)
        self._slots_shown = set(slots)
        members = set(gateway.aggregate.members())
        for name, slot in slots.items():
            session = slot.live
            metrics.slot_connected.labels(name).set(1 if session is not None else 0)
            metrics.slot_pending.labels(name).set(session.in_flight if session is not None else 0)
            metrics.slot_tools.labels(name).set(len(session.tools) if session is not None and session.ready else 0)
            metrics.slot_in_aggregate.labels(name).set(1 if name in members else 0)
            totals = slot.counter_totals()
            read = self._counted.get(name)
            if read is None or read[0] is not slot:
                read = self._counted[name] = (slot, {})
            counted = read[1]
            for kind in PROVIDER_FAULT_KINDS:
                self._advance(name, counted, kind, totals.get(kind, 0))
        metrics.slots.set(len(slots))
        metrics.aggregate_tools.set(len(gateway.aggregate.tools))
        sessions = gateway.sessions
        metrics.sessions.set(len(sessions.sessions))
        metrics.sessions_largest_principal.set(max(sessions.per_principal.values(), default=0))
        metrics.client_in_flight.set(sum(len(session.in_flight) for session in sessions.sessions.values()))
        for scope, table in gateway.rate_limiter.tables.items():
            metrics.rate_buckets.labels(scope).set(len(table))
        metrics.connections.set(gateway.connections.open_count)
        metrics.connections_largest_peer.set(gateway.connections.largest_peer())

    def _advance(self, slot: str, counted: dict[str, int], kind: str, total: int) -> None:
        """Add to the Prometheus counter what the slot's own counter gained since the last scrape."""
        gained = total - counted.get(kind, 0)
        if gained <= 0:
            return
        counted[kind] = total
        metrics = self.gateway.metrics
        metrics.provider_faults.labels(slot, kind).inc(gained)
        if kind == "unparsable":
            metrics.unparsable.labels("provider").inc(gained)
