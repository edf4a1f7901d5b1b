"""A WebSocket provider that reads slowly but steadily (docs/protocol.md, "Liveness and takeover"):
requests whose deadline passes while their frames wait for room in the connection's buffer are never
written, so the provider does not execute calls whose callers gave up long before, gets no
`notifications/cancelled` for a request it never saw, and the gateway's buffer for the socket stays
within its high-water mark plus one frame.

The provider is written the ordinary way (the `websockets` client, a small receive buffer and a
one-message queue, so little waits below the gateway): it registers, answers the handshake, then
takes one frame every 0.3 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import ClientConnection, connect

from gateway.app import GatewayServer
from gateway.southbound.websocket.endpoints import WebSocketLink
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_provider_stops_reading import answer
from tests.support.southbound import ws_url

pytestmark = pytest.mark.timeout(90)

DEADLINE_MS = 1000
ARGUMENT_BYTES = 64 * 1024
CALLS = 40
CALLS_PER_S = 10
READ_EVERY_S = 0.4
LATE_BOUND = 6
"""Frames written before their deadline that still sat in the kernel's queues and the provider's
buffers when it passed: a few 32 KiB frames on loopback with a small receive buffer."""


class SlowReader:
    """The provider side: the calls it received (their ids and when their callers made them) and the
    cancels it received."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.calls: list[tuple[Any, float, float]] = []  # (id, made at, received at)
        self.cancelled: list[Any] = []

    async def read(self) -> None:
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("method") == "tools/call":
                made_at = float(message["params"]["arguments"]["text"].split(":", 1)[0])
                self.calls.append((message["id"], made_at, time.monotonic()))
                await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}))
                await asyncio.sleep(READ_EVERY_S)
            elif message.get("method") == "notifications/cancelled":
                self.cancelled.append(message["params"]["requestId"])
            elif (reply := answer(message)) is not None:
                await self.ws.send(json.dumps(reply))


async def connect_slow_reader(gateway: GatewayServer, slot: str) -> ClientConnection:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # set before connecting: a small window
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    sock.connect((host, int(port)))
    ws = await connect(
        ws_url(gateway.url, f"/provider/{slot}"),
        sock=sock,
        max_size=None,
        max_queue=1,
        compression=None,
        ping_interval=None,
    )
    await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": False}}))
    return ws


async def call_steadily(gateway: GatewayServer, slot: str) -> list[str]:
    """CALLS calls with a large argument, CALLS_PER_S a second, each stamped with when it was made."""

    async def one(client: Client) -> str:
        text = f"{time.monotonic():.6f}:" + "x" * ARGUMENT_BYTES
        try:
            await client.call_tool("echo", {"text": text})
        except MCPError as exc:
            return str(exc)
        return "answered"

    async with Client(f"{gateway.url}/{slot}/mcp") as client:
        calls = []
        for _ in range(CALLS):
            calls.append(asyncio.create_task(one(client)))
            await asyncio.sleep(1 / CALLS_PER_S)
        return await asyncio.gather(*calls)


async def test_requests_past_their_deadline_before_written_never_reach_a_slow_reader(
    gateway_factory: GatewayFactory,
) -> None:
    gateway = await gateway_factory(providers={"request_timeout_ms": DEADLINE_MS})
    ws = await connect_slow_reader(gateway, "slow")
    provider = SlowReader(ws)
    reading = asyncio.create_task(provider.read())
    try:
        await wait_ready_slot(gateway, "slow")
        session = gateway.gateway.registry.slots["slow"].session
        assert session is not None and isinstance(session.link, WebSocketLink)
        sender = session.link.sender
        assert sender.transport is not None
        high_water = sender.transport.get_write_buffer_limits()[1]
        buffered: list[int] = []

        async def watch_buffer() -> None:
            while True:
                buffered.append(sender.transport.get_write_buffer_size())  # type: ignore[union-attr]
                await asyncio.sleep(0.005)

        watching = asyncio.create_task(watch_buffer())
        outcomes = await call_steadily(gateway, "slow")
        stopped_at = time.monotonic()
        assert sum("did not respond within 1000ms" in outcome for outcome in outcomes) > CALLS // 2
        # What was written reaches the provider within a few of its reads; wait until it stays quiet.
        received = -1
        while received != len(provider.calls):
            received = len(provider.calls)
            await asyncio.sleep(3 * READ_EVERY_S + 1)
        watching.cancel()

        # Every caller has its deadline error; what the provider still gets was written before that.
        late = [request_id for request_id, _made, got in provider.calls if got > stopped_at]
        assert len(late) <= LATE_BOUND, f"{len(late)} of {CALLS} calls reached the provider after every caller gave up"
        # A frame of a call, its JSON-RPC envelope and its WebSocket header: at most one past the mark.
        assert max(buffered) <= high_water + ARGUMENT_BYTES + 1024
        # The provider hears of a cancel only for a request it received.
        received_ids = {request_id for request_id, _made, _got in provider.calls}
        assert set(provider.cancelled) <= received_ids
    finally:
        reading.cancel()
        with contextlib.suppress(BaseException):
            await reading
        await ws.close()
