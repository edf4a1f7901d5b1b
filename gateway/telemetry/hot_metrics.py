"""The metrics bumped on every request, kept as plain numbers and handed to the registry at scrape time.

prometheus-client's children take a lock and run four to six Python calls on every `inc()` or
`observe()`. Every request pays for three of them (requests by endpoint, calls and latency by slot),
and on a relayed call that path is what the gateway adds to the hop, so these three are kept here
instead: a counter child is one attribute bumped in place, a latency child one bisect and two adds.
The event loop is the only thread that touches them (the request path and the /metrics handler both
run on it), so no lock is needed. A collector registered in the gateway's registry exposes them with
the names, labels and samples prometheus-client's own counter and histogram would
(`_total`/`_created`; `_bucket`/`_count`/`_sum`/`_created`).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, utils
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

GO_FLOAT: Callable[[float], str] = utils.floatToGoString
"""How prometheus-client spells a bucket bound in `le` (as Go does), so both expose the same labels."""


class Count:
    """One labelled counter: `child.value += 1` on the hot path."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()


class Latency:
    """One labelled histogram of seconds: `child.observe(seconds)`."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        # A bucket holds the values up to and including its bound, as Prometheus' `le` says.
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds


Child = TypeVar("Child", bound=Count | Latency)


class _Family(Generic[Child]):
    """Children by label values, made on first use, and the collector's registration."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        child: Callable[[], Child],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.children: dict[tuple[str, ...], Child] = {}
        self.by_first: dict[str, set[tuple[str, ...]]] = {}
        """The children's label values by their first label's value (the slot): removing one slot's
        series touches those only, not every child of the family."""
        self._child: Callable[[], Child] = child
        registry.register(self)  # asks describe(): a name taken twice is refused here

    def labels(self, *values: str) -> Child:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
            child = self.children[values] = self._child()
            if values:
                self.by_first.setdefault(values[0], set()).add(values)
        return child

    def remove_matching(self, label: str, value: str) -> None:
        """Drop every child whose `label` is `value` (a slot the registry forgot): at the cost of those
        children when `label` is the first one, else of a look at every child."""
        index = self.labelnames.index(label)
        if index == 0:
            gone = self.by_first.pop(value, set())
        else:
            gone = {values for values in self.children if values[index] == value}
            for values in gone:
                kin = self.by_first.get(values[0])
                if kin is not None:
                    kin.discard(values)
                    if not kin:
                        del self.by_first[values[0]]
        for values in gone:
            self.children.pop(values, None)

    def describe(self) -> list[Metric]:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        raise NotImplementedError


class CounterFamily(_Family[Count]):
    """A labelled counter whose children are `Count`s; registered in `registry` as a collector."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, registry, Count)

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self.children.items()):
            family.add_metric(values, child.value, created=child.created)
        yield family


class HistogramFamily(_Family[Latency]):
    """A labelled histogram whose children are `Latency`s; registered in `registry` as a collector."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = tuple(sorted(float(bound) for bound in buckets))
        self.edges = [GO_FLOAT(bound) for bound in bounds] + ["+Inf"]
        super().__init__(name, documentation, labelnames, registry, lambda: Latency(bounds))

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self.children.items()):
            running = 0
            buckets: list[tuple[str, float]] = []
            for edge, count in zip(self.edges, child.counts, strict=True):
                running += count
                buckets.append((edge, running))
            family.add_metric(values, buckets, child.total)
            labels = dict(zip(self.labelnames, values, strict=True))
            family.samples.append(Sample(f"{self.name}_created", labels, child.created))
        yield family
