"""pump-1's repeat cache across gateway sessions (docs/pump-1.md, "Repeated requests"), on the
MicroPython Unix-port board and on the C board (pump1-host): over MQTT (a real mosquitto, a gateway
stand-in on it) a QoS 1 redelivery that arrives after the gateway's second `initialize` on the same
link is answered from the cache without acting; over WebSocket a new connection empties it."""

from __future__ import annotations

from typing import Any

import orjson

from tests.device.harness import FakeGateway
from tests.device.mqtt_harness import BrokerPeer, publish_packet, publish_raw
from tests.device.test_device_mqtt import MqttDeviceFactory, board_on_peer, mqtt_devices  # noqa: F401
from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host  # noqa: F401
from tests.support.mosquitto import Mosquitto

SLOT = "pump-1"
START_1000 = orjson.dumps(
    {"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "start", "arguments": {"speed_rpm": 1000}}}
)


async def redeliver_after_a_second_initialize(broker_port: int, peer: BrokerPeer) -> dict[str, Any]:
    """Start, stop, initialize again on the same link, then the broker's redelivery of the start: it
    gets the first answer byte for byte; returns the pump's status after it."""
    down = peer.topic(SLOT, "down")
    await publish_raw(broker_port, [publish_packet(down, START_1000, packet_id=7)])
    first = await peer.next("up")
    assert orjson.loads(first.payload)["result"]["structuredContent"]["state"] == "starting"
    assert (await peer.call(SLOT, "stop"))["structuredContent"]["state"] in ("stopping", "stopped")
    # The gateway missed a heartbeat: it initializes the slot again on the same MQTT link.
    assert "result" in await peer.handshake(SLOT)
    await publish_raw(broker_port, [publish_packet(down, START_1000, packet_id=7, dup=True)])
    again = await peer.next("up")
    assert again.payload == first.payload, "the redelivery gets the first answer, byte for byte"
    status: dict[str, Any] = (await peer.call(SLOT, "get_status"))["structuredContent"]
    assert status["state"] in ("stopping", "stopped"), "the redelivered start must not start the pump again"
    return status


async def test_micropython_board_answers_a_redelivery_after_a_second_initialize_from_the_cache(
    mosquitto: Mosquitto,
    peer: BrokerPeer,
    mqtt_devices: MqttDeviceFactory,  # noqa: F811
) -> None:
    device = await board_on_peer(mqtt_devices, peer)
    await redeliver_after_a_second_initialize(mosquitto.port, peer)
    duplicate = await device.wait_event("duplicate_request")
    assert duplicate["detail"] == "id 41 answered from the cache"


async def test_c_board_answers_a_redelivery_after_a_second_initialize_from_the_cache(
    mosquitto: Mosquitto,
    peer: BrokerPeer,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    board = await c_boards("--mqtt", f"127.0.0.1:{mosquitto.port}", "--slot", SLOT, "--verbose")
    try:
        assert (await peer.status(SLOT)).payload, "the board published an empty status"
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    await peer.handshake(SLOT)
    await redeliver_after_a_second_initialize(mosquitto.port, peer)
    # The pump counts the duplicate silently; pump1-host says so with --verbose.
    await board.wait_line(f"slot {SLOT}: duplicate_request, id 41 answered from the cache")


async def fresh_start_on_a_new_connection(gateway: FakeGateway) -> None:
    """On one WebSocket: the start, a set_speed, a second initialize and the start again (from the
    cache); then a new connection, on which the same start is a new request and acts."""
    link = await gateway.accept()
    await link.handshake()
    first_raw, first = await link.exchange(START_1000)
    assert first["result"]["structuredContent"]["setpoint_rpm"] == 1000
    assert (await link.call("set_speed", {"speed_rpm": 2000}))["structuredContent"]["setpoint_rpm"] == 2000
    await link.handshake()
    again_raw, _ = await link.exchange(START_1000)
    assert again_raw == first_raw, "a second initialize on the same connection keeps the cache"
    assert (await link.call("get_status"))["structuredContent"]["setpoint_rpm"] == 2000

    await link.ws.close(code=1001, message=b"gateway restarting")
    link = await gateway.accept()
    await link.handshake()
    _, fresh = await link.exchange(START_1000)
    assert fresh["result"]["structuredContent"]["setpoint_rpm"] == 1000
    status = (await link.call("get_status"))["structuredContent"]
    assert status["setpoint_rpm"] == 1000, "on a new connection the start is a new request and acts"


async def test_c_board_empties_the_cache_on_a_new_websocket_connection(
    fake_gateway: FakeGateway,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    board = await c_boards("--url", fake_gateway.url, "--slot", SLOT)
    try:
        await fresh_start_on_a_new_connection(fake_gateway)
    except (AssertionError, TimeoutError) as exc:
        raise AssertionError(f"{exc!r}; the board said:\n{board.output()}") from None
