"""The gateway lets go of a serial port for `mcp-gateway flash` and takes it back
(gateway/southbound/serial/handover.py, the `_broker` tools broker_serial_release and
broker_serial_resume): a real pseudo-terminal with the simulator's board on it, the flash command's
own client (gateway/flash/handover.py) asking."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import serial
from mcp import Client

from gateway.flash.handover import GatewayHandover
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.field.gateway_process import in_this_process
from tests.integration.test_serial_boards import SLOT, port_of, serial_config, simulator_on


async def broker(url: str, tool: str, port: str) -> tuple[bool, object]:
    async with Client(f"{url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(tool, {"port": port})
    return result.is_error, result.structured_content or result.content[0].text  # type: ignore[union-attr]


async def test_a_released_port_stays_closed_for_another_program_until_it_is_resumed(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial=serial_config(str(link)))
    simulator = simulator_on(link)
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        handover = GatewayHandover(gateway.url, None, runs_gateway=in_this_process)
        # The flash's own client; asyncio.run inside it, so off this loop.
        assert await asyncio.to_thread(handover.release, str(link)) is True
        assert port_of(gateway)["state"] == "held"
        await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live is None, what="the slot to detach")
        # Another program opens it exclusively, as esptool does, and the gateway does not take it back.
        with serial.Serial(str(link), exclusive=True):
            await asyncio.sleep(0.5)  # many of the port's retry periods
            assert port_of(gateway)["state"] == "held"
            assert port_of(gateway)["opens"] == 1
        await asyncio.to_thread(handover.resume, str(link))
        await wait_ready_slot(gateway, SLOT, timeout=10)
        assert port_of(gateway)["opens"] == 2
    finally:
        await simulator.stop()


async def test_an_unknown_port_is_refused_with_the_ports_served(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial=serial_config(str(link)))
    refused, text = await broker(gateway.url, "broker_serial_release", "/dev/ttyUSB9")
    assert refused
    assert text == f"this gateway serves no serial port '/dev/ttyUSB9' (served now: {link})"


@pytest.mark.parametrize("tool", ["broker_serial_release", "broker_serial_resume"])
async def test_a_gateway_without_serial_ports_says_so(gateway_factory: GatewayFactory, tool: str) -> None:
    gateway = await gateway_factory()
    refused, text = await broker(gateway.url, tool, "/dev/ttyUSB0")
    assert refused and text == "this gateway serves no serial ports ([serial] configures none)"
