"""The core as one object: slots, client sessions and the three kinds of target, with no transport."""

from __future__ import annotations

import time

from gateway.config import GatewayConfig
from gateway.core.aggregate import AggregateTarget
from gateway.core.introspect import BrokerTarget
from gateway.core.names import ALL_SLOT, BROKER_SLOT
from gateway.core.routing import SlotTarget, Target
from gateway.core.sessions import SessionStore
from gateway.core.slots import SlotRegistry
from gateway.core.streams import MessageQueue
from gateway.telemetry.metrics import Metrics


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.registry = SlotRegistry(config, self.metrics)
        self.sessions = SessionStore(config.limits.max_sessions, config.limits.session_idle_timeout_s, self.metrics)
        self.aggregate = AggregateTarget(self.registry, self.metrics)
        self.broker = BrokerTarget(self)
        self.started_at = time.time()
        self.listening = False
        self.open_subscriptions = 0
        self.client_streams: set[MessageQueue] = set()
        self._slot_targets: dict[str, SlotTarget] = {}

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
            target = SlotTarget(self.registry, slot, self.metrics)
            self._slot_targets[name] = target
        return target

    def start(self) -> None:
        self.registry.start()
        self.sessions.start()

    async def shutdown(self) -> None:
        for queue in list(self.client_streams):
            queue.close()
        await self.sessions.shutdown()
        await self.registry.shutdown()
