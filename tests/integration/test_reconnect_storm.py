"""Boards reconnecting at once (a gateway restart on a plant): the work is proportional to the boards.

Raw WebSocket boards (bench/devices.py, pump-1's own tools and register frame) dial a gateway at once
and leave at once, while a real SDK client holds `_all`'s notification stream. The test counts the
lines the catalog modules execute, a measure of work that does not depend on the machine's speed:
per board it must stay flat as the storm grows (it grew with the number of boards when every
arrival rebuilt every catalog). `bench/storm.py` runs the 1,000-board storm and times it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from mcp import Client

from bench.devices import PUMP1_TOOLS, Devices
from gateway.app import GatewayServer
from gateway.core import aggregate
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import Boards, ScriptedBoard

CORE = Path(aggregate.__file__ or "").parent
CATALOG_FILES = {name: str(CORE / name) for name in ("aggregate.py", "coalesce.py", "groups.py")}
"""The modules that build `_all`'s and the tool groups' catalogs, by file name."""


@dataclass
class Work:
    lines: dict[str, int]
    rebuilds: int = 0


@contextmanager
def counting_lines() -> Iterator[Work]:
    """Count the line events of the catalog modules (in this thread, where the event loop runs)."""
    work = Work({name: 0 for name in CATALOG_FILES})
    by_file = {path: name for name, path in CATALOG_FILES.items()}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            work.lines[by_file[frame.f_code.co_filename]] += 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in by_file else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        yield work
    finally:
        sys.settrace(previous)


WINDOW_MS = 10_000
"""catalog_coalesce_ms here: longer than either phase of a storm, so the rebuilds counted are those the
gateway's own design makes (one per phase, when the test reads the catalog), never the number of
coalescing windows a slower host's storm happens to span."""


def ready_count(gateway: GatewayServer) -> int:
    """Slots whose provider is ready, read from the registry (reading `_all`'s catalog would rebuild it)."""
    return sum(1 for slot in gateway.gateway.registry.slots.values() if slot.live is not None and slot.live.ready)


async def storm(gateway: GatewayServer, boards: int) -> Work:
    """Line events while `boards` boards dial at once, are all served, and all leave at once."""
    registry = gateway.gateway.registry
    catalog = gateway.gateway.aggregate
    devices = Devices(gateway.url, boards, prefix="board", register=True, tools=PUMP1_TOOLS)
    async with Client(f"{gateway.url}/_all/mcp", mode="legacy") as watcher:  # holds _all's stream
        rebuilds_before = catalog.refresh.rebuilds
        with counting_lines() as work:
            await devices.start()
            try:
                await devices.wait_listed(60)
                await wait_for(lambda: ready_count(gateway) == boards, 30, "every board to be ready")
                assert len(catalog.tools) == boards * len(PUMP1_TOOLS)
            finally:
                await devices.stop()
            await wait_for(lambda: not registry.live_sessions(), 30, "every board to leave")
            assert not catalog.tools
        work.rebuilds = catalog.refresh.rebuilds - rebuilds_before
        listed = await watcher.list_tools()
    assert listed.tools == []
    return work


async def test_a_storm_costs_each_board_the_same_however_many_boards_dial(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # Every board dials from 127.0.0.1 here.
    limits = {"max_slots_per_peer": 0, "catalog_coalesce_ms": WINDOW_MS}
    small, large = 30, 120
    few = await storm(await gateway_factory(limits=limits), small)
    gateway = await gateway_factory(limits=limits)
    many = await storm(gateway, large)
    # Arrivals and departures only mark the catalog stale: it is rebuilt once when read after the
    # arrivals and once after the departures, however many boards came (a third time if a phase
    # outlasted the window on a very slow host).
    assert few.rebuilds <= 3 and many.rebuilds <= 3, (few.rebuilds, many.rebuilds)
    # A rebuild per board gives about large / small (4) per board; one rebuild per phase keeps the
    # work per board flat: each module's lines per board stay within a margin of the smaller storm's.
    for module in CATALOG_FILES:
        assert many.lines[module] / large <= 1.5 * few.lines[module] / small, (module, few.lines, many.lines)
    # No [groups] configured: the tool-group catalog is built for nobody.
    assert gateway.gateway.groups.refresh.rebuilds == 0
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    assert not errors, [record.getMessage() for record in errors]


async def test_handshakes_beyond_max_concurrent_handshakes_wait_their_turn_connected(
    gateway_factory: GatewayFactory,
) -> None:
    gateway = await gateway_factory(providers={"max_concurrent_handshakes": 2})
    helper = Boards()
    try:
        boards = [await helper.connect(gateway.url, f"/provider/turn-{index}") for index in range(3)]
        for board in boards:
            board.handshake = False  # the test answers, so it decides when each handshake ends
        # Each board waits for its first request at once: on a loaded host one handshake may start
        # well after another, and only the count of those started matters.
        tasks = {index: asyncio.create_task(first_request(board, 10.0)) for index, board in enumerate(boards)}
        await wait_for(lambda: sum(task.done() for task in tasks.values()) >= 2, 10.0, "two handshakes to start")
        await asyncio.sleep(0.5)  # time enough for a third to start, were the bound not kept
        asked = [index for index, task in tasks.items() if task.done()]
        assert len(asked) == 2
        [waiting] = [index for index in tasks if index not in asked]
        tasks[waiting].cancel()
        firsts = {index: tasks[index].result() for index in asked}
        assert not boards[waiting].closed.is_set()  # connected all along, and asked nothing yet
        await answer_handshake(boards[asked[0]], firsts[asked[0]])
        # One handshake ended: the waiting board's turn comes.
        first = await first_request(boards[waiting], 5.0)
        assert first is not None
        await answer_handshake(boards[asked[1]], firsts[asked[1]])
        await answer_handshake(boards[waiting], first)
        for index in range(3):
            await wait_ready_slot(gateway, f"turn-{index}")
    finally:
        await helper.aclose()


def is_request(message: Any) -> bool:
    return isinstance(message, dict) and "id" in message and "method" in message


async def first_request(board: ScriptedBoard, timeout: float = 0.5) -> dict[str, Any] | None:
    """The gateway's first request to `board` within `timeout`, or None."""
    try:
        request: dict[str, Any] = await board.take(is_request, timeout, "a request")
    except AssertionError:
        return None
    return request


async def answer_handshake(board: ScriptedBoard, request: dict[str, Any] | None) -> None:
    """Answer as a board of the device profile does (no server/discover), up to its tool list."""
    while request is not None:
        method = request["method"]
        if method == "tools/list":
            await board.reply(request, {"tools": board.tools})
            return
        if method == "initialize":
            await board.reply(request, board._initialize_result(request))
        else:
            await board.reply_error(request, {"code": -32601, "message": f"Method not found: {method}"})
        request = await board.take(is_request, 5.0, "the next handshake request")
