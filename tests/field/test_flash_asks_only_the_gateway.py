"""A flash sends its client token only to the gateway that may hold the port (gateway/flash/handover.py,
gateway/flash/peer.py): another program listening at --url (a local user's, on the port of a gateway
stopped for the flash) is never asked, and a port held by the gateway is not asked of another.

A listener in the test process stands for the other program (it is no `mcp-gateway run` process); the
port's holder is a process whose console script is named `mcp-gateway` run as `mcp-gateway run`, and the
real gateway its own `mcp-gateway run` process (tests/field/gateway_process.py). The fake ROM loader of
tests/support/fake_rom.py is the board.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.ports import free_port
from gateway.flash.handover import GatewayHandover
from gateway.flash.peer import listener
from gateway.flash.port import process_text
from gateway.flash.procedure import FlashRequest, flash
from gateway.flash.progress import JsonLines
from tests.field.gateway_process import gateway_process
from tests.field.images import build_image
from tests.support.fake_rom import FakeRom

TOKEN = "operator-secret-token-123"
PORT_IN_USE = 22


class Squatter:
    """Another program listening at the gateway's address: it keeps whatever a client sends it, and
    answers 404 (so that a flash that asks it is not kept waiting)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received = b""
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    self.received += connection.recv(65536)
                    connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.server.close()


@pytest.fixture
def squatter() -> Iterator[Squatter]:
    listening = Squatter()
    yield listening
    listening.close()


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "pump1-c3.bin"
    path.write_bytes(build_image("esp32c3"))
    return path


@pytest.fixture
def gateway_holder(rom: FakeRom, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that runs as `mcp-gateway run` and holds the port's lock (as the gateway's serial way in)."""
    script = tmp_path / "bin" / "mcp-gateway"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import fcntl, os, sys, time\n"
        f"fd = os.open({rom.pair.path!r}, os.O_RDWR | os.O_NOCTTY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('open', flush=True)\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    holder = subprocess.Popen([str(script), "run", "--config", "gateway.toml"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"
    yield holder
    holder.kill()
    holder.wait()


def run_flash(port: str, image: Path, url: str) -> tuple[int, list[dict[str, object]]]:
    out = io.StringIO()
    request = FlashRequest(port=port, firmware=str(image), firmware_dir=image.parent, connect_attempts=1)
    code = flash(request, JsonLines(out), GatewayHandover(url, TOKEN))
    return code, [orjson.loads(line) for line in out.getvalue().splitlines()]


def in_use_by_the_gateway(port: str, holder: int) -> str:
    return (
        f"{port} is in use by another program (held by mcp-gateway run (pid {holder})): the gateway's serial way "
        "in serves it: have the gateway let go of it (docs/field.md, Port in use) or stop the gateway (sudo "
        "systemctl stop mcp-gateway), then run the command again"
    )


def test_a_free_port_is_flashed_without_asking_a_listener_that_is_not_the_gateway(
    rom: FakeRom, image: Path, squatter: Squatter
) -> None:
    code, events = run_flash(rom.pair.path, image, squatter.url)

    assert code == 0, events
    steps = [event["step"] for event in events]
    assert "release" not in steps and "resume" not in steps, steps
    assert squatter.received == b""  # no request, no token


def test_a_port_the_gateway_holds_is_not_asked_of_another_listener(
    rom: FakeRom, image: Path, squatter: Squatter, gateway_holder: subprocess.Popen[str]
) -> None:
    code, events = run_flash(rom.pair.path, image, squatter.url)

    assert code == PORT_IN_USE, events
    assert [event["step"] for event in events] == ["image", "error"]
    assert events[-1]["message"] == (
        f"{in_use_by_the_gateway(rom.pair.path, gateway_holder.pid)}. --url {squatter.url} does not lead to the "
        f"gateway that holds the port ({process_text(os.getpid())} listens there)"
    )
    assert squatter.received == b""
    assert not rom.commands


async def test_a_port_another_gateway_holds_is_not_asked_of_the_gateway_at_url(
    rom: FakeRom, image: Path, tmp_path: Path, gateway_holder: subprocess.Popen[str]
) -> None:
    """The gateway at --url serves other ports: the one that holds this port is another process."""
    async with gateway_process(tmp_path, str(tmp_path / "ttyOTHER")) as gateway:
        code, events = await asyncio.to_thread(run_flash, rom.pair.path, image, gateway.url)
        assert code == PORT_IN_USE, events
        assert events[-1]["message"] == (
            f"{in_use_by_the_gateway(rom.pair.path, gateway_holder.pid)}. --url {gateway.url} does not lead to the "
            f"gateway that holds the port (mcp-gateway run (pid {gateway.process.pid}) listens there)"
        )


async def test_the_gateway_at_url_is_seen_as_the_gateway(tmp_path: Path) -> None:
    async with gateway_process(tmp_path, str(tmp_path / "ttyOTHER")) as gateway:
        found = listener(gateway.url)
        assert found.pids == (gateway.process.pid,) and not found.unseen
        assert found.describe() == f"mcp-gateway run (pid {gateway.process.pid}) listens there"
        # The host by name leads to it too.
        assert listener(gateway.url.replace("127.0.0.1", "localhost")).pids == (gateway.process.pid,)


def test_a_url_whose_host_is_another_machine_leads_to_no_local_gateway() -> None:
    assert not listener("http://192.0.2.1:3000").local  # TEST-NET-1: never an address of this machine
    assert listener("http://192.0.2.1:3000").describe() == "its host is no address of this machine"
    assert not listener("http://127.0.0.1:notaport").local
    nobody = listener(f"http://127.0.0.1:{free_port()}")
    assert nobody.local and nobody.nobody
