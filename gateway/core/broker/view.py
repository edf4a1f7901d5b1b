"""What the `_broker` server reads of the running gateway: a narrow view, not the Gateway class.

The Gateway (gateway/core/gateway.py) satisfies it and builds the broker with itself; nothing in
this package imports the Gateway, so the package sits below it with no cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Protocol

from gateway.config import GatewayConfig
from gateway.core.aggregate import AggregateTarget
from gateway.core.groups.catalog import GroupCatalog
from gateway.core.jsonrpc import JsonObject
from gateway.core.policy_interface import ConnectionCounts, Governance, RateLimits
from gateway.core.provider_recheck import ProviderRecheck
from gateway.core.reloading import Reloading
from gateway.core.serial_handover import SerialHandover
from gateway.core.sessions import SessionStore
from gateway.core.slots import SlotRegistry
from gateway.telemetry.metrics import Metrics


class BrokerView(Protocol):
    """The live objects and the facts `_broker`, /metrics and the diagnosis are written from."""

    @property
    def config(self) -> GatewayConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def registry(self) -> SlotRegistry: ...

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def aggregate(self) -> AggregateTarget: ...

    @property
    def groups(self) -> GroupCatalog: ...

    @property
    def rate_limiter(self) -> RateLimits: ...

    @property
    def connections(self) -> ConnectionCounts: ...

    @property
    def governance(self) -> Governance | None: ...

    @property
    def started_at(self) -> float: ...

    @property
    def bound_port(self) -> int | None: ...

    @property
    def client_streams(self) -> Sized:
        """The client event streams open now (GET streams, listens, legacy SSE)."""
        ...

    @property
    def open_subscriptions(self) -> int: ...

    @property
    def auth_posture(self) -> Callable[[], JsonObject] | None: ...

    @property
    def discovery(self) -> Callable[[], JsonObject] | None: ...

    @property
    def mqtt_status(self) -> Callable[[], list[JsonObject]] | None: ...

    @property
    def serial_status(self) -> Callable[[], JsonObject] | None: ...

    @property
    def reloading(self) -> Reloading | None:
        """The configuration reload (None: this gateway cannot reload, e.g. one built in a test)."""
        ...

    @property
    def serial_handover(self) -> SerialHandover | None:
        """Letting go of a serial port and taking it back (None: this gateway serves no serial lines)."""
        ...

    @property
    def provider_recheck(self) -> ProviderRecheck | None:
        """Ending the provider links whose credential no longer stands (None: a gateway built in a test)."""
        ...

    def base_url(self) -> str: ...
