"""Who may claim a slot that a live plain-profile MQTT board holds (docs/protocol-serial-mqtt.md, "Plain
profile"; docs/protocol.md, "Liveness and takeover"), against a real mosquitto on a free loopback port.

A status naming another device goes through the core's takeover decision, as a WebSocket newcomer
does; the same device announcing again is its reconnect and keeps its session. The boards are
tests/integration/test_mqtt_gateway.py's: the pump's own dispatcher behind a raw paho connection,
each with its own client id and device id.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import paho.mqtt.client as paho
import pytest

from gateway.app import GatewayServer
from gateway.core.provider_session import ProviderSession
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK, Board, call
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer, Seen
from tests.support.southbound import first_mqtt_broker, provider_status

SLOT = "pump-1"
DOWN = f"mcpb/{SLOT}/down"
HELD = f'Slot already held by a live provider; call provider_status on _broker. Slot: "{SLOT}"'


async def takeover_gateway(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, policy: str | None, **providers: Any
) -> GatewayServer:
    """A gateway on `mosquitto`; `policy` set for SLOT alone in [slots.declared] (None: the default, liveness)."""
    slots = {"declared": {SLOT: {"takeover": policy}}} if policy is not None else {}
    return await gateway_factory(
        providers=providers, slots=slots, mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUICK}]}
    )


async def board(port: int, device_id: str, board_type: type[Board] = Board) -> Board:
    """A board for SLOT with its own client id and device id, connected and announced."""
    announced = board_type(port, SLOT, client_id=device_id)
    announced.hello["device_id"] = device_id
    await announced.connect()
    return announced


async def down_spy(port: int) -> RawPeer:
    spy = RawPeer(port, "down-spy", v5=False)
    assert await spy.connect() == "Success"
    await spy.subscribe(DOWN)
    return spy


def is_refusal(seen: Seen) -> bool:
    return seen.topic == DOWN and orjson.loads(seen.payload).get("id", 0) is None


def holder(server: GatewayServer) -> ProviderSession | None:
    return server.gateway.registry.slots[SLOT].live


def holder_device(server: GatewayServer) -> object:
    session = holder(server)
    return (session.hello or {}).get("device_id") if session is not None else None


def contest_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "gateway.mqtt"
        and record.levelno == logging.WARNING
        and "refused the status" in record.getMessage()
    ]


class LateBoard(Board):
    """Answers every request a while after it arrives: later than the takeover probe waits."""

    late_s = 1.0

    def _request(self, message: paho.MQTTMessage) -> None:
        asyncio.get_running_loop().call_later(self.late_s, super()._request, message)


async def test_reject_keeps_the_holder_and_tells_the_newcomer_on_its_down_topic(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    server = await takeover_gateway(gateway_factory, mosquitto, "reject")
    spy = await down_spy(mosquitto.port)
    first = await board(mosquitto.port, "board-a")
    second: Board | None = None
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        session = holder(server)

        second = await board(mosquitto.port, "board-b")
        refusal = orjson.loads((await spy.next(is_refusal)).payload)
        # On the shared down topic both boards read it: data.device_id says whose status was refused.
        assert refusal["error"] == {"code": -32000, "message": HELD, "data": {"device_id": "board-b"}}
        assert holder(server) is session and holder_device(server) == "board-a"
        assert server.gateway.registry.slots[SLOT].connects == 1
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
        status = await provider_status(server.url, SLOT)
        assert status["hello"]["device_id"] == "board-a"
        assert status["upstream"]["contested_by"] == {"device_id": "board-b"}
        drops = first_mqtt_broker(server).drops
        assert drops.totals["refused"] == 1

        # The newcomer announces again (its reboot): refused again, counted and told again, warned of once.
        await second.disconnect()
        await second.connect()
        await spy.next(is_refusal)
        await wait_for(lambda: drops.totals["refused"] == 2, 5, "the second refusal to be counted")
        assert holder(server) is session
        [warning] = contest_warnings(caplog)
        assert "slot pump-1" in warning and "'board-a'" in warning and "'board-b'" in warning
        assert "takeover = reject" in warning and DOWN in warning
        assert not [r for r in caplog.records if "dropped a message (refused)" in r.getMessage()]
    finally:
        for each in (first, second):
            if each is not None:
                await each.disconnect()
        await spy.disconnect()


@pytest.mark.parametrize("policy", [None, "always"])
async def test_liveness_keeps_a_holder_that_answers_its_heartbeats(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, policy: str | None
) -> None:
    """The default policy, and `always` (MQTT links carry no provider identity, so it behaves as liveness)."""
    # A generous probe: a live holder answers at once, and a loaded machine must not make it lose.
    # Heartbeats a second apart: a board on a loaded host answers a ping well within it.
    server = await takeover_gateway(
        gateway_factory, mosquitto, policy, heartbeat_interval_s=1.0, takeover_probe_ms=3000
    )
    spy = await down_spy(mosquitto.port)
    first = await board(mosquitto.port, "board-a")
    second: Board | None = None
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        session = holder(server)
        second = await board(mosquitto.port, "board-b")
        refusal = orjson.loads((await spy.next(is_refusal)).payload)
        assert refusal["error"]["message"] == HELD
        await asyncio.sleep(2.5)  # heartbeats, and the gateway's attempts again for the standing status
        assert holder(server) is session and holder_device(server) == "board-a"
        assert server.gateway.registry.slots[SLOT].connects == 1
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
    finally:
        for each in (first, second):
            if each is not None:
                await each.disconnect()
        await spy.disconnect()


async def test_liveness_admits_the_newcomer_when_the_holder_does_not_answer(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    """The holder stopped answering (connected, its status overwritten, silent); the newcomer's own
    answers come later than the probe waits, since any answer on the shared up topic counts as the holder's."""
    server = await takeover_gateway(gateway_factory, mosquitto, None, takeover_probe_ms=200)
    first = await board(mosquitto.port, "board-a")
    second: Board | None = None
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        first.answer_calls = False
        first.pump.dispatcher.handle = lambda _frame: None
        entry = server.gateway.registry.slots[SLOT]

        second = await board(mosquitto.port, "board-b", LateBoard)
        await wait_for(
            lambda: holder_device(server) == "board-b" and entry.live is not None and entry.live.ready,
            15,
            "board-b to hold the slot",
        )
        assert entry.last_disconnect_reason == (
            "Replaced: no answer to the takeover probe within 200 ms (providers.takeover_probe_ms); "
            "a new provider took the slot"
        )
        assert entry.connects == 2
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
        assert first_mqtt_broker(server).drops.totals["refused"] == 0
        assert "contested_by" not in (await provider_status(server.url, SLOT))["upstream"]
    finally:
        for each in (first, second):
            if each is not None:
                await each.disconnect()


@pytest.mark.parametrize("policy", ["reject", None])
async def test_the_same_device_announcing_again_keeps_its_session(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, policy: str | None
) -> None:
    server = await takeover_gateway(gateway_factory, mosquitto, policy)
    spy = await down_spy(mosquitto.port)
    first = await board(mosquitto.port, "board-a")
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        session = holder(server)
        # The board reboots with new firmware: a new connection, its status again with the same device id.
        await first.disconnect()
        hello: dict[str, Any] = first.hello
        hello["firmware"] = {"name": "pump-1", "version": "9.9.9"}
        await first.connect()
        assert first.announcements == 2
        assert session is not None
        await wait_for(lambda: "firmware" in (session.hello or {}), 5, "the new hello to arrive")
        assert holder(server) is session
        assert server.gateway.registry.slots[SLOT].connects == 1
        assert (await provider_status(server.url, SLOT))["hello"]["firmware"]["version"] == "9.9.9"
        assert (await call(server.url, SLOT, "get_status"))["state"] == "stopped"
        assert first_mqtt_broker(server).drops.totals["refused"] == 0
        while not spy.seen.empty():
            assert not is_refusal(spy.seen.get_nowait())
    finally:
        await first.disconnect()
        await spy.disconnect()


async def test_revoking_the_holder_of_a_contested_slot_detaches_it(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    """The standing status is the refused board's; the holder is still the revoked device, and goes."""
    server = await takeover_gateway(gateway_factory, mosquitto, "reject")
    first = await board(mosquitto.port, "board-a")
    second: Board | None = None
    try:
        await wait_ready_slot(server, SLOT, timeout=10)
        plain = first_mqtt_broker(server).plain
        assert plain is not None
        second = await board(mosquitto.port, "board-b")
        await wait_for(lambda: first_mqtt_broker(server).drops.totals["refused"] == 1, 5, "board-b to be refused")
        done = plain.withdraw(SLOT, "board-a", "device identity revoked")
        assert done is not None and done["detached"] is True
        assert holder(server) is None
    finally:
        for each in (first, second):
            if each is not None:
                await each.disconnect()
