"""Who may claim a held slot (docs/protocol.md, "Liveness and takeover"): the reject, liveness and always policies.

Incumbents are real SDK providers (which answer pings) or scripted raw boards that stop answering
pings; newcomers are real SDK providers, or raw sockets when the test needs the exact refusal.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server
from tests.support.southbound import Boards, ScriptedBoard, provider_status

HELD = 'Slot already held by a live provider; call provider_status on _broker. Slot: "pump"'
PROBE_MS = 200


def policy_config(policy: str, where: str, probe_ms: int = PROBE_MS) -> dict[str, Any]:
    """The takeover policy set globally, or for slot `pump` only (the global one then says otherwise)."""
    providers: dict[str, Any] = {"takeover_probe_ms": probe_ms}
    if where == "global":
        return {"providers": {**providers, "takeover": policy}}
    other = "reject" if policy != "reject" else "liveness"
    return {"providers": {**providers, "takeover": other}, "slots": {"declared": {"pump": {"takeover": policy}}}}


def holder_name(gateway: GatewayServer, slot: str = "pump") -> str | None:
    session = gateway.gateway.registry.slots[slot].live
    if session is None or not session.ready:
        return None
    name = session.server_info.get("name")
    return name if isinstance(name, str) else None


async def add(gateway: GatewayServer, slot: str = "pump") -> Any:
    async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
        return (await client.call_tool("add", {"a": 2, "b": 3})).structured_content


async def silent_board(gateway: GatewayServer, boards: Boards, path: str, slots: tuple[str, ...]) -> ScriptedBoard:
    """A raw board holding `slots` that answered its handshake and then stopped answering pings."""
    first = None
    if path == "/providers":
        first = {"provider": slots[0], "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, path, first_frame=first)
    for slot in slots[1:]:
        await board.send({"jsonrpc": "2.0", "method": "notifications/register"}, slot)
    for slot in slots:
        await wait_ready_slot(gateway, slot)
    board.answers_pings = False
    return board


async def assert_newcomer_refused(gateway: GatewayServer, boards: Boards) -> None:
    """A raw newcomer is refused on both paths, with the held-slot text."""
    newcomer = await boards.connect(gateway.url, "/provider/pump")
    code, reason = await newcomer.wait_closed()
    assert (code, reason) == (1008, HELD)
    mux = await boards.connect(gateway.url, "/providers")
    await mux.send({"jsonrpc": "2.0", "method": "notifications/register"}, "pump")
    refusal = await mux.take(lambda m: m.get("id", 0) is None, what="the refusal envelope")
    assert refusal["error"] == {"code": -32000, "message": HELD}
    assert not mux.closed.is_set()


# -- reject -------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["global", "per-slot"])
@pytest.mark.parametrize("incumbent", ["live", "silent"])
async def test_reject_never_hands_the_slot_over(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards, where: str, incumbent: str
) -> None:
    gateway = await gateway_factory(**policy_config("reject", where))
    if incumbent == "live":
        await publishers.start(gateway, "pump", demo_server("incumbent"))
    else:
        await silent_board(gateway, boards, "/provider/pump", ("pump",))
    before = holder_name(gateway)
    await assert_newcomer_refused(gateway, boards)
    assert holder_name(gateway) == before
    status = await provider_status(gateway.url, "pump")
    assert status["connects"] == 1
    assert status["takeover"] == "reject"
    if incumbent == "live":
        assert await add(gateway) == {"result": 5}


async def test_a_refused_newcomer_is_warned_of_once_per_interval(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    """Four refusals of the same slot for the same reason, on both paths: one warning (logging.repeat_interval_s)."""
    caplog.set_level(logging.INFO)
    gateway = await gateway_factory(**policy_config("reject", "global"))
    await publishers.start(gateway, "pump", demo_server("incumbent"))
    for _ in range(2):
        await assert_newcomer_refused(gateway, boards)
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("provider refused")]
    assert len(warned) == 1, warned
    assert warned[0].startswith("provider refused for slot pump over websocket from 127.0.0.1:")
    assert warned[0].endswith(f": {HELD}")


# -- liveness, and always without identities ----------------------------------------------------


@pytest.mark.parametrize("policy", ["liveness", "always"])
async def test_live_incumbent_keeps_the_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards, policy: str
) -> None:
    """No identities exist yet, so `always` cannot prove "same provider" and falls back to liveness."""
    # A generous probe: a live incumbent answers at once, and a loaded machine must not make it lose.
    gateway = await gateway_factory(**policy_config(policy, "global", probe_ms=3000))
    await publishers.start(gateway, "pump", demo_server("incumbent"))
    await assert_newcomer_refused(gateway, boards)
    assert holder_name(gateway) == "incumbent"
    assert await add(gateway) == {"result": 5}
    assert (await provider_status(gateway.url, "pump"))["connects"] == 1


@pytest.mark.parametrize("where", ["global", "per-slot"])
@pytest.mark.parametrize("policy", ["liveness", "always"])
async def test_incumbent_that_misses_the_probe_loses_the_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards, policy: str, where: str
) -> None:
    gateway = await gateway_factory(**policy_config(policy, where))
    old = await silent_board(gateway, boards, "/provider/pump", ("pump",))
    await publishers.start(gateway, "pump", demo_server("newcomer"), wait_ready=False)
    await wait_for(lambda: holder_name(gateway) == "newcomer", what="the newcomer to hold the slot")
    code, reason = await old.wait_closed()
    assert code == 1008
    assert reason.startswith("Replaced")
    assert await add(gateway) == {"result": 5}
    assert old.pings_seen >= 1  # it was asked, and did not answer


# -- what happens to the old link ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/provider/pump", "/providers"])
async def test_takeover_fails_old_pending_calls_and_old_close_keeps_the_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards, path: str
) -> None:
    gateway = await gateway_factory(providers={"takeover_probe_ms": PROBE_MS})
    slots = ("pump",) if path == "/provider/pump" else ("pump", "other")
    old = await silent_board(gateway, boards, path, slots)
    async with Client(f"{gateway.url}/pump/mcp", mode="legacy") as client:
        # Two clients wait on the old link, which will never answer.
        async with Client(f"{gateway.url}/pump/mcp", mode="2026-07-28") as second:
            first_call = asyncio.create_task(client.call_tool("valve", {}))
            second_call = asyncio.create_task(second.call_tool("valve", {}))
            await old.request("tools/call")
            await old.request("tools/call")

            publisher = await publishers.start(gateway, "pump", demo_server("newcomer"), wait_ready=False)
            for call in (first_call, second_call):
                with pytest.raises(MCPError) as failure:
                    await asyncio.wait_for(call, 1.0)  # a bound: at once, not at the deadline
                assert failure.value.code == -32000
                # the link's close reason follows the text mcp-broker's clients match on
                assert failure.value.error.message.startswith('Provider "pump" disconnected: Replaced')
        await wait_for(lambda: holder_name(gateway) == "newcomer", what="the newcomer to hold the slot")
        result = await client.call_tool("add", {"a": 40, "b": 2})
        assert result.structured_content == {"result": 42}

    if path == "/provider/pump":
        code, reason = await old.wait_closed()
        assert (code, reason.startswith("Replaced")) == (1008, True)
    else:
        # The old socket loses only the slot it was beaten to; it still holds "other" until it closes.
        refusal = await old.take(lambda m: m.get("id", 0) is None, what="the lost-slot envelope")
        assert refusal["error"]["message"].startswith("Replaced")
        assert gateway.gateway.registry.slots["other"].live is not None
        await old.close()
        await wait_for(lambda: gateway.gateway.registry.slots["other"].live is None, what="the old socket's close")
    # The old link's close handler has run; it must not have released the newcomer's slot.
    assert holder_name(gateway) == "newcomer"
    status = await provider_status(gateway.url, "pump")
    assert status["connected"] is True
    assert status["connects"] == 2
    assert publisher.connections == 1
    assert await add(gateway) == {"result": 5}
