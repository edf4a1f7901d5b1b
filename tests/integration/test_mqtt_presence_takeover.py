"""MCP over MQTT presences that reuse a server-id under another slot (docs/mqtt-broker.md, "One server-id
under two slots"): against a real mosquitto running the appliance's own configuration and ACL, with the
simulator as the server and a raw paho client holding another device's credential.

The appliance's ACL confines a credential to server-names ending in its username but leaves the
server-id level free, so pump-7's password may announce `$mcp-server/presence/sim-pump-1/pump-7`: the
server-id of pump-1's server under pump-7's own slot. That must not take pump-1's slot away, neither
live nor when the broker hands both retained presences again after the gateway reconnects, in either
order.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.southbound.mqtt.brokers import MqttBroker
from sim.mqtt import MqttPumpLink
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import (
    IMAGE,
    appliance_config,
    appliance_gateway_broker,
    call,
    simulator,
    wait_gone,
)
from tests.support.mosquitto import write_password_file
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker, provider_status

ONLINE = orjson.dumps(
    {"jsonrpc": "2.0", "method": "notifications/server/online", "params": {"description": "not pump-1"}}
)
VICTIM_PRESENCE = "$mcp-server/presence/sim-pump-1/sim/pumps/pump-1"
"""What the simulator's pump-1 announces (server-id sim-pump-1, server-name sim/pumps/pump-1)."""
CLAIM = "$mcp-server/presence/sim-pump-1/pump-7"
"""pump-7's credential announcing pump-1's server-id under its own slot: the appliance's ACL lets it."""
SECRETS = {name: f"{name}-secret-0123" for name in ("mcp-gateway", "pump-1", "pump-7")}


def write_files(directory: Path) -> None:
    """The appliance broker's ACL and password file, and each credential's password in a file."""
    directory.mkdir()
    (directory / "acl").write_text((IMAGE / "acl").read_text())
    write_password_file(directory / "passwd", SECRETS)
    for name, secret in SECRETS.items():
        (directory / f"{name}-password").write_text(secret)
    (directory / "mqtt-password").write_text(SECRETS["mcp-gateway"])


async def appliance(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, directory: Path
) -> tuple[GatewayServer, MqttBroker, int, int]:
    """The appliance's broker (image/mosquitto) and a gateway on its loopback listener: (server, its
    broker connection, the LAN port, the loopback port)."""
    write_files(directory)
    lan, loopback = free_port(), free_port()
    await mosquitto_factory(config_text=appliance_config(directory, lan, loopback), port=lan)
    server = await gateway_factory(mqtt={"brokers": [appliance_gateway_broker(directory, loopback)]})
    broker = first_mqtt_broker(server)
    await wait_for(lambda: len(broker.subscribed) == 3, 5, "the gateway subscribed on its loopback listener")
    return server, broker, lan, loopback


async def claim(lan: int) -> None:
    """pump-7's credential announces pump-1's server-id, retained, then leaves (no will)."""
    pump_7 = RawPeer(lan, "pump-7", username="pump-7", password=SECRETS["pump-7"])
    assert await pump_7.connect() == "Success"
    pump_7.publish(CLAIM, ONLINE, retain=True)  # PUBACKed: the broker took it (the ACL let it through)
    await pump_7.disconnect()


async def reconnect_gateway(broker: MqttBroker, loopback: int) -> None:
    """Knock the gateway's connection off (another connection with its client id, on its listener): it
    reconnects, subscribes again and receives every retained presence anew."""
    losses = broker.client.losses
    intruder = RawPeer(loopback, broker.client.client_id, username="mcp-gateway", password=SECRETS["mcp-gateway"])
    assert await intruder.connect() == "Success"
    await wait_for(lambda: broker.client.losses > losses, 5, "the gateway to lose its connection")
    await intruder.disconnect()
    await wait_for(lambda: broker.client.connected, 10, "the gateway to reconnect")


@pytest.mark.parametrize("claimed_first", [False, True], ids=["claim-while-pump-1-serves", "claim-before-pump-1"])
async def test_a_presence_reusing_a_server_id_under_another_slot_never_displaces_its_instance(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    claimed_first: bool,
) -> None:
    server, broker, lan, loopback = await appliance(gateway_factory, mosquitto_factory, tmp_path / "appliance")
    registry = server.gateway.registry
    if claimed_first:
        await claim(lan)
        await wait_for(lambda: "pump-7" in registry.slots, 5, "the claim's slot pump-7")
    pump_file = str(tmp_path / "appliance" / "pump-1-password")
    sim = simulator(f"mqtt://127.0.0.1:{lan}", "mcp", username="pump-1", password_file=pump_file)
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        if not claimed_first:
            with caplog.at_level(logging.WARNING, logger="gateway.mqtt"):
                await claim(lan)
                # The claim is bridged into its own slot (pump-7's credential may use that one).
                await wait_for(lambda: "pump-7" in registry.slots, 5, "the claim's slot pump-7")
        entry = registry.slots["pump-1"]
        assert entry.live is not None and entry.live.ready, entry.last_disconnect_reason
        assert entry.connects == 1, "pump-1's slot was taken away and given back"
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        link = sim.links["pump-1"]
        assert isinstance(link, MqttPumpLink) and (link.client.connects, link.client.losses) == (1, 0)
        status = await provider_status(server.url, "pump-1")
        assert status["upstream"]["server_name"] == "sim/pumps/pump-1"
        assert status["upstream"]["server_id_also_in"] == ["pump-7"]
        assert broker.mcp is not None and broker.mcp.status()["shared_server_ids"] == 1
        if not claimed_first:
            [warning] = [r.getMessage() for r in caplog.records if "MCP server-id 'sim-pump-1'" in r.getMessage()]
            assert "announced as 'pump-7' (slot 'pump-7')" in warning
            assert "'sim/pumps/pump-1' (slot 'pump-1')" in warning
            assert "neither replaces the other" in warning

        # After a reconnect the broker hands both retained presences again, in an order of its own
        # (the order they were stored in: the test runs both): pump-1 comes back whichever comes first.
        await reconnect_gateway(broker, loopback)
        await wait_for(lambda: registry.slots["pump-1"].connects == 2, 10, "pump-1 attached again")
        await wait_ready_slot(server, "pump-1", timeout=10)
        await wait_for(lambda: "pump-7" in broker.mcp.of_slot if broker.mcp else False, 5, "the claim again")
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        status = await provider_status(server.url, "pump-1")
        assert status["upstream"]["server_name"] == "sim/pumps/pump-1"
    finally:
        await sim.stop()


async def test_a_server_that_goes_offline_then_announces_a_new_name_is_bridged_under_it(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    """The rule's other side: a server-id is free for another slot once its instance is gone (an emptied
    presence: a will or a clean shutdown). slot_naming = "dashed" makes plant/a/pump-1 and
    plant/b/pump-1 two slots for the simulator's one server-id sim-pump-1."""
    from tests.integration.test_mqtt_gateway import mqtt_gateway
    from tests.support.mosquitto import Mosquitto

    broker_process: Mosquitto = await mosquitto_factory()
    server = await mqtt_gateway(gateway_factory, broker_process, profiles=["mcp"], slot_naming="dashed")
    old = simulator(broker_process.url, "mcp", server_prefix="plant/a")
    try:
        await wait_ready_slot(server, "plant-a-pump-1", timeout=10)
    finally:
        await old.stop()
    assert "presence was emptied" in await wait_gone(server, "plant-a-pump-1")
    new = simulator(broker_process.url, "mcp", server_prefix="plant/b")
    try:
        await wait_ready_slot(server, "plant-b-pump-1", timeout=10)
        assert (await call(server.url, "plant-b-pump-1", "get_status"))["state"] == "stopped"
        mcp = first_mqtt_broker(server).mcp
        assert mcp is not None
        status = mcp.status()
        # The old name is forgotten, not retried: its presence was emptied.
        assert (status["bridged"], status["reattaching"], status["instances"]) == (["plant-b-pump-1"], {}, 1)
        assert status["shared_server_ids"] == 0
    finally:
        await new.stop()
