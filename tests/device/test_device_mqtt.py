"""pump-1 on the MicroPython Unix port (96 KB heap) over the plain MQTT profile
(docs/protocol-serial-mqtt.md, "Plain profile"), through a real mosquitto: behind the real gateway
and called by SDK clients, and byte by byte against a gateway stand-in on the broker (redeliveries,
malformed payloads, retained requests, a broker that restarts or freezes). umqtt.simple comes from
PyPI onto the Unix port's module path, as `mip` puts it on a board; a test that cannot get it,
mosquitto or micropython fails, never skips.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client

from bench.ports import free_port
from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.device.conftest import DeviceFactory
from tests.device.harness import DEVICE_HEAP, SCHEMA_FILE, Device, start_device
from tests.device.mqtt_harness import BrokerPeer, publish_packet, publish_raw
from tests.device.test_device_wss import self_signed
from tests.device.test_mpy_cross import compiled_board, start_compiled
from tests.device.test_pump_gateway import assert_physics, poll, status_of
from tests.support.mosquitto import Mosquitto

SLOT = "pump-1"
MqttDeviceFactory = Callable[..., Awaitable[Device]]


@pytest.fixture
async def mqtt_devices(micropython: str, umqtt: Path, tmp_path: Path) -> AsyncIterator[MqttDeviceFactory]:
    """Start pump-1 boards on the MQTT transport: `await mqtt_devices(port, slot=..., mqtt={...})`."""
    started: list[Device] = []

    async def start(port: int, mqtt: dict[str, Any] | None = None, **overrides: Any) -> Device:
        config = {
            "transport": "mqtt",
            "mqtt": {"broker": "127.0.0.1", "port": port, **(mqtt or {})},
            "schema_path": str(SCHEMA_FILE),
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
            "connect_timeout_s": 2,
            **overrides,
        }
        device = await start_device(micropython, tmp_path / f"board-{len(started)}.json", config, (umqtt,))
        started.append(device)
        return device

    yield start
    for device in started:
        await device.stop()


def broker_log(broker: Mosquitto) -> str:
    return broker.log_file.read_text(errors="replace")


def mqtt_gateway_config(broker: Mosquitto, **broker_overrides: Any) -> dict[str, Any]:
    return {
        "mqtt": {"brokers": [{"url": f"mqtt://127.0.0.1:{broker.port}", "profiles": ["plain"], **broker_overrides}]}
    }


async def tls_broker(mosquitto_factory: MosquittoFactory, tls: Path, tmp_path: Path) -> tuple[Mosquitto, int]:
    """A mosquitto with a plain listener (broker.port, for the gateway) and a TLS one (the port returned)."""
    tls_port = free_port()
    broker = await mosquitto_factory(
        config_text="\n".join(
            [
                "per_listener_settings false",
                "allow_anonymous true",
                "persistence false",
                f"log_dest file {tmp_path / 'tls-broker.log'}",
                "listener {port} 127.0.0.1",
                f"listener {tls_port} 127.0.0.1",
                f"cafile {tls / 'ca.pem'}",
                f"certfile {tls / 'server.pem'}",
                f"keyfile {tls / 'server-key.pem'}",
            ]
        )
        + "\n"
    )
    return broker, tls_port


async def board_on_peer(mqtt_devices: MqttDeviceFactory, peer: BrokerPeer, **config: Any) -> Device:
    device = await mqtt_devices(peer.port, **config)
    status = await peer.status()
    assert status.payload, "the board published an empty status"
    await peer.handshake()
    return device


# --- through the gateway, called by SDK clients ---------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_client_runs_the_mqtt_board_through_the_gateway(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, mqtt_devices: MqttDeviceFactory, mode: str
) -> None:
    gateway = await gateway_factory(**mqtt_gateway_config(mosquitto))
    await mqtt_devices(mosquitto.port, device_id="mqtt-board-1")
    await wait_ready_slot(gateway, SLOT, timeout=15)
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    expected = tools_hash(orjson.loads(SCHEMA_FILE.read_bytes()))
    assert session.tools_hash == expected  # listed by the gateway over MQTT, page by page
    assert session.hello == {
        "device_id": "mqtt-board-1",
        "firmware": {"name": "pump-1-micropython", "version": "0.1.0"},
        "schema": expected,
    }
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode=mode) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == ["get_status", "start", "set_speed", "stop", "reset_fault"]
        assert (await status_of(client))["state"] == "stopped"

        started = await status_of(client, "start", {"speed_rpm": 1200})
        assert started["state"] == "starting"
        ramp = await poll(client, lambda s: s["state"] == "running")
        speeds = [s["speed_rpm"] for s in ramp]
        assert speeds == sorted(speeds), "the speed ramps up without going back"
        assert ramp[-1]["speed_rpm"] == 1200
        for sample in ramp:
            assert_physics(sample)

        changed = await status_of(client, "set_speed", {"speed_rpm": 1800})
        assert changed["setpoint_rpm"] == 1800
        assert_physics((await poll(client, lambda s: s["speed_rpm"] == 1800))[-1])

        refused = await client.call_tool("start", {"speed_rpm": 5000})
        assert refused.is_error
        assert "speed_rpm 5000 is out of range" in refused.content[0].text  # type: ignore[union-attr]

        assert (await status_of(client, "stop"))["state"] == "stopping"
        stopped = (await poll(client, lambda s: s["state"] == "stopped"))[-1]
        assert stopped["speed_rpm"] == 0
        assert stopped["setpoint_rpm"] == 1800


async def test_a_killed_board_clears_its_status_and_the_gateway_detaches_it(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, mqtt_devices: MqttDeviceFactory
) -> None:
    watcher = BrokerPeer(mosquitto.port, client_id="status-watcher")
    await watcher.start(f"mcpb/{SLOT}/status")
    try:
        gateway = await gateway_factory(**mqtt_gateway_config(mosquitto))
        device = await mqtt_devices(mosquitto.port)
        assert (await watcher.status()).payload  # the register frame, retained
        await wait_ready_slot(gateway, SLOT, timeout=15)
        async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
            await status_of(client, "start", {"speed_rpm": 900})

            device.process.send_signal(signal.SIGKILL)  # no DISCONNECT, no goodbye: the broker's will speaks
            cleared = await watcher.status()
            assert cleared.payload == b""

            def detached() -> bool:
                entry = gateway.gateway.registry.slots.get(SLOT)
                return entry is None or entry.live is None

            await wait_for(detached, 10, "the gateway to detach the slot")
            with pytest.raises(Exception, match=f'Provider "{SLOT}" not connected'):
                await client.call_tool("get_status", {})

        # A board that comes back announces itself again and gets its slot back.
        await mqtt_devices(mosquitto.port)
        assert (await watcher.status()).payload
        await wait_ready_slot(gateway, SLOT, timeout=15)
        async with Client(f"{gateway.url}/{SLOT}/mcp", mode="2026-07-28") as client:
            assert (await status_of(client))["state"] == "stopped"  # a new boot: the motor was stopped
    finally:
        await watcher.stop()


async def test_a_board_stopped_at_its_console_clears_its_status_at_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, mqtt_devices: MqttDeviceFactory
) -> None:
    gateway = await gateway_factory(**mqtt_gateway_config(mosquitto))
    watcher = BrokerPeer(mosquitto.port, client_id="status-watcher")
    await watcher.start(f"mcpb/{SLOT}/status")
    try:
        device = await mqtt_devices(mosquitto.port)
        assert (await watcher.status()).payload
        await wait_ready_slot(gateway, SLOT, timeout=15)

        device.process.send_signal(signal.SIGINT)  # Ctrl-C: on a board the REPL keeps the socket open
        await device.wait_event("link_closed", reason="app ended")
        assert (await watcher.status()).payload == b""
        await device.wait_event("motor_stopped")
        assert await device.wait_exit() == 0
        await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live is None, 10, "the slot to be detached")
        # A clean DISCONNECT, so the broker discarded the will instead of publishing it on top.
        await wait_for(lambda: "Client mcpb-pump-1 disconnected." in broker_log(mosquitto), 5, "a clean DISCONNECT")
    finally:
        await watcher.stop()


async def test_a_board_the_gateway_refuses_logs_why_and_gets_the_slot_once_free(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, mqtt_devices: MqttDeviceFactory, devices: DeviceFactory
) -> None:
    # The gateway's back-off is far longer than the test waits: only the freed slot can explain the attach.
    gateway = await gateway_factory(**mqtt_gateway_config(mosquitto, reconnect_initial_s=60, reconnect_max_s=120))
    old = await devices(gateway.url, device_id="old-websocket-board")  # still holds pump-1
    await wait_ready_slot(gateway, SLOT, timeout=10)
    # A board that would not dial again (and announce itself anew) within the test.
    new = await mqtt_devices(mosquitto.port, device_id="new-mqtt-board", link_timeout_s=600.0)
    refused = await new.wait_event("gateway_error")
    assert refused["detail"].startswith("Slot already held by a live provider"), refused

    await old.stop()
    # Its status still stands: the gateway attaches it as soon as the slot frees.

    def attached() -> bool:
        entry = gateway.gateway.registry.slots.get(SLOT)
        live = entry.live if entry is not None else None
        return live is not None and live.ready and (live.hello or {}).get("device_id") == "new-mqtt-board"

    await wait_for(attached, 15, "the MQTT board to get the slot")
    assert len(new.named("link_up")) == 1  # on the connection it had: no new status
    assert len(new.named("gateway_error")) == 1  # told once, however often the gateway tried again


# --- against a gateway stand-in on the broker, byte by byte ---------------------------------------------


async def test_the_status_is_the_retained_register_frame(
    mosquitto: Mosquitto, peer: BrokerPeer, mqtt_devices: MqttDeviceFactory
) -> None:
    device = await mqtt_devices(mosquitto.port, device_id="aa:bb:cc:dd:ee:ff")
    status = await peer.status()
    assert status.retain is False  # a live subscriber gets it as it is published
    expected = {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {
            "slot": SLOT,
            "aggregate": True,
            "hello": {
                "device_id": "aa:bb:cc:dd:ee:ff",
                "firmware": {"name": "pump-1-micropython", "version": "0.1.0"},
                "schema": tools_hash(orjson.loads(SCHEMA_FILE.read_bytes())),
            },
        },
    }
    assert orjson.loads(status.payload) == expected
    # A gateway that starts later finds the board through the retained status.
    late = BrokerPeer(mosquitto.port, client_id="late-gateway")
    await late.start()
    try:
        found = await late.status()
        assert found.retain is True
        assert orjson.loads(found.payload) == expected
    finally:
        await late.stop()
    ready = await device.wait_event("link_up")
    assert ready["url"] == f"mqtt://127.0.0.1:{mosquitto.port}/mcpb/{SLOT}"
    answer = await peer.handshake()
    assert answer["result"]["serverInfo"] == {"name": "pump-1", "version": "0.1.0"}
    assert (await peer.request(SLOT, "ping"))["result"] == {}  # the gateway's heartbeat on MQTT


async def test_a_redelivered_request_is_executed_once_and_answered_twice_alike(
    mosquitto: Mosquitto, peer: BrokerPeer, mqtt_devices: MqttDeviceFactory
) -> None:
    device = await board_on_peer(mqtt_devices, peer)
    start_1000 = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 41,
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"speed_rpm": 1000}},
        }
    )
    down = peer.topic(SLOT, "down")
    await publish_raw(mosquitto.port, [publish_packet(down, start_1000, packet_id=7)])
    first = await peer.next("up")
    assert orjson.loads(first.payload)["result"]["structuredContent"]["setpoint_rpm"] == 1000
    assert (await peer.call(SLOT, "set_speed", {"speed_rpm": 2000}))["structuredContent"]["setpoint_rpm"] == 2000

    # The QoS 1 redelivery of the same PUBLISH: DUP set, same packet id, same bytes.
    await publish_raw(mosquitto.port, [publish_packet(down, start_1000, packet_id=7, dup=True)])
    again = await peer.next("up")
    assert again.payload == first.payload, "a redelivery gets the first answer, byte for byte"
    duplicate = await device.wait_event("duplicate_request")
    assert duplicate["detail"] == "id 41 answered from the cache"

    status = (await peer.call(SLOT, "get_status"))["structuredContent"]
    assert status["setpoint_rpm"] == 2000, "the redelivered start must not run again"
    assert status["state"] in ("starting", "running")

    # The same id with other bytes is a different request, and it is executed.
    stop_41 = orjson.dumps({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "stop"}})
    _, stopped = await peer.exchange(SLOT, stop_41)
    assert stopped["result"]["structuredContent"]["state"] in ("stopping", "stopped")


async def test_malformed_payloads_on_down_get_named_answers_and_the_board_keeps_serving(
    peer: BrokerPeer, mqtt_devices: MqttDeviceFactory
) -> None:
    device = await board_on_peer(mqtt_devices, peer)
    for payload, code, words in (
        (b'{"jsonrpc":"2.0","id":1,"method":', -32700, "Parse error"),
        (b"", -32700, "Parse error"),
        (b"\xff\xfe\x00garbage", -32700, "Parse error"),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600, "no batches"),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', -32600, "id must be a string or an integer"),
    ):
        _, answer = await peer.exchange(SLOT, payload)
        assert answer["id"] is None, payload
        assert answer["error"]["code"] == code, answer
        assert words in answer["error"]["message"], answer

    unknown = await peer.request(SLOT, "resources/list")
    assert unknown["error"]["code"] == -32601
    assert "resources/list" in unknown["error"]["message"]

    # 10 kB is more than the board's 4 kB frame cap: skipped in slices, refused with the caller's id.
    oversize = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": "big-1",
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"x": "y" * 10_000}},
        }
    )
    _, too_large = await peer.exchange(SLOT, oversize)
    assert too_large["id"] == "big-1"
    assert too_large["error"] == {
        "code": -32600,
        "message": f"Request too large: {len(oversize)} bytes; this device accepts frames of at most 4096 bytes",
    }

    assert (await peer.request(SLOT, "ping"))["result"] == {}
    status = (await peer.call(SLOT, "get_status"))["structuredContent"]
    assert status["state"] == "stopped", "no refused payload moved the pump"
    assert device.named("link_up") and not device.named("link_down"), "one link the whole time"


async def test_a_retained_request_on_down_is_never_executed(peer: BrokerPeer, mqtt_devices: MqttDeviceFactory) -> None:
    stale = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"start","arguments":{"speed_rpm":2900}}}'
    peer.publish(peer.topic(SLOT, "down"), stale, retain=True)  # left behind by a misconfigured client
    try:
        device = await board_on_peer(mqtt_devices, peer)
        dropped = await device.wait_event("mqtt_dropped")
        assert dropped["why"] == "retained, so stale"
        assert dropped["topic"] == f"mcpb/{SLOT}/down"
        status = (await peer.call(SLOT, "get_status"))["structuredContent"]
        assert status["state"] == "stopped"
        assert status["setpoint_rpm"] == 1450
    finally:
        peer.publish(peer.topic(SLOT, "down"), b"", retain=True)  # clears the retained message


async def test_the_board_comes_back_after_the_broker_restarts(
    mosquitto: Mosquitto, mqtt_devices: MqttDeviceFactory
) -> None:
    peer = BrokerPeer(mosquitto.port)
    await peer.start()
    device = await board_on_peer(mqtt_devices, peer)
    await peer.call(SLOT, "start", {"speed_rpm": 900})
    await peer.stop()

    await mosquitto.stop()
    await device.wait_event("link_down", timeout=10)
    await mosquitto.start()  # the same port; retained messages were not persisted
    await device.wait_event("link_up", count=2, timeout=15)

    peer = BrokerPeer(mosquitto.port, client_id="test-gateway-2")
    await peer.start()
    try:
        # Re-published on the new connection, so a broker without persistence knows the board again.
        assert (await peer.status()).payload
        await peer.handshake()
        status = (await peer.call(SLOT, "get_status"))["structuredContent"]
        assert status["setpoint_rpm"] == 900
        assert status["state"] in ("starting", "running"), "a short outage does not stop the pump"
    finally:
        await peer.stop()


async def test_keepalive_holds_an_idle_link_and_notices_a_frozen_broker(
    mosquitto: Mosquitto, peer: BrokerPeer, mqtt_devices: MqttDeviceFactory
) -> None:
    device = await board_on_peer(mqtt_devices, peer, mqtt={"keepalive_s": 2})
    # Idle for twice the broker's limit (1.5 x keepalive): the board's PINGREQs keep it connected.
    await asyncio.sleep(4)
    assert not device.named("link_down"), device.output()
    assert (await peer.request(SLOT, "ping"))["result"] == {}

    assert mosquitto.process is not None
    mosquitto.process.send_signal(signal.SIGSTOP)  # the TCP connection stays open, and nothing answers
    try:
        down = await device.wait_event("link_down", timeout=10)
        assert down["reason"] == "OSError: no answer from the broker to PINGREQ for 1 s"
    finally:
        mosquitto.process.send_signal(signal.SIGCONT)
    await device.wait_event("link_up", count=2, timeout=15)


async def test_heap_does_not_grow_over_200_calls(peer: BrokerPeer, mqtt_devices: MqttDeviceFactory) -> None:
    device = await board_on_peer(mqtt_devices, peer, heap_log_s=0.3)
    calls: tuple[tuple[str, dict[str, Any]], ...] = (
        ("get_status", {}),
        ("start", {"speed_rpm": 1500}),
        ("set_speed", {"speed_rpm": 2200}),
        ("start", {"speed_rpm": 5000}),
        ("stop", {}),
    )
    for n in range(20):  # fill the response cache and every buffer once
        await peer.call(SLOT, *calls[n % 5])
    before = len(device.named("heap"))
    baseline = (await device.wait_event("heap", count=before + 1))["used"]
    for n in range(200):
        await peer.call(SLOT, *calls[n % 5])
    after = len(device.named("heap"))
    final = await device.wait_event("heap", count=after + 1)
    print(f"device heap over MQTT: {baseline} bytes used after warm-up, {final['used']} after 200 more calls")
    print(f"device heap free after 200 calls: {final['free']} bytes of {DEVICE_HEAP}")
    assert final["used"] <= baseline + 512, f"heap grew from {baseline} to {final['used']} bytes"


async def test_the_compiled_board_serves_over_mqtt(
    mpy_cross: str, micropython: str, umqtt: Path, peer: BrokerPeer, tmp_path: Path
) -> None:
    """The deployment form: every module as .mpy, umqtt.simple compiled as `mip` installs it."""
    board = await compiled_board(mpy_cross, tmp_path / "board")
    lib = board / "lib" / "umqtt"
    lib.mkdir(parents=True)
    process = await asyncio.create_subprocess_exec(
        mpy_cross, "-o", str(lib / "simple.mpy"), str(umqtt / "umqtt" / "simple.py"), stderr=asyncio.subprocess.STDOUT
    )
    assert await process.wait() == 0
    config = {"transport": "mqtt", "mqtt": {"broker": "127.0.0.1", "port": peer.port}, "backoff_min_s": 0.1}
    device = await start_compiled(micropython, board, config, board / "lib")
    try:
        await peer.status()
        await peer.handshake()
        status = (await peer.call(SLOT, "start", {"speed_rpm": 600}))["structuredContent"]
        assert status["state"] == "starting"
        assert (await device.wait_event("ready"))["url"] == f"mqtt://127.0.0.1:{peer.port}/mcpb/{SLOT}"
    finally:
        await device.stop()


async def test_a_board_the_broker_refuses_logs_why_and_keeps_trying(
    mosquitto_factory: MosquittoFactory, mqtt_devices: MqttDeviceFactory
) -> None:
    broker = await mosquitto_factory(users={"pump-board": "right-secret"})
    device = await mqtt_devices(broker.port, mqtt={"user": "pump-board", "password": "wrong-secret"})
    refused = await device.wait_event("link_down")
    assert refused["reason"] == "OSError: the broker refused the connection: not authorized (CONNACK 5)"
    await device.wait_event("link_down", count=2)  # it backs off and dials again
    assert "wrong-secret" not in "\n".join(device.lines), "a password never reaches the log"
    await device.stop()

    device = await mqtt_devices(broker.port, mqtt={"user": "pump-board", "password": "right-secret"})
    await device.wait_event("link_up")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"mqtt": {}}, "mqtt.broker must name the broker"),
        ({"slot": "line/pump"}, "slot must not contain / when transport is mqtt"),
        ({"mqtt": {"broker": "b", "prefix": "site/#"}}, "mqtt.prefix must not contain +, # or NUL"),
        ({"mqtt": {"broker": "b", "prefix": "site//mcpb"}}, "mqtt.prefix must not start with $ or have an empty"),
        ({"mqtt": {"broker": "b", "password": "secret"}}, "mqtt.password needs mqtt.user"),
        ({"mqtt": {"broker": "b", "prefix": "p" * 100}, "slot": "s" * 30}, "must stay within 116 bytes"),
        ({"mqtt": {"broker": "b", "brokers": []}}, "unknown key mqtt.brokers"),
        ({"transport": "carrier-pigeon"}, "transport must be one of websocket, mqtt"),
    ],
)
async def test_a_wrong_mqtt_config_stops_the_app_with_its_name(
    micropython: str, umqtt: Path, tmp_path: Path, config: dict[str, Any], words: str
) -> None:
    full = {"transport": "mqtt", "mqtt": {"broker": "127.0.0.1"}, "schema_path": str(SCHEMA_FILE)}
    full.update(config)
    device = await start_device(micropython, tmp_path / "board.json", full, (umqtt,))
    try:
        error = await device.wait_event("config_error")
        assert words in error["error"], error
        assert await device.wait_exit() == 1
        assert not device.named("link_up")
    finally:
        await device.stop()


async def test_a_board_talks_to_the_broker_over_tls_and_checks_its_certificate(
    mosquitto_factory: MosquittoFactory, mqtt_devices: MqttDeviceFactory, tmp_path: Path
) -> None:
    tls = self_signed(tmp_path / "tls", "localhost")
    stranger = self_signed(tmp_path / "stranger", "localhost")
    broker, tls_port = await tls_broker(mosquitto_factory, tls, tmp_path)
    peer = BrokerPeer(broker.port)
    await peer.start()
    try:
        mqtts = {"broker": "localhost", "port": tls_port, "tls": True}
        wrong = await mqtt_devices(tls_port, mqtt=mqtts, ca_file=str(stranger / "ca.pem"))
        refused = await wrong.wait_event("link_down")
        assert "The certificate is not correctly signed by the trusted CA" in refused["reason"], refused
        await wrong.wait_event("link_down", count=2)  # and it keeps trying, backing off
        await wrong.stop()

        device = await mqtt_devices(tls_port, mqtt=mqtts, ca_file=str(tls / "ca.pem"))
        assert (await device.wait_event("link_up"))["url"] == f"mqtts://localhost:{tls_port}/mcpb/{SLOT}"
        assert (await peer.status()).payload
        await peer.handshake()
        status = (await peer.call(SLOT, "start", {"speed_rpm": 700}))["structuredContent"]
        assert status["setpoint_rpm"] == 700
    finally:
        await peer.stop()
