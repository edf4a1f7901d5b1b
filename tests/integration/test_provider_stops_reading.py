"""A WebSocket provider that stops reading its socket (docs/protocol.md, "Deadlines", "Liveness and
takeover"): every caller is answered by its deadline whatever the socket does, a send that waits past
limits.provider_send_timeout_s cuts the link with a named reason, and a heartbeat drop aborts it.

The provider is written the ordinary way (the `websockets` client): it answers the handshake, then
pauses its transport's reading with a tiny receive buffer, so the gateway's sends back up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import ws_url

pytestmark = pytest.mark.timeout(60)

ECHO = {
    "name": "echo",
    "description": "echo text",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
BIG_TEXT = "x" * 400_000
CALLS = 8
MARGIN_S = 3.0


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    """The handshake answers of a session-era provider; None for anything else."""
    method, request_id = request.get("method"), request.get("id")
    if request_id is None:
        return None
    if method == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stops-reading", "version": "1"},
        }
        return {"jsonrpc": "2.0", "id": request_id, "result": result}
    if method == "tools/list":
        return {"jsonrpc": "2.0", "id": request_id, "result": {"tools": [ECHO]}}
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}}


@contextlib.asynccontextmanager
async def provider_that_stops_reading(
    gateway: GatewayServer, slots: list[str], *, multiplexed: bool, alive_every_s: float | None
) -> AsyncIterator[ClientConnection]:
    """A provider serving `slots` until their tools are listed, then reading nothing more; it sends a
    notification every `alive_every_s` seconds (so it counts as alive), or nothing (None)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # set before connecting: a small window
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    sock.connect((host, int(port)))
    path = "/providers" if multiplexed else f"/provider/{slots[0]}"
    ws = await connect(ws_url(gateway.url, path), sock=sock, max_size=None, compression=None, ping_interval=None)

    def wrap(slot: str, message: dict[str, Any]) -> str:
        return json.dumps({"provider": slot, "payload": message} if multiplexed else message)

    listed: set[str] = set()
    for slot in slots:
        register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": False}}
        await ws.send(wrap(slot, register))
    while listed != set(slots):
        frame = json.loads(await ws.recv())
        slot, message = (frame["provider"], frame["payload"]) if multiplexed else (slots[0], frame)
        reply = answer(message)
        if reply is not None:
            await ws.send(wrap(slot, reply))
        if message.get("method") == "tools/list":
            listed.add(slot)
    for slot in slots:
        await wait_ready_slot(gateway, slot)
    ws.transport.pause_reading()

    async def look_alive() -> None:
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "alive"}}
        while alive_every_s is not None:
            for slot in slots:
                await ws.send(wrap(slot, note))
            await asyncio.sleep(alive_every_s)

    alive = asyncio.create_task(look_alive())
    try:
        yield ws
    finally:
        alive.cancel()
        with contextlib.suppress(BaseException):
            await alive
        ws.transport.abort()


async def drain_slowly(ws: ClientConnection, *, chunk: int, for_s: float) -> int:
    """Take up to `chunk` bytes off the socket below the paused WebSocket client every 50 ms for `for_s`
    seconds, as a slow link drains it; how many bytes it took. The client itself still reads nothing."""
    raw = socket.socket(fileno=os.dup(ws.transport.get_extra_info("socket").fileno()))
    try:
        taken = 0
        started = time.monotonic()
        while time.monotonic() - started < for_s:
            with contextlib.suppress(BlockingIOError):
                taken += len(raw.recv(chunk))
            await asyncio.sleep(0.05)
        return taken
    finally:
        raw.close()  # the duplicate descriptor only: the connection stays open


async def call_all(gateway: GatewayServer, slot: str, texts: list[str]) -> list[tuple[str, float]]:
    """Call echo once per text, all at once; each call's error message and how long it took."""

    async def one(client: Client, text: str) -> tuple[str, float]:
        started = time.monotonic()
        try:
            await client.call_tool("echo", {"text": text})
        except MCPError as exc:
            return str(exc), time.monotonic() - started
        return "answered", time.monotonic() - started

    async with Client(f"{gateway.url}/{slot}/mcp") as client:
        return await asyncio.gather(*(one(client, text) for text in texts))


async def slot_reason(gateway: GatewayServer, slot: str) -> str:
    entry = gateway.gateway.registry.slots[slot]
    await wait_for(lambda: entry.session is None, timeout=10, what=f"slot {slot} to be vacant")
    return entry.last_disconnect_reason


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_callers_get_their_deadline_while_the_frames_wait(
    gateway_factory: GatewayFactory, multiplexed: bool
) -> None:
    gateway = await gateway_factory(providers={"request_timeout_ms": 1500}, limits={"provider_send_timeout_s": 4})
    async with provider_that_stops_reading(gateway, ["stall"], multiplexed=multiplexed, alive_every_s=0.3):
        outcomes = await asyncio.wait_for(call_all(gateway, "stall", [BIG_TEXT] * CALLS), 1.5 + MARGIN_S)
        for message, took in outcomes:
            assert 'Provider "stall" did not respond within 1500ms' in message
            assert took < 1.5 + MARGIN_S
        # The frames still wait; the send bound then cuts the link, naming why.
        reason = await slot_reason(gateway, "stall")
        assert reason == "provider stopped reading: its socket took nothing for 4 s (limits.provider_send_timeout_s)"


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_a_send_waiting_past_its_bound_fails_every_pending_request_at_once(
    gateway_factory: GatewayFactory, multiplexed: bool
) -> None:
    gateway = await gateway_factory(providers={"request_timeout_ms": 30_000}, limits={"provider_send_timeout_s": 2})
    slots = ["stall-a", "stall-b"] if multiplexed else ["stall-a"]
    async with provider_that_stops_reading(gateway, slots, multiplexed=multiplexed, alive_every_s=0.3):
        calls = [call_all(gateway, "stall-a", [BIG_TEXT] * CALLS)]
        if multiplexed:
            # A slot sharing the stalled socket: small calls, ended with the socket.
            calls.append(call_all(gateway, "stall-b", ["small"] * 2))
        results = await asyncio.wait_for(asyncio.gather(*calls), 2 + MARGIN_S)
        why = "provider stopped reading: its socket took nothing for 2 s (limits.provider_send_timeout_s)"
        for slot, outcomes in zip(slots, results, strict=True):
            for message, took in outcomes:
                assert message == f'Provider "{slot}" disconnected: {why}'
                assert took < 2 + MARGIN_S
            assert await slot_reason(gateway, slot) == why


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_a_heartbeat_drop_aborts_the_link_and_fails_its_callers_at_once(
    gateway_factory: GatewayFactory, multiplexed: bool
) -> None:
    gateway = await gateway_factory(
        providers={"request_timeout_ms": 30_000, "heartbeat_interval_s": 1}, limits={"provider_send_timeout_s": 60}
    )
    async with provider_that_stops_reading(gateway, ["silent"], multiplexed=multiplexed, alive_every_s=None) as ws:
        # Two sweeps drop a provider that answers no ping: about 2 s, plus a turn of the sweep.
        outcomes = await asyncio.wait_for(call_all(gateway, "silent", [BIG_TEXT] * CALLS), 3 + MARGIN_S)
        for message, took in outcomes:
            assert message == 'Provider "silent" disconnected: No answer to heartbeat ping within 1s; reconnect'
            assert took < 3 + MARGIN_S
        # The gateway aborted its end (no close frame waits behind the full buffer): the provider's
        # next frames meet a reset connection.
        with pytest.raises(ConnectionClosed):
            for _ in range(50):
                await ws.send('{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"here?"}}')
                await asyncio.sleep(0.1)


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_a_provider_that_reads_slowly_but_steadily_is_not_cut(
    gateway_factory: GatewayFactory, multiplexed: bool
) -> None:
    """A weak radio link: the socket takes 16 KiB every 50 ms (about 320 kB/s), so the frames queued
    take seconds to leave, far past the send bound, but the socket never goes a bound without taking
    anything; once it takes nothing, the bound cuts it."""
    gateway = await gateway_factory(providers={"request_timeout_ms": 30_000}, limits={"provider_send_timeout_s": 1})
    async with provider_that_stops_reading(gateway, ["slow"], multiplexed=multiplexed, alive_every_s=None) as ws:
        calls = asyncio.create_task(call_all(gateway, "slow", [BIG_TEXT] * CALLS))
        try:
            taken = await drain_slowly(ws, chunk=16384, for_s=4)
            slot = gateway.gateway.registry.slots["slow"]
            assert slot.session is not None, slot.last_disconnect_reason  # 4 s of frames waiting, never cut
            assert 0 < taken < len(BIG_TEXT) * CALLS  # still draining: the frames waited all along
            # It takes nothing more: cut within the bound.
            reason = await slot_reason(gateway, "slow")
            assert (
                reason == "provider stopped reading: its socket took nothing for 1 s (limits.provider_send_timeout_s)"
            )
        finally:
            calls.cancel()
            await asyncio.gather(calls, return_exceptions=True)
