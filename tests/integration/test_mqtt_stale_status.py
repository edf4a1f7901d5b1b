"""A plain-profile board's status that the broker kept (docs/protocol-serial-mqtt.md, "Plain profile";
docs/mqtt-broker.md, "No persistence"), against a real mosquitto on a free loopback port.

A broker with persistence hands the gateway, after a restart, every status it stored before: of boards
not back yet, and of boards that went while it was down. The tests reproduce it without a broker kill:
the status is published retained before the gateway subscribes, so the gateway gets the broker's stored
copy (retain flag set) while no board listens on the slot's down topic.
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import paho.mqtt.client as paho
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from sim import firmware
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK, Board, call
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker, provider_status

SLOT = "pump-1"
DEVICE = f"board-{SLOT}"  # Board's device id


async def store_status(port: int, board: Board) -> None:
    """Leave `board`'s status on the broker, retained, with no board behind it (as a broker that kept it
    over a restart does)."""
    peer = RawPeer(port, "status-writer", v5=False)
    assert await peer.connect() == "Success"
    peer.publish(board.topics["status"], firmware.register_frame(board.hello, SLOT), retain=True)
    await peer.disconnect()


async def stale_gateway(gateway_factory: GatewayFactory, mosquitto: Mosquitto, **providers: object) -> GatewayServer:
    return await gateway_factory(
        providers=providers,
        logging={"repeat_interval_s": 1.0},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUICK}]},
    )


async def parked_gateway(gateway_factory: GatewayFactory, mosquitto: Mosquitto, board: Board) -> GatewayServer:
    """A gateway that got `board`'s stored status while the board is away: it tried the handshake once
    (500 ms), gave up, and the slot now waits for the board."""
    await store_status(mosquitto.port, board)
    server = await stale_gateway(gateway_factory, mosquitto, initialize_timeout_ms=500)
    slots = server.gateway.registry.slots
    await wait_for(lambda: SLOT in slots and slots[SLOT].connects == 1, 10, "the stored status to attach")
    await wait_for(lambda: slots[SLOT].live is None, 10, "the handshake to fail")
    return server


def warnings_of(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == logger and record.levelno == logging.WARNING and text in record.getMessage()
    ]


async def test_a_board_announcing_again_during_initialize_is_initialized_at_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    board = Board(mosquitto.port, SLOT)
    await store_status(mosquitto.port, board)
    # The deadline of the handshake is far away: only sending initialize again serves the caller soon.
    server = await stale_gateway(gateway_factory, mosquitto, initialize_timeout_ms=30_000)
    entry = server.gateway.registry.slots
    await wait_for(lambda: SLOT in entry and entry[SLOT].live is not None, 10, "the stored status to attach")
    session = entry[SLOT].live
    assert session is not None and session.state == "initializing"  # its initialize went to nobody

    started = time.monotonic()
    caller = asyncio.create_task(call(server.url, SLOT, "get_status"))
    try:
        await asyncio.sleep(0.3)  # the caller waits for the handshake
        await board.connect()  # subscribes to down, then publishes its status: the board is back
        result = await asyncio.wait_for(caller, 10)
        assert result["state"] == "stopped"
        assert time.monotonic() - started < 10
        assert entry[SLOT].live is session  # the same session: the callers waiting for it went on
        assert entry[SLOT].connects == 1
        status = await provider_status(server.url, SLOT)
        assert status["counters"]["unmatched_responses"] == 0
    finally:
        caller.cancel()
        await board.disconnect()


async def test_a_stored_status_of_a_board_that_is_gone_is_tried_once_then_waits_for_the_board(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    board = Board(mosquitto.port, SLOT)
    server = await parked_gateway(gateway_factory, mosquitto, board)
    slots = server.gateway.registry.slots
    # Back-off is 0.05 s to 0.3 s: without the rule the slot would be attached several times by now,
    # and a quiet window of the flap log (1 s) would close with a warning.
    await asyncio.sleep(3.0)
    assert slots[SLOT].connects == 1
    assert slots[SLOT].live is None
    plain = first_mqtt_broker(server).plain
    assert plain is not None and plain.reattach.status() == {}
    stale = warnings_of(caplog, "gateway.mqtt", "a retained status of device")
    assert stale == [
        f"MQTT broker {mosquitto.url}: slot {SLOT}: a retained status of device {DEVICE!r} the broker stored "
        "(before a restart of the broker or the gateway, or of a board gone without a last will): the board does "
        "not answer; waiting for it to publish a new status; a broker with persistence keeps such statuses: "
        "docs/mqtt-broker.md"
    ]
    assert warnings_of(caplog, "gateway.slots", "push each other off") == []
    # Not connected, and a caller is told why.
    async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError, match=f'Provider "{SLOT}" not connected: .*a retained status of device'):
            await client.call_tool("get_status", {})

    # The board comes back and announces itself: attached and served at once.
    await board.connect()
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
        assert plain.stale_warned == {}
    finally:
        await board.disconnect()


class SpeakingBoard(Board):
    """Comes back without a new status: it answers on `up` first (a notification), as a board that
    never saw its status emptied may."""

    async def connect(self) -> None:
        peer = await self.open_peer(manual_ack=True)
        await peer.subscribe(self.topics["down"])
        peer.publish(self.topics["up"], b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}')


async def test_a_parked_stored_status_is_attached_again_when_the_board_speaks_on_up(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    board = SpeakingBoard(mosquitto.port, SLOT)
    server = await parked_gateway(gateway_factory, mosquitto, board)
    slots = server.gateway.registry.slots
    await asyncio.sleep(1.0)
    assert slots[SLOT].connects == 1

    await board.connect()
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
    finally:
        await board.disconnect()


class SleepyBoard(SpeakingBoard):
    """Listens on `down` from the start but acts on nothing until `wake()`, which publishes its status
    first and then answers what it got meanwhile: it gets both copies of `initialize`."""

    def __init__(self, port: int, slot: str) -> None:
        super().__init__(port, slot)
        self.asleep = True
        self.kept: list[paho.MQTTMessage] = []
        self.initialize_answered = 0

    async def connect(self) -> None:
        peer = await self.open_peer()
        await peer.subscribe(self.topics["down"])

    def _request(self, message: paho.MQTTMessage) -> None:
        if self.asleep:
            self.kept.append(message)
            return
        if orjson.loads(bytes(message.payload)).get("method") == "initialize":
            self.initialize_answered += 1
        super()._request(message)

    def wake(self) -> None:
        assert self.peer is not None
        self.peer.client.publish(self.topics["status"], firmware.register_frame(self.hello, SLOT), qos=1, retain=True)
        self.asleep = False
        kept, self.kept = self.kept, []
        for message in kept:
            self._request(message)


async def test_a_second_answer_to_initialize_sent_again_is_not_counted_as_unmatched(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    board = SleepyBoard(mosquitto.port, SLOT)
    await store_status(mosquitto.port, board)
    await board.connect()
    try:
        server = await stale_gateway(gateway_factory, mosquitto, initialize_timeout_ms=30_000)
        await wait_for(lambda: len(board.kept) == 1, 10, "initialize to reach the board")
        board.wake()
        await wait_ready_slot(server, SLOT, timeout=10)
        await wait_for(lambda: board.initialize_answered == 2, 10, "the board to answer both copies")
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"  # after both answers
        status = await provider_status(server.url, SLOT)
        assert status["counters"]["unmatched_responses"] == 0
        assert server.gateway.registry.slots[SLOT].connects == 1
    finally:
        await board.disconnect()
