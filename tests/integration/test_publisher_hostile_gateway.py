"""Publishers and the simulator against a gateway that misbehaves (docs/provider-api.md, "Reconnecting";
docs/simulator.md): a malformed frame is skipped and the link lives, a fault ends one link and never
the publisher, a slot refused at the door or a link dropped right after every upgrade backs off instead
of redialling in a tight loop, and a huge frame is refused before it is buffered."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.publish import MultiplexedPublisher, Publisher
from gateway.publish.sdk_bridge import SdkServer
from gateway.publish.websocket import (
    MALFORMED_ENVELOPE,
    MALFORMED_JSON,
    MALFORMED_PAYLOAD,
    MALFORMED_REFUSAL,
    MALFORMED_SLOT,
)
from gateway.southbound.serial import framing
from sim.serial_line import SerialTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import Publishers, wait_for
from tests.support.serial_ports import raw_tty

pytestmark = pytest.mark.timeout(60)

PING = {"jsonrpc": "2.0", "id": "gw-7", "method": "ping"}
HOSTILE_FRAMES = [
    b"not json at all",
    b'["a list"]',
    b'{"provider":["x"],"payload":{}}',  # an unhashable slot name
    b'{"provider":{"a":1},"payload":{}}',
    b'{"provider":"nobody","payload":{}}',
    b'{"provider":"demo-1","payload":"text"}',
    b'{"provider":"demo-1","payload":{"id":null,"error":"boom"}}',  # a refusal whose error is no object
    b'{"provider":"demo-1","payload":{"id":null,"error":{"code":"x","message":1}}}',
]


def demo_server(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def hello() -> str:
        return "hi"

    return server


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def fake_gateway() -> AsyncIterator[Callable[[str, Handler], Awaitable[str]]]:
    """An aiohttp app on a free loopback port with one WebSocket route; returns its ws:// base URL."""
    runners: list[web.AppRunner] = []

    async def serve(path: str, handler: Handler) -> str:
        app = web.Application()
        app.router.add_get(path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"ws://127.0.0.1:{runner.addresses[0][1]}"

    yield serve
    for runner in runners:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def running(publisher: Publisher | MultiplexedPublisher) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(publisher.run())
    try:
        yield task
    finally:
        await publisher.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)


# -- the multiplexed publisher against malformed envelopes ------------------------------------------


async def test_malformed_envelopes_are_skipped_and_the_link_and_its_slots_keep_working(
    fake_gateway: Callable[[str, Handler], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.publish")
    answers: list[Any] = []
    dials = 0

    async def providers(request: web.Request) -> web.WebSocketResponse:
        nonlocal dials
        dials += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()  # the register envelope of demo-1
        for _ in range(2):  # each kind twice: logged once, counted twice
            for frame in HOSTILE_FRAMES:
                await ws.send_str(frame.decode())
        await ws.send_bytes(orjson.dumps({"provider": "demo-1", "payload": PING}))
        async for msg in ws:
            answers.append(orjson.loads(msg.data))
        return ws

    url = await fake_gateway("/providers", providers)
    publisher = MultiplexedPublisher({"demo-1": demo_server("demo")}, url, backoff_initial_s=0.05, backoff_max_s=0.1)
    async with running(publisher) as task:
        # The ping after the hostile frames is answered over the same link: it lived through them.
        await wait_for(lambda: any(a.get("payload", {}).get("id") == "gw-7" for a in answers), 10, "the ping answer")
        assert not task.done()
        assert dials == 1 and publisher.faults == 0 and publisher.errors == []
        assert publisher.malformed_frames == {
            MALFORMED_JSON: 2,
            MALFORMED_ENVELOPE: 6,
            MALFORMED_SLOT: 2,
            MALFORMED_PAYLOAD: 2,
            MALFORMED_REFUSAL: 4,
        }
    skipped = [r for r in caplog.records if r.getMessage().startswith("skipped a frame")]
    assert len(skipped) == len(publisher.malformed_frames)  # one line per kind


async def test_refusals_keep_the_latest_per_slot_across_reconnects(
    fake_gateway: Callable[[str, Handler], Awaitable[str]],
) -> None:
    dials = 0

    async def providers(request: web.Request) -> web.WebSocketResponse:
        nonlocal dials
        dials += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()
        await ws.receive()
        refusal = {"id": None, "error": {"code": -32000, "message": f"Slot already held ({dials})"}}
        await ws.send_bytes(orjson.dumps({"provider": "demo-2", "payload": refusal}))
        await ws.send_bytes(orjson.dumps({"provider": "demo-1", "payload": PING}))
        await ws.close()  # every link ends at once: the refusal comes again at each reconnect
        return ws

    url = await fake_gateway("/providers", providers)
    servers: dict[str, SdkServer] = {"demo-1": demo_server("one"), "demo-2": demo_server("two")}
    publisher = MultiplexedPublisher(servers, url, backoff_initial_s=0.01, backoff_max_s=0.02)
    async with running(publisher):
        await wait_for(lambda: publisher.connections >= 6, 15, "six links")
        assert len(publisher.errors) == 1
        latest = publisher.errors[0]
        assert latest["slot"] == "demo-2" and latest["code"] == -32000
        assert latest["message"] != "Slot already held (1)"  # replaced at each reconnect


class FaultyPublisher(MultiplexedPublisher):
    """Stands in for a bug in the publisher's own handling: the first refusal it reads raises."""

    def _refused(self, slot: str, error: Any) -> None:
        raise RuntimeError("a bug in handling a refusal")


async def test_a_fault_in_handling_ends_the_link_and_the_publisher_dials_again(
    fake_gateway: Callable[[str, Handler], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.publish")

    async def providers(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()
        refusal = {"id": None, "error": {"code": -32000, "message": "held"}}
        await ws.send_bytes(orjson.dumps({"provider": "demo-1", "payload": refusal}))
        async for _ in ws:
            pass
        return ws

    url = await fake_gateway("/providers", providers)
    publisher = FaultyPublisher({"demo-1": demo_server("demo")}, url, backoff_initial_s=0.01, backoff_max_s=0.05)
    async with running(publisher) as task:
        await wait_for(lambda: publisher.faults >= 3, 10, "three faults, each on its own link")
        assert not task.done()
        assert publisher.connections >= 3
        assert publisher.last_close == (None, "publisher fault: RuntimeError: a bug in handling a refusal")
    with_traceback = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert len(with_traceback) == 1  # the first of its kind; the rest are counted


# -- the back-off: a link must prove itself before the wait starts over -----------------------------


async def test_a_slot_refused_at_the_door_is_not_dialled_in_a_tight_loop(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "storm-1", demo_server("holder"))
    newcomer = Publisher(demo_server("newcomer"), gateway.url, "storm-1", backoff_initial_s=0.05, backoff_max_s=2.0)
    async with running(newcomer):
        await wait_for(lambda: newcomer.last_close is not None, 5, "the first refusal")
        assert newcomer.last_close is not None and newcomer.last_close[0] == 1008
        await asyncio.sleep(3)
        # A close 1008 before any frame puts the ceiling at backoff_max_s: waits of 1 to 2 s.
        assert newcomer.connections <= 4, newcomer.connections
        assert "already held" in newcomer.last_close[1]


def pinging_provider(links: list[int], stay_up_s: Callable[[int], float]) -> Handler:
    """A gateway's /provider endpoint that takes the register frame, sends a ping, stays up
    `stay_up_s(link number)` seconds and closes 1001; each link's number is appended to `links`."""

    async def provider(request: web.Request) -> web.WebSocketResponse:
        links.append(len(links) + 1)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()
        await ws.send_bytes(orjson.dumps(PING))
        await asyncio.sleep(stay_up_s(links[-1]))
        await ws.close(code=1001, message=b"going away")
        return ws

    return provider


async def test_links_dropped_right_after_the_upgrade_back_off_longer_and_longer(
    fake_gateway: Callable[[str, Handler], Awaitable[str]],
) -> None:
    """The gateway speaks (a ping) and then closes at once, every time: each link is a failed dial."""
    links: list[int] = []
    url = await fake_gateway("/provider/{slot}", pinging_provider(links, lambda _: 0.0))
    publisher = Publisher(demo_server("demo"), url, "demo-1", backoff_initial_s=0.05, backoff_max_s=1.0)
    async with running(publisher):
        await asyncio.sleep(2.5)
        # Ceilings 0.05, 0.1, 0.2, 0.4, 0.8, 1 s...: some seven dials, never the dozens of a reset per link.
        assert 3 <= len(links) <= 10, len(links)
        assert publisher.backoff.failures >= 3


async def test_a_link_that_carried_frames_and_stayed_up_starts_the_back_off_over(
    fake_gateway: Callable[[str, Handler], Awaitable[str]],
) -> None:
    links: list[int] = []
    # From the fourth, links stay up past backoff_max_s.
    url = await fake_gateway("/provider/{slot}", pinging_provider(links, lambda link: 0.5 if link >= 4 else 0.0))
    publisher = Publisher(demo_server("demo"), url, "demo-1", backoff_initial_s=0.05, backoff_max_s=0.3)
    async with running(publisher):
        await wait_for(lambda: publisher.connections >= 4, 10, "the fourth link")
        assert publisher.backoff.failures == 3
        await wait_for(lambda: publisher.connections >= 5, 10, "the fifth link")
        assert publisher.backoff.failures == 1  # reset, then one wait


# -- the simulator ----------------------------------------------------------------------------------


async def test_the_simulator_refuses_a_huge_frame_with_1009_before_buffering_it() -> None:
    """A 'gateway' declares a 64 MiB text frame and sends only its first bytes: the pump closes with
    1009 at once (it read the length, not the frame) and dials again."""
    closes: list[int] = []
    dials = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal dials
        dials += 1
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key")
        )
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
        writer.write(b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        await writer.drain()
        await reader.read(4096)  # the register frame
        if dials == 1:
            writer.write(struct.pack(">BBQ", 0x81, 127, 64 << 20) + b'{"jsonrpc":"2.0","id":"brk-1"' + b" " * 4096)
            await writer.drain()
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                first, second = await reader.readexactly(2)
                length = second & 0x7F
                mask = await reader.readexactly(4)
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(await reader.readexactly(length)))
                if first & 0x0F == 0x8:
                    closes.append(struct.unpack(">H", payload[:2])[0])
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    simulator = Simulator(f"ws://127.0.0.1:{port}", SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.1))
    simulator.start()
    try:
        await wait_for(lambda: closes == [1009], 10, "the pump's close 1009")
        await wait_for(lambda: dials >= 2, 10, "the pump dialling again")
    finally:
        await simulator.stop()
        server.close()
        await server.wait_closed()


async def test_a_serial_envelope_with_an_unhashable_slot_is_skipped_and_the_next_one_served(tmp_path: Path) -> None:
    link = tmp_path / "ttyPUMPS"
    settings = SimulatorSettings(pumps=2, backoff_min_s=0.05, backoff_max_s=0.1)
    simulator = Simulator(None, settings, serial=SerialTarget(pty=True, link=str(link)))
    simulator.start()
    fd = os.open(link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    raw_tty(fd)
    decoder = framing.FrameDecoder()
    inbox: list[bytes] = []

    def readable() -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            inbox.extend(decoder.feed(os.read(fd, 65_536)))

    asyncio.get_running_loop().add_reader(fd, readable)
    try:
        await wait_for(lambda: sum(b"notifications/register" in m for m in inbox) >= 2, 10, "both registrations")
        ping = orjson.dumps({"provider": "pump-1", "payload": PING})
        # One write: the hostile frame and the ping reach the pump in the same read.
        os.write(fd, framing.wire_bytes(b'{"provider":["x"],"payload":{}}') + framing.wire_bytes(ping))
        await wait_for(lambda: any(b'"gw-7"' in m and b'"pump-1"' in m for m in inbox), 10, "the ping's answer")
    finally:
        asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)
        await simulator.stop()
