"""The simulated pump's repeat cache (docs/pump-1.md, "Repeated requests"): it outlives a gateway's
second `initialize` on the same MQTT link, so a QoS 1 redelivery that arrives after it is answered
from the cache without acting; a new WebSocket connection, a new gateway session, empties it."""

from __future__ import annotations

import orjson

from sim.mqtt import MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.device.harness import FakeGateway
from tests.device.mqtt_harness import BrokerPeer, publish_packet, publish_raw
from tests.sim.conftest import SimulatorFactory
from tests.support.mosquitto import Mosquitto

SLOT = "pump-1"
START_1000 = orjson.dumps(
    {"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "start", "arguments": {"speed_rpm": 1000}}}
)


def duplicates(simulator: Simulator) -> int:
    count: int = simulator.state(SLOT)["requests"]["duplicates"]
    return count


async def test_a_redelivery_after_a_second_initialize_on_mqtt_is_answered_from_the_cache(
    mosquitto: Mosquitto, peer: BrokerPeer
) -> None:
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3)
    simulator = Simulator(None, settings, mqtt=MqttTarget(mosquitto.url, "plain"))
    simulator.start()
    try:
        assert (await peer.status(SLOT)).payload, "the simulated pump published an empty status"
        await peer.handshake(SLOT)
        down = peer.topic(SLOT, "down")
        await publish_raw(mosquitto.port, [publish_packet(down, START_1000, packet_id=7)])
        first = await peer.next("up")
        assert orjson.loads(first.payload)["result"]["structuredContent"]["state"] == "starting"
        stopped = await peer.call(SLOT, "stop")
        assert stopped["structuredContent"]["state"] in ("stopping", "stopped")

        # The gateway missed a heartbeat and initializes the slot again on the same link; then the
        # broker redelivers the start (DUP, same packet id, same bytes).
        await peer.handshake(SLOT)
        await publish_raw(mosquitto.port, [publish_packet(down, START_1000, packet_id=7, dup=True)])
        again = await peer.next("up")
        assert again.payload == first.payload, "the redelivery gets the first answer, byte for byte"
        assert duplicates(simulator) == 1
        status = (await peer.call(SLOT, "get_status"))["structuredContent"]
        assert status["state"] in ("stopping", "stopped"), "the redelivered start must not start the pump again"
    finally:
        await simulator.stop()


async def test_a_new_websocket_connection_empties_the_cache(simulators: SimulatorFactory) -> None:
    gateway = FakeGateway()
    await gateway.start()
    try:
        simulator = await simulators(gateway.url)
        link = await gateway.accept()
        await link.handshake()
        first_raw, first = await link.exchange(START_1000)
        assert first["result"]["structuredContent"]["setpoint_rpm"] == 1000
        await link.call("set_speed", {"speed_rpm": 2000})
        # A second initialize on the same connection keeps the cache.
        await link.handshake()
        again_raw, _ = await link.exchange(START_1000)
        assert again_raw == first_raw
        assert duplicates(simulator) == 1

        # A new connection is a new gateway session, whose ids may start over: id 41 is a new request.
        await link.ws.close(code=1001, message=b"gateway restarting")
        link = await gateway.accept()
        await wait_for(lambda: simulator.state(SLOT)["link"]["links"] == 2, 5, "the second connection")
        await link.handshake()
        _, fresh = await link.exchange(START_1000)
        assert fresh["result"]["structuredContent"]["setpoint_rpm"] == 1000
        status = (await link.call("get_status"))["structuredContent"]
        assert status["setpoint_rpm"] == 1000, "on a new connection the start is a new request and acts"
        assert duplicates(simulator) == 1
    finally:
        await gateway.stop()
