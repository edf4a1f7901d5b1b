"""The simulator's back-off after links the gateway drops soon after they came up (docs/simulator.md):
as on the MicroPython board, a link that carried a message from the gateway but was lost within
`backoff_max_s` counts as a failed dial, so the waits grow; only a link that carried a message and
stayed up `backoff_max_s` starts the back-off over. On every way in the simulator has: a WebSocket,
a pump's registration on a serial line, and the serial line itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import WSCloseCode, web

from gateway.southbound.serial import framing
from sim.link import PumpLink
from sim.serial_line import SerialTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.support.serial_ports import PtyPair, raw_tty

BACKOFF_MIN_S = 0.05
SHORT_S = 0.1  # how long the stand-in gateway keeps a link it drops soon
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
LET_GO = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Slot taken over"}}'
WS_DOWN = re.compile(r"pump-1 link down \(.*\); dialling again in (?P<wait>[0-9.]+) s")
StandIn = Callable[[dict[int, float]], Awaitable[str]]
SERIAL_DOWN = re.compile(r"pump-1 link down \(let go by the gateway.*\); registering again in (?P<wait>[0-9.]+) s")


def waits(caplog: pytest.LogCaptureFixture, pattern: re.Pattern[str]) -> list[float]:
    found = (pattern.match(record.getMessage()) for record in caplog.records if record.name == "sim")
    return [float(match["wait"]) for match in found if match]


@pytest.fixture
async def started() -> AsyncIterator[list[Simulator]]:
    simulators: list[Simulator] = []
    yield simulators
    for simulator in simulators:
        await simulator.stop()


# -- WebSocket --------------------------------------------------------------------------------------


@pytest.fixture
async def stand_in() -> AsyncIterator[StandIn]:
    """A gateway's provider endpoint that accepts every pump, sends it one frame (as the gateway's
    initialize after an accepted registration) and closes the link SHORT_S later, or after `hold[n]`
    seconds for link n (1-based). Returns its base URL."""
    runners: list[web.AppRunner] = []

    async def serve(hold: dict[int, float]) -> str:
        links = 0

        async def provider(request: web.Request) -> web.WebSocketResponse:
            nonlocal links
            links += 1
            ws = web.WebSocketResponse(autoping=True)
            await ws.prepare(request)
            await ws.send_bytes(PING)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(hold.get(links, SHORT_S)):
                    async for _ in ws:
                        pass
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"taken over")
            return ws

        app = web.Application()
        app.router.add_get("/provider/{slot}", provider)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"ws://127.0.0.1:{port}"

    yield serve
    for runner in runners:
        await runner.cleanup()


def ws_link(simulator: Simulator) -> PumpLink:
    link = simulator.links["pump-1"]
    assert isinstance(link, PumpLink)
    return link


async def test_websocket_links_dropped_soon_after_they_came_up_back_off_longer_and_longer(
    stand_in: StandIn, started: list[Simulator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    url = await stand_in({})
    simulator = Simulator(url, SimulatorSettings(pumps=1, backoff_min_s=BACKOFF_MIN_S, backoff_max_s=2.0))
    started.append(simulator)
    simulator.start()
    link = ws_link(simulator)
    await wait_for(lambda: link.links >= 5, 15, "five links")
    # Every link carried the stand-in's frame, and each one was lost within backoff_max_s: a failed
    # dial each, so the ceiling doubles (0.05, 0.1, 0.2 s: waits from half of each up to it).
    first = waits(caplog, WS_DOWN)[:3]
    assert len(first) == 3, caplog.text
    assert first[2] >= 0.1, first
    assert link.backoff.failures >= 4


async def test_a_websocket_link_that_stayed_up_the_longest_wait_starts_the_back_off_over(
    stand_in: StandIn, started: list[Simulator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    backoff_max_s = 0.6
    url = await stand_in({4: backoff_max_s + 0.3})
    simulator = Simulator(url, SimulatorSettings(pumps=1, backoff_min_s=BACKOFF_MIN_S, backoff_max_s=backoff_max_s))
    started.append(simulator)
    simulator.start()
    link = ws_link(simulator)
    await wait_for(lambda: link.links >= 4, 15, "the fourth link")
    assert link.backoff.failures == 3  # three short links, three failed dials
    await wait_for(lambda: len(waits(caplog, WS_DOWN)) >= 4, 15, "the fourth link lost")
    assert waits(caplog, WS_DOWN)[3] <= BACKOFF_MIN_S, caplog.text  # from the minimum again
    assert link.backoff.failures == 1


# -- serial -----------------------------------------------------------------------------------------


class LineEnd:
    """The gateway's end of the simulator's serial line, on an open tty: frames in and out."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.decoder = framing.FrameDecoder()
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65_536)
        except (BlockingIOError, OSError):
            return
        for message in self.decoder.feed(data):
            self.inbox.put_nowait(message)

    async def registered(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while b"notifications/register" not in await self.inbox.get():
                pass

    def send(self, message: bytes) -> None:
        os.write(self.fd, framing.wire_bytes(message))

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.fd)


async def test_a_serial_registration_let_go_soon_backs_off_longer_until_one_stays_up(
    started: list[Simulator], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    backoff_max_s = 0.6
    link = tmp_path / "ttyPUMP"
    settings = SimulatorSettings(pumps=1, backoff_min_s=BACKOFF_MIN_S, backoff_max_s=backoff_max_s)
    simulator = Simulator(None, settings, serial=SerialTarget(pty=True, link=str(link)))
    started.append(simulator)
    simulator.start()
    fd = os.open(link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    raw_tty(fd)
    end = LineEnd(fd)
    assert simulator.serial_line is not None
    view = simulator.serial_line.views["pump-1"]
    try:
        for done, hold in enumerate((SHORT_S, SHORT_S, SHORT_S, backoff_max_s + 0.3)):
            await end.registered()
            end.send(PING)  # the registration carried a request
            await asyncio.sleep(hold)
            end.send(LET_GO)  # then the gateway let it go (another provider took the slot)
            await wait_for(lambda: len(waits(caplog, SERIAL_DOWN)) > done, 5, "the pump let go")  # noqa: B023
        found = waits(caplog, SERIAL_DOWN)
        # Let go within backoff_max_s: failed dials, the ceiling doubles (0.05, 0.1, 0.2 s) ...
        assert found[2] >= 0.1, found
        # ... until a registration stayed up that long: from the minimum again.
        assert found[3] <= BACKOFF_MIN_S, found
        assert view.backoff.failures == 1
    finally:
        end.close()
        os.close(fd)


async def test_a_serial_line_lost_soon_after_it_opened_backs_off_longer_until_one_stays_open(
    started: list[Simulator], tmp_path: Path
) -> None:
    backoff_max_s = 0.6
    link = tmp_path / "ttyUSB-PUMP"
    pair = PtyPair()
    os.symlink(pair.path, link)
    settings = SimulatorSettings(pumps=1, backoff_min_s=BACKOFF_MIN_S, backoff_max_s=backoff_max_s)
    simulator = Simulator(None, settings, serial=SerialTarget(path=str(link)))
    started.append(simulator)
    simulator.start()
    line = simulator.serial_line
    assert line is not None
    failures = []
    try:
        for hold in (SHORT_S, SHORT_S, SHORT_S, backoff_max_s + 0.3):
            end = LineEnd(pair.master)
            await end.registered()
            end.send(PING)  # the opening carried a frame from the gateway
            await asyncio.sleep(hold)
            # The cable is pulled: the next opening finds a new port behind the same name.
            opens = line.opens
            end.close()
            old, pair = pair, PtyPair()
            os.symlink(pair.path, tmp_path / "next")
            os.replace(tmp_path / "next", link)
            old.close()
            await wait_for(lambda: line.opens > opens, 10, "the line opened again")  # noqa: B023
            failures.append(line.backoff.failures)
        # Lost within backoff_max_s: a failed opening each; one that stayed open starts over.
        assert failures == [1, 2, 3, 1]
    finally:
        pair.close()
