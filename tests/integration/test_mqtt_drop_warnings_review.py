"""A dropped message is warned of once per reason and slot, against a real mosquitto: a second board
that publishes garbage is its own misconfiguration, and the log names it even when another board's
garbage was warned of before (docs/mqtt-broker.md, "What the gateway does with the broker")."""

from __future__ import annotations

import logging

import pytest

from gateway.southbound.mqtt.drops import MAX_WARNED, DropCounter, MqttMetrics
from gateway.telemetry.metrics import Metrics
from tests.conftest import GatewayFactory, wait_for
from tests.integration.test_mqtt_gateway import QUICK
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker


def dropped_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "dropped a message (malformed)" in r.getMessage()]


async def test_each_board_that_publishes_garbage_is_warned_of_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.mqtt")
    server = await gateway_factory(
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUICK, "check_anonymous": False}]}
    )
    mqtt = first_mqtt_broker(server)
    await wait_for(lambda: bool(mqtt.subscribed), 10, "the gateway's subscriptions")
    garbage = RawPeer(mosquitto.port, "garbage", v5=False)
    assert await garbage.connect() == "Success"
    try:
        for slot in ("pump-1", "pump-2"):
            for _ in range(3):
                garbage.publish(f"mcpb/{slot}/status", b"not json")
        await wait_for(lambda: mqtt.drops.totals["malformed"] == 6, 10, "six malformed statuses")
    finally:
        await garbage.disconnect()
    warned = dropped_warnings(caplog)
    assert len(warned) == 2, warned
    assert "mcpb/pump-1/status" in warned[0] and "mcpb/pump-2/status" in warned[1], warned


def test_a_publisher_cycling_through_slot_names_cannot_flood_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.mqtt")
    drops = DropCounter("mqtt://broker", MqttMetrics(Metrics()))
    for number in range(MAX_WARNED * 4):
        drops.count("unregistered", f"mcpb/s{number}/up", "no status", f"s{number}")
    drops.count("oversize", "mcpb/s0/up", "too large", "s0")  # a new reason past the bound: still news
    drops.count("oversize", "mcpb/s1/up", "too large", "s1")
    warned = [r.getMessage() for r in caplog.records if "dropped a message" in r.getMessage()]
    assert len(warned) == MAX_WARNED + 2, len(warned)
    assert "(oversize) on mcpb/s0/up" in warned[-1]
    assert drops.totals["unregistered"] == MAX_WARNED * 4
