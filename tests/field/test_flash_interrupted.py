"""`mcp-gateway flash` stopped midway, and a port another mcp-gateway command holds.

The command runs in its own process (`python -m gateway.cli flash`), as a technician runs it, against
the fake ESP32-C3 ROM loader on a pseudo-terminal (tests/support/fake_rom.py), slowed down so that a
signal arrives during the write. What is checked is what the technician reads: the last JSON line or
the stderr line, and the exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson
import pytest

from gateway.flash.port import gateway_command, in_use_error
from tests.field.images import build_image
from tests.support.fake_rom import FakeRom
from tests.support.serial_ports import PtyPair

REPO = Path(__file__).resolve().parents[2]
BLOCK_DELAY_S = 0.05
"""The slowed ROM's pause per written block: about 2 s for the test image's blocks."""


class SlowRom(FakeRom):
    """A ROM loader that takes its time over each compressed block, as a real one on a slow line."""

    def _defl_data(self, data: bytes, chk: int) -> bytes:
        time.sleep(BLOCK_DELAY_S)
        return super()._defl_data(data, chk)


@pytest.fixture
def rom() -> Iterator[SlowRom]:
    fake = SlowRom(PtyPair())
    yield fake
    fake.close()


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "pump1-c3.bin"
    path.write_bytes(build_image("esp32c3"))
    return path


def start_flash(port: str, image: Path, *options: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "gateway.cli", "flash", port, "--firmware", str(image), "--offset", "0x10000"]
    return subprocess.Popen(
        [*argv, "--connect-attempts", "1", "--no-handover", *options],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_write(out: IO[str]) -> list[str]:
    """The JSON lines up to the first write step that wrote something."""
    lines = []
    for line in out:
        lines.append(line)
        event = orjson.loads(line)
        if event["step"] == "write" and event["written"] > 0:
            return lines
        assert event["step"] != "error", lines
    raise AssertionError(f"the flash ended before it wrote: {lines}")


@pytest.mark.parametrize(("signum", "exit_code", "stopped_by"), [
    (signal.SIGINT, 130, "Ctrl-C (SIGINT)"),
    (signal.SIGTERM, 143, "SIGTERM"),
])  # fmt: skip
def test_a_flash_stopped_during_the_write_ends_with_the_interrupted_error(
    rom: SlowRom, image: Path, signum: int, exit_code: int, stopped_by: str
) -> None:
    flash = start_flash(rom.pair.path, image, "--json")
    try:
        assert flash.stdout is not None
        wait_for_write(flash.stdout)
        flash.send_signal(signum)
        out, err = flash.communicate(timeout=30)
    finally:
        if flash.poll() is None:
            flash.kill()
            flash.wait()
    assert flash.returncode == exit_code, err
    last = orjson.loads(out.splitlines()[-1])
    assert (last["step"], last["error"]) == ("error", "interrupted"), out
    total = len(image.read_bytes())
    assert last["message"].startswith(f"the flash was stopped by {stopped_by} during the write ("), last
    assert last["message"].endswith(
        f" of {total:,} bytes at 0x10000): the flash may hold part of the image, and the board may not start: "
        "run the command again"
    ), last
    assert err == ""


def test_a_flash_stopped_by_sigterm_says_so_on_stderr(rom: SlowRom, image: Path) -> None:
    flash = start_flash(rom.pair.path, image)
    try:
        assert flash.stdout is not None
        assert flash.stdout.readline().startswith("Image: ")
        assert flash.stdout.readline().startswith("Board: ESP32-C3")
        deadline = time.monotonic() + 10
        while not rom.commands.count(0x11) and time.monotonic() < deadline:  # the first block written
            time.sleep(0.02)
        flash.send_signal(signal.SIGTERM)
        out, err = flash.communicate(timeout=30)
    finally:
        if flash.poll() is None:
            flash.kill()
            flash.wait()
    assert flash.returncode == 143, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mcp-gateway flash: the flash was stopped by SIGTERM during the write ("), err
    assert lines[0].endswith("may not start: run the command again [interrupted]"), err


# -- a port another mcp-gateway command holds --------------------------------------------------------


def test_a_port_another_flash_holds_names_that_flash(rom: SlowRom, image: Path) -> None:
    first = start_flash(rom.pair.path, image, "--json")
    try:
        assert first.stdout is not None
        wait_for_write(first.stdout)
        second = start_flash(rom.pair.path, image)
        _, err = second.communicate(timeout=30)
        first_out, _ = first.communicate(timeout=30)
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert second.returncode == 22, err
    assert err == (
        f"mcp-gateway flash: {rom.pair.path} is in use by another program (held by mcp-gateway flash (pid "
        f"{first.pid})): another flash is using the board: wait for it to end, then run the command again "
        "[port-in-use]\n"
    )
    assert first.returncode == 0, first_out


def test_a_port_the_gateway_serves_says_the_gateway(tmp_path: Path) -> None:
    """A process that runs as `mcp-gateway run` (its console script's name) holds the port's lock."""
    pair = PtyPair()
    script = tmp_path / "mcp-gateway"
    script.write_text(
        f"#!{sys.executable}\n"
        "import fcntl, os, sys, time\n"
        f"fd = os.open({pair.path!r}, os.O_RDWR | os.O_NOCTTY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('open', flush=True)\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    holder = subprocess.Popen([str(script), "run", "--config", "gateway.toml"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        image = tmp_path / "pump1-c3.bin"
        image.write_bytes(build_image("esp32c3"))
        second = start_flash(pair.path, image)
        _, err = second.communicate(timeout=30)
    finally:
        holder.kill()
        holder.wait()
        pair.close()
    assert second.returncode == 22, err
    assert err == (
        f"mcp-gateway flash: {pair.path} is in use by another program (held by mcp-gateway run (pid {holder.pid})): "
        "the gateway's serial way in serves it: have the gateway let go of it (docs/field.md, Port in use) or stop "
        "the gateway (sudo systemctl stop mcp-gateway), then run the command again [port-in-use]\n"
    )


def test_an_mcp_gateway_process_is_named_by_its_command() -> None:
    script = "/usr/local/bin/mcp-gateway"
    assert gateway_command([script, "run", "--config", "/etc/mcp-gateway/mcp-gateway.toml"]) == "mcp-gateway run"
    assert gateway_command(["/usr/bin/python3", script, "flash", "/dev/ttyUSB0"]) == "mcp-gateway flash"
    assert gateway_command([sys.executable, "-m", "gateway.cli", "device", "install", "/dev/ttyUSB0"]) == (
        "mcp-gateway device install"
    )
    assert gateway_command(["picocom", "/dev/ttyUSB0"]) is None
    assert gateway_command([sys.executable, "-c", "pass"]) is None
    other = in_use_error("/dev/ttyUSB0", ["mcp-gateway device update (pid 7)"]).message
    assert other.endswith("(pid 7)): another device update is using the board: wait for it to end, then run the "
                          "command again")  # fmt: skip
    monitor = in_use_error("/dev/ttyUSB0", [f"picocom (pid {os.getpid()})"]).message
    assert monitor.endswith(": close it (a serial monitor, another flash, the gateway's serial way in) and run the "
                            "command again")  # fmt: skip
