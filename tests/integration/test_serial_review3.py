"""Findings of a serial review: a provider that sends requests faster than it reads their answers (a
serial board, a WebSocket provider) holds at most limits.max_pending_per_slot answers in the gateway,
the rest of its requests dropped and counted; a released or resumed port is logged; a configured port
whose USB device appears is opened at once; a pseudo-terminal is held by the flock alone (no TIOCEXCL,
which a killed gateway would leave set).

Real gateways, real pseudo-terminals (tests/support/serial_ports.py), a real WebSocket provider
(`websockets`), real MCP clients.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.core.broker.status import serial_status
from gateway.southbound.serial import opening
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.integration.test_provider_stops_reading import provider_that_stops_reading
from tests.integration.test_serial_boards import FAST_RETRY, broker_call, ptys  # noqa: F401 (fixture)
from tests.support.serial_ports import FramedBoard, PtyEnumerator
from tests.support.unprivileged import as_nobody

pytestmark = pytest.mark.timeout(90)

SLOT = "pump-flood"
BOUND = 16
"""limits.max_pending_per_slot in these tests: the answers one provider may have waiting."""
FLOOD = 1500
LONG_ID = "x" * 1500
"""Part of each request id: every answer carries it back, so the answers fill the line quickly."""


def request(index: int) -> dict[str, Any]:
    # sampling/createMessage with no client request pending: the gateway answers it itself (-32603 / refusal).
    return {"jsonrpc": "2.0", "id": f"{LONG_ID}-{index}", "method": "sampling/createMessage", "params": {}}


def port_status(server: GatewayServer, path: str) -> dict[str, Any]:
    return next(port for port in serial_status(server.gateway)["ports"] if port["path"] == path)


async def limit_hits(server: GatewayServer) -> float:
    async with aiohttp.ClientSession() as http:
        return (await scrape(http, server)).get("mcpgw_limit_hits_total", limit="max_pending_per_slot")


async def settled(server: GatewayServer) -> float:
    """The requests dropped (limit hits) once their count stopped growing for half a second (at most 20 s)."""
    hits, deadline = -1.0, time.monotonic() + 20
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = await limit_hits(server)
        if now == hits:
            break
        hits = now
    return hits


async def test_a_serial_board_that_sends_requests_faster_than_it_reads_holds_a_bounded_number_of_answers(
    gateway_factory: GatewayFactory,
    ptys: Any,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.provider")
    pair = ptys()
    server = await gateway_factory(
        serial={"ports": [{"path": pair.path}], "write_timeout_s": 60, **FAST_RETRY},
        limits={"max_pending_per_slot": BOUND},
        providers={"heartbeat_interval_s": 60},
    )
    board = FramedBoard(pair)
    try:
        assert (await board.next_message())["method"] == "broker/register"  # the port is open
        board.register(SLOT)
        await wait_ready_slot(server, SLOT)
        loop = asyncio.get_running_loop()
        loop.remove_reader(pair.master)  # the board stops reading: the gateway's answers back up on the line
        for index in range(FLOOD):
            board.send(request(index))
        await wait_for(lambda: not board.writer.pending, timeout=20, what="the board's requests all on the line")
        session = server.gateway.registry.slots[SLOT].live
        assert session is not None

        await settled(server)
        waiting = len(session.requests._answers)
        dropped = port_status(server, pair.path)["dropped"]["backlog"]
        assert waiting <= BOUND, f"{waiting} answers wait for the line, {dropped} requests dropped"
        assert FLOOD - 1000 < dropped < FLOOD  # the line holds some hundreds of answers; the rest dropped
        assert await limit_hits(server) == dropped
        warnings = [r for r in caplog.records if "faster than it reads" in r.getMessage()]
        assert len(warnings) == 1, warnings  # one per burst

        # The board reads again: every request not dropped is answered, and the slot still works.
        answered_before = len(board.received)
        loop.add_reader(pair.master, board._readable)

        def flood_answers() -> int:
            return sum(1 for m in board.received[answered_before:] if str(m.get("id", "")).startswith(LONG_ID))

        await wait_for(lambda: flood_answers() == FLOOD - dropped, timeout=20, what="every kept request answered")
        async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "still here"})
        assert not result.is_error
        await wait_for(
            lambda: any("answers are written again" in r.getMessage() for r in caplog.records),
            what="the end of the burst logged",
        )
    finally:
        board.stop()


async def test_a_websocket_provider_that_sends_requests_faster_than_it_reads_holds_a_bounded_number_of_answers(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(
        limits={"max_pending_per_slot": BOUND, "provider_send_timeout_s": 60},
        providers={"heartbeat_interval_s": 60},
    )
    async with provider_that_stops_reading(server, ["ws-flood"], multiplexed=False, alive_every_s=None) as ws:
        session = server.gateway.registry.slots["ws-flood"].live
        assert session is not None
        for index in range(FLOOD):
            await ws.send(orjson.dumps(request(index)).decode())
        hits = await settled(server)
        waiting = len(session.requests._answers)
        buffered = getattr(session.link, "sender").transport.get_write_buffer_size()  # noqa: B009
        # Unbounded, the flood's answers (2 MB) would wait in the connection's buffer.
        assert buffered < FLOOD * len(LONG_ID) / 4, f"{buffered} bytes of answers wait, {hits:g} requests dropped"
        assert waiting <= BOUND
        assert FLOOD - 1000 < hits < FLOOD
        assert session.requests.dropped == hits
        assert server.gateway.registry.slots["ws-flood"].live is session  # the link itself carries on


async def test_a_configured_port_whose_usb_device_appears_is_opened_at_once(
    ptys: Any,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.southbound.hotplug")
    link = tmp_path / "ttyUSB-board"
    enumerator = PtyEnumerator()
    config = GatewayConfig.model_validate(
        {
            "port": 0,
            "serial": {
                "ports": [{"path": str(link)}],
                "hotplug": {"enabled": True},
                "retry_initial_s": 20,
                "retry_max_s": 30,
            },
        }
    )
    server = GatewayServer(config, serial_enumerator=enumerator)
    await server.start()
    try:
        await wait_for(lambda: port_status(server, str(link))["state"] == "backoff", what="the first open to fail")
        cable = ptys()
        os.symlink(cable.path, link)
        plugged = time.monotonic()
        enumerator.plug(cable)
        await wait_for(lambda: port_status(server, str(link))["state"] == "open", timeout=3, what="the port open")
        assert time.monotonic() - plugged < 3  # not after the 10 to 20 s back-off
        assert serial_status(server.gateway)["hotplug"]["ignored"][cable.path] == "configured under [[serial.ports]]"
        assert any("opening it (configured)" in r.getMessage() for r in caplog.records)
    finally:
        await server.stop()


def open_as_nobody(path: str) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as exc:
            return {"errno": exc.errno}
        os.close(fd)
        return {"errno": 0}

    return as_nobody(work)


async def test_a_pseudo_terminal_is_held_by_the_flock_alone_so_a_killed_gateway_leaves_it_usable(
    root: None,
    gateway_factory: GatewayFactory,
    ptys: Any,  # noqa: F811
) -> None:
    # A pseudo-terminal keeps TIOCEXCL past its last close while its other end is open: a gateway killed
    # with it set would leave it refusing the restarted gateway (run as a service user) for good.
    pair = ptys()
    os.chmod(pair.path, 0o666)
    server = await gateway_factory(serial={"ports": [{"path": pair.path}], "max_hold_s": 120, **FAST_RETRY})
    await wait_for(lambda: port_status(server, pair.path)["state"] == "open", what="the port open")
    assert open_as_nobody(pair.path) == {"errno": 0}
    fd = os.open(pair.path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        assert opening.is_pseudo_terminal(fd)  # a USB adapter's or UART's tty is no pseudo-terminal
    finally:
        os.close(fd)
    await broker_call(server, "broker_serial_release", {"port": pair.path})
    assert open_as_nobody(pair.path) == {"errno": 0}
    resumed = await broker_call(server, "broker_serial_resume", {"port": pair.path})
    assert resumed["state"] == "open"


async def test_a_release_and_a_resume_are_logged(
    gateway_factory: GatewayFactory,
    ptys: Any,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.southbound.serial")
    pair = ptys()
    server = await gateway_factory(serial={"ports": [{"path": pair.path}], "max_hold_s": 120, **FAST_RETRY})
    await wait_for(lambda: port_status(server, pair.path)["state"] == "open", what="the port open")
    await broker_call(server, "broker_serial_release", {"port": pair.path})
    messages = [r.getMessage() for r in caplog.records]
    assert (
        f"serial port {pair.path}: released for another program (broker_serial_release); taken back at the latest "
        "in 120s (serial.max_hold_s) without broker_serial_resume"
    ) in messages
    await broker_call(server, "broker_serial_resume", {"port": pair.path})
    messages = [r.getMessage() for r in caplog.records]
    assert f"serial port {pair.path}: taken back (broker_serial_resume); open" in messages
