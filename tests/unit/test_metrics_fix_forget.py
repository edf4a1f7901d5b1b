"""Forgetting a slot's series costs what that slot's series number, counted as work (collect() calls,
series removed, children looked at), never timed: with limits.max_slots names shown, a scan of every
family per forgotten name stalled the gateway. And no name is forgotten twice (registry, then scrape)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Gauge

from gateway.config import GatewayConfig
from gateway.core.gateway import Gateway
from gateway.core.slots import ROOM_SLACK_SHARE
from gateway.policy.limiters import Limiters
from gateway.telemetry.metrics import Metrics

SLOTS = 1024


def slot_families(metrics: Metrics) -> list[Counter | Gauge]:
    """The prometheus-client families labelled by slot (the hot ones are hot_metrics families)."""
    return [
        family
        for family in vars(metrics).values()
        if isinstance(family, Counter | Gauge) and "slot" in getattr(family, "_labelnames", ())
    ]


def fill(metrics: Metrics) -> None:
    """Every slot-labelled family gets series for SLOTS slots, and the hot families too."""
    for i in range(SLOTS):
        slot = f"slot-{i}"
        for gauge in (metrics.slot_connected, metrics.slot_pending, metrics.slot_tools, metrics.slot_in_aggregate):
            gauge.labels(slot).set(1)
        metrics.call_errors.labels(slot, "deadline").inc()
        metrics.call_errors.labels(slot=slot, kind="provider").inc()
        metrics.heartbeat_misses.labels(slot).inc()
        metrics.provider_connects.labels(slot, "websocket").inc()
        metrics.provider_disconnects.labels(slot).inc()
        metrics.provider_faults.labels(slot, "unparsable").inc()
        metrics.provider_telemetry.labels(slot, "accepted").inc()
        metrics.call_metrics(slot, "tools/call")[0].value += 1
        metrics.call_metrics(slot, "tools/list")[0].value += 1


class Work:
    """Counts what forgetting does: collect() calls and removals on the slot families, and children
    of the hot families looked at one by one."""

    def __init__(self, metrics: Metrics) -> None:
        self.collects = 0
        self.removed = 0
        self.iterated = 0
        for family in slot_families(metrics):
            self._watch(family)
        for hot in (metrics.calls, metrics.latency):
            hot.children = CountingDict(self, hot.children)

    def _watch(self, family: Counter | Gauge) -> None:
        collect, remove = family.collect, family.remove

        def counted_collect() -> Any:
            self.collects += 1
            return collect()

        def counted_remove(*values: Any) -> None:
            self.removed += 1
            remove(*values)

        family.collect = counted_collect  # type: ignore[method-assign]
        family.remove = counted_remove  # type: ignore[method-assign]


class CountingDict(dict[Any, Any]):
    def __init__(self, work: Work, items: dict[Any, Any]) -> None:
        super().__init__(items)
        self.work = work

    def __iter__(self) -> Iterator[Any]:
        for key in super().__iter__():
            self.work.iterated += 1
            yield key


def test_forgetting_a_slot_touches_only_its_own_series() -> None:
    metrics = Metrics()
    fill(metrics)
    work = Work(metrics)
    for i in range(100):
        metrics.forget_slot(f"slot-{i}")
    assert work.collects == 0
    assert work.removed == 100 * 11  # four gauges, two call_errors kinds, five other families
    assert work.iterated == 0
    exposed = metrics.render().decode()
    assert 'slot="slot-5"' not in exposed
    assert 'mcpgw_call_errors_total{kind="provider",slot="slot-500"} 1.0' in exposed
    assert 'mcpgw_calls_total{method="tools/call",slot="slot-500"} 1.0' in exposed
    assert 'mcpgw_call_latency_seconds_count{slot="slot-500"}' in exposed


def test_a_name_forgotten_before_or_never_seen_costs_a_lookup() -> None:
    metrics = Metrics()
    fill(metrics)
    metrics.forget_slot("slot-7")
    work = Work(metrics)
    metrics.forget_slot("slot-7")
    metrics.forget_slot("never-seen")
    assert (work.collects, work.removed, work.iterated) == (0, 0, 0)


def test_a_slot_made_again_counts_from_nothing_and_is_forgotten_again() -> None:
    metrics = Metrics()
    metrics.call_errors.labels("pump-1", "deadline").inc(5)
    metrics.call_metrics("pump-1", "tools/call")[0].value += 3
    metrics.forget_slot("pump-1")
    metrics.call_errors.labels("pump-1", "deadline").inc()
    calls = metrics.call_metrics("pump-1", "tools/call")[0]
    calls.value += 1
    exposed = metrics.render().decode()
    assert 'mcpgw_call_errors_total{kind="deadline",slot="pump-1"} 1.0' in exposed
    assert 'mcpgw_calls_total{method="tools/call",slot="pump-1"} 1.0' in exposed
    metrics.forget_slot("pump-1")
    assert 'slot="pump-1"' not in metrics.render().decode()


def test_the_scrape_forgets_no_name_the_registry_forgot() -> None:
    config = GatewayConfig.model_validate({"limits": {"max_slots": 64}})
    gateway = Gateway(config, Limiters.from_config(config.limits).for_core())
    metrics = gateway.metrics
    forgotten: list[str] = []
    forget = metrics.forget_slot

    def counted(slot: str) -> None:
        forgotten.append(slot)
        forget(slot)

    metrics.forget_slot = counted  # type: ignore[method-assign]
    for i in range(64):
        gateway.registry.slot(f"asked-{i}")
    metrics.render()  # the scrape sets the four gauges of each name asked for
    for i in range(64, 1000):
        gateway.registry.slot(f"asked-{i}")  # each evicts the oldest, whose series go with it
    metrics.render()
    metrics.render()
    assert len(forgotten) == len(set(forgotten)) == 1000 - len(gateway.registry.slots)
    exposed = metrics.render().decode()
    assert exposed.count("mcpgw_slot_connected{") == len(gateway.registry.slots) <= 64


def test_a_series_set_after_its_slot_went_is_forgotten_at_the_next_scrape() -> None:
    config = GatewayConfig.model_validate({})
    gateway = Gateway(config, Limiters.from_config(config.limits).for_core())
    metrics = gateway.metrics
    gateway.registry.slot("gone")
    assert 'mcpgw_slot_connected{slot="gone"} 0.0' in metrics.render().decode()
    gateway.registry.forget("gone")
    # A late event of the link the slot last had, once the registry forgot it (a provider's telemetry, say).
    metrics.provider_telemetry.labels("gone", "accepted").inc()
    metrics.call_metrics("gone", "tools/call")[0].value += 1
    assert 'slot="gone"' not in metrics.render().decode()


def test_a_full_table_scans_its_slots_once_per_many_new_names_not_per_name() -> None:
    config = GatewayConfig.model_validate({})
    gateway = Gateway(config, Limiters.from_config(config.limits).for_core())
    registry = gateway.registry
    cap = config.limits.max_slots
    for i in range(cap):
        gateway.target(f"asked-{i}")
    scans = 0
    vacant = registry._vacant

    def counted() -> Any:
        nonlocal scans
        scans += 1
        return vacant()

    registry._vacant = counted  # type: ignore[method-assign]
    for i in range(1000):
        gateway.target(f"more-{i}")
    assert len(registry.slots) <= cap
    assert "asked-0" not in registry.slots and "more-999" in registry.slots
    # Each scan makes room for 1 + cap // ROOM_SLACK_SHARE names (17 at the default 1024).
    assert scans <= 1000 // (1 + cap // ROOM_SLACK_SHARE) + 1
