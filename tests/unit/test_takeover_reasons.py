"""What a holder let go under the `liveness` takeover is told (docs/protocol.md, "Liveness and takeover"):
the probe it did not answer, or the heartbeat it had already missed, each in a close reason of 123 bytes."""

from __future__ import annotations

from gateway.config import GatewayConfig
from gateway.core.link import CLOSE_POLICY, MAX_CLOSE_REASON_BYTES
from gateway.core.slots import SlotRegistry
from gateway.telemetry.metrics import Metrics
from tests.unit.test_provider_session import MemoryLink

PROBE_MS = 50
PROBE_MISSED = (
    f"Replaced: no answer to the takeover probe within {PROBE_MS} ms (providers.takeover_probe_ms); "
    "a new provider took the slot"
)
HEARTBEAT_MISSED = "Replaced: this link missed its heartbeat and a new provider claimed the slot"


def registry() -> SlotRegistry:
    config = GatewayConfig.model_validate({"providers": {"takeover_probe_ms": PROBE_MS}})
    return SlotRegistry(config, Metrics())


async def test_a_holder_silent_to_the_probe_is_told_it_missed_the_probe() -> None:
    slots = registry()
    holder = MemoryLink(native_ping=True)
    old = await slots.attach("pump-1", holder)
    new = await slots.attach("pump-1", MemoryLink(native_ping=True))
    assert holder.pings == 1  # the probe
    assert holder.closed == (CLOSE_POLICY, PROBE_MISSED)
    assert old.close_reason == PROBE_MISSED
    assert slots.slots["pump-1"].last_disconnect_reason == PROBE_MISSED
    assert len(PROBE_MISSED.encode()) <= MAX_CLOSE_REASON_BYTES
    await new.close(CLOSE_POLICY, "test over")


async def test_a_holder_that_missed_a_heartbeat_is_told_so_without_a_probe() -> None:
    slots = registry()
    holder = MemoryLink(native_ping=True)
    old = await slots.attach("pump-1", holder)
    assert old.heartbeat()  # pinged
    assert not old.heartbeat()  # missed: the sweep closes it, and a newcomer comes first
    pings = holder.pings
    new = await slots.attach("pump-1", MemoryLink(native_ping=True))
    assert holder.pings == pings  # not probed
    assert holder.closed == (CLOSE_POLICY, HEARTBEAT_MISSED)
    await new.close(CLOSE_POLICY, "test over")
