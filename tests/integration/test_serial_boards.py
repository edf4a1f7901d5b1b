"""Boards on serial lines (docs/protocol-serial-mqtt.md, "Serial way in"): real pseudo-terminals, the
MicroPython Unix port, real SDK clients.

The gateway opens a port by path as it opens /dev/ttyUSB0. The board opens another pseudo-terminal
and a relay joins the two (tests/support/serial_ports.py), so that a test can damage the bytes on
the line, freeze it, or pull the cable; a hand-written FramedBoard stands in where a board must
misbehave. Calls come from real SDK clients in both eras.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from cobs import cobs
from mcp import Client, MCPError
from mcp.types import CallToolResult

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.core.broker.status import serial_status
from gateway.southbound.serial import framing
from gateway.southbound.serial.ports import REGISTER_REQUEST
from sim.serial_line import SerialTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.device.harness import SCHEMA_FILE, Device, find_tool, start_device
from tests.integration.test_metrics import scrape
from tests.sim.test_sim_process import line_matching, spawn, stop
from tests.support.serial_ports import FramedBoard, PtyEnumerator, PtyPair, SerialRelay
from tests.support.servers import demo_server
from tests.support.southbound import provider_status

SLOT = "pump-1"
FAST_RETRY = {"retry_initial_s": 0.05, "retry_max_s": 0.3}
BOOT_LOG = (
    b"ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n"
    b"configsip: 0, SPIWP:0xee\r\nclk_drv:0x00,q_drv:0x00,d_drv:0x00,cs0_drv:0x00,hd_drv:0x00,wp_drv:0x00\r\n"
    b"mode:DIO, clock div:2\r\nload:0x3fff0030,len:4540\r\nentry 0x40080600\r\n"
)

PtyFactory = Callable[[], PtyPair]
BoardFactory = Callable[..., Awaitable[Device]]


@pytest.fixture
def ptys() -> Any:
    made: list[PtyPair] = []

    def make() -> PtyPair:
        pair = PtyPair()
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.close()


@pytest.fixture
async def relays() -> AsyncIterator[Callable[[PtyPair, PtyPair], SerialRelay]]:
    made: list[SerialRelay] = []

    def make(board: PtyPair, gateway: PtyPair) -> SerialRelay:
        relay = SerialRelay(board, gateway)
        made.append(relay)
        return relay

    yield make
    for relay in made:
        relay.stop()


@pytest.fixture
async def boards(tmp_path: Path) -> AsyncIterator[BoardFactory]:
    """pump-1 on the MicroPython Unix port (96 KB heap), its link a serial line at `path`."""
    micropython = find_tool("micropython")
    started: list[Device] = []

    async def start(path: str, **overrides: Any) -> Device:
        config = {
            "transport": "serial",
            "serial": {"path": path},
            "schema_path": str(SCHEMA_FILE),
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
            **overrides,
        }
        device = await start_device(micropython, tmp_path / f"board-{len(started)}.json", config)
        started.append(device)
        return device

    yield start
    for device in started:
        await device.stop()


def serial_config(*paths: str, **line: Any) -> dict[str, Any]:
    return {"ports": [{"path": path, **line} for path in paths], **FAST_RETRY}


def port_of(server: GatewayServer, index: int = 0) -> dict[str, Any]:
    ports: list[dict[str, Any]] = serial_status(server.gateway)["ports"]
    return ports[index]


def port_at(server: GatewayServer, path: str) -> dict[str, Any]:
    ports: list[dict[str, Any]] = serial_status(server.gateway)["ports"]
    return next(port for port in ports if port["path"] == path)


def unregistered_reached(server: GatewayServer, path: str, count: int) -> bool:
    return bool(port_at(server, path)["dropped"]["unregistered"] == count)


async def status_of(client: Client, tool: str = "get_status", arguments: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    return result.structured_content


async def poll(client: Client, until: Callable[[Any], bool], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        status = await status_of(client)
        if until(status):
            return status
        assert time.monotonic() < deadline, f"pump never reached the expected state: {status}"
        await asyncio.sleep(0.05)


async def broker_call(server: GatewayServer, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else result.content[0].text  # type: ignore[union-attr]


async def metrics_text(server: GatewayServer) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
        return await response.text()


# -- the MicroPython board over a pseudo-terminal -----------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_client_drives_the_micropython_pump_over_a_serial_line(
    gateway_factory: GatewayFactory, ptys: PtyFactory, relays: Any, boards: BoardFactory, mode: str
) -> None:
    board_side, gateway_side = ptys(), ptys()
    relays(board_side, gateway_side)
    gateway = await gateway_factory(serial=serial_config(gateway_side.path))
    device = await boards(board_side.path)
    await wait_ready_slot(gateway, SLOT, timeout=15)
    link_up = await device.wait_event("link_up")
    assert link_up["url"] == f"serial {board_side.path} 115200 baud"

    async with Client(f"{gateway.url}/{SLOT}/mcp", mode=mode) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == ["get_status", "start", "set_speed", "stop", "reset_fault"]
        assert (await status_of(client))["state"] == "stopped"
        started = await status_of(client, "start", {"speed_rpm": 1200})
        assert (started["state"], started["setpoint_rpm"]) == ("starting", 1200)
        running = await poll(client, lambda s: s["state"] == "running")
        assert running["speed_rpm"] == 1200
        refused = await client.call_tool("start", {"speed_rpm": 5000})
        assert refused.is_error
        assert "speed_rpm 5000 is out of range" in refused.content[0].text  # type: ignore[union-attr]
        assert (await status_of(client, "stop"))["state"] == "stopping"
        assert (await poll(client, lambda s: s["state"] == "stopped"))["speed_rpm"] == 0

    status = await provider_status(gateway.url, SLOT)
    assert status["transport"] == "serial"
    assert status["remote"] == gateway_side.path
    assert status["identity"] == f"serial:{gateway_side.path}"
    assert status["provider_url"] == gateway_side.path  # where the board comes in: its port
    assert status["aggregate"] is True
    assert status["hello"]["firmware"] == {"name": "pump-1-micropython", "version": "0.1.0"}
    port = status["upstream"]
    assert port["kind"] == "serial"
    assert (port["state"], port["slots"], port["source"], port["enveloped"]) == ("open", [SLOT], "config", False)
    assert port["dropped_total"] == 0
    assert port["frames_in"] > 5 and port["frames_out"] > 5
    assert status["counters"]["unparsable"] == 0


def damage_next_answer(relay: SerialRelay, damage: Callable[[bytearray], None]) -> None:
    """Damage the next tool result the board sends (found by decoding the frames on the line)."""

    def hook(_index: int, chunk: bytes) -> bytes:
        try:
            payload = cobs.decode(chunk)
        except cobs.DecodeError:
            return chunk
        if b'"content"' not in payload:
            return chunk
        relay.hook = None
        damaged = bytearray(chunk)
        damage(damaged)
        return bytes(damaged)

    relay.hook = hook


def no_zero_noise(size: int, rng: random.Random) -> bytes:
    return bytes(rng.randrange(0x80, 0x100) for _ in range(size))  # not text, and never a delimiter


def flip_a_bit(frame: bytearray) -> None:
    at = len(frame) // 2
    frame[at] ^= 0x10 if frame[at] != 0x10 else 0x01


async def test_noise_on_the_line_is_dropped_and_counted_and_never_answers_a_call(
    gateway_factory: GatewayFactory, ptys: PtyFactory, relays: Any, boards: BoardFactory
) -> None:
    rng = random.Random(6)
    board_side, gateway_side = ptys(), ptys()
    relay = relays(board_side, gateway_side)
    gateway = await gateway_factory(serial=serial_config(gateway_side.path), providers={"request_timeout_ms": 1500})
    await boards(board_side.path)
    await wait_ready_slot(gateway, SLOT, timeout=15)
    damages: list[tuple[str, Callable[[bytearray], None]]] = [
        ("a flipped bit", flip_a_bit),
        ("boot-log text inside the frame", lambda frame: frame.__setitem__(slice(12, 12), BOOT_LOG)),
        ("random bytes inside the frame", lambda frame: frame.__setitem__(slice(30, 30), no_zero_noise(40, rng))),
    ]
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        assert (await status_of(client))["state"] == "stopped"
        before = port_of(gateway)["dropped_total"]
        # Between frames: a board's boot banner, then binary noise. Neither costs a call.
        relay.inject_to_gateway(BOOT_LOG)
        assert (await status_of(client))["state"] == "stopped"
        relay.inject_to_gateway(no_zero_noise(64, rng))
        assert (await status_of(client, "start", {"speed_rpm": 900}))["setpoint_rpm"] == 900
        assert port_of(gateway)["dropped"]["text"] == 1
        for what, damage in damages:
            damage_next_answer(relay, damage)
            with pytest.raises(MCPError) as failure:
                await client.call_tool("set_speed", {"speed_rpm": 1000})
            assert failure.value.error.message.startswith(f'Provider "{SLOT}" did not respond within 1500ms'), what
            # The next good frame is served, and it is the answer to this call, not to the lost one.
            assert (await status_of(client, "set_speed", {"speed_rpm": 1100}))["setpoint_rpm"] == 1100, what
        port = port_of(gateway)
        assert port["dropped_total"] - before == 2 + len(damages)
        # Noise with delimiters in it is cut into several pieces: each is dropped, the line resynchronises.
        relay.inject_to_gateway(b"\x00garbage\x01\x02\x00\xff\xfe\x00")
        assert (await status_of(client))["setpoint_rpm"] == 1100
        assert port_of(gateway)["dropped_total"] - before >= 2 + len(damages) + 2
        await status_of(client, "stop")

    status = await provider_status(gateway.url, SLOT)
    # Nothing the damage produced reached the session as a message.
    assert status["counters"]["unparsable"] == 0
    assert status["counters"]["unmatched_responses"] == 0
    assert status["counters"]["protocol_violations"] == 0
    assert status["counters"]["deadlines"] == len(damages)
    metrics = await metrics_text(gateway)
    path = re.escape(gateway_side.path)
    assert re.search(rf'mcpgw_serial_dropped_frames_total\{{port="{path}",reason="text"\}} [1-9]', metrics)
    assert re.search(rf'mcpgw_serial_dropped_frames_total\{{port="{path}",reason="(cobs|crc)"\}} [1-9]', metrics)
    assert re.search(rf'mcpgw_serial_port_open\{{port="{path}"\}} 1\.0', metrics)


async def assert_all_disconnected(calls: list[asyncio.Task[CallToolResult]]) -> None:
    for call in calls:
        # A bound (never a speed assertion): "at once" must not mean "at the 60 s deadline".
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 2.0)
        detail = failure.value.error.data["detail"]  # why the link ended, after the text clients match on
        assert detail and failure.value.error.message == f'Provider "{SLOT}" disconnected: {detail}'


async def test_hot_plug_attach_call_unplug_with_calls_pending_and_plug_in_again(
    ptys: PtyFactory, relays: Any, boards: BoardFactory
) -> None:
    enumerator = PtyEnumerator()
    config = GatewayConfig.model_validate(
        {"port": 0, "serial": {"hotplug": {"enabled": True, "slots": ["pump-*"]}, **FAST_RETRY}}
    )
    server = GatewayServer(config, serial_enumerator=enumerator)
    await server.start()
    try:
        board_side, cable = ptys(), ptys()
        relay = relays(board_side, cable)
        await boards(board_side.path)
        other = ptys()
        enumerator.plug(other, vid_pid="046d:c52b")  # a mouse's receiver: not a listed board, left alone
        enumerator.plug(cable, vid_pid="10c4:ea60", serial_number="0001")
        await wait_ready_slot(server, SLOT, timeout=15)
        status = await provider_status(server.url, SLOT)
        assert status["transport"] == "serial"
        assert status["identity"] == "serial:usb:10c4:ea60:0001"
        assert status["upstream"]["source"] == "hotplug"
        assert status["upstream"]["usb"]["vid_pid"] == "10c4:ea60"
        hotplug = serial_status(server.gateway)["hotplug"]
        assert hotplug["backend"] == "test"
        assert hotplug["ignored"] == {other.path: "VID:PID 046d:c52b is not in serial.hotplug.vid_pid"}

        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(Client(f"{server.url}/{SLOT}/mcp", mode=mode))
                for mode in ("legacy", "2026-07-28")
            ]
            assert (await status_of(clients[0]))["state"] == "stopped"
            relay.frozen = True  # the board's answers no longer arrive: the calls stay pending
            calls = [asyncio.create_task(client.call_tool("get_status", {})) for client in clients]

            def both_pending() -> bool:
                session = server.gateway.registry.slots[SLOT].live
                return session is not None and len(session.pending) == 2

            await wait_for(both_pending, what="two calls pending at the board")
            # The relay lets go of the cable's descriptors first: the event loop would otherwise keep
            # watching closed numbers, and the next socket given such a number could not be watched.
            relay.stop()
            cable.close()  # pulled out: the tty is gone ...
            enumerator.unplug(cable)  # ... and udev says so
            await assert_all_disconnected(calls)
            await wait_for(lambda: serial_status(server.gateway)["ports"] == [], what="the port to go")
            with pytest.raises(MCPError, match=f'Provider "{SLOT}" not connected'):
                await clients[0].call_tool("get_status", {})

        new_cable = ptys()
        relays(board_side, new_cable)
        enumerator.plug(new_cable, vid_pid="10c4:ea60", serial_number="0001")
        # The board never noticed; it registers again when the gateway asks (broker/register).
        await wait_ready_slot(server, SLOT, timeout=15)
        async with Client(f"{server.url}/{SLOT}/mcp", mode="2026-07-28") as client:
            assert (await status_of(client))["state"] == "stopped"
        hotplug = serial_status(server.gateway)["hotplug"]
        assert (hotplug["attached"], hotplug["detached"]) == (2, 1)
    finally:
        await server.stop()


# -- the simulator on a serial line (the board's code under CPython) ----------------------------


def simulator_on(link: Path, pumps: int = 1) -> Simulator:
    settings = SimulatorSettings(pumps=pumps, backoff_min_s=0.05, backoff_max_s=0.2)
    simulator = Simulator(None, settings, serial=SerialTarget(pty=True, link=str(link)))
    simulator.start()
    return simulator


async def test_a_port_that_is_missing_or_fails_is_retried(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    link = tmp_path / "ttyPUMP"  # like /dev/serial/by-id/...: a name that follows the board
    gateway = await gateway_factory(serial=serial_config(str(link)))
    await wait_for(lambda: port_of(gateway)["failures_in_a_row"] >= 3, what="the missing port to be retried")
    assert port_of(gateway)["last_error"] == "cannot open: No such file or directory (ENOENT)"
    assert port_of(gateway)["state"] in ("backoff", "opening")
    diagnosis = await broker_call(gateway, "broker_diagnose")
    missing = [problem for problem in diagnosis["problems"] if problem["id"] == "serial.port_unavailable"]
    assert len(missing) == 1, diagnosis["problems"]
    assert missing[0]["severity"] == "error"
    assert missing[0]["summary"].startswith(f"Serial port {link} cannot be opened")
    assert missing[0]["evidence"].startswith("cannot open: No such file or directory (ENOENT);")
    assert "ls -l /dev/serial/by-id/" in missing[0]["fix"]

    simulator = simulator_on(link)
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
            assert (await status_of(client, "start", {"speed_rpm": 700}))["setpoint_rpm"] == 700
    finally:
        await simulator.stop()  # the line dies under the open port
    await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live is None, what="the slot to be detached")
    status = await provider_status(gateway.url, SLOT)
    # A pty whose other end closed reads EIO or end of file, by kernel and timing; both are the unplug.
    assert re.match(
        rf"serial port {re.escape(str(link))} (failed: read error|closed: the device went away)",
        status["last_disconnect_reason"],
    ), status["last_disconnect_reason"]
    # Where the board comes back is its port, not a WebSocket URL, in provider_status and in the fix.
    assert status["provider_url"] == str(link)
    lost = (await broker_call(gateway, "broker_diagnose", {"slot": SLOT}))["problems"]
    assert [problem["id"] for problem in lost] == ["slot.disconnected"]
    assert lost[0]["fix"].startswith(f"Check the board on serial port {link}: its power and cable")

    simulator = simulator_on(link)
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        async with Client(f"{gateway.url}/{SLOT}/mcp", mode="2026-07-28") as client:
            assert (await status_of(client))["state"] == "stopped"  # a new pump: it booted stopped
        assert port_of(gateway)["opens"] == 2
    finally:
        await simulator.stop()


async def test_sim_serial_pty_command_publishes_pumps_with_envelopes(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    link = tmp_path / "pumps"
    process = await spawn(
        "sim",
        "--serial-pty",
        "--serial-link",
        str(link),
        "--pumps",
        "2",
        "--control-port",
        "0",
        "--log-level",
        "warning",
    )
    try:
        line = await line_matching(process.stdout, re.compile(rb"serve it with: mcp-gateway run --serial (\S+)"))
        assert f"serial line {link} (envelopes, one slot per pump)".encode() in line
        assert link.resolve().as_posix().startswith("/dev/pts/")
        gateway = await gateway_factory(serial=serial_config(str(link)))
        for slot in ("pump-1", "pump-2"):
            await wait_ready_slot(gateway, slot, timeout=10)
        async with Client(f"{gateway.url}/pump-2/mcp", mode="2026-07-28") as client:
            assert (await status_of(client, "start", {"speed_rpm": 1500}))["setpoint_rpm"] == 1500
        async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
            assert (await status_of(client))["state"] == "stopped"
        port = port_of(gateway)
        assert port["slots"] == ["pump-1", "pump-2"]
        assert (await provider_status(gateway.url, "pump-2"))["upstream"]["enveloped"] is True
    finally:
        assert await stop(process) == 0
    assert not link.exists()


# -- a hand-written board: what the gateway says to a board that gets things wrong --------------


@pytest.fixture
async def framed(ptys: PtyFactory) -> AsyncIterator[Callable[..., FramedBoard]]:
    made: list[FramedBoard] = []

    def make(pair: PtyPair, **options: Any) -> FramedBoard:
        board = FramedBoard(pair, **options)
        made.append(board)
        return board

    yield make
    for board in made:
        board.stop()


async def test_an_unregistered_board_is_asked_to_register(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path))
    assert await board.next_message() == orjson.loads(REGISTER_REQUEST)  # as the port opens
    board.send({"jsonrpc": "2.0", "id": 7, "result": {}})  # a board that thinks it is registered
    assert await board.next_message() == orjson.loads(REGISTER_REQUEST)
    await wait_for(lambda: port_of(gateway)["dropped"]["unregistered"] == 1, what="the frame to be counted")

    board.send({"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}})
    refusal = await board.next_message()
    assert refusal["id"] is None
    assert refusal["error"]["code"] == -32000
    assert "names its slot: send notifications/register with params.slot" in refusal["error"]["message"]

    board.register("valve-3")
    await wait_ready_slot(gateway, "valve-3")
    async with Client(f"{gateway.url}/valve-3/mcp", mode="legacy") as client:
        result = await client.call_tool("echo", {"open": True})
    assert result.content[0].text == '{"open":true}'  # type: ignore[union-attr]


async def test_slot_patterns_of_the_port_and_takeover_rules_refuse_by_name(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any, publishers: Publishers
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path, slots=["pump-*", "held"]))
    await board.next_message()
    board.register("boiler-1")
    refusal = await board.next_message()
    assert refusal["error"] == {
        "code": -32001,
        "message": f'Serial port {pair.path} may not publish slot "boiler-1"; its slots setting allows: pump-*, held',
    }
    await publishers.start(gateway, "held", demo_server("held"))
    board.register("held")
    refusal = await board.next_message()
    assert refusal["error"]["code"] == -32000
    assert refusal["error"]["message"].startswith("Slot already held by a live provider")
    assert port_of(gateway)["dropped"]["refused"] == 2
    assert port_of(gateway)["slots"] == []


async def test_register_frames_naming_invisible_characters_or_dot_segments_are_refused(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path))  # slots = ["*"]: the name rules alone
    await board.next_message()
    printable = "; use printable characters only"
    dots = 'Slot name "{}" is a path step in URLs; pick another name, e.g. pump-1'
    refused = {
        "pump\u00851": "Slot name contains control characters (U+0085 at character 5)" + printable,
        "pump\u2067-1": "Slot name contains bidirectional controls (U+2067 at character 5)" + printable,
        "..": dots.format(".."),
    }
    for slot, reason in refused.items():
        board.register(slot)
        refusal = await board.next_message()
        assert refusal == {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": reason}}
    register = {"jsonrpc": "2.0", "method": "notifications/register"}
    board.send({"provider": ".", "payload": register})  # and with envelopes
    refusal = await board.next_message()
    assert refusal["provider"] == "."
    assert refusal["payload"]["error"]["message"] == dots.format(".")
    assert port_of(gateway)["dropped"]["refused"] == 4
    assert port_of(gateway)["slots"] == []
    assert not gateway.gateway.registry.slots


async def test_refused_register_frames_warn_once_per_slot_and_count_the_rest(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.southbound.serial")
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path, slots=["pump-*"]))
    await board.next_message()
    for slot in ["boiler-1"] * 5 + ["boiler-2"] * 2:  # a board that retries a wrong name, then another
        board.register(slot)
        refusal = await board.next_message()
        assert refusal["error"]["message"].startswith(f'Serial port {pair.path} may not publish slot "{slot}"')
    assert port_of(gateway)["dropped"]["refused"] == 7
    warnings = [
        record.getMessage()
        for record in caplog.records
        if record.name == "gateway.southbound.serial" and record.levelno >= logging.WARNING
    ]
    assert warnings == [
        f'serial port {pair.path}: Serial port {pair.path} may not publish slot "{slot}"; its slots setting '
        "allows: pump-* (further ones are only counted)"
        for slot in ("boiler-1", "boiler-2")
    ]


async def test_bytes_in_and_out_count_every_byte_on_the_line(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path))
    await board.next_message()
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        assert not (await client.call_tool("echo", {"text": "x" * 600})).is_error  # over 254 bytes: COBS codes

    # What the board read and wrote, byte for byte: delimiters, COBS code bytes and the CRC included.
    def counted() -> tuple[int, int]:
        port = port_of(gateway)
        return port["bytes_out"], port["bytes_in"]

    with contextlib.suppress(AssertionError):  # the last frames may still be on their way: wait, then compare
        await wait_for(lambda: counted() == (board.bytes_read, board.bytes_written), what="the byte counters")
    assert counted() == (board.bytes_read, board.bytes_written)
    assert port_of(gateway)["frames_out"] == len(board.received)


async def test_serial_bounds_are_configured_counted_and_shown_in_metrics(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    first, second = ptys(), ptys()
    board = framed(first)
    settings = {
        **serial_config(first.path, second.path, frame_cap=256),
        "backlog_messages": 1,
        "register_request_interval_s": 3600,
    }
    gateway = await gateway_factory(serial=settings)
    assert await board.next_message() == orjson.loads(REGISTER_REQUEST)  # as the port opens
    # Three messages in one write arrive in one read: the first waits to be handled, the other two
    # find the backlog (1) full. An unregistered board is asked to register once per interval.
    unregistered = [framing.wire_bytes(orjson.dumps({"jsonrpc": "2.0", "id": n, "result": {}})) for n in range(3)]
    board.write_raw(b"".join(unregistered))
    board.send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x" * 300}})
    await wait_for(
        lambda: port_at(gateway, first.path)["dropped"]["oversize"] == 1, what="the oversize frame to be dropped"
    )
    await wait_for(lambda: port_at(gateway, first.path)["dropped"]["unregistered"] >= 1, what="the unregistered frame")
    dropped = port_at(gateway, first.path)["dropped"]
    assert (dropped["unregistered"], dropped["backlog"]) == (1, 2)
    assert port_at(gateway, first.path)["register_requests"] == 2  # one at open, one for the first unregistered frame
    for more in range(2, 5):  # one at a time: the backlog holds one
        board.send({"jsonrpc": "2.0", "id": 9, "result": {}})
        await wait_for(partial(unregistered_reached, gateway, first.path, more), what="one more unregistered frame")
    assert port_at(gateway, first.path)["register_requests"] == 2
    assert serial_status(gateway.gateway)["limits"] == {
        "backlog_messages": 1,
        "register_request_interval_s": 3600,
        "write_timeout_s": 5.0,
    }

    async with aiohttp.ClientSession() as http:
        metrics = await scrape(http, gateway)
    assert {
        name: metrics.value("mcpgw_limit", limit=name)
        for name in (
            "serial.backlog_messages",
            "serial.register_request_interval_s",
            "serial.write_timeout_s",
            "serial.ports[0].frame_cap",
            "serial.ports[1].frame_cap",
            "serial.hotplug.frame_cap",
        )
    } == {
        "serial.backlog_messages": 1,
        "serial.register_request_interval_s": 3600,
        "serial.write_timeout_s": 5,
        "serial.ports[0].frame_cap": 256,
        "serial.ports[1].frame_cap": 256,
        "serial.hotplug.frame_cap": None,  # hot-plug is off
    }
    assert metrics.value("mcpgw_limit_hits_total", limit="serial.ports[0].frame_cap") == 1
    assert metrics.value("mcpgw_limit_hits_total", limit="serial.backlog_messages") == 2
    assert metrics.value("mcpgw_serial_dropped_frames_total", port=first.path, reason="oversize") == 1
    assert metrics.value("mcpgw_serial_dropped_frames_total", port=first.path, reason="backlog") == 2
    keys = {port["path"]: port["config_key"] for port in serial_status(gateway.gateway)["ports"]}
    assert keys == {first.path: "serial.ports[0]", second.path: "serial.ports[1]"}


async def test_registering_again_answers_the_old_links_pending_calls_at_once(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    board.answer_requests = False
    gateway = await gateway_factory(serial=serial_config(pair.path))
    await board.next_message()
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("echo", {}))
        request = await board.next_message()
        assert request["method"] == "tools/call"
        board.register(SLOT)  # the board rebooted: whatever it was asked is forgotten
        await assert_all_disconnected([call])
        await wait_ready_slot(gateway, SLOT)
        board.answer_requests = True
        assert not (await client.call_tool("echo", {"again": 1})).is_error
    assert gateway.gateway.registry.slots[SLOT].connects == 2


async def test_a_late_answer_to_the_previous_links_call_reaches_no_caller_of_the_next(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    """The line outlives the link: an answer the board wrote before it registered again can arrive
    after the new link asked something, and must not be taken for that answer."""
    pair = ptys()
    board = framed(pair)
    board.answer_requests = False
    gateway = await gateway_factory(serial=serial_config(pair.path), providers={"heartbeat_interval_s": 3600})
    await board.next_message()
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)
    first = gateway.gateway.registry.slots[SLOT].live
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        old_call = asyncio.create_task(client.call_tool("echo", {"n": 1}))
        old_request = await board.next_message()
        board.register(SLOT)
        await assert_all_disconnected([old_call])
        await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live not in (None, first), what="a new link")
        await wait_ready_slot(gateway, SLOT)
        second = gateway.gateway.registry.slots[SLOT].live
        assert second is not None

        new_call = asyncio.create_task(client.call_tool("echo", {"n": 2}))
        new_request = await board.next_message()
        assert new_request["id"] != old_request["id"]
        stale = {"content": [{"type": "text", "text": "stale"}], "isError": False}
        board.send({"jsonrpc": "2.0", "id": old_request["id"], "result": stale})
        await wait_for(lambda: second.counters.unmatched_responses == 1, what="the late answer to be unmatched")
        assert not new_call.done()
        fresh = {"content": [{"type": "text", "text": "fresh"}], "isError": False}
        board.send({"jsonrpc": "2.0", "id": new_request["id"], "result": fresh})
        result = await asyncio.wait_for(new_call, 5)
    assert result.content[0].text == "fresh"  # type: ignore[union-attr]


async def test_one_port_many_slots_with_envelopes(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path, slots=["valve-*"]))
    await board.next_message()
    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
    for slot in ("valve-1", "valve-2", "boiler"):
        board.send({"provider": slot, "payload": register})
    refusal = await board.next_message()
    assert refusal["provider"] == "boiler"
    assert refusal["payload"]["error"]["code"] == -32001
    for slot in ("valve-1", "valve-2"):
        await wait_ready_slot(gateway, slot)
    async with Client(f"{gateway.url}/_all/mcp", mode="2026-07-28") as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
    assert names == ["valve-1-echo", "valve-2-echo"]  # each slot's tool, under its slot's name; none of boiler's
    for slot in ("valve-1", "valve-2"):
        async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
            result = await client.call_tool("echo", {"slot": slot})
        assert result.content[0].text == orjson.dumps({"slot": slot}).decode()  # type: ignore[union-attr]
    assert port_of(gateway)["slots"] == ["valve-1", "valve-2"]
    # Each slot's frames, both ways, went inside envelopes naming it.
    assert all("provider" in message for message in board.received[1:])


async def test_heartbeat_is_a_json_rpc_ping_and_a_silent_board_loses_its_slot_not_its_port(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path), providers={"heartbeat_interval_s": 0.2})
    await board.next_message()
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)
    await wait_for(lambda: any(m.get("method") == "ping" for m in board.received), what="a JSON-RPC ping")
    board.stop()  # the board hangs: it reads nothing and answers nothing
    await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live is None, what="the heartbeat to drop it")
    status = await provider_status(gateway.url, SLOT)
    assert status["last_disconnect_reason"].startswith("No answer to heartbeat ping")
    assert port_of(gateway)["state"] == "open"
    board = framed(pair)  # it comes back to life: whatever it says first, it is asked to register
    board.send({"jsonrpc": "2.0", "id": "brk-99", "result": {}})
    await wait_for(lambda: REGISTER_REQUEST in [orjson.dumps(m) for m in board.received], what="broker/register")
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)


async def test_debug_mode_takes_typed_json_lines(gateway_factory: GatewayFactory, ptys: PtyFactory) -> None:
    pair = ptys()
    gateway = await gateway_factory(serial=serial_config(pair.path, debug_json_lines=True))
    board = FramedBoard(pair, handshake=False)  # a person at a terminal: every answer typed as a line
    try:
        await board.next_message()
        typed = b'{"jsonrpc":"2.0","method":"notifications/register","params":{"slot":"bench-1"}}\r\n'
        board.write_raw(b"hello?\r\n" + typed)
        request = await board.next_message()  # the gateway's handshake goes out framed, as always
        assert request["method"] == "initialize"
        server_info = {"name": "t", "version": "1"}
        answer = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": server_info},
        }
        board.write_raw(orjson.dumps(answer) + b"\n")
        request = await board.next_message()
        assert request["method"] == "tools/list"
        board.write_raw(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": []}}) + b"\r\n")
        await wait_ready_slot(gateway, "bench-1")
        assert port_of(gateway)["debug_lines"] == 3
        assert port_of(gateway)["dropped"]["text"] == 1  # "hello?" is not JSON: dropped and counted
        assert port_of(gateway)["debug_json_lines"] is True
    finally:
        board.stop()


async def test_shutdown_tells_the_board_and_closes_the_port(ptys: PtyFactory, framed: Any) -> None:
    pair = ptys()
    board = framed(pair)
    server = GatewayServer(GatewayConfig.model_validate({"port": 0, "serial": serial_config(pair.path)}))
    await server.start()
    await board.next_message()
    board.register(SLOT)
    await wait_ready_slot(server, SLOT)
    await server.stop()
    goodbye = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "Gateway shutting down"}}
    # Written before the port closed; the board's reader takes it in on its next turn of the loop.
    await wait_for(lambda: goodbye in board.received, what="the goodbye frame")
    assert board.received[-1] == goodbye
    assert port_of(server)["state"] == "stopped"


async def test_broker_info_lists_ports_and_hot_plug(gateway_factory: GatewayFactory, ptys: PtyFactory) -> None:
    pair = ptys()
    gateway = await gateway_factory(serial=serial_config(pair.path, baud=921600))
    await wait_for(lambda: port_of(gateway)["state"] == "open", what="the port to open")
    async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
        info = (await client.call_tool("broker_info", {})).structured_content
    assert info is not None
    serial = info["serial"]
    assert serial["hotplug"] == {"enabled": False}
    assert [(port["path"], port["baud"], port["state"]) for port in serial["ports"]] == [(pair.path, 921600, "open")]
    page = await broker_call(gateway, "broker_guide", {"topic": "publish-provider"})
    assert f"| `{pair.path}` | config | 921600 | open | `*` | - |" in page
    assert "USB hot-plug is off" in page


@pytest.mark.skipif(sys.platform != "linux", reason="pseudo-terminal paths under /dev/pts")
async def test_run_serial_flag_serves_the_port(ptys: PtyFactory, tmp_path: Path) -> None:
    from bench.ports import free_port
    from tests.integration.test_shutdown import wait_until_ready

    pair = ptys()
    board = FramedBoard(pair)
    port = free_port()
    process = await spawn("run", "--port", str(port), "--serial", f"{pair.path}@57600", "--log-level", "warning")
    try:
        await wait_until_ready(f"http://127.0.0.1:{port}", process)
        assert await board.next_message() == orjson.loads(REGISTER_REQUEST)
        board.register("flag-board")
        status: dict[str, Any] = {}
        for _ in range(100):
            status = await provider_status(f"http://127.0.0.1:{port}", "flag-board")
            if status["state"] == "ready":
                break
            await asyncio.sleep(0.05)
        assert status["upstream"]["baud"] == 57600
    finally:
        board.stop()
        assert await stop(process) == 0


async def test_provider_url_names_the_last_link_that_held_the_slot(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any, publishers: Publishers
) -> None:
    """After a board left its serial port the slot names the port; once an SDK server held the slot
    over WebSocket and left too, it names the WebSocket way in, not the port of long ago."""
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path))
    slots = gateway.gateway.registry.slots
    await board.next_message()  # the gateway asks the board to register
    board.register(SLOT)
    await wait_ready_slot(gateway, SLOT)
    board.stop()
    pair.close()  # the board is unplugged
    await wait_for(lambda: slots[SLOT].live is None, what="the serial board to be detached")
    assert (await provider_status(gateway.url, SLOT))["provider_url"] == pair.path

    publisher = await publishers.start(gateway, SLOT, demo_server("pump"))
    await publisher.stop()
    await wait_for(lambda: slots[SLOT].live is None, what="the WebSocket provider to leave")
    status = await provider_status(gateway.url, SLOT)
    assert status["provider_url"] == f"{gateway.url.replace('http', 'ws', 1)}/provider/{SLOT}"


async def test_another_board_on_the_line_is_named_where_the_first_board_left(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    # Boards swapped between lines: the slot of the board that was on the line says which board came.
    pair = ptys()
    board = framed(pair)
    gateway = await gateway_factory(serial=serial_config(pair.path, slots=["pump-*"]))
    await board.next_message()
    board.register("pump-a", hello={"device_id": "dev-a"})
    await wait_ready_slot(gateway, "pump-a")
    first = gateway.gateway.registry.slots["pump-a"].live
    board.register("pump-a", hello={"device_id": "dev-a"})  # the same board, restarted
    await wait_for(lambda: gateway.gateway.registry.slots["pump-a"].live is not first, what="the old link to go")
    assert (await provider_status(gateway.url, "pump-a"))["last_disconnect_reason"] == (
        f"the board on serial port {pair.path} registered again"
    )
    await wait_ready_slot(gateway, "pump-a")
    board.register("pump-b", hello={"device_id": "dev-b"})  # another board on this line
    await wait_ready_slot(gateway, "pump-b")
    assert (await provider_status(gateway.url, "pump-a"))["last_disconnect_reason"] == (
        f"another board registered on serial port {pair.path} (device dev-b, slot pump-b)"
    )
