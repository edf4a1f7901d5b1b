"""MQTT ways in (docs/protocol-serial-mqtt.md, "MQTT ways in") against a real mosquitto on a free loopback port.

The simulator publishes pump-1s through the broker in both profiles (the board's own code behind a
paho connection); raw paho clients play the boards and spies whose bytes a test must control.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import paho.mqtt.client as paho
import pytest
from mcp import Client, MCPError

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.drops import DropCounter
from gateway.southbound.mqtt.packet_size import PACKET_HEADROOM_BYTES
from sim import firmware
from sim.mqtt import MqttProfile, MqttPumpLink, MqttTarget
from sim.pump import PumpSettings, SimulatedPump
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker, provider_status

REPO = Path(__file__).resolve().parents[2]
MODES = ("legacy", "2026-07-28")
QUICK = {"reconnect_initial_s": 0.05, "reconnect_max_s": 0.3, "connect_timeout_s": 3}


async def mqtt_gateway(gateway_factory: GatewayFactory, broker: Mosquitto, **broker_options: Any) -> GatewayServer:
    return await gateway_factory(mqtt={"brokers": [{"url": broker.url, **QUICK, **broker_options}]})


def simulator(url: str, profile: MqttProfile, first: int = 1, **target: Any) -> Simulator:
    settings = SimulatorSettings(pumps=1, first=first, backoff_min_s=0.05, backoff_max_s=0.3)
    sim = Simulator(None, settings, mqtt=MqttTarget(url, profile, **target))
    sim.start()
    return sim


async def call(url: str, slot: str, tool: str, arguments: dict[str, Any] | None = None, mode: str = "legacy") -> Any:
    async with Client(f"{url}/{slot}/mcp", mode=mode) as client:
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    return result.structured_content


async def broker_tool(url: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with Client(f"{url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result
    return result.structured_content


async def wait_gone(server: GatewayServer, slot: str, timeout: float = 5.0) -> str:
    entry = server.gateway.registry.slots.get(slot)
    await wait_for(lambda: entry is not None and entry.live is None, timeout, f"slot {slot} to be detached")
    assert entry is not None
    return entry.last_disconnect_reason


class Board:
    """A plain-profile board by hand: the pump's own dispatcher behind a raw paho connection.

    `hold_calls`: tools/call requests are executed but neither answered nor acknowledged (their
    message ids wait in `held`), as when a board loses its connection between acting and answering."""

    def __init__(
        self,
        port: int,
        slot: str,
        *,
        client_id: str | None = None,
        clean: bool = True,
        credential: tuple[str, str] | None = None,
    ) -> None:
        self.port = port
        self.credential = credential  # (username, password) on a broker without anonymous clients
        self.slot = slot
        self.client_id = client_id or f"board-{slot}"
        self.clean = clean
        self.pump = SimulatedPump(slot, firmware.load_registry(firmware.schema_file()), PumpSettings())
        self.executed: dict[str, int] = {}
        for name, handler in list(self.pump.dispatcher.handlers.items()):
            self.pump.dispatcher.handlers[name] = self._counting(name, handler)
        self.hello = {"device_id": f"board-{slot}", "schema": firmware.schema_hash(firmware.schema_file())}
        self.hold_calls = False
        self.answer_calls = True
        self.held: list[int] = []
        self.held_event = asyncio.Event()
        self.deliveries: list[tuple[bool, bytes]] = []  # (dup flag, payload) of every tools/call received
        self.peer: RawPeer | None = None
        self.announcements = 0  # status publishes
        self.topics = {kind: mqtt_topics.plain_topic("mcpb", slot, kind) for kind in ("status", "down", "up")}

    def _counting(self, name: str, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(arguments: Any) -> Any:
            self.executed[name] = self.executed.get(name, 0) + 1
            return handler(arguments)

        return run

    async def open_peer(self, **options: Any) -> RawPeer:
        """Connect the board's raw MQTT 3.1.1 client (`options` go to RawPeer), every message it gets
        handed to `_request` on this loop; subscribing and announcing are the caller's."""
        loop = asyncio.get_running_loop()
        peer = RawPeer(
            self.port, self.client_id, v5=False, on_message=lambda _peer, message: self._post(loop, message), **options
        )
        self.peer = peer
        assert await peer.connect() == "Success"
        return peer

    async def connect(self) -> None:
        peer = await self.open_peer(
            username=self.credential[0] if self.credential else None,
            password=self.credential[1] if self.credential else None,
            clean=self.clean,
            will=(self.topics["status"], b"", True),
            manual_ack=True,
        )
        if self.clean or not self.held:
            await peer.subscribe(self.topics["down"])
        frame = firmware.register_frame(self.hello, self.slot)
        peer.client.publish(self.topics["status"], frame, qos=1, retain=True)
        self.announcements += 1

    def _post(self, loop: asyncio.AbstractEventLoop, message: paho.MQTTMessage) -> None:
        loop.call_soon_threadsafe(self._request, message)

    def _request(self, message: paho.MQTTMessage) -> None:
        peer = self.peer
        assert peer is not None
        payload = bytes(message.payload)
        body = orjson.loads(payload)
        if body.get("method") == "tools/call":
            self.deliveries.append((bool(message.dup), payload))
        answer = firmware.assemble(self.pump.dispatcher.handle(payload))
        if body.get("method") == "tools/call" and (self.hold_calls or not self.answer_calls):
            if self.hold_calls:
                self.held.append(message.mid)
                self.held_event.set()
            else:
                peer.client.ack(message.mid, 1)
            return
        if answer is not None:
            peer.client.publish(self.topics["up"], answer, qos=1)
        peer.client.ack(message.mid, 1)

    async def disconnect(self) -> None:
        if self.peer is not None:
            await self.peer.disconnect()


# -- MCP over MQTT -----------------------------------------------------------------------------------


async def test_mcp_over_mqtt_pump_found_by_presence_driven_in_both_eras_and_detached_by_its_will(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    spy = RawPeer(mosquitto.port, "spy")
    assert await spy.connect() == "Success"
    await spy.subscribe("$mcp-server/#", "$mcp-rpc/#")
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["mcp"])
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "sim", "--mqtt", mosquitto.url, "--profile", "mcp",
        "--control-port", "0", "--log-level", "warning",
        cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_ready_slot(server, "pump-1", timeout=15)

        # On the wire: the retained presence found the server; the handshake opened on its control
        # topic and went on over the RPC topic, every message of the gateway carrying its identity.
        presence = await spy.next(lambda seen: seen.topic.startswith("$mcp-server/presence/"))
        assert presence.topic == "$mcp-server/presence/sim-pump-1/sim/pumps/pump-1"
        assert orjson.loads(presence.payload)["method"] == "notifications/server/online"
        client_id = first_mqtt_broker(server).client.client_id
        initialize = await spy.next(lambda seen: seen.topic == "$mcp-server/sim-pump-1/sim/pumps/pump-1")
        assert orjson.loads(initialize.payload)["method"] == "initialize"
        assert initialize.user_property("MCP-COMPONENT-TYPE") == "mcp-client"
        assert initialize.user_property("MCP-MQTT-CLIENT-ID") == client_id
        rpc = f"$mcp-rpc/{client_id}/sim-pump-1/sim/pumps/pump-1"
        answer = await spy.next(lambda seen: seen.topic == rpc and b'"result"' in seen.payload)
        assert answer.user_property("MCP-COMPONENT-TYPE") == "mcp-server"

        for mode in MODES:
            async with Client(f"{server.url}/pump-1/mcp", mode=mode) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert {"start", "stop", "get_status", "set_speed", "reset_fault"} <= tools
                started = await client.call_tool("start", {"speed_rpm": 1200})
                assert not started.is_error, started.content
                answer_now = await client.call_tool("get_status", {})
                assert answer_now.structured_content is not None
                assert answer_now.structured_content["setpoint_rpm"] == 1200

        status = await provider_status(server.url, "pump-1")
        assert status["transport"] == "mqtt-mcp"
        assert status["upstream"]["server_name"] == "sim/pumps/pump-1"
        assert status["upstream"]["server_id"] == "sim-pump-1"
        assert status["upstream"]["topics"]["rpc"] == rpc

        # Killed without DISCONNECT: the broker publishes its will (an empty retained presence).
        process.kill()
        await process.wait()
        reason = await wait_gone(server, "pump-1")
        assert "presence was emptied" in reason
        async with Client(f"{server.url}/pump-1/mcp", mode="legacy") as client:
            with pytest.raises(MCPError, match='Provider "pump-1" not connected'):
                await client.call_tool("get_status", {})
        # Detached, the slot still names the broker and the server that carried it (not a ws:// URL).
        status = await provider_status(server.url, "pump-1")
        assert status["provider_url"] == f"{mosquitto.url} sim/pumps/pump-1 (sim-pump-1)"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await spy.disconnect()


async def test_server_notifications_disconnected_detaches_and_another_instance_takes_the_slot(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["mcp"])
    first = simulator(mosquitto.url, "mcp", server_prefix="plant/a", instance="a")
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        profile = first_mqtt_broker(server).mcp
        assert profile is not None
        # A second server whose name ends in pump-1 waits: the slot is served by one instance at a time.
        second = simulator(mosquitto.url, "mcp", server_prefix="plant/b", instance="b")
        try:
            await wait_for(lambda: len(profile.instances) == 2, 5, "both presences")
            assert (await provider_status(server.url, "pump-1"))["upstream"]["server_name"] == "plant/a/pump-1"
            # The first server ends the gateway's session: the slot is detached at once, and the waiting
            # server of the same slot name is bridged in its place.
            peer = first.links["pump-1"]
            assert isinstance(peer, MqttPumpLink)
            client_id = first_mqtt_broker(server).client.client_id
            peer.client.publish(
                mqtt_topics.rpc_topic(client_id, "sim-pump-1-a", "plant/a/pump-1"),
                orjson.dumps({"jsonrpc": "2.0", "method": "notifications/disconnected"}),
                user_properties=peer.users,
            )
            entry = server.gateway.registry.slots["pump-1"]
            await wait_for(
                lambda: "notifications/disconnected" in entry.last_disconnect_reason, 5, "the de-initialization"
            )

            def served_by_b() -> bool:
                session = entry.live
                return session is not None and session.ready and "plant/b/pump-1" in session.link.info.remote

            await wait_for(served_by_b, 5, "the second server in the slot")
            assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        finally:
            await second.stop()
    finally:
        await first.stop()


async def test_mcp_server_that_stops_answering_is_detached_then_bridged_again_without_announcing(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await gateway_factory(
        providers={"heartbeat_interval_s": 0.3},
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["mcp"], **QUICK}]},
    )
    sim = simulator(mosquitto.url, "mcp")
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        link = sim.links["pump-1"]
        assert isinstance(link, MqttPumpLink)
        # Frozen: connected, its presence standing, answering nothing (a hung server).
        monkeypatch.setattr(link.pump, "handle", lambda _frame: None)
        entry = server.gateway.registry.slots["pump-1"]
        async with Client(f"{server.url}/pump-1/mcp", mode="legacy") as client:
            with pytest.raises(MCPError, match='Provider "pump-1" disconnected'):
                await client.call_tool("get_status", {})
        assert "heartbeat" in entry.last_disconnect_reason

        monkeypatch.undo()  # it answers again: the gateway initializes it again, unasked
        await wait_ready_slot(server, "pump-1", timeout=10)
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        assert link.client.connects == 1  # one connection, one presence: the server never announced again
        assert entry.connects >= 2
    finally:
        await sim.stop()


async def test_a_refused_server_is_bridged_at_once_when_its_slot_frees(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    # A back-off far longer than the test waits: only the freed slot can explain the bridging.
    slow = {**QUICK, "reconnect_initial_s": 60, "reconnect_max_s": 120}
    server = await gateway_factory(mqtt={"brokers": [{"url": mosquitto.url, **slow}]})
    plain = simulator(mosquitto.url, "plain")  # holds pump-1
    plain_stopped = False
    mcp: Simulator | None = None
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        mcp = simulator(mosquitto.url, "mcp", instance="b")  # sim/pumps/pump-1: the same slot (own client id)
        broker = first_mqtt_broker(server)
        profile = broker.mcp
        assert profile is not None
        await wait_for(lambda: "pump-1" in profile.reattach.status(), 10, "the refused server to wait")
        waiting = broker.status()["mcp"]["reattaching"]["pump-1"]
        assert waiting["waiting_for_free_slot"] is True
        assert waiting["reason"].startswith("Slot already held by a live provider")
        assert broker.drops.totals["refused"] == 1

        await plain.stop()  # the board's status is emptied: the slot frees
        plain_stopped = True

        def served_over_mcp() -> bool:
            session = server.gateway.registry.slots["pump-1"].live
            return session is not None and session.ready and session.link.info.transport == "mqtt-mcp"

        await wait_for(served_over_mcp, 10, "the waiting server in the freed slot")
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        assert profile.reattach.status() == {}
        assert broker.drops.totals["refused"] == 1  # counted once per announcement, not per attempt
    finally:
        if not plain_stopped:
            await plain.stop()
        if mcp is not None:
            await mcp.stop()


async def test_the_gateway_never_hears_its_own_rpc_messages(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    """The RPC topic is subscribed with No Local: the gateway's requests are not delivered back to it
    (it would take each for the server's and answer it with an error on the same topic)."""
    spy = RawPeer(mosquitto.port, "spy")
    assert await spy.connect() == "Success"
    await spy.subscribe("$mcp-rpc/#")
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["mcp"])
    sim = simulator(mosquitto.url, "mcp")
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        for _ in range(3):
            assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        # Read up to the third call's answer (what the gateway published for the first two is before it).
        seen: list[Any] = []
        while sum(1 for m in seen if b'"structuredContent"' in m.payload) < 3:
            seen.append(await spy.next())
        while not spy.seen.empty():
            seen.append(spy.seen.get_nowait())
        from_gateway = [orjson.loads(m.payload) for m in seen if m.user_property("MCP-COMPONENT-TYPE") == "mcp-client"]
        assert from_gateway and all("method" in body for body in from_gateway), from_gateway  # no answers of its own
        status = await provider_status(server.url, "pump-1")
        assert status["counters_total"]["unmatched_responses"] == 0
        assert status["counters_total"]["protocol_violations"] == 0
    finally:
        await sim.stop()
        await spy.disconnect()


async def test_gateway_shutdown_ends_its_mcp_sessions_on_the_wire(mosquitto: Mosquitto) -> None:
    from gateway.config import GatewayConfig

    spy = RawPeer(mosquitto.port, "spy")
    assert await spy.connect() == "Success"
    await spy.subscribe("$mcp-client/#", "$mcp-rpc/#")
    config = GatewayConfig.model_validate({"port": 0, "mqtt": {"brokers": [{"url": mosquitto.url, **QUICK}]}})
    server = GatewayServer(config)
    await server.start()
    sim = simulator(mosquitto.url, "mcp")
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        client_id = first_mqtt_broker(server).client.client_id
        await server.stop()
        # The core closes the link: notifications/disconnected on the RPC topic; then the gateway says
        # goodbye on its presence topic before DISCONNECT (its will says the same if it dies instead).
        rpc = await spy.next(lambda seen: seen.topic == f"$mcp-rpc/{client_id}/sim-pump-1/sim/pumps/pump-1")
        while orjson.loads(rpc.payload).get("method") != "notifications/disconnected":
            rpc = await spy.next(lambda seen: seen.topic.startswith("$mcp-rpc/"))
        farewell = await spy.next(lambda seen: seen.topic == f"$mcp-client/presence/{client_id}")
        assert orjson.loads(farewell.payload) == {"jsonrpc": "2.0", "method": "notifications/disconnected"}
        assert farewell.user_property("MCP-MQTT-CLIENT-ID") == client_id
        assert first_mqtt_broker(server).client.state == "stopped"
    finally:
        await sim.stop()
        await spy.disconnect()


# -- plain profile -----------------------------------------------------------------------------------


async def test_plain_profile_simulator_driven_through_the_gateway(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    spy = RawPeer(mosquitto.port, "spy", v5=False)
    assert await spy.connect() == "Success"
    await spy.subscribe("mcpb/#")
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["plain"], protocol="3.1.1")
    sim = simulator(mosquitto.url, "plain")
    stopped = False
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        status_message = await spy.next(lambda seen: seen.topic == "mcpb/pump-1/status")
        frame = orjson.loads(status_message.payload)
        assert frame["method"] == "notifications/register"
        assert frame["params"]["slot"] == "pump-1"
        assert frame["params"]["aggregate"] is True
        assert frame["params"]["hello"]["device_id"] == "sim-pump-1"

        for mode in MODES:
            await call(server.url, "pump-1", "start", {"speed_rpm": 1300}, mode)
            status = await call(server.url, "pump-1", "get_status", {}, mode)
            assert status["setpoint_rpm"] == 1300
        down = await spy.next(lambda seen: seen.topic == "mcpb/pump-1/down" and b'"tools/call"' in seen.payload)
        assert orjson.loads(down.payload)["params"]["name"] in ("start", "get_status")

        status = await provider_status(server.url, "pump-1")
        assert status["transport"] == "mqtt"
        assert status["provider_url"] == f"{mosquitto.url} mcpb/pump-1"
        assert status["in_aggregate"] is True
        assert status["hello"]["device_id"] == "sim-pump-1"
        assert status["upstream"]["topics"] == {
            "status": "mcpb/pump-1/status",
            "down": "mcpb/pump-1/down",
            "up": "mcpb/pump-1/up",
        }
        # The publish guide tells the next board what to send, on this gateway's broker and prefix.
        async with Client(f"{server.url}/_broker/mcp", mode="legacy") as broker_client:
            guide = await broker_client.call_tool("broker_guide", {"topic": "publish-provider"})
        page = guide.content[0].text  # type: ignore[union-attr]
        assert f"Broker `{mosquitto.url}`: connected." in page
        assert "mcpb/pump-2/status" in page and "mcpb/pump-2/down" in page and "mcpb/pump-2/up" in page

        # A clean shutdown empties the retained status: the slot goes at once.
        await sim.stop()
        stopped = True
        reason = await wait_gone(server, "pump-1")
        assert "status was emptied" in reason
        cleared = await spy.next(lambda seen: seen.topic == "mcpb/pump-1/status" and not seen.payload)
        assert cleared.payload == b""
        # Detached, the slot still names the broker and topic that carried it (not a ws:// URL).
        status = await provider_status(server.url, "pump-1")
        assert status["provider_url"] == f"{mosquitto.url} mcpb/pump-1"
        seen = first_mqtt_broker(server).status()["slots_seen"]
        assert seen["pump-1"]["remote"] == f"{mosquitto.url} mcpb/pump-1"
    finally:
        if not stopped:
            await sim.stop()
        await spy.disconnect()


async def test_plain_board_that_stops_answering_is_detached_then_attached_again_without_announcing(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    # A second apart: a board on a loaded host answers a ping well within it, so only the silence
    # the test makes is a miss.
    server = await gateway_factory(
        providers={"heartbeat_interval_s": 1.0}, mqtt={"brokers": [{"url": mosquitto.url, **QUICK}]}
    )
    board = Board(mosquitto.port, "pump-3")
    await board.connect()
    try:
        await wait_ready_slot(server, "pump-3", timeout=10)
        handle = board.pump.dispatcher.handle
        board.answer_calls = False  # the board keeps its connection but answers nothing any more
        board.pump.dispatcher.handle = lambda _frame: None
        async with Client(f"{server.url}/pump-3/mcp", mode="legacy") as client:
            # Answered when the heartbeat finds the board silent, not at the call's 60 s deadline.
            with pytest.raises(MCPError, match='Provider "pump-3" disconnected'):
                await client.call_tool("get_status", {})
        entry = server.gateway.registry.slots["pump-3"]
        assert "heartbeat" in entry.last_disconnect_reason

        # It answers again. Its status still stands, and a board speaks only when asked: the gateway
        # attaches it again by itself (with back-off), with no new status from the board.
        board.pump.dispatcher.handle = handle
        board.answer_calls = True
        await wait_ready_slot(server, "pump-3", timeout=10)
        assert (await call(server.url, "pump-3", "get_status"))["state"] == "stopped"
        assert board.announcements == 1  # the board never published its status again
        assert entry.connects >= 2
        plain = first_mqtt_broker(server).plain
        assert plain is not None and plain.reattach.status() == {}  # nothing waits any more
    finally:
        await board.disconnect()


async def test_a_redelivered_qos1_request_is_answered_once_and_acted_on_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["plain"])
    board = Board(mosquitto.port, "pump-5", client_id="board-pump-5-persistent", clean=False)
    await board.connect()
    try:
        await wait_ready_slot(server, "pump-5", timeout=10)
        board.hold_calls = True
        async with Client(f"{server.url}/pump-5/mcp", mode="legacy") as client:
            call_task = asyncio.create_task(client.call_tool("start", {"speed_rpm": 1000}))
            await asyncio.wait_for(board.held_event.wait(), 5)
            # The board acted, then lost its connection before answering or acknowledging: it reconnects
            # to its persistent session, and the broker delivers the same request again (DUP set).
            assert board.executed.get("start") == 1
            await board.disconnect()
            board.hold_calls = False
            await board.connect()
            result = await asyncio.wait_for(call_task, 10)
        assert not result.is_error, result.content
        assert [dup for dup, _ in board.deliveries] == [False, True]
        assert board.deliveries[0][1] == board.deliveries[1][1]  # the very same request, same id
        assert board.executed.get("start") == 1  # the redelivery was answered from the board's cache
        assert board.pump.dispatcher.counts["duplicates"] == 1
        assert board.pump.controller.status()["setpoint_rpm"] == 1000
        # The board's reconnect (same device, same status) did not detach the slot.
        assert server.gateway.registry.slots["pump-5"].connects == 1
    finally:
        await board.disconnect()


# -- broker outage -------------------------------------------------------------------------------------

NAMED = re.compile(r'Provider "pump-\d" (disconnected|not connected)')


async def test_broker_restart_under_load_callers_get_named_errors_and_the_gateway_recovers(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await gateway_factory(
        providers={"request_timeout_ms": 30_000},
        limits={"rate": {"per_principal": {"rate_per_s": 0}, "per_slot": {"rate_per_s": 0}}},
        mqtt={"brokers": [{"url": mosquitto.url, **QUICK}]},
    )
    plain = simulator(mosquitto.url, "plain", first=1)
    mcp = simulator(mosquitto.url, "mcp", first=2)
    silent = Board(mosquitto.port, "pump-9")  # answers the handshake, never a tool call
    silent.answer_calls = False
    await silent.connect()
    outcomes: list[tuple[str, float]] = []
    stop_load = asyncio.Event()

    async def load(slot: str) -> None:
        async with Client(f"{server.url}/{slot}/mcp", mode="2026-07-28") as client:
            while not stop_load.is_set():
                started = time.monotonic()
                try:
                    await client.call_tool("get_status", {})
                    outcomes.append(("ok", time.monotonic() - started))
                except MCPError as exc:
                    outcomes.append((str(exc), time.monotonic() - started))
                    await asyncio.sleep(0.05)

    try:
        for slot in ("pump-1", "pump-2", "pump-9"):
            await wait_ready_slot(server, slot, timeout=10)
        async with Client(f"{server.url}/pump-9/mcp", mode="legacy") as held_client:
            held = asyncio.create_task(held_client.call_tool("get_status", {}))
            entry = server.gateway.registry.slots["pump-9"]
            await wait_for(lambda: entry.live is not None and entry.live.in_flight == 1, 5, "the held call")
            workers = [asyncio.create_task(load(slot)) for slot in ("pump-1", "pump-2", "pump-1", "pump-2")]
            await wait_for(lambda: sum(1 for kind, _ in outcomes if kind == "ok") >= 20, 10, "calls under load")

            await mosquitto.restart(down_s=0.5)
            # The call in flight on the lost broker is answered at once, by name.
            with pytest.raises(MCPError, match='Provider "pump-9" disconnected'):
                await asyncio.wait_for(held, 5)

            for slot in ("pump-1", "pump-2"):
                await wait_ready_slot(server, slot, timeout=15)
            recovered = len(outcomes)
            await wait_for(lambda: len(outcomes) >= recovered + 20, 10, "calls after the restart")
            stop_load.set()
            await asyncio.wait_for(asyncio.gather(*workers), 10)

        errors = [kind for kind, _ in outcomes if kind != "ok"]
        assert errors, "the outage was never seen by a caller"
        assert all(NAMED.search(kind) for kind in errors), set(errors)
        assert outcomes[-1][0] == "ok"
        broker = first_mqtt_broker(server).status()
        assert broker["connects"] >= 2 and broker["connection_losses"] >= 1
        told = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert any("connection lost: " in line for line in told)  # the loss is a warning, once,
        again = [line for line in told if "connection lost" in line and "connecting again" in line]
        assert not again, again  # not twice
        assert set(broker["subscriptions"]) == {"mcpb/+/status", "mcpb/+/up", "$mcp-server/presence/+/#"}
        async with Client(f"{server.url}/pump-2/mcp", mode="legacy") as client:
            assert not (await client.call_tool("get_status", {})).is_error
    finally:
        stop_load.set()
        await plain.stop()
        await mcp.stop()
        await silent.disconnect()


async def test_unreachable_broker_is_diagnosed_and_its_slots_answer_not_connected(
    gateway_factory: GatewayFactory,
) -> None:
    port = free_port()
    server = await gateway_factory(mqtt={"brokers": [{"url": f"mqtt://127.0.0.1:{port}", **QUICK}]})
    await wait_for(lambda: first_mqtt_broker(server).client.attempts >= 2, 5, "connection attempts")
    diagnosis = await broker_tool(server.url, "broker_diagnose")
    found = [problem for problem in diagnosis["problems"] if problem["id"] == "mqtt.broker_unreachable"]
    assert found and found[0]["severity"] == "error"
    assert f"127.0.0.1:{port}" in found[0]["summary"]
    assert "cannot connect" in found[0]["evidence"]
    assert "connection attempts since the gateway started" in found[0]["evidence"]  # not this outage's


async def test_a_wrong_broker_password_is_warned_about_once_and_the_attempts_are_counted(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refused CONNECT is one fault however often it is tried again (one warning per kind of fault,
    count the rest: docs/mqtt-broker.md, "What the gateway does with the broker"), and it is not a lost
    connection."""
    caplog.set_level(logging.DEBUG, logger="gateway.mqtt")
    broker = await mosquitto_factory(users={"mcp-gateway": "the-right-password"})
    (tmp_path / "mqtt-password").write_text("a-wrong-password")
    entry = {"url": broker.url, "username": "mcp-gateway", "password": {"file": str(tmp_path / "mqtt-password")}}
    server = await gateway_factory(mqtt={"brokers": [{**entry, **QUICK}]})
    client = first_mqtt_broker(server).client
    await wait_for(lambda: client.refusals >= 8, 10, "eight refused attempts")

    records = [record for record in caplog.records if record.name == "gateway.mqtt"]
    above_debug = [record.getMessage() for record in records if record.levelno > logging.DEBUG]
    refused = [text for text in above_debug if "refused the connection: Not authorized" in text]
    assert len(refused) == 1, above_debug
    assert [record.levelno for record in records if "refused the connection" in record.getMessage()] == [
        logging.WARNING
    ]
    assert not [record.getMessage() for record in records if "connection lost" in record.getMessage()]
    assert len([text for text in above_debug if "connecting again" in text]) == 1, above_debug
    status = client.status()
    assert status["refusals"] >= 8 and status["attempts"] >= 8 and status["connection_losses"] == 0
    assert status["last_error"] == "refused by the broker: Not authorized"
    diagnosis = await broker_tool(server.url, "broker_diagnose")
    [problem] = [problem for problem in diagnosis["problems"] if problem["id"] == "mqtt.broker_unreachable"]
    assert problem["evidence"].startswith("refused by the broker: Not authorized")


# -- bad input -------------------------------------------------------------------------------------------


async def test_malformed_payloads_wrong_topics_and_oversize_messages_are_dropped_and_counted(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, max_payload_bytes=5000)  # above a board page (4 KB)
    sim = simulator(mosquitto.url, "plain")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        register = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/register", "params": {"slot": "other"}})
        sends: list[tuple[str, bytes]] = [
            ("mcpb/pump-1/up", b"{not json"),  # malformed, on an attached slot
            ("mcpb/pump-1/up", b"[1, 2]"),  # malformed: a batch
            ("mcpb/pump-7/status", b"hello"),  # malformed status
            ("mcpb/pump-7/status", register),  # malformed: params.slot names another slot
            ("$mcp-server/presence/srv-1/plant/x", b'{"jsonrpc":"2.0","method":"ping","id":1}'),  # malformed presence
            ("mcpb/_reserved/up", b"{}"),  # wrong topic: a reserved slot name
            ("mcpb/" + "x" * 65 + "/up", b"{}"),  # wrong topic: a slot name over 64 bytes
            ("$mcp-server/presence/only-an-id", b"{}"),  # wrong topic: no server-name
            ("mcpb/pump-1/up", b'{"jsonrpc":"2.0","method":"x","params":{"pad":"' + b"x" * 6000 + b'"}}'),  # oversize
            ("mcpb/ghost/up", b'{"jsonrpc":"2.0","id":"brk-1","result":{}}'),  # unregistered: no status
        ]
        for topic, payload in sends:
            rogue.publish(topic, payload)
        expected = {"malformed": 5, "wrong_topic": 3, "oversize": 1, "unregistered": 1}
        drops = first_mqtt_broker(server).drops
        await wait_for(lambda: {k: drops.totals[k] for k in expected} == expected, 5, f"counts {expected}")
        assert "pump-7" not in {name for name, slot in server.gateway.registry.slots.items() if slot.live}

        # The attached board is unharmed and carries its own share of the count.
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        status = await provider_status(server.url, "pump-1")
        assert status["upstream"]["dropped"] == {"malformed": 2, "oversize": 1}

        metrics = await fetch_metrics(server)
        label = f'broker="{mosquitto.url}"'
        for reason, count in expected.items():
            assert f'mcpgw_mqtt_dropped_messages_total{{{label},reason="{reason}"}} {count}.0' in metrics

        diagnosis = await broker_tool(server.url, "broker_diagnose")
        dropped = [problem for problem in diagnosis["problems"] if problem["id"] == "mqtt.messages_dropped"]
        assert dropped and dropped[0]["severity"] == "warning"
        assert "malformed 5, oversize 1, unregistered 1, wrong_topic 3" in dropped[0]["evidence"]
    finally:
        await rogue.disconnect()
        await sim.stop()


async def test_an_answer_without_an_outcome_ends_its_call_and_a_batch_is_answered(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["plain"])
    board = Board(mosquitto.port, "pump-5")
    await board.connect()
    listener = RawPeer(mosquitto.port, "down-listener", v5=False)
    assert await listener.connect() == "Success"
    await listener.subscribe(board.topics["down"])
    try:
        await wait_ready_slot(server, "pump-5", timeout=10)
        board.hold_calls = True
        async with Client(f"{server.url}/pump-5/mcp", mode="legacy") as client:
            call_task = asyncio.create_task(client.call_tool("get_status", {}))
            await asyncio.wait_for(board.held_event.wait(), 5)
            request_id = orjson.loads(board.deliveries[0][1])["id"]
            # Neither result nor error: the caller is told at once, not at the deadline.
            listener.publish(board.topics["up"], orjson.dumps({"jsonrpc": "2.0", "id": request_id}))
            with pytest.raises(MCPError, match='answered without a "result" or an "error"'):
                await asyncio.wait_for(call_task, 5)
        # A batch: nothing in it is read, and the board gets one error for it on its down topic.
        listener.publish(board.topics["up"], b'[{"jsonrpc":"2.0","id":"b-1","method":"ping"}]')
        async with asyncio.timeout(5):
            while b'"reason":"batch"' not in (seen := await listener.seen.get()).payload:
                pass  # the gateway's own traffic to the board (its call, heartbeats)
        answer = orjson.loads(seen.payload)
        assert answer["id"] is None and answer["error"]["code"] == -32600
        assert first_mqtt_broker(server).drops.totals["malformed"] == 2  # both are still counted as dropped
    finally:
        await listener.disconnect()
        await board.disconnect()


def counted(drops: DropCounter, reason: str, count: int) -> bool:
    return drops.totals[reason] == count


async def test_announcements_naming_invisible_characters_or_dot_segments_attach_nothing(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    # The names /provider/<name>, serial and [slots.declared] refuse. (C0 and C1 controls never get this
    # far: mosquitto delivers no message whose topic holds one, as MQTT 5 §1.5.4 lets a broker do.)
    server = await mqtt_gateway(gateway_factory, mosquitto)
    drops = first_mqtt_broker(server).drops
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    online = orjson.dumps({"jsonrpc": "2.0", "method": mqtt_topics.METHOD_SERVER_ONLINE, "params": {}})
    dots = 'Slot name ".." is a path step in URLs; pick another name, e.g. pump-1'
    try:
        printable = "; use printable characters only"
        plain = [
            ("..", dots),
            ("pump\u200b1", "Slot name contains format characters (U+200B at character 5)" + printable),
        ]
        for count, (slot, detail) in enumerate(plain, 1):  # the <slot> level and params.slot agree
            register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"slot": slot}}
            rogue.publish(mqtt_topics.plain_topic("mcpb", slot, "status"), orjson.dumps(register), retain=True)
            await wait_for(partial(counted, drops, "wrong_topic", count), 10, f"the status of {slot!r} dropped")
            assert drops.last["wrong_topic"].endswith(f"the slot level is not a usable slot name: {detail}")
        rtl = "Slot name contains bidirectional controls (U+202E at character 5)" + printable
        mcp = [("plant/..", dots), ("plant/pump\u202e7", rtl)]  # the slot is the server-name's last level
        for count, (server_name, detail) in enumerate(mcp, 1):
            rogue.publish(mqtt_topics.server_presence_topic("srv-1", server_name), online, retain=True)
            await wait_for(partial(counted, drops, "refused", count), 10, f"the presence of {server_name!r} refused")
            assert drops.last["refused"].endswith(f": {detail}")
        assert not server.gateway.registry.slots
        assert drops.totals["wrong_topic"] == drops.totals["refused"] == 2
    finally:
        await rogue.disconnect()


async def test_with_announce_max_packet_size_far_larger_messages_are_dropped_by_the_broker(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    """MQTT 5, opted in: CONNECT announces a Maximum Packet Size of max_payload_bytes plus headroom, and the
    broker drops a larger message instead of sending it (one here: mosquitto 2.0.11 stalls after 20)."""
    server = await mqtt_gateway(
        gateway_factory, mosquitto, profiles=["plain"], max_payload_bytes=5000, announce_max_packet_size=True
    )
    broker = first_mqtt_broker(server)
    await wait_for(lambda: "mcpb/+/up" in broker.subscribed, 5, "the gateway's subscriptions")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    try:
        rogue.publish("mcpb/ghost/up", b"x" * (5000 + PACKET_HEADROOM_BYTES + 10_000))  # over the packet size
        rogue.publish("mcpb/ghost/up", b"x" * 6000)  # over max_payload_bytes, within the packet size
        rogue.publish("mcpb/ghost/up", b'{"jsonrpc":"2.0","id":"brk-1","result":{}}')
        # The same publisher's messages arrive in order: the last one is counted after the others.
        await wait_for(lambda: broker.drops.totals["unregistered"] == 1, 5, "the last message")
        assert broker.drops.totals["oversize"] == 1  # the far larger one never reached the gateway
        metrics = await fetch_metrics(server)
        assert 'mcpgw_limit{limit="mqtt.brokers[0].max_payload_bytes"} 5000.0' in metrics
        assert 'mcpgw_limit_hits_total{limit="mqtt.brokers[0].max_payload_bytes"} 1.0' in metrics
        assert f'mcpgw_mqtt_messages_total{{broker="{mosquitto.url}",direction="in"}} 2.0' in metrics
        limits = broker.status()["limits"]
        assert limits["max_packet_bytes"] == 5000 + PACKET_HEADROOM_BYTES
        assert limits["announce_max_packet_size"] is True
    finally:
        await rogue.disconnect()


async def test_many_oversize_qos1_messages_do_not_stall_the_broker_connection_by_default(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    """mosquitto 2.0.11 never frees the in-flight slot of a QoS 1 message it drops for a client's announced
    Maximum Packet Size: after 20 the gateway hears nothing more. By default nothing is announced; the
    gateway reads every message, drops the oversize ones (counted) and its boards go on answering."""
    server = await gateway_factory(
        providers={"request_timeout_ms": 5000},
        mqtt={"brokers": [{"url": mosquitto.url, **QUICK, "profiles": ["plain"], "max_payload_bytes": 5000}]},
    )
    broker = first_mqtt_broker(server)
    sim = simulator(mosquitto.url, "plain")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        assert broker.status()["limits"]["announce_max_packet_size"] is False
        for _ in range(40):  # twice mosquitto's max_inflight_messages, each far over max_packet_bytes
            rogue.publish("mcpb/pump-1/up", b"x" * (5000 + PACKET_HEADROOM_BYTES + 10_000))
        await wait_for(lambda: broker.drops.totals["oversize"] == 40, 10, "the gateway to read all 40")
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        assert broker.client.connects == 1 and broker.client.losses == 0
        metrics = await fetch_metrics(server)
        assert 'mcpgw_limit_hits_total{limit="mqtt.brokers[0].max_payload_bytes"} 40.0' in metrics
    finally:
        await rogue.disconnect()
        await sim.stop()


def small_packet_broker(max_packet_size: int) -> str:
    return "\n".join(
        [
            "listener {port} 127.0.0.1",
            "allow_anonymous true",
            "persistence false",
            f"max_packet_size {max_packet_size}",
            "set_tcp_nodelay true",
        ]
    )


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_a_request_larger_than_the_broker_takes_is_refused_alone_and_the_link_stays(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, protocol: str
) -> None:
    """A PUBLISH over the broker's Maximum Packet Size makes mosquitto disconnect the gateway (every slot of
    the broker goes). MQTT 5: the gateway checks the whole packet against the CONNACK's Maximum Packet Size;
    MQTT 3.1.1 (no CONNACK properties): the payload against max_payload_bytes."""
    broker_limit = 16_384
    mosquitto = await mosquitto_factory(config_text=small_packet_broker(broker_limit) + "\n")
    entry: dict[str, Any] = {"url": mosquitto.url, **QUICK}
    if protocol == "3.1.1":
        entry |= {"protocol": "3.1.1", "profiles": ["plain"], "max_payload_bytes": 8192}
    server = await gateway_factory(mqtt={"brokers": [entry]})
    broker = first_mqtt_broker(server)
    plain = simulator(mosquitto.url, "plain", first=1)
    mcp = simulator(mosquitto.url, "mcp", first=2) if protocol == "5" else None
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        if mcp is not None:
            await wait_ready_slot(server, "pump-2", timeout=10)
        limit, label = (broker_limit, "broker_max_packet_size") if protocol == "5" else (8192, "max_payload_bytes")
        slots = ["pump-1", "pump-2"] if mcp is not None else ["pump-1"]
        for slot in slots:
            async with Client(f"{server.url}/{slot}/mcp", mode="legacy") as client:
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("get_status", {"pad": "x" * 20_000})
                assert refused.value.error.code == -32000
                message = refused.value.error.message
                assert re.match(
                    rf'Request for "{slot}" is \d+ bytes; the MQTT broker {re.escape(mosquitto.url)} '
                    rf"accepts at most {limit}",
                    message,
                ), message
                # The same client, the same slot: the link is up.
                assert not (await client.call_tool("get_status", {})).is_error
                # Just within the limit it is published: the board itself answers (over its 4 KB frame cap).
                size = refused.value.error.data["size"]
                with pytest.raises(MCPError, match="too large"):
                    await client.call_tool("get_status", {"pad": "x" * (20_000 - (size - limit) - 16)})
        assert broker.client.connects == 1 and broker.client.losses == 0
        for slot in slots:
            entry_slot = server.gateway.registry.slots[slot]
            assert entry_slot.connects == 1 and entry_slot.live is not None and not entry_slot.live.in_flight
        status = broker.status()
        assert status["limits"]["broker_max_packet_size"] == (broker_limit if protocol == "5" else None)
        assert status["limits"]["max_outbound"] == {"bytes": limit, "of": "packet" if protocol == "5" else "payload"}
        metrics = await fetch_metrics(server)
        assert f'mcpgw_limit_hits_total{{limit="mqtt.brokers[0].{label}"}} {len(slots)}.0' in metrics
        assert 'mcpgw_call_errors_total{kind="message_refused",slot="pump-1"} 1.0' in metrics
        if protocol == "5":
            assert f'mcpgw_limit{{limit="mqtt.brokers[0].broker_max_packet_size"}} {broker_limit}.0' in metrics
    finally:
        await plain.stop()
        if mcp is not None:
            await mcp.stop()


async def test_subscriptions_longer_than_the_brokers_packet_size_go_out_in_several_subscribes(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory
) -> None:
    """120 server filters make a SUBSCRIBE of about 9.7 KB, over mosquitto's max_packet_size of 8192:
    sent as one packet, mosquitto disconnected the gateway at every connect and no MCP board was found
    (the one filter that matches the board comes last). The gateway splits them to fit the CONNACK's
    Maximum Packet Size."""
    broker_limit = 8192
    mosquitto = await mosquitto_factory(config_text=small_packet_broker(broker_limit) + "\n")
    filters = [f"area-{index:03d}/{'x' * 60}/#" for index in range(119)] + ["sim/pumps/#"]
    assert mqtt_topics.subscribe_packet_bytes([mqtt_topics.server_presence_filter(f) for f in filters]) > broker_limit
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["mcp"], server_filter=filters)
    broker = first_mqtt_broker(server)
    sim = simulator(mosquitto.url, "mcp", first=2)
    try:
        await wait_ready_slot(server, "pump-2", timeout=10)
        assert (await call(server.url, "pump-2", "get_status"))["state"] == "stopped"
        assert set(broker.subscribed) >= {mqtt_topics.server_presence_filter(f) for f in filters}
        status = broker.status()
        assert status["subscribe_error"] is None
        assert broker.client.connects == 1 and broker.client.losses == 0
    finally:
        await sim.stop()


async def test_messages_past_max_backlog_are_dropped_and_counted(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, profiles=["plain"], max_backlog=5)
    broker = first_mqtt_broker(server)
    await wait_for(lambda: "mcpb/+/up" in broker.subscribed, 5, "the gateway's subscriptions")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    try:
        # The event loop is held (as a gateway that fell behind): paho's thread keeps reading.
        for index in range(20):
            rogue.publish(f"mcpb/ghost-{index}/up", b"{}")  # blocks this thread until the broker's PUBACK
        deadline = time.monotonic() + 5
        while broker.client.backlog + broker.client.backlog_overflow < 20:
            assert time.monotonic() < deadline, "the gateway's network thread never read the messages"
            time.sleep(0.01)  # noqa: ASYNC251 (holding the event loop is the point)
        assert broker.client.backlog == 5
        await wait_for(lambda: broker.drops.totals["unregistered"] == 5, 5, "the 5 queued messages")
        assert broker.drops.totals["backlog"] == 15
        assert broker.client.backlog == 0
        metrics = await fetch_metrics(server)
        assert 'mcpgw_limit{limit="mqtt.brokers[0].max_backlog"} 5.0' in metrics
        assert 'mcpgw_limit_hits_total{limit="mqtt.brokers[0].max_backlog"} 15.0' in metrics
        assert f'mcpgw_mqtt_dropped_messages_total{{broker="{mosquitto.url}",reason="backlog"}} 15.0' in metrics
        assert "backlog" in broker.drops.last and "max_backlog (5)" in broker.drops.last["backlog"]
    finally:
        await rogue.disconnect()


async def test_max_instances_bounds_the_devices_one_broker_announces(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mqtt_gateway(gateway_factory, mosquitto, max_instances=2)
    broker = first_mqtt_broker(server)
    await wait_for(lambda: len(broker.subscribed) == 3, 5, "the gateway's subscriptions")
    rogue = RawPeer(mosquitto.port, "rogue")
    assert await rogue.connect() == "Success"
    online = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/server/online", "params": {}})
    try:
        for slot in ("pump-1", "pump-2", "pump-3"):
            rogue.publish(f"mcpb/{slot}/status", firmware.register_frame({"device_id": slot}, slot), retain=True)
        for server_id in ("srv-1", "srv-2", "srv-3"):
            rogue.publish(f"$mcp-server/presence/{server_id}/plant/{server_id}", online, retain=True)
        await wait_for(lambda: broker.drops.totals["refused"] == 2, 5, "the third board and the third server")
        assert broker.plain is not None and sorted(broker.plain.announced) == ["pump-1", "pump-2"]
        assert broker.mcp is not None and sorted(broker.mcp.instances) == [("srv-1", "srv-1"), ("srv-2", "srv-2")]
        assert "more than 2" in broker.drops.last["refused"]
        metrics = await fetch_metrics(server)
        assert 'mcpgw_limit{limit="mqtt.brokers[0].max_instances"} 2.0' in metrics
        assert 'mcpgw_limit_hits_total{limit="mqtt.brokers[0].max_instances"} 2.0' in metrics
    finally:
        await rogue.disconnect()


async def fetch_metrics(server: GatewayServer) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
        return await response.text()


# -- the appliance broker's credentials ------------------------------------------------------------------

IMAGE = REPO / "image" / "mosquitto"


def appliance_config(directory: Path, lan_port: int, gateway_port: int) -> str:
    """The shipped image/mosquitto/mcp-gateway.conf, adapted to test ports and files (and no log noise)."""
    text = (IMAGE / "mcp-gateway.conf").read_text()
    text = text.replace("/etc/mosquitto/mcp-gateway/", f"{directory}/")
    text = re.sub(r"(?m)^listener 1883$", f"listener {lan_port} 127.0.0.1", text)
    text = re.sub(r"(?m)^listener 1884 127\.0\.0\.1$", f"listener {gateway_port} 127.0.0.1", text)
    assert f"listener {lan_port}" in text and f"listener {gateway_port}" in text
    return text + f"log_dest file {directory}/mosquitto.log\n"


def appliance_gateway_broker(directory: Path, loopback: int) -> dict[str, Any]:
    """image/mcp-gateway.toml's [[mqtt.brokers]] entry, pointed at the test's loopback port and files."""
    import tomllib

    conf = (IMAGE / "mcp-gateway.conf").read_text()
    [entry] = tomllib.loads((REPO / "image" / "mcp-gateway.toml").read_text())["mqtt"]["brokers"]
    # The gateway's entry names the listener the broker's configuration keeps on loopback for it.
    assert entry["url"] == "mqtt://127.0.0.1:1884" and re.search(r"(?m)^listener 1884 127\.0\.0\.1$", conf)
    assert entry["password"] == {"file": "/etc/mcp-gateway/mqtt-password"}
    return {
        **entry,
        "url": f"mqtt://127.0.0.1:{loopback}",
        "password": {"file": str(directory / "mqtt-password")},
        **QUICK,
    }


async def test_appliance_acl_confines_each_board_to_its_own_topics(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    from tests.support.mosquitto import write_password_file

    directory = tmp_path / "appliance"
    directory.mkdir()
    (directory / "acl").write_text((IMAGE / "acl").read_text())
    secrets = {"mcp-gateway": "gateway-secret-0123", "pump-1": "pump-1-secret-0123", "pump-2": "pump-2-secret-0123"}
    write_password_file(directory / "passwd", secrets)
    lan, loopback = free_port(), free_port()
    broker = await mosquitto_factory(config_text=appliance_config(directory, lan, loopback), port=lan)
    (directory / "mqtt-password").write_text(secrets["mcp-gateway"])
    server = await gateway_factory(mqtt={"brokers": [appliance_gateway_broker(directory, loopback)]})
    gateway_broker = first_mqtt_broker(server)
    await wait_for(lambda: len(gateway_broker.subscribed) == 3, 5, "the gateway subscribed on its loopback listener")
    assert gateway_broker.client.config.username == "mcp-gateway"

    # Without the right password nobody gets in.
    wrong = RawPeer(lan, "intruder", v5=False, username="pump-1", password="guess")
    assert await wrong.connect() == "Not authorized"
    anonymous = RawPeer(lan, "anonymous", v5=False)
    assert await anonymous.connect() == "Not authorized"

    # pump-2's credential cannot speak for pump-1: the broker drops what it publishes there.
    forger = RawPeer(lan, "forger", v5=False, username="pump-2", password=secrets["pump-2"])
    assert await forger.connect() == "Success"
    forged = firmware.register_frame({"device_id": "forged"}, "pump-1")
    forger.publish("mcpb/pump-1/status", forged, retain=True)
    forger.publish("mcpb/pump-1/up", b'{"jsonrpc":"2.0","id":"brk-1","result":{}}')
    await forger.disconnect()

    # MCP over MQTT: the slot is the server-name's last level, so that is what the username must be.
    # pump-1's credential may not announce a server named .../boiler-9 (whatever its server-id).
    online = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/server/online", "params": {}})
    claimer = RawPeer(lan, "claimer", username="pump-1", password=secrets["pump-1"])
    assert await claimer.connect() == "Success"
    for topic in (
        "$mcp-server/presence/pump-1/anything/boiler-9",
        "$mcp-server/presence/boiler-9/boiler-9",
        "$mcp-server/presence/x/a/b/c/boiler-9",
        "$mcp-server/presence/pump-1/boiler-9/pump-1/more",
    ):
        claimer.publish(topic, online, retain=True)
    await claimer.disconnect()

    (directory / "pump-2-password").write_text(secrets["pump-2"])
    (directory / "pump-1-password").write_text(secrets["pump-1"])
    plain = simulator(broker.url, "plain", first=2, username="pump-2", password_file=str(directory / "pump-2-password"))
    # A server whose name ends in its username is bridged (server-id sim-pump-1, name sim/pumps/pump-1).
    mcp = simulator(broker.url, "mcp", first=1, username="pump-1", password_file=str(directory / "pump-1-password"))
    try:
        await wait_ready_slot(server, "pump-2", timeout=10)
        await wait_ready_slot(server, "pump-1", timeout=10)
        assert (await call(server.url, "pump-2", "get_status"))["state"] == "stopped"
        assert (await call(server.url, "pump-1", "get_status"))["state"] == "stopped"
        status = await provider_status(server.url, "pump-1")
        assert status["transport"] == "mqtt-mcp"  # the MCP server, not the forged plain status
        assert status["upstream"]["server_name"] == "sim/pumps/pump-1"
        # The broker handles a publish before its PUBACK, and the forgers had theirs before the simulators
        # started: had a forged message passed, the gateway would have had it before the real ones.
        assert "boiler-9" not in server.gateway.registry.slots and "more" not in server.gateway.registry.slots
        assert gateway_broker.mcp is not None and set(gateway_broker.mcp.instances) == {("pump-1", "sim-pump-1")}
        assert gateway_broker.drops.totals["unregistered"] == 0
    finally:
        await plain.stop()
        await mcp.stop()


async def test_appliance_broker_lets_no_credential_take_over_another_devices_client_id(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    """mosquitto disconnects a client when another connects with its client id. On the appliance's LAN
    listener a device's client id is its username (use_username_as_clientid), so whatever client id
    another credential sends, it cannot knock a board, a server or the gateway off."""
    from tests.support.mosquitto import write_password_file

    directory = tmp_path / "appliance"
    directory.mkdir()
    (directory / "acl").write_text((IMAGE / "acl").read_text())
    secrets = {name: f"{name}-secret-0123" for name in ("mcp-gateway", "pump-1", "pump-2", "pump-3")}
    write_password_file(directory / "passwd", secrets)
    lan, loopback = free_port(), free_port()
    broker = await mosquitto_factory(config_text=appliance_config(directory, lan, loopback), port=lan)
    (directory / "mqtt-password").write_text(secrets["mcp-gateway"])
    server = await gateway_factory(
        providers={"request_timeout_ms": 5000}, mqtt={"brokers": [appliance_gateway_broker(directory, loopback)]}
    )
    gateway_broker = first_mqtt_broker(server)
    await wait_for(lambda: len(gateway_broker.subscribed) == 3, 5, "the gateway subscribed on its loopback listener")
    for name in ("pump-1", "pump-2"):
        (directory / f"{name}-password").write_text(secrets[name])
    plain = simulator(broker.url, "plain", first=2, username="pump-2", password_file=str(directory / "pump-2-password"))
    mcp = simulator(broker.url, "mcp", first=1, username="pump-1", password_file=str(directory / "pump-1-password"))
    try:
        await wait_ready_slot(server, "pump-2", timeout=10)
        await wait_ready_slot(server, "pump-1", timeout=10)
        # pump-3's credential (a board of its own, no device here) tries every client id in use: the
        # ids the devices send (their device ids), the ids they have on the broker (their usernames),
        # the device firmware's default (mcpb-<slot>) and the gateway's.
        reused = ["sim-pump-2", "pump-2", "mcpb-pump-2", "sim-pump-1", "pump-1", gateway_broker.client.client_id]
        for client_id in reused:
            intruder = RawPeer(lan, client_id, v5=False, username="pump-3", password=secrets["pump-3"])
            assert await intruder.connect() == "Success"
            await intruder.disconnect()
        # A device knocked off would have to connect again to receive this request (clean sessions): a
        # call answered over a connection that never ended proves nobody took it over.
        for slot in ("pump-2", "pump-1"):
            assert (await call(server.url, slot, "get_status"))["state"] == "stopped"
            link = plain.links[slot] if slot == "pump-2" else mcp.links[slot]
            assert isinstance(link, MqttPumpLink)
            assert (link.client.connects, link.client.losses) == (1, 0), slot
            assert server.gateway.registry.slots[slot].connects == 1
        assert (gateway_broker.client.connects, gateway_broker.client.losses) == (1, 0)
    finally:
        await plain.stop()
        await mcp.stop()
