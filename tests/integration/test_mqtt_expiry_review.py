"""The MQTT 5 message expiry of the gateway's requests is each request's own deadline, against a real
mosquitto (docs/protocol-serial-mqtt.md, "Plain profile"): a slot's request_timeout_ms, a tool's
tool_timeouts_ms entry and initialize_timeout_ms, not the providers' default, so that a board that was
away never acts on a request whose caller was already answered."""

from __future__ import annotations

import orjson
import paho.mqtt.client as paho

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK, Board, call
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer

SLOT = "pump-1"


async def test_each_request_expires_on_the_broker_at_its_own_deadline(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    expiries: dict[str, list[int | None]] = {}

    def seen(_peer: RawPeer, message: paho.MQTTMessage) -> None:  # paho's thread: list appends only
        method = str(orjson.loads(message.payload).get("method"))
        expiries.setdefault(method, []).append(getattr(message.properties, "MessageExpiryInterval", None))

    # A spy on the board's down topic (MQTT 5: it sees the expiry the broker forwards, never above the
    # one the gateway set).
    spy = RawPeer(mosquitto.port, "spy", v5=True, on_message=seen)
    assert await spy.connect() == "Success"
    await spy.subscribe(f"mcpb/{SLOT}/down")
    board = Board(mosquitto.port, SLOT)
    server = await gateway_factory(
        providers={"initialize_timeout_ms": 3000},  # request_timeout_ms stays the default, 60 s
        slots={"declared": {SLOT: {"request_timeout_ms": 5000, "tool_timeouts_ms": {"start": 2000}}}},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUICK}]},
    )
    try:
        await board.connect()
        await wait_ready_slot(server, SLOT, 10)
        await call(server.url, SLOT, "get_status")
        await call(server.url, SLOT, "start", {"speed_rpm": 1300})
        await wait_for(lambda: len(expiries.get("tools/call", [])) >= 2, 10, "both calls on the down topic")
    finally:
        await board.disconnect()
        await spy.disconnect()
    initialize, tools_list, (get_status, start) = expiries["initialize"], expiries["tools/list"], expiries["tools/call"]
    assert all(expiry is not None and 1 <= expiry <= 3 for expiry in initialize), expiries
    assert all(expiry is not None and 1 <= expiry <= 5 for expiry in tools_list), expiries
    assert all(expiry is not None and 1 <= expiry <= 5 for expiry in expiries["notifications/initialized"]), expiries
    assert get_status is not None and 1 <= get_status <= 5, expiries
    assert start is not None and 1 <= start <= 2, expiries
