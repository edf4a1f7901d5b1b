"""A released serial port is given back however the program it was released for ends: `mcp-gateway flash`
stopped by SIGTERM or SIGHUP resumes it, and the gateway takes it back by itself after
`[serial] max_hold_s`; meanwhile broker_diagnose names the held port.

A real gateway serves a pseudo-terminal with the simulator's board on it; the flash runs as its own
process (`python -m gateway.cli flash`), as a technician's shell runs it, and is sent the signal.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.field.gateway_process import gateway_process
from tests.field.images import build_image
from tests.integration.test_serial_boards import SLOT, broker_call, port_of, serial_config, simulator_on


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_flash_stopped_by_a_signal_gives_the_port_back(tmp_path: Path, stop: signal.Signals) -> None:
    # The gateway runs as `mcp-gateway run`: a flash asks only a gateway it sees as one (gateway/flash/peer.py).
    link = tmp_path / "ttyPUMP"
    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    async with gateway_process(tmp_path, str(link)) as gateway:
        simulator = simulator_on(link)
        try:
            await gateway.wait_port("the gateway to open the port", lambda port: port["state"] == "open")
            flash = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "flash", str(link), "--firmware", str(image),
                "--connect-attempts", "60", "--json", "--url", gateway.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert flash.stdout is not None
            steps: list[dict[str, object]] = []
            while not steps or steps[-1]["step"] != "release":
                line = await asyncio.wait_for(flash.stdout.readline(), 20)
                assert line, (await flash.stderr.read()).decode() if flash.stderr else "no output"
                steps.append(orjson.loads(line))
            assert (await gateway.port())["state"] == "held"
            await asyncio.sleep(0.5)  # into esptool's attempts to reach the ROM loader
            flash.send_signal(stop)
            rest, _ = await asyncio.wait_for(flash.communicate(), 20)
            assert flash.returncode == 128 + stop
            if stop == signal.SIGTERM:  # after SIGHUP the terminal is gone: nothing more is printed
                *_, resumed, stopped = (orjson.loads(line) for line in rest.splitlines())
                assert resumed == {"step": "resume", "port": str(link)}
                assert stopped["step"] == "error" and stopped["error"] == "interrupted"
            await gateway.wait_port("the gateway to take the port back", lambda port: port["state"] == "open")
        finally:
            await simulator.stop()


async def test_a_port_released_and_never_resumed_is_taken_back_after_max_hold_s(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.southbound.serial")
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial={**serial_config(str(link)), "max_hold_s": 1.5})
    simulator = simulator_on(link)
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        released = await broker_call(gateway, "broker_serial_release", {"port": str(link)})
        assert (released["state"], released["closed"], released["max_hold_s"]) == ("held", True, 1.5)
        assert released["held_since"].endswith("Z") and 0 < released["given_back_in_s"] <= 1.5

        # broker_diagnose names it, with since when and what gives it back.
        diagnosis = await broker_call(gateway, "broker_diagnose")
        held = [problem for problem in diagnosis["problems"] if problem["id"] == "serial.port_held"]
        assert len(held) == 1, diagnosis["problems"]
        assert held[0]["severity"] == "warning"
        assert held[0]["summary"].startswith(f"Serial port {link} is let go of for another program")
        assert held[0]["evidence"].startswith(
            "released by broker_serial_release (mcp-gateway flash, device update) "
            f"since {released['held_since']}; the gateway takes it back by itself in "
        )
        assert held[0]["evidence"].endswith("s (serial.max_hold_s = 1.5)")
        assert f'broker_serial_resume {{"port": "{link}"}}' in held[0]["fix"]

        # A second release renews the time: at 2 s (past the first bound) the port is still held.
        await asyncio.sleep(1.0)
        renewed = await broker_call(gateway, "broker_serial_release", {"port": str(link)})
        assert renewed["held_since"] == released["held_since"] and renewed["given_back_in_s"] > 1.4
        await asyncio.sleep(1.0)
        assert port_of(gateway)["state"] == "held"
        assert not [record for record in caplog.records if "max_hold_s" in record.getMessage()]

        await wait_for(lambda: port_of(gateway)["state"] == "open", 3, "the bound to give the port back")
        await wait_ready_slot(gateway, SLOT, timeout=10)
        warned = [record.getMessage() for record in caplog.records if "max_hold_s" in record.getMessage()]
        assert warned == [
            f"serial port {link}: taken back after serial.max_hold_s (1.5s) let go of without broker_serial_resume "
            f"(since {released['held_since']}): the program it was released for did not give it back"
        ]
        diagnosis = await broker_call(gateway, "broker_diagnose")
        assert not [problem for problem in diagnosis["problems"] if problem["id"] == "serial.port_held"]
    finally:
        await simulator.stop()


async def test_a_resumed_port_is_not_taken_back_again_by_the_bound(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.southbound.serial")
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial={**serial_config(str(link)), "max_hold_s": 0.5})
    simulator = simulator_on(link)
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        await broker_call(gateway, "broker_serial_release", {"port": str(link)})
        resumed = await broker_call(gateway, "broker_serial_resume", {"port": str(link)})
        assert "held_since" not in resumed
        await wait_ready_slot(gateway, SLOT, timeout=10)
        await asyncio.sleep(1.0)
        assert port_of(gateway)["opens"] == 2
        assert "held_since" not in port_of(gateway)
        assert not [record for record in caplog.records if "max_hold_s" in record.getMessage()]
    finally:
        await simulator.stop()
