"""A `/providers` socket whose every slot claim is refused: it gets its refusal envelopes at once and, at
limits.connections.handshake_timeout_s, a close that says its claims were refused (not that it claimed
nothing), counted as mcpgw_connection_cuts_total{reason="slots_refused"}."""

from __future__ import annotations

import asyncio
import contextlib
import time

from tests.conftest import GatewayFactory
from tests.integration.test_connection_limits import SLACK_S, metrics
from tests.support.southbound import Boards

HANDSHAKE_S = 0.5
REGISTER = {"jsonrpc": "2.0", "method": "notifications/register"}
HELD = 'Slot already held by a live provider; call provider_status on _broker. Slot: "{}"'


async def test_a_socket_refused_every_slot_is_closed_saying_so(gateway_factory: GatewayFactory, boards: Boards) -> None:
    server = await gateway_factory(
        providers={"takeover": "reject"}, limits={"connections": {"handshake_timeout_s": HANDSHAKE_S}}
    )
    holder = await boards.connect(server.url, "/providers", first_frame={"provider": "pump-1", "payload": REGISTER})
    await holder.send(REGISTER, "pump-2")

    started = time.monotonic()
    newcomer = await boards.connect(server.url, "/providers")
    for slot in ("pump-1", "pump-2"):
        await newcomer.send(REGISTER, slot)
    for slot in ("pump-1", "pump-2"):
        refusal = await newcomer.take(lambda m: m.get("id", 0) is None, what=f"the refusal of {slot}")
        assert refusal["error"] == {"code": -32000, "message": HELD.format(slot)}

    code, reason = await newcomer.wait_closed(HANDSHAKE_S + SLACK_S + 1)
    assert time.monotonic() - started >= HANDSHAKE_S
    assert code == 1008
    # Whole, not cut: the refusals themselves came in full as error envelopes.
    assert reason == 'No slot served: every slot claimed was refused (last: "pump-2"); the error envelopes said why'
    assert len(reason.encode()) <= 123
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_cuts_total", reason="slots_refused") == 1
    assert scrape.get("mcpgw_connection_cuts_total", reason="handshake_timeout") == 0
    assert scrape.get("mcpgw_limit_hits_total", limit="connections.handshake_timeout_s") == 0
    # The holder keeps both slots and its socket.
    assert not holder.closed.is_set()
    assert all(server.gateway.registry.slots[slot].live is not None for slot in ("pump-1", "pump-2"))


async def test_a_socket_that_was_served_a_slot_is_not_cut(gateway_factory: GatewayFactory, boards: Boards) -> None:
    """One claim refused, one served: the socket keeps its slot past the handshake time."""
    server = await gateway_factory(
        providers={"takeover": "reject"}, limits={"connections": {"handshake_timeout_s": HANDSHAKE_S}}
    )
    await boards.connect(server.url, "/providers", first_frame={"provider": "pump-1", "payload": REGISTER})
    newcomer = await boards.connect(server.url, "/providers")
    await newcomer.send(REGISTER, "pump-1")
    await newcomer.take(lambda m: m.get("id", 0) is None, what="the refusal of pump-1")
    await newcomer.send(REGISTER, "pump-3")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(newcomer.closed.wait(), HANDSHAKE_S + SLACK_S)
    assert not newcomer.closed.is_set()
    assert server.gateway.registry.slots["pump-3"].live is not None
    scrape = metrics(server)
    assert scrape.get("mcpgw_connection_cuts_total", reason="slots_refused") == 0
    assert scrape.get("mcpgw_connection_cuts_total", reason="handshake_timeout") == 0


async def test_a_long_refused_slot_name_leaves_the_close_reason_whole(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    """A slot name that would not fit whole is left out, not cut: the reason stays whole and says where
    the reasons are."""
    server = await gateway_factory(
        providers={"takeover": "reject"}, limits={"connections": {"handshake_timeout_s": HANDSHAKE_S}}
    )
    slot = "pump-" + "x" * 59  # 64 bytes, the longest slot name
    await boards.connect(server.url, "/providers", first_frame={"provider": slot, "payload": REGISTER})
    newcomer = await boards.connect(server.url, "/providers")
    await newcomer.send(REGISTER, slot)
    refusal = await newcomer.take(lambda m: m.get("id", 0) is None, what="the refusal")
    assert refusal["error"] == {"code": -32000, "message": HELD.format(slot)}

    code, reason = await newcomer.wait_closed(HANDSHAKE_S + SLACK_S + 1)
    assert (code, reason) == (1008, "No slot served: every slot claimed was refused; the error envelopes said why")
