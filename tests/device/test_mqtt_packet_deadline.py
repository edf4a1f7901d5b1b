"""A broker cannot hold the MQTT board inside one packet or one SUBSCRIBE (docs/device-mqtt.md,
"Keep the dead-man independent of MQTT"): pump-1 on the MicroPython Unix port against a hostile
broker written here (an asyncio server on loopback) that dribbles a PUBLISH a byte at a time inside
every read's timeout, answers a redial's SUBSCRIBE with PINGRESPs and never a SUBACK, or sends a
remaining length that never ends. Each time the board drops the link with a reason that names what
the broker did, and its dead-man stops the motor on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.device.harness import SCHEMA_FILE, Device, start_device
from tests.device.mqtt_harness import publish_packet

SLOT = "pump-1"
DOWN = f"mcpb/{SLOT}/down"
DEADMAN_S = 2
PACKET_S = 3  # the board's bound for the rest of a packet (mcpdevice.mqtt_client.IO_TIMEOUT_S)
CONNECT_TIMEOUT_S = 2  # the board's connect_timeout_s: its bound for the SUBACK
GAP_S = 1.0  # between dribbled bytes: inside every read's timeout
MARGIN_S = 6.0  # a loaded two-core machine

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first = (await reader.readexactly(1))[0]
    size = shift = 0
    while True:
        byte = (await reader.readexactly(1))[0]
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return first, await reader.readexactly(size)


def request(number: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": number, "method": method}
    if params is not None:
        frame["params"] = params
    return orjson.dumps(frame)


async def open_session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """CONNACK, SUBACK, PUBACK for the board's status."""
    await read_packet(reader)  # CONNECT
    writer.write(b"\x20\x02\x00\x00")
    _, body = await read_packet(reader)  # SUBSCRIBE
    writer.write(b"\x90\x03" + body[:2] + b"\x01")
    await serve_until_answer(reader, writer, None)


async def serve_until_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int | None) -> None:
    """Acknowledge what the board publishes until the answer to request `number` (None: its status)."""
    while True:
        first, body = await read_packet(reader)
        if first & 0xF0 != 0x30:
            continue  # the board's PUBACKs
        length = struct.unpack("!H", body[:2])[0]
        packet_id, payload = body[2 + length : 4 + length], body[4 + length :]
        writer.write(b"\x40\x02" + packet_id)
        if number is None or b'"id":%d,' % number in payload:
            return


async def start_the_pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """What the gateway does at attach, then a tools/call that starts the motor."""
    await open_session(reader, writer)
    info = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    writer.write(publish_packet(DOWN, request(1, "initialize", info), 1))
    await serve_until_answer(reader, writer, 1)
    writer.write(publish_packet(DOWN, request(2, "tools/call", {"name": "start", "arguments": {}}), 2))
    await serve_until_answer(reader, writer, 2)


@contextlib.asynccontextmanager
async def hostile_broker(handler: Handler) -> AsyncIterator[int]:
    """A broker on a free loopback port; `handler` gets each connection and its number (1, 2, ...)."""
    connections = 0
    tasks: list[asyncio.Task[None]] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        # Cancelled when the test ends: that ends the connection, as the broker going away would.
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await handler(reader, writer, connections)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@pytest.fixture
async def board(micropython: str, umqtt: Path, tmp_path: Path) -> AsyncIterator[Callable[[int], Awaitable[Device]]]:
    started: list[Device] = []

    async def start(port: int) -> Device:
        config = {
            "transport": "mqtt",
            "mqtt": {"broker": "127.0.0.1", "port": port},
            "schema_path": str(SCHEMA_FILE),
            "deadman_s": DEADMAN_S,
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
            "connect_timeout_s": CONNECT_TIMEOUT_S,
        }
        device = await start_device(micropython, tmp_path / "board.json", config, (umqtt,))
        started.append(device)
        return device

    yield start
    for device in started:
        await device.stop()


async def test_a_publish_dribbled_inside_every_read_timeout_drops_the_link_within_the_packet_bound(
    board: Callable[[int], Awaitable[Device]],
) -> None:
    began = asyncio.get_running_loop().create_future()

    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        if number > 1:
            await asyncio.sleep(60)  # the redial: silent
            return
        await start_the_pump(reader, writer)
        packet = publish_packet(DOWN, request(3, "ping"), 3)
        for at, byte in enumerate(packet):
            writer.write(bytes([byte]))
            await writer.drain()
            if at == 0:
                began.set_result(time.monotonic())
            await asyncio.sleep(GAP_S)

    async with hostile_broker(dribble) as port:
        device = await board(port)
        first_byte = await asyncio.wait_for(began, 20)
        # Unbounded, the packet's 60-odd bytes would hold the board for a minute.
        down = await device.wait_event("link_down", timeout=PACKET_S + MARGIN_S)
        assert time.monotonic() - first_byte < PACKET_S + MARGIN_S, device.output()
        assert down["reason"] == f"OSError: the broker stopped mid-packet: no whole packet within {PACKET_S} s"
        fault = await device.wait_event("fault", code="link_lost", timeout=DEADMAN_S + MARGIN_S)
        assert fault["code"] == "link_lost"


async def test_a_redial_whose_suback_never_comes_drops_the_link_and_the_dead_man_still_stops_the_motor(
    board: Callable[[int], Awaitable[Device]],
) -> None:
    dropped = asyncio.get_running_loop().create_future()

    async def no_suback(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        if number == 1:
            await start_the_pump(reader, writer)
            dropped.set_result(time.monotonic())
            return  # the connection closes: the board redials
        await read_packet(reader)  # CONNECT
        writer.write(b"\x20\x02\x00\x00")
        await read_packet(reader)  # SUBSCRIBE
        for _ in range(200):  # a PINGRESP now and then, inside every read's timeout; never a SUBACK
            writer.write(b"\xd0\x00")
            await writer.drain()
            await asyncio.sleep(0.5)

    async with hostile_broker(no_suback) as port:
        device = await board(port)
        at = await asyncio.wait_for(dropped, 20)
        fault = await device.wait_event("fault", code="link_lost", timeout=DEADMAN_S + MARGIN_S)
        assert fault["code"] == "link_lost"
        down = await device.wait_event("link_down", count=2, timeout=CONNECT_TIMEOUT_S + MARGIN_S)
        assert down["reason"] == f"OSError: no SUBACK from the broker within {CONNECT_TIMEOUT_S} s of SUBSCRIBE"
        assert time.monotonic() - at < CONNECT_TIMEOUT_S + 2 * MARGIN_S, device.output()


async def test_a_remaining_length_that_never_ends_is_a_named_protocol_error(
    board: Callable[[int], Awaitable[Device]],
) -> None:
    async def endless_length(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        if number > 1:
            await open_session(reader, writer)  # the redial is served
            await asyncio.sleep(60)
            return
        await start_the_pump(reader, writer)
        writer.write(b"\x40")  # a PUBACK whose remaining length goes on and on
        for _ in range(16):  # 1 MB at most: the board stops reading after 4 length bytes
            writer.write(b"\xff" * 65536)
            await writer.drain()

    async with hostile_broker(endless_length) as port:
        device = await board(port)
        down = await device.wait_event("link_down", timeout=20)
        assert down["reason"] == (
            "OSError: malformed packet from the broker: its remaining length runs past 4 bytes"
        ), device.output()
        await device.wait_event("link_up", count=2, timeout=MARGIN_S)  # and it dials again
