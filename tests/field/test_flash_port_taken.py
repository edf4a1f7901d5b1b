"""A flash that finds the port locked by another `mcp-gateway flash` leaves it alone: it asks the
gateway for nothing, so the port the gateway released for the first flash stays released until that
flash gives it back (gateway/flash/procedure.py, open_with_handover).

A real gateway, as its own `mcp-gateway run` process (tests/field/gateway_process.py: a flash asks no
other listener), serves a pseudo-terminal whose other side is a slow fake ROM loader
(tests/support/fake_rom.py); the first flash runs as its own process (`python -m gateway.cli flash`,
named `mcp-gateway flash` by the port's lock holders), the second runs the command's own code with its
own client to the gateway (gateway/flash/handover.py).
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from gateway.flash.handover import GatewayHandover, Release
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines
from tests.conftest import GatewayFactory, wait_for
from tests.field.gateway_process import GatewayProcess, gateway_process, in_this_process
from tests.field.images import build_image
from tests.integration.test_serial_boards import port_of, serial_config
from tests.support.fake_rom import FakeRom
from tests.support.serial_ports import PtyPair

OFFSET = 0x10000
PORT_IN_USE = 22


class SlowRom(FakeRom):
    """Takes 0.3 s per written block: the whole image about 8 s."""

    def _defl_data(self, data: bytes, chk: int) -> bytes:
        time.sleep(0.3)
        return super()._defl_data(data, chk)


@pytest.fixture
def rom() -> Iterator[FakeRom]:
    pair = PtyPair()
    fake = SlowRom(pair)
    yield fake
    fake.close()


async def start_writing(url: str, port: str, image: Path, registry: Path) -> asyncio.subprocess.Process:
    """A flash with handover, as its own process, once it writes (it holds the port)."""
    first = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "flash", port, "--firmware", str(image), "--offset", hex(OFFSET),
        "--json", "--url", url, "--registry", str(registry),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert first.stdout is not None
    step: dict[str, object] = {}
    while not (step.get("step") == "write" and isinstance(step.get("written"), int) and step["written"]):
        line = await asyncio.wait_for(first.stdout.readline(), 20)
        assert line, (await first.stderr.read()).decode() if first.stderr else "no output"
        step = orjson.loads(line)
    return first


async def test_a_second_flash_leaves_the_port_of_a_running_flash_alone(rom: FakeRom, tmp_path: Path) -> None:
    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    async with gateway_process(tmp_path, rom.pair.path) as gateway:
        await gateway.wait_port("the gateway to open the port", lambda port: port["state"] == "open")
        await second_flash_while_the_first_writes(gateway, rom, image, tmp_path)


async def second_flash_while_the_first_writes(
    gateway: GatewayProcess, rom: FakeRom, image: Path, tmp_path: Path
) -> None:
    first = await start_writing(gateway.url, rom.pair.path, image, tmp_path / "devices.db")
    try:
        held = await gateway.port()
        assert held["state"] == "held"

        out = io.StringIO()
        request = FlashRequest(
            port=rom.pair.path, firmware=str(image), firmware_dir=tmp_path, offset=OFFSET, release_wait_s=1.0
        )
        code = await asyncio.to_thread(flash, request, JsonLines(out), GatewayHandover(gateway.url, None))

        events = [orjson.loads(line) for line in out.getvalue().splitlines()]
        assert code == PORT_IN_USE, events
        assert [event["step"] for event in events] == ["image", "error"], events
        assert f"held by mcp-gateway flash (pid {first.pid})" in events[-1]["message"]
        assert "wait for it to end" in events[-1]["message"]
        assert first.returncode is None  # the first flash still writes ...
        still = await gateway.port()
        assert still["state"] == "held"  # ... and the gateway still keeps the port closed for it
        assert still["opens"] == held["opens"]
    finally:
        stdout, stderr = await asyncio.wait_for(first.communicate(), 30)

    assert await first.wait() == 0, (stdout + stderr).decode()
    steps = [orjson.loads(line)["step"] for line in stdout.splitlines()]
    assert steps[-2:] == ["reset", "resume"], steps
    assert holds(rom, image)
    await gateway.wait_port("the gateway to open the port again", lambda port: port["opens"] > held["opens"])


async def test_the_gateway_says_when_a_port_was_released_already(gateway_factory: GatewayFactory, rom: FakeRom) -> None:
    gateway = await gateway_factory(serial={**serial_config(rom.pair.path), "max_hold_s": 900})
    await wait_for(lambda: port_of(gateway)["state"] == "open", 10, "the gateway to open the port")
    handover = GatewayHandover(gateway.url, None, runs_gateway=in_this_process)

    assert await asyncio.to_thread(handover.let_go, rom.pair.path) == Release(already_held=False)
    assert await asyncio.to_thread(handover.let_go, rom.pair.path) == Release(already_held=True)
    await asyncio.to_thread(handover.resume, rom.pair.path)
    await wait_for(lambda: port_of(gateway)["state"] == "open", 10, "the gateway to open the port again")
    assert await asyncio.to_thread(handover.let_go, rom.pair.path) == Release(already_held=False)
    await asyncio.to_thread(handover.resume, rom.pair.path)


def holds(rom: FakeRom, image: Path) -> bool:
    """The board's flash holds the image at OFFSET."""
    data = image.read_bytes()
    return bytes(rom.flash[OFFSET : OFFSET + len(data)]) == data
