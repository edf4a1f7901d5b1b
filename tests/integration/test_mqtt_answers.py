"""Answers over MQTT that come late or too large (docs/protocol.md, "Requests and ids";
docs/protocol-serial-mqtt.md, "Broker outages and bad input"), against a real mosquitto.

A board's topics and a server's RPC topic outlive the session the gateway holds on them: an answer to
a request of the slot's previous session can arrive after the slot was attached again, and must reach
no caller of the new one. An answer larger than max_payload_bytes is dropped unread, and the request
it names ends at once instead of at its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_session import ProviderSession
from gateway.southbound.mqtt import topics as mqtt_topics
from sim import firmware
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK, Board
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.southbound import first_mqtt_broker

QUIET = {"heartbeat_interval_s": 3600}
"""No heartbeat pings: the only requests on the wire are the handshake and the test's calls."""
STALE = {"content": [{"type": "text", "text": "stale: the answer to the previous session's call"}], "isError": True}


async def plain_gateway(gateway_factory: GatewayFactory, broker: Mosquitto, **options: Any) -> GatewayServer:
    return await gateway_factory(
        providers=QUIET, mqtt={"brokers": [{"url": broker.url, **QUICK, "profiles": ["plain"], **options}]}
    )


def live_session(server: GatewayServer, slot: str) -> ProviderSession:
    session = server.gateway.registry.slots[slot].live
    assert session is not None
    return session


def live_session_or_none(server: GatewayServer, slot: str) -> ProviderSession | None:
    entry = server.gateway.registry.slots.get(slot)
    return entry.live if entry is not None else None


async def delivered(board: Board, count: int) -> JsonObject:
    """The `count`-th tools/call the board received (it acknowledges, and the test answers)."""
    await wait_for(lambda: len(board.deliveries) >= count, 5, f"tools/call number {count} to reach the board")
    request: JsonObject = orjson.loads(board.deliveries[count - 1][1])
    return request


def board_answer(board: Board, request: JsonObject) -> bytes:
    answer = firmware.assemble(board.pump.dispatcher.handle(orjson.dumps(request)))
    assert isinstance(answer, bytes)
    return answer


# -- the plain profile ---------------------------------------------------------------------------------


async def test_a_late_answer_from_a_board_reaches_no_caller_of_the_slots_next_session(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await plain_gateway(gateway_factory, mosquitto)
    board = Board(mosquitto.port, "pump-5")
    board.answer_calls = False
    await board.connect()
    assert board.peer is not None
    try:
        await wait_ready_slot(server, "pump-5", timeout=10)
        first = live_session(server, "pump-5")
        async with Client(f"{server.url}/pump-5/mcp", mode="legacy") as client:
            old_call = asyncio.create_task(client.call_tool("get_status", {}))
            old_request = await delivered(board, 1)
            # The board goes offline and announces itself again: the slot is attached with a new session.
            board.peer.publish(board.topics["status"], b"", retain=True)
            with pytest.raises(MCPError, match='Provider "pump-5" disconnected'):
                await asyncio.wait_for(old_call, 5)
            board.peer.publish(board.topics["status"], firmware.register_frame(board.hello, "pump-5"), retain=True)
            await wait_for(lambda: live_session_or_none(server, "pump-5") not in (None, first), 10, "a new session")
            await wait_ready_slot(server, "pump-5", timeout=10)
            second = live_session(server, "pump-5")

            new_call = asyncio.create_task(client.call_tool("get_status", {}))
            new_request = await delivered(board, 2)
            assert new_request["id"] != old_request["id"]
            # Now the board's answer to the first call arrives: it names no request of this session.
            stale = {"jsonrpc": "2.0", "id": old_request["id"], "result": STALE}
            board.peer.publish(board.topics["up"], orjson.dumps(stale))
            await wait_for(lambda: second.counters.unmatched_responses == 1, 5, "the late answer to be unmatched")
            assert not new_call.done()
            board.peer.publish(board.topics["up"], board_answer(board, new_request))
            result = await asyncio.wait_for(new_call, 5)
        assert not result.is_error, result.content
        assert result.structured_content is not None and result.structured_content["state"] == "stopped"
    finally:
        await board.disconnect()


async def test_an_oversize_answer_ends_its_call_at_once_and_the_board_stays(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await plain_gateway(gateway_factory, mosquitto, max_payload_bytes=5000)
    board = Board(mosquitto.port, "pump-5")
    board.answer_calls = False
    await board.connect()
    assert board.peer is not None
    try:
        await wait_ready_slot(server, "pump-5", timeout=10)
        async with Client(f"{server.url}/pump-5/mcp", mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("get_status", {}))
            request = await delivered(board, 1)
            text = {"type": "text", "text": "x" * 6000}
            big = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"content": [text]}})
            board.peer.publish(board.topics["up"], big)
            # Well before the 60 s deadline: the caller is told what happened instead of "sent no answer".
            with pytest.raises(MCPError) as caught:
                await asyncio.wait_for(call, 10)
            error = caught.value.error
            assert error.code == -32603
            assert error.message == (
                f'Provider "pump-5" answered, but the gateway refused the answer: {len(big)} bytes, over '
                f"max_payload_bytes (5000) of MQTT broker {mosquitto.url}; raise max_payload_bytes or send "
                "smaller messages"
            )
            assert error.data == {
                "slot": "pump-5",
                "reason": "answer_refused",
                "limit": "mqtt.brokers[0].max_payload_bytes",
            }
            broker = first_mqtt_broker(server)
            assert broker.drops.totals["oversize"] == 1

            # An oversize message that names no pending request is only counted; the link stays.
            board.peer.publish(board.topics["up"], big)
            await wait_for(lambda: broker.drops.totals["oversize"] == 2, 5, "the second oversize message")
            board.answer_calls = True
            result = await client.call_tool("get_status", {})
        assert not result.is_error, result.content
        assert server.gateway.registry.slots["pump-5"].connects == 1
    finally:
        await board.disconnect()


# -- MCP over MQTT -------------------------------------------------------------------------------------


class HandServer:
    """An MCP over MQTT server by hand: it answers the handshake and pings itself and hands each
    tools/call (with the RPC topic it came on) to the test."""

    def __init__(self, port: int, client_id: str, server_id: str = "srv-1", server_name: str = "lab/thermo-1") -> None:
        self.port = port
        self.server_id = server_id
        self.rpc = mqtt_topics.rpc_topic(client_id, server_id, server_name)
        self.control = mqtt_topics.server_control_topic(server_id, server_name)
        self.presence = mqtt_topics.server_presence_topic(server_id, server_name)
        self.calls: asyncio.Queue[JsonObject] = asyncio.Queue()
        self.peer: RawPeer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.peer = RawPeer(self.port, self.server_id)
        assert await self.peer.connect() == "Success"
        await self.peer.subscribe(self.control, self.rpc, no_local=True)
        self._task = asyncio.create_task(self._serve())
        self.announce()

    def announce(self) -> None:
        assert self.peer is not None
        online = {"jsonrpc": "2.0", "method": mqtt_topics.METHOD_SERVER_ONLINE, "params": {}}
        self.peer.publish(self.presence, orjson.dumps(online), retain=True)

    def send(self, payload: bytes) -> None:
        assert self.peer is not None
        self.peer.publish(self.rpc, payload, user_properties=[(mqtt_topics.PROP_COMPONENT_TYPE, "mcp-server")])

    async def _serve(self) -> None:
        assert self.peer is not None
        while True:
            message = orjson.loads((await self.peer.seen.get()).payload)
            method = message.get("method")
            result: Any = None
            if method == "initialize":
                result = {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hand-server", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
            elif method == "ping":
                result = {}
            elif method == "tools/call":
                self.calls.put_nowait(message)
            if result is not None:
                self.send(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.peer is not None:
            await self.peer.disconnect()


async def mcp_gateway(gateway_factory: GatewayFactory, broker: Mosquitto, **options: Any) -> GatewayServer:
    return await gateway_factory(
        providers=QUIET, mqtt={"brokers": [{"url": broker.url, **QUICK, "profiles": ["mcp"], **options}]}
    )


async def test_a_late_answer_from_an_mcp_server_reaches_no_caller_of_the_slots_next_session(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mcp_gateway(gateway_factory, mosquitto)
    hand = HandServer(mosquitto.port, first_mqtt_broker(server).client.client_id)
    await hand.start()
    try:
        await wait_ready_slot(server, "thermo-1", timeout=10)
        first = live_session(server, "thermo-1")
        async with Client(f"{server.url}/thermo-1/mcp", mode="legacy") as client:
            old_call = asyncio.create_task(client.call_tool("echo", {"n": 1}))
            old_request = await asyncio.wait_for(hand.calls.get(), 5)
            # The server announces itself again (it reconnected): the gateway opens a new session on
            # the same RPC topic, which carries the same client id.
            hand.announce()
            with pytest.raises(MCPError, match='Provider "thermo-1" disconnected'):
                await asyncio.wait_for(old_call, 5)
            await wait_for(lambda: live_session_or_none(server, "thermo-1") not in (None, first), 10, "a new session")
            await wait_ready_slot(server, "thermo-1", timeout=10)
            second = live_session(server, "thermo-1")

            new_call = asyncio.create_task(client.call_tool("echo", {"n": 2}))
            new_request = await asyncio.wait_for(hand.calls.get(), 5)
            assert new_request["id"] != old_request["id"]
            hand.send(orjson.dumps({"jsonrpc": "2.0", "id": old_request["id"], "result": STALE}))
            await wait_for(lambda: second.counters.unmatched_responses == 1, 5, "the late answer to be unmatched")
            assert not new_call.done()
            fresh = {"content": [{"type": "text", "text": "fresh"}], "isError": False}
            hand.send(orjson.dumps({"jsonrpc": "2.0", "id": new_request["id"], "result": fresh}))
            result = await asyncio.wait_for(new_call, 5)
        assert not result.is_error and result.content[0].text == "fresh"  # type: ignore[union-attr]
    finally:
        await hand.stop()


async def test_an_oversize_answer_from_an_mcp_server_ends_its_call_at_once(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await mcp_gateway(gateway_factory, mosquitto, max_payload_bytes=5000)
    hand = HandServer(mosquitto.port, first_mqtt_broker(server).client.client_id)
    await hand.start()
    try:
        await wait_ready_slot(server, "thermo-1", timeout=10)
        async with Client(f"{server.url}/thermo-1/mcp", mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("echo", {}))
            request = await asyncio.wait_for(hand.calls.get(), 5)
            big = orjson.dumps(
                {"jsonrpc": "2.0", "id": request["id"], "result": {"content": [{"type": "text", "text": "x" * 6000}]}}
            )
            hand.send(big)
            with pytest.raises(
                MCPError, match=rf"refused the answer: {len(big)} bytes, over max_payload_bytes \(5000\)"
            ):
                await asyncio.wait_for(call, 10)
            assert first_mqtt_broker(server).drops.totals["oversize"] == 1
            second = asyncio.create_task(client.call_tool("echo", {}))
            request = await asyncio.wait_for(hand.calls.get(), 5)
            hand.send(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}}))
            assert not (await asyncio.wait_for(second, 5)).is_error
    finally:
        await hand.stop()
