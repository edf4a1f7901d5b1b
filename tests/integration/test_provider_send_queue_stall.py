"""A WebSocket provider that stops reading while its frames fit in the kernel's send buffer
(docs/protocol.md, "Liveness and takeover"): no send of the gateway ever waits (the kernel accepts
every frame at once), yet the socket takes nothing, so limits.provider_send_timeout_s cuts the link
with its named reason and counts the hit, long before the callers' own deadline.

The provider is the one of test_provider_stops_reading: written the ordinary way (the `websockets`
client), it pauses its transport's reading behind a tiny receive buffer and keeps sending a
notification every 200 ms, so it looks alive to the heartbeat.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.conftest import GatewayFactory
from tests.integration.test_metrics import scrape
from tests.integration.test_provider_stops_reading import (
    call_all,
    drain_slowly,
    provider_that_stops_reading,
    slot_reason,
)

pytestmark = pytest.mark.timeout(60)

SMALL_TEXT = "x" * 2000
"""A call's text: eight of them fill the paused provider's receive window and then wait in the
gateway's kernel send queue, far below the connection's own buffer's high-water mark."""
CALLS = 8
CALL_DEADLINE_MS = 20_000
WHY = "provider stopped reading: its socket took nothing for 2 s (limits.provider_send_timeout_s)"


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_frames_waiting_in_the_kernel_are_cut_at_the_send_bound(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, multiplexed: bool
) -> None:
    gateway = await gateway_factory(
        providers={"request_timeout_ms": CALL_DEADLINE_MS}, limits={"provider_send_timeout_s": 2}
    )
    async with provider_that_stops_reading(gateway, ["telemetry"], multiplexed=multiplexed, alive_every_s=0.2):
        outcomes = await call_all(gateway, "telemetry", [SMALL_TEXT] * CALLS)
        # The callers learn why from the cut, not from their deadline's "did not respond".
        assert [message for message, _took in outcomes] == [f'Provider "telemetry" disconnected: {WHY}'] * CALLS
        assert await slot_reason(gateway, "telemetry") == WHY
        metrics = await scrape(http, gateway)
        assert metrics.get("mcpgw_limit_hits_total", limit="provider_send_timeout_s") == 1


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_a_slow_steady_reader_of_small_frames_is_not_cut(
    gateway_factory: GatewayFactory, multiplexed: bool
) -> None:
    """Small frames the kernel accepted, taken 2 KiB every 50 ms (about 40 kB/s): they take seconds to
    leave, far past the send bound, but the socket never goes a bound without taking anything."""
    gateway = await gateway_factory(providers={"request_timeout_ms": 30_000}, limits={"provider_send_timeout_s": 1})
    async with provider_that_stops_reading(gateway, ["slow"], multiplexed=multiplexed, alive_every_s=0.2) as ws:
        calls = asyncio.create_task(call_all(gateway, "slow", [SMALL_TEXT] * 100))
        try:
            taken = await drain_slowly(ws, chunk=2048, for_s=3)
            slot = gateway.gateway.registry.slots["slow"]
            assert slot.session is not None, slot.last_disconnect_reason  # 3 s of frames waiting, never cut
            assert 0 < taken < len(SMALL_TEXT) * 100  # still draining: the frames waited all along
            # It takes nothing more: cut by the bound.
            assert await slot_reason(gateway, "slow") == WHY.replace("2 s", "1 s")
        finally:
            calls.cancel()
            await asyncio.gather(calls, return_exceptions=True)
