"""Helpers for southbound tests: a hand-written provider board, reading provider_status, the first MQTT broker.

ScriptedBoard is a provider written by hand on a raw WebSocket, for tests that need a board to
misbehave. It speaks the real wire protocol (docs/protocol.md, "WebSocket ways in"): it answers the
gateway's own `initialize` and `tools/list` like a well-behaved board, answers WebSocket pings only
while `answers_pings` is true, and hands every other message to the test, which scripts the reply (or
the lack of one) byte by byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from mcp import Client

from gateway.app import GatewayServer
from gateway.southbound.mqtt.brokers import MqttBroker
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings

VALVE_TOOL: dict[str, Any] = {
    "name": "valve",
    "description": "Open or close the valve (scripted by the test).",
    "inputSchema": {"type": "object", "properties": {"open": {"type": "boolean"}}},
}
SLOW_TOOL: dict[str, Any] = {
    "name": "slow",
    "description": "A tool with its own deadline in the slot config.",
    "inputSchema": {"type": "object"},
}

Message = dict[str, Any]


def ws_url(gateway_url: str, path: str) -> str:
    return "ws" + gateway_url.removeprefix("http") + path


class ScriptedBoard:
    """One raw provider socket: `/provider/<slot>` (dedicated) or `/providers` (multiplexed)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, *, multiplexed: bool, tools: list[Message]) -> None:
        self.ws = ws
        self.multiplexed = multiplexed
        self.tools = tools
        self.answers_pings = True
        self.pings_seen = 0
        self.handshake = True  # answer initialize and tools/list automatically
        self.inbox: list[tuple[str | None, Any]] = []  # (envelope provider, message) not yet taken
        self.received: list[tuple[str | None, Any]] = []  # everything, for assertions
        self.texts: list[str] = []  # every text frame exactly as it arrived
        self.close_code: int | None = None
        self.close_reason = ""
        self.closed = asyncio.Event()
        self._arrived = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(
        cls,
        http: aiohttp.ClientSession,
        gateway_url: str,
        path: str,
        *,
        tools: list[Message] | None = None,
        first_frame: Any = None,
    ) -> ScriptedBoard:
        """Open the socket; `first_frame` (a JSON value or raw str) is sent before anything else."""
        ws = await http.ws_connect(ws_url(gateway_url, path), autoping=False, autoclose=True)
        if first_frame is not None:
            await ws.send_str(first_frame if isinstance(first_frame, str) else orjson.dumps(first_frame).decode())
        return cls(ws, multiplexed=path.startswith("/providers"), tools=tools or [VALVE_TOOL, SLOW_TOOL])

    # -- the socket ---------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg.type is aiohttp.WSMsgType.PING:
                    self.pings_seen += 1
                    if self.answers_pings:
                        await self.ws.pong(msg.data)
                elif msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    await self._on_text(msg.data)
                elif msg.type is aiohttp.WSMsgType.CLOSE:
                    self.close_code, self.close_reason = msg.data, msg.extra or ""
                    return
                elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
                    if self.close_code is None:
                        self.close_code = self.ws.close_code
                    return
        except (ConnectionError, RuntimeError):
            return
        finally:
            self.closed.set()
            self._arrived.set()

    async def _on_text(self, data: str | bytes) -> None:
        self.texts.append(data if isinstance(data, str) else data.decode())
        value = orjson.loads(data)
        provider: str | None = None
        message = value
        if self.multiplexed and isinstance(value, dict) and "provider" in value:
            provider, message = value["provider"], value.get("payload")
        self.received.append((provider, message))
        if self.handshake and isinstance(message, dict) and "id" in message:
            method = message.get("method")
            if method == "initialize":
                await self.reply(message, self._initialize_result(message), provider)
                return
            if method == "server/discover":
                # What a board of the device profile answers (it serves the session era only).
                error = {"code": -32601, "message": "Method not found: server/discover"}
                await self.reply_error(message, error, provider)
                return
            if method == "tools/list":
                await self.reply(message, {"tools": self.tools}, provider)
                return
        if isinstance(message, dict) and message.get("method") == "notifications/initialized":
            return
        self.inbox.append((provider, message))
        self._arrived.set()

    @staticmethod
    def _initialize_result(request: Message) -> Message:
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "scripted-board", "version": "1.0"},
        }

    # -- what the test does -------------------------------------------------------------------

    async def send(self, message: Any, provider: str | None = None) -> None:
        """Send one JSON value; on a multiplexed socket it is wrapped for `provider`."""
        if self.multiplexed and provider is not None:
            message = {"provider": provider, "payload": message}
        await self.ws.send_str(orjson.dumps(message).decode())

    async def send_raw(self, text: str) -> None:
        await self.ws.send_str(text)

    async def reply(self, request: Message, result: Any, provider: str | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result}, provider)

    async def reply_error(self, request: Message, error: Any, provider: str | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "error": error}, provider)

    async def take(self, match: Callable[[Any], bool], timeout: float = 5.0, what: str = "a message") -> Any:
        """The first message not yet taken that satisfies `match` (waits for it, never hangs)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, (_, message) in enumerate(self.inbox):
                if match(message):
                    del self.inbox[index]
                    return message
            if self.closed.is_set():
                raise AssertionError(f"socket closed ({self.close_code} {self.close_reason!r}) before {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}; inbox: {self.inbox!r}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)

    async def request(self, method: str, timeout: float = 5.0) -> Message:
        """The next request the gateway forwarded with this method."""
        message: Message = await self.take(
            lambda m: isinstance(m, dict) and m.get("method") == method and "id" in m, timeout, f"a {method} request"
        )
        return message

    async def answer_to(self, request_id: Any, timeout: float = 5.0) -> Message:
        """The gateway's answer to a request this board opened."""
        message: Message = await self.take(
            lambda m: isinstance(m, dict) and "method" not in m and m.get("id") == request_id,
            timeout,
            f"the answer to id {request_id!r}",
        )
        return message

    async def wait_closed(self, timeout: float = 5.0) -> tuple[int | None, str]:
        await asyncio.wait_for(self.closed.wait(), timeout)
        return self.close_code, self.close_reason

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


class Boards:
    """Opens scripted boards on one HTTP session and closes them all at the end of a test."""

    def __init__(self) -> None:
        self.http = aiohttp.ClientSession()
        self.opened: list[ScriptedBoard] = []

    async def connect(
        self, gateway_url: str, path: str, kind: type[ScriptedBoard] = ScriptedBoard, **options: Any
    ) -> ScriptedBoard:
        """A board of `kind` (a ScriptedBoard that answers some methods itself) on `path`."""
        board = await kind.connect(self.http, gateway_url, path, **options)
        self.opened.append(board)
        return board

    async def aclose(self) -> None:
        for board in self.opened:
            await board.close()
        await self.http.close()


class SlotUnknown(LookupError):
    """provider_status of a slot the gateway does not know."""


async def provider_status(gateway_url: str, slot: str) -> dict[str, Any]:
    """What an operator sees: the `provider_status` tool of `_broker`; SlotUnknown for a slot it does
    not know (yet)."""
    async with Client(f"{gateway_url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("provider_status", {"name": slot})
    if result.is_error and "Unknown provider" in str(result.content):
        raise SlotUnknown(slot)
    assert not result.is_error, result
    status = result.structured_content
    assert isinstance(status, dict)
    return status


def first_mqtt_broker(server: GatewayServer) -> MqttBroker:
    """The first [[mqtt.brokers]] connection of a gateway built with brokers configured."""
    assert server.mqtt is not None, "the gateway was built without [[mqtt.brokers]]"
    return server.mqtt.brokers[0]


@contextlib.asynccontextmanager
async def simulated_pumps(server: GatewayServer, pumps: int = 1) -> AsyncIterator[Simulator]:
    """`pumps` simulated pumps (pump-1, pump-2, ...) publishing to `server`, each slot ready; stopped after."""
    from tests.conftest import wait_ready_slot

    simulator = Simulator(server.url, SimulatorSettings(pumps=pumps, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        for number in range(1, pumps + 1):
            await wait_ready_slot(server, f"pump-{number}")
        yield simulator
    finally:
        await simulator.stop()
