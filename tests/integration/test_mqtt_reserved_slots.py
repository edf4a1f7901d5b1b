"""A plain-profile status for a slot name reserved for the gateway (`_all`, `_broker`, `_x`) is refused
as every way in refuses such a name: counted `refused`, answered on the board's `down` topic with the
reason, and warned once per name (docs/protocol-serial-mqtt.md). A real mosquitto carries it."""

from __future__ import annotations

import logging
from functools import partial

import orjson
import pytest

from tests.conftest import GatewayFactory, wait_for
from tests.integration.test_mqtt_gateway import mqtt_gateway
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer, Seen
from tests.support.southbound import first_mqtt_broker

RESERVED = {
    "_all": 'Provider "_all" is reserved by the broker',
    "_broker": 'Provider "_broker" is reserved by the broker',
    "_x": 'Provider "_x" is reserved: names starting with "_" belong to the gateway',
}


def on_topic(topic: str, seen: Seen) -> bool:
    return seen.topic == topic


def register(slot: str) -> bytes:
    hello = {"device_id": f"dev{slot}", "firmware": {"name": "t", "version": "1"}}
    params = {"slot": slot, "hello": hello}
    return orjson.dumps({"jsonrpc": "2.0", "method": "notifications/register", "params": params})


async def test_a_reserved_slots_status_is_refused_on_down_and_warned_once_per_name(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.mqtt")
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["plain"])
    board = RawPeer(mosquitto.port, "reserved-board")
    assert await board.connect() == "Success"
    try:
        await board.subscribe("mcpb/+/down")
        broker = first_mqtt_broker(server)
        await wait_for(lambda: "mcpb/+/status" in broker.subscribed, 10, "the gateway's subscriptions")
        drops = broker.drops
        for slot, reason in RESERVED.items():
            for _attempt in range(2):
                board.publish(f"mcpb/{slot}/status", register(slot))
                seen = await board.next(partial(on_topic, f"mcpb/{slot}/down"))
                assert orjson.loads(seen.payload) == {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32000, "message": reason, "data": {"device_id": f"dev{slot}"}},
                }
        await wait_for(lambda: drops.totals.get("refused") == 6, 5, "six refused statuses")
        assert drops.totals["wrong_topic"] == 0
        warned = [r.getMessage() for r in caplog.records if "refused the status on" in r.getMessage()]
        assert len(warned) == 3, warned
        assert all(any(f"mcpb/{slot}/status" in text for text in warned) for slot in RESERVED)
        # A reserved name's up topic, and an empty status (a will), stay wrong topics: nothing to answer.
        board.publish("mcpb/_x/up", b"{}")
        board.publish("mcpb/_x/status", b"")
        await wait_for(lambda: drops.totals.get("wrong_topic") == 2, 5, "two wrong topics")
    finally:
        await board.disconnect()
