"""MQTT defects a review reproduced against a real mosquitto, each against a real mosquitto on a free
loopback port (docs/protocol-serial-mqtt.md, "MQTT ways in"; docs/mqtt-broker.md):

- a retained message on a board's `up` topic (or an MCP server's RPC topic) is the broker's stored copy:
  dropped and counted (`retained`), never taken as the device being alive, so a dead board's stored
  status is tried once; a dead MCP server's stored presence is tried once too;
- a TLS broker that requires a client certificate is one warning, however OpenSSL words each failure;
- a scheme that does not match the listener says so;
- one broker listed under two names is warned of, naming both entries;
- a board whose status stands but which never answers is tried again forever: its failed initialize is
  one warning per logging.repeat_interval_s, not one per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest

from gateway.southbound.mqtt import topics as mqtt_topics
from sim import firmware
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for
from tests.integration.test_mqtt_gateway import QUICK, Board
from tests.integration.test_mqtt_stale_status import store_status, warnings_of
from tests.integration.test_mqtt_tls_acl import gateway_password, pki, tls_broker_config, tls_url
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker

QUIET = {**QUICK, "check_anonymous": False}
SLOT = "pump-1"


async def retain(port: int, topic: str, payload: bytes) -> None:
    """Leave `payload` retained on `topic` (MQTT 5), with nobody behind it."""
    peer = RawPeer(port, "retainer", v5=True)
    assert await peer.connect() == "Success"
    peer.publish(topic, payload, retain=True)
    await peer.disconnect()


async def test_a_retained_message_on_up_is_dropped_and_is_no_sign_of_life(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    board = Board(mosquitto.port, SLOT)
    await store_status(mosquitto.port, board)
    # The board's last answer, published retained, outlives it on the broker.
    await retain(mosquitto.port, board.topics["up"], b'{"jsonrpc":"2.0","id":5,"result":{}}')
    server = await gateway_factory(
        providers={"initialize_timeout_ms": 500},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUIET}]},
    )
    slots = server.gateway.registry.slots
    await wait_for(lambda: SLOT in slots and slots[SLOT].connects == 1, 10, "the stored status to attach")
    await asyncio.sleep(3.0)  # back-off 0.05 s to 0.3 s: taken as life, the slot would be tried again and again
    assert slots[SLOT].connects == 1
    assert len(warnings_of(caplog, "gateway.mqtt", "a retained status of device")) == 1
    drops = first_mqtt_broker(server).drops
    assert drops.totals["retained"] == 1
    assert drops.of_slot(SLOT) == {"retained": 1}
    assert drops.last["retained"].startswith(f"{board.topics['up']}: a retained message on a topic of live traffic")


async def test_a_retained_presence_of_a_dead_server_is_tried_once_and_a_retained_rpc_message_is_dropped(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client_id = "gw-review"
    server_id, server_name, slot = "sid-9", "plant/pump-9", "pump-9"
    online = {"jsonrpc": "2.0", "method": mqtt_topics.METHOD_SERVER_ONLINE, "params": {"server_name": server_name}}
    await retain(mosquitto.port, mqtt_topics.server_presence_topic(server_id, server_name), orjson.dumps(online))
    rpc = mqtt_topics.rpc_topic(client_id, server_id, server_name)
    await retain(mosquitto.port, rpc, b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}')
    server = await gateway_factory(
        providers={"initialize_timeout_ms": 500},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["mcp"], "client_id": client_id, **QUIET}]},
    )
    slots = server.gateway.registry.slots
    await wait_for(lambda: slot in slots and slots[slot].connects == 1, 10, "the stored presence to be bridged")
    await asyncio.sleep(3.0)
    assert slots[slot].connects == 1
    mcp = first_mqtt_broker(server).mcp
    assert mcp is not None and mcp.reattach.status() == {}
    [warning] = warnings_of(caplog, "gateway.mqtt", "a retained presence of MCP server")
    assert f"slot {slot}: a retained presence of MCP server '{server_name}' ('{server_id}')" in warning
    assert "waiting for it to announce itself again" in slots[slot].last_disconnect_reason
    assert first_mqtt_broker(server).drops.totals["retained"] >= 1

    # The server comes back: its presence, published now, is bridged at once.
    peer = RawPeer(mosquitto.port, server_id, v5=True)
    assert await peer.connect() == "Success"
    try:
        peer.publish(mqtt_topics.server_presence_topic(server_id, server_name), orjson.dumps(online), retain=True)
        await wait_for(lambda: slots[slot].connects == 2, 10, "the new presence to be bridged")
        assert mcp.stale_warned == {}
    finally:
        await peer.disconnect()


async def test_a_broker_that_requires_a_client_certificate_is_one_warning_however_openssl_words_it(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.mqtt")
    tls = pki(tmp_path / "tls")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls, require_certificate=True))
    entry = {"url": tls_url(broker), "ca_file": str(tls / "ca.pem"), **QUIET}
    server = await gateway_factory(mqtt={"brokers": [entry]})
    client = first_mqtt_broker(server).client
    seen: set[str] = set()

    def words() -> bool:
        seen.add(client.last_error)
        return client.attempts >= 25

    await wait_for(words, 20, "failed attempts")
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.name == "gateway.mqtt" and r.levelno == logging.WARNING and "client certificate" in r.getMessage()
    ]
    assert len(warned) == 1, (warned, seen)
    assert client.last_error_kind == "tls"


async def test_a_scheme_that_does_not_match_the_listener_is_named(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, mosquitto: Mosquitto, tmp_path: Path
) -> None:
    tls = pki(tmp_path / "tls")
    tls_broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls))
    plain_to_tls = await gateway_factory(
        mqtt={"brokers": [{"url": f"mqtt://localhost:{tls_broker.port}", **gateway_password(tmp_path), **QUIET}]}
    )
    tls_to_plain = await gateway_factory(
        mqtt={"brokers": [{"url": f"mqtts://localhost:{mosquitto.port}", "ca_file": str(tls / "ca.pem"), **QUIET}]}
    )
    to_tls = first_mqtt_broker(plain_to_tls).client
    to_plain = first_mqtt_broker(tls_to_plain).client
    await wait_for(lambda: to_tls.attempts >= 2 and to_plain.attempts >= 2, 10, "failed attempts")
    assert to_tls.last_error == (
        "connection closed before the broker's CONNACK: the broker or the network closed it; the listener may "
        "expect TLS (an mqtts:// URL), and this URL is mqtt://"
    )
    assert to_plain.last_error.startswith("cannot connect: "), to_plain.last_error
    assert to_plain.last_error.endswith(
        "; the listener may expect plain MQTT (an mqtt:// URL), and this URL is mqtts://"
    ), to_plain.last_error


async def test_one_broker_listed_under_two_names_is_warned_of_naming_both(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    by_address, by_name = mosquitto.url, f"mqtt://localhost:{mosquitto.port}"
    server = await gateway_factory(
        mqtt={"brokers": [{"url": by_address, **QUIET}, {"url": by_name, **QUIET}]},
    )
    assert server.mqtt is not None
    first, second = server.mqtt.brokers
    await wait_for(lambda: first.same_broker_as == [by_name], 10, "the check of both entries")
    assert second.same_broker_as == [by_address]
    assert first.status()["same_broker_as"] == [by_name]
    [warning] = warnings_of(caplog, "gateway.mqtt", "are one broker")
    assert warning.startswith(
        f"MQTT brokers {by_address} (mqtt.brokers[0]) and {by_name} (mqtt.brokers[1]) are one broker: both reach "
        f"loopback (127.0.0.1, ::1) port {mosquitto.port}."
    )


async def test_one_broker_per_entry_is_not_warned_of(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    one, other = await mosquitto_factory(), await mosquitto_factory()
    server = await gateway_factory(mqtt={"brokers": [{"url": one.url, **QUIET}, {"url": other.url, **QUIET}]})
    assert server.mqtt is not None and server.mqtt._checking is not None
    await asyncio.wait_for(server.mqtt._checking, 10)
    assert warnings_of(caplog, "gateway.mqtt", "are one broker") == []
    assert [broker.same_broker_as for broker in server.mqtt.brokers] == [[], []]


async def test_a_board_that_never_answers_is_one_failed_initialize_warning_per_repeat_interval(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await gateway_factory(
        providers={"initialize_timeout_ms": 200},
        logging={"repeat_interval_s": 60.0},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], **QUIET}]},
    )
    await wait_for(lambda: first_mqtt_broker(server).client.connected, 10, "the broker connection")
    await wait_for(lambda: bool(first_mqtt_broker(server).subscribed), 10, "the subscriptions")
    # A board that announced itself while the gateway listened, then died without a will: its status stands.
    board = Board(mosquitto.port, SLOT)
    peer = RawPeer(mosquitto.port, "mute-board", v5=False)
    assert await peer.connect() == "Success"
    peer.publish(board.topics["status"], firmware.register_frame(board.hello, SLOT), retain=True)
    await peer.disconnect()
    slots = server.gateway.registry.slots
    await wait_for(lambda: SLOT in slots and slots[SLOT].connects >= 5, 20, "attempts again")
    failed = warnings_of(caplog, "gateway.provider", "failed to initialize")
    assert len(failed) == 1, failed
    assert failed[0].startswith(f"provider for slot {SLOT} failed to initialize: ")
    assert "once per logging.repeat_interval_s" in failed[0]
