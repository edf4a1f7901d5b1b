"""A flash killed while the gateway had the port released leaves the port held; the next flash takes
that hold over and has the gateway take the port back at its end (gateway/flash/procedure.py,
open_with_handover).

A real gateway, as its own `mcp-gateway run` process (tests/field/gateway_process.py: a flash asks no
other listener), serves a pseudo-terminal whose other side is the fake ROM loader of
tests/support/fake_rom.py; the first flash runs as its own process (`python -m gateway.cli flash`) and
is sent SIGKILL, so that nothing of it can resume the port; the second runs the command's own code with
its own client to the gateway (gateway/flash/handover.py).
"""

from __future__ import annotations

import asyncio
import io
import signal
import sys
from pathlib import Path

import orjson

from gateway.flash.handover import GatewayHandover
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines
from tests.field.gateway_process import gateway_process
from tests.field.images import build_image
from tests.support.fake_rom import FakeRom

OFFSET = 0x10000


async def kill_a_flash_after_the_release(url: str, port: str, image: Path) -> None:
    killed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "flash", port, "--firmware", str(image), "--offset", hex(OFFSET),
        "--connect-attempts", "60", "--json", "--url", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert killed.stdout is not None
    try:
        step: dict[str, object] = {}
        while step.get("step") != "release":
            line = await asyncio.wait_for(killed.stdout.readline(), 20)
            assert line, (await killed.stderr.read()).decode() if killed.stderr else "no output"
            step = orjson.loads(line)
    finally:
        killed.send_signal(signal.SIGKILL)
        await killed.communicate()
    assert killed.returncode == -signal.SIGKILL


async def test_a_flash_after_a_killed_one_gives_the_held_port_back(rom: FakeRom, tmp_path: Path) -> None:
    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    async with gateway_process(tmp_path, rom.pair.path) as gateway:
        await gateway.wait_port("the gateway to open the port", lambda port: port["state"] == "open")
        await kill_a_flash_after_the_release(gateway.url, rom.pair.path, image)
        held = await gateway.port()
        assert held["state"] == "held"  # nobody asks for it back: given back only after max_hold_s
        await flash_again(gateway.url, rom, image, tmp_path)
        port = await gateway.wait_port("the gateway to open the port again", lambda port: port["opens"] > held["opens"])
        assert "held_since" not in port


async def flash_again(url: str, rom: FakeRom, image: Path, tmp_path: Path) -> None:
    # The technician runs the command again. The port is free (the gateway holds it closed): the flash
    # takes the gateway's hold over and asks it, at the end, to take the port back.
    out = io.StringIO()
    request = FlashRequest(
        port=rom.pair.path, firmware=str(image), firmware_dir=tmp_path, offset=OFFSET, connect_attempts=3
    )
    code = await asyncio.to_thread(flash, request, JsonLines(out), GatewayHandover(url, None))

    events = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert code == 0, events
    steps = [event["step"] for event in events]
    assert steps[:3] == ["image", "release", "detect"] and steps[-2:] == ["reset", "resume"], steps
    assert events[-1] == {"step": "resume", "port": rom.pair.path}
    assert holds(rom, image)


async def test_a_free_port_the_gateway_does_not_serve_is_flashed_without_a_handover(
    rom: FakeRom, tmp_path: Path
) -> None:
    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))

    out = io.StringIO()
    request = FlashRequest(port=rom.pair.path, firmware=str(image), firmware_dir=tmp_path, connect_attempts=3)
    async with gateway_process(tmp_path, str(tmp_path / "ttyOTHER")) as gateway:
        code = await asyncio.to_thread(flash, request, JsonLines(out), GatewayHandover(gateway.url, None))

    steps = [orjson.loads(line)["step"] for line in out.getvalue().splitlines()]
    assert code == 0 and "release" not in steps and "resume" not in steps, steps


def holds(rom: FakeRom, image: Path) -> bool:
    """The board's flash holds the image at OFFSET."""
    data = image.read_bytes()
    return bytes(rom.flash[OFFSET : OFFSET + len(data)]) == data
