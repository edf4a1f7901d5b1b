"""pump1-host over MQTT against a broker that is slow on purpose: the POSIX MQTT port
(device/libmcpb-idf/ports/posix/mqtt_posix.c) bounds whole packets and the SUBACK wait, not single
reads, so a broker that dribbles bytes cannot hold the control loop (and the pump's dead-man) off.

The broker here is a few lines of MQTT 3.1.1 on a real loopback socket, because mosquitto cannot be
told to be slow; the board is the real pump1-host binary.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.device_c.conftest import SLOT, CBoard, CBoardFactory

DOWN = f"mcpb/{SLOT}/down"
IO_TIMEOUT_S = 3.0  # mcpb_mqtt_posix.io_timeout_ms: a whole packet, from its first byte
CONNECT_TIMEOUT_S = 10.0  # mcpb_mqtt_posix.connect_timeout_ms: CONNACK, and SUBSCRIBE to SUBACK
MARGIN_S = 3.0  # scheduling on a loaded 2-core machine under ASan
PINGRESP = b"\xd0\x00"

Link = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def remaining_length(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def publish_head(topic: str, payload_len: int) -> bytes:
    """A QoS 0 PUBLISH up to its payload."""
    name = topic.encode()
    return b"\x30" + remaining_length(2 + len(name) + payload_len) + struct.pack(">H", len(name)) + name


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first = (await reader.readexactly(1))[0]
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return first, await reader.readexactly(length)


class SlowBroker:
    """A listening socket; each connection the board makes arrives in `links`."""

    def __init__(self) -> None:
        self.links: asyncio.Queue[Link] = asyncio.Queue()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self.links.put((reader, writer))

        self.server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def next_link(self, timeout: float = 15.0) -> Link:
        return await asyncio.wait_for(self.links.get(), timeout)

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        while not self.links.empty():
            self.links.get_nowait()[1].close()


@pytest.fixture
async def slow_broker() -> AsyncIterator[SlowBroker]:
    broker = SlowBroker()
    await broker.start()
    yield broker
    await broker.close()


async def start_board(c_boards: CBoardFactory, broker: SlowBroker) -> CBoard:
    return await c_boards("--mqtt", f"127.0.0.1:{broker.port}", "--slot", SLOT, "--device-id", "slow-broker")


async def connack(link: Link) -> None:
    reader, writer = link
    first, _ = await read_packet(reader)
    assert first == 0x10, "CONNECT first"
    writer.write(b"\x20\x02\x00\x00")
    await writer.drain()


async def attach(link: Link) -> None:
    """CONNACK, SUBACK, the board's register frame; then initialize, as the gateway does."""
    reader, writer = link
    await connack(link)
    first, body = await read_packet(reader)
    assert first == 0x82, "SUBSCRIBE next"
    writer.write(b"\x90\x03" + body[:2] + b"\x01")
    register = await answer(link)
    assert register["method"] == "notifications/register"
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    await request(link, 0, "initialize", init)


async def answer(link: Link) -> dict[str, Any]:
    """The next PUBLISH from the board (acknowledged when QoS 1), as JSON."""
    reader, writer = link
    while True:
        first, body = await asyncio.wait_for(read_packet(reader), 10)
        if first & 0xF0 != 0x30:
            continue
        qos = (first >> 1) & 3
        topic_len = struct.unpack(">H", body[:2])[0]
        at = 2 + topic_len
        if qos:
            writer.write(b"\x40\x02" + body[at : at + 2])
            at += 2
        parsed: dict[str, Any] = json.loads(body[at:])
        return parsed


def request_bytes(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    return publish_head(DOWN, len(payload)) + payload


async def request(link: Link, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    link[1].write(request_bytes(request_id, method, params))
    await link[1].drain()
    return await answer(link)


async def get_status(link: Link, request_id: int) -> dict[str, Any]:
    reply = await request(link, request_id, "tools/call", {"name": "get_status", "arguments": {}})
    status: dict[str, Any] = reply["result"]["structuredContent"]
    return status


async def dribble_until_closed(link: Link, chunk: bytes, every_s: float, give_up_s: float) -> float:
    """Sends chunk every every_s until the board hangs up (its time) or give_up_s passes (fails)."""
    reader, writer = link
    started = time.monotonic()
    while time.monotonic() - started < give_up_s:
        try:
            writer.write(chunk)
            await writer.drain()
            # The board sends nothing unasked here, so a read that ends is its hang-up.
            await asyncio.wait_for(reader.read(1), every_s)
            return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionError:
            return time.monotonic() - started
    pytest.fail(f"the board kept the link for {give_up_s:.0f} s of a broker dribbling {chunk!r} every {every_s} s")


async def test_a_publish_dribbled_byte_by_byte_drops_the_link_within_io_timeout(
    c_boards: CBoardFactory, slow_broker: SlowBroker
) -> None:
    board = await start_board(c_boards, slow_broker)
    link = await slow_broker.next_link()
    await attach(link)
    started = await request(link, 1, "tools/call", {"name": "start", "arguments": {"speed_rpm": 1500}})
    assert started["result"]["structuredContent"]["state"] == "starting"
    board_started = time.monotonic()

    # A 100 KB request whose body comes one byte every 0.5 s: every single read is well inside the
    # I/O timeout, the packet as a whole never is.
    link[1].write(publish_head(DOWN, 100_000))
    held = await dribble_until_closed(link, b" ", every_s=0.5, give_up_s=IO_TIMEOUT_S + 12)
    assert held < IO_TIMEOUT_S + MARGIN_S, f"link held {held:.1f} s"
    await board.wait_line("took longer than io_timeout_ms")
    await board.wait_line("link_down")

    # The board redials with its back-off, and the pump kept ticking meanwhile: its uptime counts
    # the time the slow packet took.
    again = await slow_broker.next_link(timeout=40)
    await attach(again)
    status = await get_status(again, 2)
    assert status["state"] == "running"
    assert status["uptime_s"] >= time.monotonic() - board_started - MARGIN_S


async def test_packets_other_than_suback_drop_the_link_within_connect_timeout(
    c_boards: CBoardFactory, slow_broker: SlowBroker
) -> None:
    board = await start_board(c_boards, slow_broker)
    link = await slow_broker.next_link()
    await connack(link)
    first, _ = await read_packet(link[0])
    assert first == 0x82
    # A PINGRESP every second and never the SUBACK: each packet comes in time, the SUBACK never does.
    held = await dribble_until_closed(link, PINGRESP, every_s=1.0, give_up_s=CONNECT_TIMEOUT_S + 10)
    assert held < CONNECT_TIMEOUT_S + MARGIN_S, f"link held {held:.1f} s"
    await board.wait_line("no SUBACK from the broker")
    again = await slow_broker.next_link(timeout=40)
    await attach(again)
    assert (await get_status(again, 1))["fault"] is None


async def test_a_stream_of_unasked_packets_does_not_stop_the_pump_ticking(
    c_boards: CBoardFactory, slow_broker: SlowBroker
) -> None:
    await start_board(c_boards, slow_broker)
    link = await slow_broker.next_link()
    await attach(link)
    writer = link[1]
    before = await get_status(link, 1)
    writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    flood_started = time.monotonic()
    flood = PINGRESP * 32768
    # PINGRESPs back to back for 3 s, then a get_status behind them in the same stream: the board
    # answers it before it ticks again, so its uptime shows whether it ticked during the flood.
    while time.monotonic() - flood_started < 3.0:
        writer.write(flood)
        await writer.drain()
    writer.write(request_bytes(2, "tools/call", {"name": "get_status", "arguments": {}}))
    await writer.drain()
    reply = await answer(link)
    elapsed = time.monotonic() - flood_started
    ticked = reply["result"]["structuredContent"]["uptime_s"] - before["uptime_s"]
    assert ticked >= elapsed - 1.5, f"the pump ticked {ticked} s of {elapsed:.1f} s of flood"
