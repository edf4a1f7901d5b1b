"""A broker stopped in an orderly way (mosquitto on SIGTERM) publishes its boards' last wills to the gateway
just before it closes the gateway's own connection: the slots name the broker's loss, not "device went
offline", and broker restarts are not taken for two boards pushing each other off a slot. A board's own
will with the broker up still detaches its slot at once as offline (docs/mqtt-broker.md, "What the
gateway does with the broker")."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.southbound.mqtt.plain import LEFT_WITH_BROKER, WILLS_BEFORE_CLOSE_S
from sim.mqtt import MqttPumpLink, MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.support.mosquitto import Mosquitto
from tests.support.southbound import provider_status

QUICK = {"reconnect_initial_s": 0.05, "reconnect_max_s": 0.3, "connect_timeout_s": 3}
PUMPS = 4
SLOTS = [f"pump-{number}" for number in range(1, PUMPS + 1)]
OFFLINE = "device went offline: its status was emptied (its last will, or a clean shutdown)"
FLAP_HINT = "push each other off"


def plain_boards(url: str) -> Simulator:
    """PUMPS simulated boards on the plain profile (last will: an empty retained status)."""
    settings = SimulatorSettings(pumps=PUMPS, first=1, backoff_min_s=0.05, backoff_max_s=0.3)
    sim = Simulator(None, settings, mqtt=MqttTarget(url, "plain"))
    sim.start()
    return sim


async def plain_gateway(gateway_factory: GatewayFactory, broker: Mosquitto, **overrides: object) -> GatewayServer:
    return await gateway_factory(mqtt={"brokers": [{"url": broker.url, "profiles": ["plain"], **QUICK}]}, **overrides)


async def all_ready(server: GatewayServer) -> None:
    for slot in SLOTS:
        await wait_ready_slot(server, slot, timeout=15)


async def all_detached(server: GatewayServer) -> None:
    slots = server.gateway.registry.slots
    await wait_for(lambda: all(slots[slot].live is None for slot in SLOTS), 10, "every slot to be detached")


def left_offline(caplog: pytest.LogCaptureFixture, since: int) -> set[str]:
    """Slots whose leave by an emptied status was logged since record `since`."""
    return {
        slot
        for record in caplog.records[since:]
        for slot in SLOTS
        if record.getMessage() == f"provider left slot {slot}: {OFFLINE}"
    }


async def stop_until_wills_arrive(
    server: GatewayServer, broker: Mosquitto, caplog: pytest.LogCaptureFixture
) -> set[str]:
    """Stop the broker (SIGTERM) until the gateway got at least one board's will before its own connection
    closed (mosquitto's order of closing its clients decides); the slots detached by a will."""
    for _ in range(5):
        since = len(caplog.records)
        await broker.stop()
        await all_detached(server)
        willed = left_offline(caplog, since)
        if willed:
            return willed
        await broker.start()
        await all_ready(server)
    raise AssertionError("mosquitto never sent the gateway a board's will as it stopped (5 tries)")


async def not_connected(url: str, slot: str) -> str:
    async with Client(f"{url}/{slot}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("get_status", {})
    return str(refused.value)


async def test_a_broker_stopped_in_order_names_its_loss_not_the_boards_wills(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    broker = await mosquitto_factory()
    server = await plain_gateway(gateway_factory, broker)
    sim = plain_boards(broker.url)
    try:
        await all_ready(server)
        willed = await stop_until_wills_arrive(server, broker, caplog)
        lost = f"MQTT broker {broker.url} connection lost: "
        slots = server.gateway.registry.slots
        for slot in SLOTS:
            reason = slots[slot].last_disconnect_reason
            assert reason.startswith(lost), (slot, reason)
            assert "device went offline" not in reason
        for slot in willed:
            assert slots[slot].last_disconnect_reason.endswith(f" {LEFT_WITH_BROKER}")
        # What a caller and an operator read for the whole outage.
        slot = sorted(willed)[0]
        answer = await not_connected(server.url, slot)
        assert f'Provider "{slot}" not connected: its provider left ' in answer
        assert lost in answer and LEFT_WITH_BROKER in answer and "device went offline" not in answer
        status = await provider_status(server.url, slot)
        assert status["last_disconnect_reason"].startswith(lost)
        assert status["last_disconnect_reason"].endswith(LEFT_WITH_BROKER)
        relabelled = f"provider left slot {slot} with its broker: {lost}"
        assert any(record.getMessage().startswith(relabelled) for record in caplog.records)

        # The broker is back: every board attaches again and answers.
        await broker.start()
        await all_ready(server)
        async with Client(f"{server.url}/{slot}/mcp", mode="legacy") as client:
            assert not (await client.call_tool("get_status", {})).is_error
    finally:
        await sim.stop()


async def test_quick_broker_restarts_are_not_taken_for_boards_pushing_each_other_off(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    interval_s = 8.0
    broker = await mosquitto_factory()
    server = await plain_gateway(gateway_factory, broker, logging={"repeat_interval_s": interval_s})
    sim = plain_boards(broker.url)
    try:
        await all_ready(server)
        since = len(caplog.records)
        # Within one interval: orderly stops (some slots leave by the wills mosquitto sends, the rest with
        # the gateway's connection) and a kill (every slot leaves with the connection).
        for stop in ("stop", "kill", "stop"):
            if stop == "kill":
                broker.kill()
            else:
                await broker.stop()
            await all_detached(server)
            await broker.start()
            await all_ready(server)
        flaps = server.gateway.registry.flaps
        await wait_for(lambda: not flaps._windows, 3 * interval_s + 3, "the slots' flap windows to close")
        told = [record.getMessage() for record in caplog.records[since:]]
        assert not [line for line in told if FLAP_HINT in line], [line for line in told if FLAP_HINT in line]
        for slot in SLOTS:  # every attach after a restart is written as it comes
            assert sum(line.startswith(f"provider attached to slot {slot} ") for line in told) == 3, told
    finally:
        await sim.stop()


async def test_a_boards_own_will_with_the_broker_up_fails_its_caller_at_once_as_offline(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory
) -> None:
    broker = await mosquitto_factory()
    server = await plain_gateway(gateway_factory, broker)
    sim = plain_boards(broker.url)
    try:
        await all_ready(server)
        link = sim.links["pump-1"]
        assert isinstance(link, MqttPumpLink)

        def silent(_frame: bytes) -> bytes | None:
            return None  # the board acts on nothing more, and answers nothing

        link.pump.handle = silent  # type: ignore[method-assign,assignment]
        entry = server.gateway.registry.slots["pump-1"]
        async with Client(f"{server.url}/pump-1/mcp", mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("get_status", {}))
            await wait_for(lambda: entry.live is not None and entry.live.in_flight == 1, 5, "the call in flight")
            cut = time.monotonic()
            link.drop(offline_s=60)  # killed mid-call: no DISCONNECT, the broker publishes its will
            with pytest.raises(MCPError, match='Provider "pump-1" disconnected'):
                await asyncio.wait_for(call, 5)
            assert time.monotonic() - cut < 1.0  # at once, not at the call's deadline
        assert entry.last_disconnect_reason == OFFLINE
        # A broker lost well after the will leaves the board's own leave as it was.
        await asyncio.sleep(WILLS_BEFORE_CLOSE_S + 0.5)
        await broker.stop()
        await wait_for(lambda: all(server.gateway.registry.slots[s].live is None for s in SLOTS[1:]), 10, "the rest")
        assert entry.last_disconnect_reason == OFFLINE
        answer = await not_connected(server.url, "pump-1")
        assert f"({OFFLINE})" in answer and "MQTT broker" not in answer
    finally:
        await sim.stop()
