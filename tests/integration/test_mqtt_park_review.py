"""A retained MCP over MQTT presence whose handshake fails unheard is parked, not given up (review
regress13), against a real mosquitto on a free loopback port (docs/protocol-serial-mqtt.md):

- a live server that misses its first `initialize` (slow to start) is bridged again by the parked
  back-off, and the warning claims no broker persistence;
- a late answer on its RPC topic, after the link ended, counts as heard and ends the parking at once;
- a dead server's stored presence is tried on the slow back-off (not in a tight loop) and warned of once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
import paho.mqtt.client as paho
import pytest
from mcp import Client
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.app import GatewayServer
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.mcp import PARKED_FIRST_S, McpProfile
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK
from tests.integration.test_mqtt_stale_status import warnings_of
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker

QUIET = {**QUICK, "check_anonymous": False}
CLIENT_ID = "gw-park"
SERVER_ID, SERVER_NAME, SLOT = "srv-7", "plant/demo", "demo"
ONLINE = orjson.dumps({"jsonrpc": "2.0", "method": mqtt_topics.METHOD_SERVER_ONLINE, "params": {"description": "d"}})
PRESENCE = mqtt_topics.server_presence_topic(SERVER_ID, SERVER_NAME)
STALE = "a retained presence of MCP server"


class SlowServer:
    """An MCP over MQTT server on a RawPeer: it leaves `ignore` initialize requests unanswered and answers
    the first `late` of the rest after `late_s` (paho's thread answers; a timer sends the late ones)."""

    def __init__(self, port: int, *, ignore: int = 0, late: int = 0, late_s: float = 0.0) -> None:
        self.ignore, self.late, self.late_s = ignore, late, late_s
        self.initializes = 0
        self.peer = RawPeer(port, SERVER_ID, on_message=self._on_message)

    async def start(self) -> None:
        assert await self.peer.connect() == "Success"
        control = mqtt_topics.server_control_topic(SERVER_ID, SERVER_NAME)
        await self.peer.subscribe(control, f"{mqtt_topics.RPC_ROOT}/+/{SERVER_ID}/{SERVER_NAME}", no_local=True)
        self.peer.publish(PRESENCE, ONLINE, retain=True)

    def _on_message(self, peer: RawPeer, message: paho.MQTTMessage) -> None:
        try:
            request = orjson.loads(message.payload)
        except orjson.JSONDecodeError:
            return
        users = dict(getattr(message.properties, "UserProperty", None) or [])
        client_id = users.get(mqtt_topics.PROP_MQTT_CLIENT_ID)
        if not isinstance(request, dict) or "id" not in request or client_id is None:
            return
        method = request.get("method")
        delay = 0.0
        result: dict[str, Any] = {}
        if method == "initialize":
            self.initializes += 1
            if self.initializes <= self.ignore:
                return
            if self.initializes <= self.ignore + self.late:
                delay = self.late_s
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "demo", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "hello", "inputSchema": {"type": "object", "properties": {}}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "hi"}]}
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [(mqtt_topics.PROP_COMPONENT_TYPE, "mcp-server")]
        topic = mqtt_topics.rpc_topic(client_id, SERVER_ID, SERVER_NAME)
        answer = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
        if delay:
            peer.loop.call_soon_threadsafe(
                peer.loop.call_later, delay, lambda: peer.client.publish(topic, answer, qos=1, properties=props)
            )
        else:
            peer.client.publish(topic, answer, qos=1, properties=props)

    async def stop(self) -> None:
        await self.peer.disconnect()


async def gateway(gateway_factory: GatewayFactory, mosquitto: Mosquitto) -> GatewayServer:
    return await gateway_factory(
        providers={"initialize_timeout_ms": 500},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["mcp"], "client_id": CLIENT_ID, **QUIET}]},
    )


def profile(server: GatewayServer) -> McpProfile:
    mcp = first_mqtt_broker(server).mcp
    assert mcp is not None
    return mcp


async def test_a_live_server_that_misses_its_first_initialize_is_bridged_again_by_the_parked_back_off(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    live = SlowServer(mosquitto.port, ignore=1)
    await live.start()  # its presence is retained before the gateway subscribes
    try:
        server = await gateway(gateway_factory, mosquitto)
        mcp = profile(server)
        await wait_for(lambda: bool(warnings_of(caplog, "gateway.mqtt", STALE)), 10, "the presence to be parked")
        [warning] = warnings_of(caplog, "gateway.mqtt", STALE)
        assert "persistence" not in warning
        assert "slow to start" in warning
        await wait_ready_slot(server, SLOT, timeout=PARKED_FIRST_S + 10)
        assert live.initializes == 2
        assert mcp.parked == set() and mcp.stale_warned == {} and mcp.status()["parked"] == {}
        async with Client(f"{server.url}/{SLOT}/mcp") as client:
            called = await client.call_tool("hello", {})
            assert not called.is_error, called.content
    finally:
        await live.stop()


async def test_a_late_answer_on_the_rpc_topic_ends_the_parking_at_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    late = SlowServer(mosquitto.port, late=1, late_s=1.0)  # initialize_timeout_ms is 500
    await late.start()
    try:
        server = await gateway(gateway_factory, mosquitto)
        mcp = profile(server)
        await wait_for(lambda: bool(warnings_of(caplog, "gateway.mqtt", STALE)), 10, "the presence to be parked")
        parked_at = time.monotonic()
        # The answer comes 0.5 s after the deadline: heard, the slot is bridged at once (the parked
        # back-off would wait PARKED_FIRST_S / 2 at least).
        await wait_ready_slot(server, SLOT, timeout=PARKED_FIRST_S / 2)
        assert time.monotonic() - parked_at < PARKED_FIRST_S / 2
        assert late.initializes == 2
        assert mcp.parked == set() and mcp.parked_topics == {}
    finally:
        await late.stop()


async def test_a_dead_servers_stored_presence_is_tried_on_the_slow_back_off_and_warned_of_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    retainer = RawPeer(mosquitto.port, "retainer")
    assert await retainer.connect() == "Success"
    retainer.publish(PRESENCE, ONLINE, retain=True)
    await retainer.disconnect()
    server = await gateway(gateway_factory, mosquitto)
    slots = server.gateway.registry.slots
    mcp = profile(server)
    await wait_for(lambda: SLOT in slots and slots[SLOT].connects == 1, 10, "the stored presence to be bridged")
    await wait_for(lambda: (SLOT, SERVER_ID) in mcp.parked, 5, "the unanswered presence to be parked")
    assert mcp.reattach.status() == {}  # not on the broker's quick back-off (0.05 s to 0.3 s)
    await wait_for(lambda: slots[SLOT].connects == 2, PARKED_FIRST_S + 5, "the parked retry")
    await wait_for(lambda: (SLOT, SERVER_ID) in mcp.parked, 5, "the presence to be parked again")
    await asyncio.sleep(PARKED_FIRST_S / 2)  # the next wait is PARKED_FIRST_S at least
    assert slots[SLOT].connects == 2
    assert len(warnings_of(caplog, "gateway.mqtt", STALE)) == 1
    assert mcp.status()["parked"][SLOT]["attempts"] == 1
