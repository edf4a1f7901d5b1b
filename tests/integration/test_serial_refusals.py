"""Boards on a serial line that the gateway refuses, or lets go (docs/device-serial.md, "Registering"):
a real gateway serving a pseudo-terminal, the simulator on the other end (docs/simulator.md, "Over a
serial line") or pump-1 on the MicroPython Unix port.

A refusal (the gateway's error with id null, before the gateway sent the registration anything) is
what a close 1008 is on a WebSocket: the board or pump says why, its link is down, the refusal is no
contact (the dead-man of a turning pump still runs out), and it registers again after the longest
back-off, by itself.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from gateway.app import GatewayServer
from gateway.core.broker.status import serial_status
from sim.pump import PumpSettings
from sim.serial_line import SerialTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.harness import SCHEMA_FILE, Device, find_tool, start_device
from tests.support.serial_ports import PtyPair, SerialRelay

HELD = "Slot already held by a live provider"


def holder_on(gateway: GatewayServer, started: list[Simulator]) -> Simulator:
    """pump-1 from the simulator on a WebSocket, a quick back-off: the slot's other provider."""
    holder = Simulator(gateway.url, SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.2))
    holder.start()
    started.append(holder)
    return holder


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sim" and r.levelno == logging.WARNING]


def refused_at_port(gateway: GatewayServer) -> int:
    (port,) = serial_status(gateway.gateway)["ports"]
    refused: int = port["dropped"]["refused"]
    return refused


def transport_of(gateway: GatewayServer, slot: str) -> str | None:
    entry = gateway.gateway.registry.slots.get(slot)
    if entry is None or entry.live is None:
        return None
    transport: str = entry.live.link.info.transport
    return transport


def device_of(gateway: GatewayServer, slot: str) -> str | None:
    entry = gateway.gateway.registry.slots.get(slot)
    if entry is None or entry.live is None or entry.live.hello is None:
        return None
    device: str = entry.live.hello["device_id"]
    return device


@pytest.fixture
async def simulators() -> AsyncIterator[list[Simulator]]:
    started: list[Simulator] = []
    yield started
    for simulator in started:
        await simulator.stop()


@pytest.fixture
async def line() -> AsyncIterator[tuple[str, str]]:
    """A serial cable: the board's end and the gateway's, two pseudo-terminals joined by a relay."""
    board_side, gateway_side = PtyPair(), PtyPair()
    relay = SerialRelay(board_side, gateway_side)
    yield board_side.path, gateway_side.path
    relay.stop()
    board_side.close()
    gateway_side.close()


def on_serial(
    started: list[Simulator], link: Path, pumps: int = 1, backoff_s: tuple[float, float] = (0.05, 0.2), **pump: float
) -> Simulator:
    settings = SimulatorSettings(
        pumps=pumps,
        pump=PumpSettings(**pump),  # type: ignore[arg-type]
        backoff_min_s=backoff_s[0],
        backoff_max_s=backoff_s[1],
    )
    simulator = Simulator(None, settings, serial=SerialTarget(pty=True, link=str(link)))
    simulator.start()
    started.append(simulator)
    return simulator


async def test_a_refused_serial_pump_says_why_is_down_is_no_contact_and_registers_again(
    gateway_factory: GatewayFactory,
    tmp_path: Path,
    simulators: list[Simulator],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    link = tmp_path / "ttyPUMP"
    serial = on_serial(simulators, link, backoff_s=(0.25, 1.0), deadman_s=4)
    gateway = await gateway_factory(
        serial={"ports": [{"path": str(link)}], "retry_initial_s": 0.05, "retry_max_s": 0.3},
        providers={"heartbeat_interval_s": 0.25},
    )
    await wait_ready_slot(gateway, "pump-1", timeout=10)
    async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
        started = await client.call_tool("start", {"speed_rpm": 1200})
        assert not started.is_error
    # The serial pump falls silent; the heartbeat frees its slot and a pump on a WebSocket takes it.
    serial.apply("pump-1", "link_drop", seconds=600)
    holder_on(gateway, simulators)
    await wait_for(lambda: transport_of(gateway, "pump-1") == "websocket", 10, "the WebSocket pump to take the slot")
    caplog.clear()
    serial.apply("pump-1", "link_drop", clear=True)  # back: it registers, and the gateway refuses it

    await wait_for(lambda: bool(warnings_of(caplog)), 10, "the refusal's warning")
    warning = warnings_of(caplog)[0]
    assert warning.startswith(f"pump-1 refused by the gateway (error -32000: {HELD}"), warning
    assert "; registering again in " in warning
    await wait_for(lambda: not serial.state("pump-1")["link"]["connected"], 5, "the link to show down")
    reason = serial.state("pump-1")["link"]["last_down_reason"]
    assert reason.startswith(f"refused by the gateway, error -32000: {HELD}"), reason

    # It tries again after each back-off, and every try is refused; one warning for each of the first
    # three, then every twentieth.
    tries = serial.state("pump-1")["link"]["links"]
    await wait_for(lambda: serial.state("pump-1")["link"]["links"] >= tries + 2, 10, "registering again")
    await wait_for(lambda: len(warnings_of(caplog)) >= 3, 10, "the next refusals' warnings")
    assert all(w.startswith(f"pump-1 refused by the gateway (error -32000: {HELD}") for w in warnings_of(caplog))
    assert transport_of(gateway, "pump-1") == "websocket"

    # Refusals are no contact: refused again and again, the turning pump's dead-man still stops it.
    await wait_for(
        lambda: serial.state("pump-1")["status"]["state"] == "fault", 15, "the serial pump's dead-man to trip"
    )
    status = serial.state("pump-1")["status"]
    assert status["fault"]["code"] == "link_lost", status
    assert refused_at_port(gateway) >= 3


async def test_one_refused_pump_on_an_enveloped_line_leaves_the_other_serving(
    gateway_factory: GatewayFactory,
    tmp_path: Path,
    simulators: list[Simulator],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    link = tmp_path / "ttyPUMPS"
    serial = on_serial(simulators, link, pumps=2, backoff_s=(0.25, 1.0))
    gateway = await gateway_factory(
        serial={"ports": [{"path": str(link), "slots": ["pump-1"]}], "retry_initial_s": 0.05, "retry_max_s": 0.3}
    )
    await wait_ready_slot(gateway, "pump-1", timeout=10)
    await wait_for(lambda: bool(warnings_of(caplog)), 10, "pump-2's refusal")
    warning = warnings_of(caplog)[0]
    assert warning.startswith(
        f'pump-2 refused by the gateway (error -32001: Serial port {link} may not publish slot "pump-2"'
    )
    await wait_for(lambda: serial.state("pump-2")["link"]["links"] >= 3, 10, "pump-2 to register again")
    await wait_for(lambda: not serial.state("pump-2")["link"]["connected"], 5, "pump-2's link to show down")
    assert serial.state("pump-1")["link"]["connected"] is True
    async with Client(f"{gateway.url}/pump-1/mcp", mode="2026-07-28") as client:
        assert not (await client.call_tool("get_status", {})).is_error
    assert not [w for w in warnings_of(caplog) if w.startswith("pump-1")]


async def test_a_refused_micropython_board_backs_off_and_registers_again_by_itself(
    gateway_factory: GatewayFactory, line: tuple[str, str], simulators: list[Simulator], tmp_path: Path
) -> None:
    board_path, gateway_path = line
    gateway = await gateway_factory(
        serial={"ports": [{"path": gateway_path}], "retry_initial_s": 0.05, "retry_max_s": 0.3}
    )
    holder = holder_on(gateway, simulators)
    await wait_ready_slot(gateway, "pump-1", timeout=10)
    config = {
        "transport": "serial",
        "serial": {"path": board_path},
        "schema_path": str(SCHEMA_FILE),
        "backoff_min_s": 1,
        "backoff_max_s": 2,
        # No telemetry: nothing of the board's own makes the gateway ask it to register; only its back-off.
        "telemetry": {"enabled": False},
    }
    board: Device = await start_device(find_tool("micropython"), tmp_path / "board.json", config)
    try:
        down = await board.wait_event("link_down", timeout=15)
        assert down["reason"].startswith(f"gateway error -32000: {HELD}"), down
        assert down.get("refused") is True, down
        assert 1 <= down["retry_in_s"] <= 2, down
        again = await board.wait_event("link_down", count=2, timeout=15)
        assert again.get("refused") is True and again["reason"] == down["reason"], again
        assert again["t"] - down["t"] >= 1, "the board registered again before its back-off ended"
        assert len(board.named("link_up")) == 2, board.output()
        assert device_of(gateway, "pump-1") == "sim-pump-1"

        await holder.stop()  # the slot comes free: the board takes it at its next try
        simulators.remove(holder)
        await wait_for(lambda: device_of(gateway, "pump-1") == "unix-pump-1", 15, "the board to register again")
        await wait_ready_slot(gateway, "pump-1", timeout=10)
        async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
            assert not (await client.call_tool("get_status", {})).is_error
    finally:
        await board.stop()
