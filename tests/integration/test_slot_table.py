"""The slot table cannot be filled for good (limits.max_slots, max_slots_per_peer, vacant_slot_ttl_s).

Raw provider sockets (tests/support/southbound.py) claim names as a hostile peer on the plant LAN
would: many at once on one `/providers` socket, or by retained MQTT statuses on a real mosquitto;
then they leave, and an ordinary board must still find room.
"""

from __future__ import annotations

import time

import aiohttp

from gateway.app import GatewayServer
from gateway.core.link import LinkInfo
from gateway.core.slots import claimant
from sim import firmware
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import Boards, ScriptedBoard, first_mqtt_broker, provider_status

REGISTER = {"jsonrpc": "2.0", "method": "notifications/register"}


async def claim(board: ScriptedBoard, gateway: GatewayServer, names: list[str]) -> None:
    """Register every name on one multiplexed socket and wait until each is served."""
    for name in names:
        await board.send(REGISTER, name)
    for name in names:
        await wait_ready_slot(gateway, name)


async def test_names_a_peer_claimed_and_left_make_room_for_a_new_board(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    gateway = await gateway_factory(limits={"max_slots": 12})
    hog = await boards.connect(gateway.url, "/providers")
    await claim(hog, gateway, [f"hog-{index}" for index in range(12)])
    refused = await boards.connect(gateway.url, "/provider/pump-1")
    code, reason = await refused.wait_closed()
    assert (code, reason) == (1008, "Too many slots (limit 12); raise limits.max_slots. Slot: pump-1")

    await hog.close()
    await wait_for(lambda: not gateway.gateway.registry.live_sessions(), what="the claims to end")
    board = await boards.connect(gateway.url, "/provider/pump-1")
    await wait_ready_slot(gateway, "pump-1")
    assert not board.closed.is_set()
    # The oldest vacant slot went to make room; the rest stay until their time is up.
    registry = gateway.gateway.registry
    assert "hog-0" not in registry.slots and "hog-11" in registry.slots and len(registry.slots) == 12


async def test_one_peer_holds_at_most_max_slots_per_peer_and_another_peer_still_gets_in(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    gateway = await gateway_factory(limits={"max_slots_per_peer": 3}, providers={"takeover_probe_ms": 200})
    hog = await boards.connect(gateway.url, "/providers")
    await claim(hog, gateway, ["a-1", "a-2", "a-3"])
    await hog.send(REGISTER, "a-4")
    refusal = await hog.take(lambda m: isinstance(m, dict) and "error" in m, what="the refusal")
    assert refusal["error"]["message"] == (
        "Too many slots for one provider (limit 3); raise limits.max_slots_per_peer. Slot: a-4"
    )
    assert "a-4" not in {session.slot for session in gateway.gateway.registry.live_sessions()}
    # A dedicated socket from the same address counts against the same cap.
    same_peer = await boards.connect(gateway.url, "/provider/a-5")
    assert await same_peer.wait_closed() == (
        1008,
        "Too many slots for one provider (limit 3); raise limits.max_slots_per_peer. Slot: a-5",
    )
    # A board that rebooted takes its name back from its own dead link: not a new claim.
    hog.answers_pings = False
    again = await boards.connect(gateway.url, "/provider/a-1")
    await wait_for(lambda: gateway.gateway.registry.slots["a-1"].connects == 2, what="a-1 taken back")
    assert not again.closed.is_set()

    # 127.0.0.2 is another address on the same loopback interface: another board, its own cap.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        other = await ScriptedBoard.connect(http, gateway.url, "/provider/b-1")
        try:
            await wait_ready_slot(gateway, "b-1")
            status = await provider_status(gateway.url, "b-1")
            assert status["remote"].startswith("127.0.0.2:")
        finally:
            await other.close()

    # Leaving gives the claim back.
    await hog.close()
    await wait_for(lambda: gateway.gateway.registry.held_by["peer 127.0.0.1"] == 1, what="the claims to end")
    board = await boards.connect(gateway.url, "/provider/a-6")
    await wait_ready_slot(gateway, "a-6")
    assert not board.closed.is_set()


async def test_a_vacant_slot_is_forgotten_after_vacant_slot_ttl_s(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    gateway = await gateway_factory(limits={"vacant_slot_ttl_s": 60}, slots={"declared": {"kept": {}}})
    registry = gateway.gateway.registry
    board = await boards.connect(gateway.url, "/provider/pump-7")
    await wait_ready_slot(gateway, "pump-7")
    assert registry.forget_vacant(time.monotonic() + 3600) == 0  # held: never forgotten
    await board.close()
    await wait_for(lambda: registry.slots["pump-7"].live is None, what="pump-7 to leave")
    assert registry.forget_vacant(time.monotonic() + 59) == 0
    assert registry.forget_vacant(time.monotonic() + 61) == 1
    assert "pump-7" not in registry.slots and "kept" in registry.slots
    # The heartbeat sweep forgets them on its own.
    again = await boards.connect(gateway.url, "/provider/pump-7")
    await wait_ready_slot(gateway, "pump-7")
    await again.close()
    await wait_for(lambda: registry.slots["pump-7"].live is None, what="pump-7 to leave again")
    registry.slots["pump-7"].vacant_since -= 61
    registry.heartbeat_sweep()
    assert "pump-7" not in registry.slots


async def test_retained_statuses_that_filled_the_table_and_were_cleared_leave_room(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, boards: Boards
) -> None:
    quick = {"reconnect_initial_s": 0.05, "reconnect_max_s": 0.3, "connect_timeout_s": 3}
    gateway = await gateway_factory(
        limits={"max_slots": 8},
        providers={"initialize_timeout_ms": 300},
        mqtt={"brokers": [{"url": mosquitto.url, **quick}]},
    )
    broker = first_mqtt_broker(gateway)
    await wait_for(lambda: len(broker.subscribed) == 3, 5, "the gateway's subscriptions")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    names = [f"ghost-{index}" for index in range(10)]
    try:
        for name in names:
            rogue.publish(f"mcpb/{name}/status", firmware.register_frame({"device_id": name}, name), retain=True)
        registry = gateway.gateway.registry
        await wait_for(lambda: len(registry.slots) == 8, 5, "the table to fill")
        for name in names:
            rogue.publish(f"mcpb/{name}/status", b"", retain=True)
        await wait_for(lambda: not registry.live_sessions(), 5, "the ghosts to go")
    finally:
        await rogue.disconnect()
    board = await boards.connect(gateway.url, "/provider/pump-1")
    await wait_ready_slot(gateway, "pump-1")
    assert not board.closed.is_set()


def test_claims_are_counted_by_identity_then_address() -> None:
    assert claimant(LinkInfo("websocket", "10.0.0.7:50123")) == "peer 10.0.0.7"
    assert claimant(LinkInfo("websocket-mux", "::1:50123")) == "peer ::1"  # as websocket.py writes it
    assert claimant(LinkInfo("websocket", "10.0.0.7:1", identity="pump-fleet")) == "identity pump-fleet"
    assert claimant(LinkInfo("mqtt", "mqtt://broker mcpb/pump-1")) is None
    assert claimant(LinkInfo("serial", "/dev/ttyUSB0")) is None
