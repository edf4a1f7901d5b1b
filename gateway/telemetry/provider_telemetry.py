"""Providers' `broker/telemetry` notifications (docs/telemetry.md, "Provider telemetry"): validated,
bounded per slot, queued for OTLP export with the slot as a resource attribute, never sent to clients.

The wire is mcp-broker's versioned envelope `{"version": 1, "signal": ..., ...}`: signal "traces" with
one `span` (mcp-broker's own shape, what pump-1 sends), "logs" with a list of `events`, "metrics" with
a list of `metrics` points. A notification is never answered: one that breaks a rule is dropped
whole, counted, and logged once per slot and kind of fault. A slot's token bucket charges every item
(an event, a point, a span and each of its events), so a flood from one board is dropped and counted
for that slot alone.
Validation runs on the event loop and is bounded by the configured limits; turning items into SDK
objects and sending them happens on the export thread (gateway/telemetry/otlp_providers.py).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.config import ProviderTelemetryConfig
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.telemetry")

METHOD = "broker/telemetry"
SIGNALS = {"traces": "span", "logs": "events", "metrics": "metrics"}
"""Each signal and the key that carries its items."""
HEX_TRACE_ID = re.compile(r"[0-9a-f]{32}")
HEX_SPAN_ID = re.compile(r"[0-9a-f]{16}")
MAX_NANOS = 2**63 - 1
SEVERITIES = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "warning": 13, "error": 17, "fatal": 21}
"""OpenTelemetry severity numbers of the severity texts an event may name."""
METRIC_KINDS = ("gauge", "sum")
Scalar = str | int | float | bool


class Refused(ValueError):
    """One notification breaks a rule; its message says which (never quoting values)."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Scalar]


@dataclass(frozen=True, slots=True)
class ProviderSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Scalar]
    events: tuple[SpanEvent, ...]
    status_code: int
    status_message: str | None


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    name: str
    time_ns: int | None
    severity: int
    severity_text: str
    body: str | None
    attributes: dict[str, Scalar]
    trace_id: str | None
    span_id: str | None


@dataclass(frozen=True, slots=True)
class MetricPoint:
    name: str
    kind: str
    value: int | float
    unit: str | None
    time_ns: int | None
    attributes: dict[str, Scalar]


Item = ProviderSpan | ProviderEvent | MetricPoint

ITEM_BYTES = 256
"""Estimated bytes of one span, event or point before its texts and attributes (the objects holding it)."""
ATTRIBUTE_BYTES = 64
"""Estimated bytes of one attribute before its key's and string value's characters."""


def item_cost(item: Item) -> int:
    """What one item counts for in a slot's bucket and in the export queue: a span 1 plus its events."""
    return 1 + len(item.events) if isinstance(item, ProviderSpan) else 1


def _attributes_size(found: Mapping[str, Scalar]) -> int:
    return sum(
        ATTRIBUTE_BYTES + len(key) + (len(value) if isinstance(value, str) else 0) for key, value in found.items()
    )


def estimated_size(item: Item) -> int:
    """A cheap estimate of the bytes one item holds while it waits for export (providers.max_queue_bytes):
    ITEM_BYTES per span, event or point, its name and texts, ATTRIBUTE_BYTES plus the characters of each
    attribute. Bounded by the limits it was parsed with, and about the size of its JSON."""
    size = ITEM_BYTES + len(item.name) + _attributes_size(item.attributes)
    if isinstance(item, ProviderSpan):
        size += len(item.status_message or "")
        size += sum(ITEM_BYTES + len(event.name) + _attributes_size(event.attributes) for event in item.events)
    elif isinstance(item, ProviderEvent):
        size += len(item.body or "")
    else:
        size += len(item.unit or "")
    return size


@dataclass(frozen=True, slots=True)
class Batch:
    """The items of one notification, with where they came from."""

    slot: str
    identity: str | None
    received_ns: int
    items: tuple[Item, ...]

    @property
    def cost(self) -> int:
        """Its items as the queue counts them (item_cost)."""
        return sum(item_cost(item) for item in self.items)

    @property
    def size(self) -> int:
        """Its estimated bytes (estimated_size)."""
        return sum(estimated_size(item) for item in self.items)


class ExportSink(Protocol):
    """Where accepted batches go: the export thread's bounded queue."""

    def put(self, batch: Batch) -> bool:
        """Queue one batch; False when the queue is full, in items or in bytes (the batch is dropped)."""
        ...

    def shutdown(self) -> bool | None:
        """Send what waits and stop (blocking: called off the event loop); False when the export did not
        end within export_timeout_ms (a sink with nothing to wait for may answer None)."""
        ...


class Bucket:
    """Items one slot may still send now: `burst` at most, refilled at `rate` per second."""

    __slots__ = ("level", "stamp")

    def __init__(self, burst: float, now: float) -> None:
        self.level = burst
        self.stamp = now

    def take(self, cost: int, rate: float, burst: float, now: float) -> bool:
        self.level = min(burst, self.level + (now - self.stamp) * rate)
        self.stamp = now
        if self.level < cost:
            return False
        self.level -= cost
        return True


class ProviderTelemetry:
    """The gateway's intake of `broker/telemetry`: one per gateway, for every slot."""

    def __init__(self, settings: ProviderTelemetryConfig, metrics: Metrics, max_slots: int) -> None:
        self.settings = settings
        self.metrics = metrics
        self.max_slots = max_slots
        """Buckets and warned slots kept at most (limits.max_slots)."""
        self.sink: ExportSink | None = None
        """None while export is off: every notification is counted ("off") and dropped."""
        self.buckets: dict[str, Bucket] = {}
        self._warned: set[tuple[str, str]] = set()

    def configure(self, settings: ProviderTelemetryConfig, sink: ExportSink | None) -> None:
        """New bounds and a new export queue (a reload); buckets start full again."""
        self.settings = settings
        self.sink = sink if settings.enabled else None
        self.buckets.clear()

    def forget(self, slot: str) -> None:
        """The slot is gone from the registry: its bucket and warnings go too."""
        self.buckets.pop(slot, None)
        self._warned = {key for key in self._warned if key[0] != slot}

    # -- intake -------------------------------------------------------------------------------

    def accept(self, slot: str, identity: str | None, params: object, board: bool = True) -> None:
        """One `broker/telemetry` notification of `slot`'s provider (`board`: it connected to the gateway,
        as boards do, rather than being an upstream the gateway runs or dials)."""
        if not board:
            self._count(slot, "not_a_board")
            return
        sink = self.sink
        if sink is None:
            self._count(slot, "off")
            return
        settings = self.settings
        try:
            signal, raw = envelope(params, settings.max_items)
        except Refused as exc:
            self._refused(slot, exc)
            return
        if not self._admit(slot, raw_cost(signal, raw)):
            self._count(slot, "rate_limited")
            self._warn(slot, "rate", "%s sends telemetry faster than [telemetry.providers] allows; excess dropped")
            return
        try:
            items = parse_items(signal, raw, settings)
        except Refused as exc:
            self._refused(slot, exc)
            return
        if not sink.put(Batch(slot, identity, time.time_ns(), items)):
            self._count(slot, "queue_full")
            self.metrics.telemetry_dropped.labels("provider_queue").inc(sum(item_cost(item) for item in items))
            return
        self._count(slot, "accepted")

    def _admit(self, slot: str, cost: int) -> bool:
        now = time.monotonic()
        settings = self.settings
        bucket = self.buckets.get(slot)
        if bucket is None:
            if len(self.buckets) >= self.max_slots:
                self._make_room(now)
            bucket = self.buckets[slot] = Bucket(settings.burst, now)
        return bucket.take(cost, settings.rate_per_s, settings.burst, now)

    def _make_room(self, now: float) -> None:
        """Forget the buckets that have refilled (their slots are quiet); all of them when none has."""
        settings = self.settings
        full = [
            slot
            for slot, bucket in self.buckets.items()
            if bucket.level + (now - bucket.stamp) * settings.rate_per_s >= settings.burst
        ]
        for slot in full or list(self.buckets):
            del self.buckets[slot]

    def _count(self, slot: str, outcome: str) -> None:
        self.metrics.provider_telemetry.labels(slot, outcome).inc()

    def _refused(self, slot: str, exc: Refused) -> None:
        self._count(slot, "invalid")
        self._warn(slot, "invalid", "%s sent a broker/telemetry notification that was dropped: %s", str(exc))

    def _warn(self, slot: str, kind: str, text: str, *args: Any) -> None:
        """Once per slot and kind of fault; the counters carry the rest."""
        key = (slot, kind)
        if key in self._warned:
            return
        if len(self._warned) >= self.max_slots * 2:
            self._warned.clear()
        self._warned.add(key)
        log.warning(text, f"provider for slot {slot}", *args, extra={"slot": slot})


# -- validation -------------------------------------------------------------------------------


def raw_cost(signal: str, raw: list[Any]) -> int:
    """What a notification costs its slot's bucket before it is parsed (item_cost): a span 1 plus its
    events (envelope checked their number), an event or a point 1."""
    if signal == "traces":
        events = raw[0].get("events")
        return 1 + (len(events) if isinstance(events, list) else 0)
    return len(raw)


def envelope(params: object, max_items: int) -> tuple[str, list[Any]]:
    """(signal, its raw items) of a notification's params: a span's events at most max_items too, so
    that its cost (raw_cost) is bounded before the bucket is asked."""
    if not isinstance(params, Mapping):
        raise Refused("params must be an object")
    version = params.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise Refused("version must be 1")
    signal = params.get("signal")
    key = SIGNALS.get(signal) if isinstance(signal, str) else None
    if key is None or not isinstance(signal, str):
        raise Refused(f"signal must be one of {', '.join(SIGNALS)}")
    raw = params.get(key)
    if signal == "traces":
        if not isinstance(raw, Mapping):
            raise Refused('signal "traces" needs "span", an object')
        events = raw.get("events")
        if isinstance(events, list) and len(events) > max_items:
            raise Refused(f"span.events must be a list of at most max_items ({max_items})")
        return signal, [raw]
    if not isinstance(raw, list) or not raw:
        raise Refused(f'signal "{signal}" needs "{key}", a non-empty list')
    if len(raw) > max_items:
        raise Refused(f'"{key}" holds {len(raw)} items, more than max_items ({max_items})')
    return signal, raw


def parse_items(signal: str, raw: list[Any], settings: ProviderTelemetryConfig) -> tuple[Item, ...]:
    if signal == "traces":
        return (parse_span(raw[0], settings),)
    if signal == "logs":
        return tuple(parse_event(value, index, settings) for index, value in enumerate(raw))
    return tuple(parse_point(value, index, settings) for index, value in enumerate(raw))


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Refused(f"{where} must be an object")
    return value


def _text(value: object, where: str, limit: int, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise Refused(f"{where} must be a {'non-empty ' if required else ''}string")
    if len(value) > limit:
        raise Refused(f"{where} is longer than max_string_length ({limit})")
    return value


def _hex_id(value: object, pattern: re.Pattern[str], where: str, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or pattern.fullmatch(value) is None or not value.strip("0"):
        size = 32 if pattern is HEX_TRACE_ID else 16
        raise Refused(f"{where} must be {size} lowercase hex characters, not all zero")
    return value


def _nanos(value: object, where: str, *, required: bool = True) -> int | None:
    """Unix nanoseconds: a decimal string (mcp-broker's form) or a whole number."""
    if value is None and not required:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise Refused(f"{where} must be Unix nanoseconds, a decimal string")
    if not 0 <= number <= MAX_NANOS:
        raise Refused(f"{where} is out of range")
    return number


def _number(value: object, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refused(f"{where} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise Refused(f"{where} must be finite")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise Refused(f"{where} is out of range")
    return value


def attributes(value: object, where: str, settings: ProviderTelemetryConfig) -> dict[str, Scalar]:
    """Scalar attributes (strings, finite numbers, booleans), bounded in count and length."""
    if value is None:
        return {}
    found = _object(value, where)
    if len(found) > settings.max_attributes:
        raise Refused(f"{where} holds {len(found)} attributes, more than max_attributes ({settings.max_attributes})")
    limit = settings.max_string_length
    checked: dict[str, Scalar] = {}
    for key, item in found.items():
        if not isinstance(key, str) or not key or len(key) > limit:
            raise Refused(f"{where}: a key is empty or longer than max_string_length ({limit})")
        if isinstance(item, str):
            if len(item) > limit:
                raise Refused(f"{where}.{key[:64]} is longer than max_string_length ({limit})")
            checked[key] = item
        elif isinstance(item, bool):
            checked[key] = item
        else:
            checked[key] = _number(item, f"{where}.{key[:64]}")
    return checked


def parse_span(value: object, settings: ProviderTelemetryConfig) -> ProviderSpan:
    """mcp-broker's span: ids in lowercase hex, times as decimal nanoseconds, kind 0-5, status 0-2."""
    span = _object(value, "span")
    limit = settings.max_string_length
    kind = span.get("kind", 0)
    if type(kind) is not int or not 0 <= kind <= 5:
        raise Refused("span.kind must be 0 to 5")
    start = _nanos(span.get("startTimeUnixNano"), "span.startTimeUnixNano")
    end = _nanos(span.get("endTimeUnixNano"), "span.endTimeUnixNano")
    assert start is not None and end is not None
    if end < start:
        raise Refused("span.endTimeUnixNano is before its start")
    raw_events = span.get("events", [])
    if not isinstance(raw_events, list) or len(raw_events) > settings.max_items:
        raise Refused(f"span.events must be a list of at most max_items ({settings.max_items})")
    events = []
    for index, raw in enumerate(raw_events):
        where = f"span.events[{index}]"
        event = _object(raw, where)
        name = _text(event.get("name"), f"{where}.name", limit)
        at = _nanos(event.get("timeUnixNano"), f"{where}.timeUnixNano")
        assert name is not None and at is not None
        events.append(SpanEvent(name, at, attributes(event.get("attributes"), f"{where}.attributes", settings)))
    status = span.get("status") or {}
    status = _object(status, "span.status")
    code = status.get("code", 0)
    if type(code) is not int or code not in (0, 1, 2):
        raise Refused("span.status.code must be 0, 1 or 2")
    name = _text(span.get("name"), "span.name", limit)
    trace_id = _hex_id(span.get("traceId"), HEX_TRACE_ID, "span.traceId")
    span_id = _hex_id(span.get("spanId"), HEX_SPAN_ID, "span.spanId")
    assert name is not None and trace_id is not None and span_id is not None
    return ProviderSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(span.get("parentSpanId"), HEX_SPAN_ID, "span.parentSpanId", required=False),
        name=name,
        kind=kind,
        start_ns=start,
        end_ns=end,
        attributes=attributes(span.get("attributes"), "span.attributes", settings),
        events=tuple(events),
        status_code=code,
        status_message=_text(status.get("message"), "span.status.message", limit, required=False),
    )


def parse_event(value: object, index: int, settings: ProviderTelemetryConfig) -> ProviderEvent:
    """An event (a log record): name, optional time, severity, body, attributes and trace context."""
    where = f"events[{index}]"
    event = _object(value, where)
    limit = settings.max_string_length
    severity_text = event.get("severity", "info")
    severity = SEVERITIES.get(severity_text) if isinstance(severity_text, str) else None
    if severity is None:
        raise Refused(f"{where}.severity must be one of {', '.join(SEVERITIES)}")
    name = _text(event.get("name"), f"{where}.name", limit)
    assert name is not None
    trace_id = _hex_id(event.get("traceId"), HEX_TRACE_ID, f"{where}.traceId", required=False)
    span_id = _hex_id(event.get("spanId"), HEX_SPAN_ID, f"{where}.spanId", required=False)
    if (trace_id is None) != (span_id is None):
        raise Refused(f"{where} needs traceId and spanId together")
    return ProviderEvent(
        name=name,
        time_ns=_nanos(event.get("timeUnixNano"), f"{where}.timeUnixNano", required=False),
        severity=severity,
        severity_text=severity_text.upper(),
        body=_text(event.get("body"), f"{where}.body", limit, required=False),
        attributes=attributes(event.get("attributes"), f"{where}.attributes", settings),
        trace_id=trace_id,
        span_id=span_id,
    )


def parse_point(value: object, index: int, settings: ProviderTelemetryConfig) -> MetricPoint:
    """A metric point: a gauge (the value now) or a sum (a monotonic total the board keeps)."""
    where = f"metrics[{index}]"
    point = _object(value, where)
    limit = settings.max_string_length
    kind = point.get("kind", "gauge")
    if kind not in METRIC_KINDS:
        raise Refused(f"{where}.kind must be gauge or sum")
    name = _text(point.get("name"), f"{where}.name", limit)
    assert name is not None
    number = _number(point.get("value"), f"{where}.value")
    if kind == "sum" and number < 0:
        raise Refused(f"{where}.value of a sum must not be negative")
    return MetricPoint(
        name=name,
        kind=kind,
        value=number,
        unit=_text(point.get("unit"), f"{where}.unit", limit, required=False),
        time_ns=_nanos(point.get("timeUnixNano"), f"{where}.timeUnixNano", required=False),
        attributes=attributes(point.get("attributes"), f"{where}.attributes", settings),
    )
