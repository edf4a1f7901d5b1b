"""`mcp-gateway device install` and `device update` against a MicroPython board behind a PTY.

The board: the MicroPython Unix port running tests/support/raw_repl_shim.py on the master side of a
PTY (its console: the raw REPL), its filesystem a temporary folder. The command opens the PTY's slave
as it would open /dev/ttyUSB0. When the board soft-resets with a main.py, `Board` starts the real
application (`micropython main.py` in that folder, 96 KB heap) as the board would; when the console
interrupts it (Ctrl-C), `Board` stops it. The application dials a real gateway with the identity the
install issued it; an SDK client calls it; an update replaces its code and it comes back with the new
firmware version.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from gateway.cli.device_install import add_device
from gateway.cli.devices import add_devices
from gateway.devices.registry import DeviceRegistry, default_registry_path
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.harness import DEVICE_DIR, DEVICE_HEAP, Device, find_tool
from tests.field.pty_console import PtyConsole

SHIM = Path(__file__).resolve().parents[1] / "support" / "raw_repl_shim.py"
SLOT = "pump-7"
BENCH_TOKEN = "bench-secret-for-the-simulators"


class Board(PtyConsole):
    """A MicroPython board on a PTY: its console (the raw REPL shim) and, once reset, its application."""

    def __init__(self, micropython: str, root: Path) -> None:
        super().__init__(
            root,
            [micropython, str(SHIM), str(root)],
            env={**os.environ, "MICROPYPATH": ".frozen"},
            what="the raw REPL shim",
        )
        self.micropython = micropython
        self.app: Device | None = None
        self.apps: list[Device] = []

    @property
    def _shim(self) -> asyncio.subprocess.Process | None:
        """The console's process (test_device_install_faults kills it: the cable comes out)."""
        return self._console

    async def on_event(self, event: str) -> None:
        if event == "interrupt":
            await self._stop_app()
        elif event == "reset":
            await self._stop_app()
            await self._start_app()

    async def _start_app(self) -> None:
        config = orjson.loads((self.root / "config.json").read_bytes())
        process = await asyncio.create_subprocess_exec(
            self.micropython,
            "-X",
            f"heapsize={DEVICE_HEAP}",
            "main.py",
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "MICROPYPATH": f".frozen:{self.root}"},
        )
        self.app = Device(process, config)
        self.apps.append(self.app)

    async def _stop_app(self) -> None:
        if self.app is not None:
            await self.app.stop()
            self.app = None

    async def power_cycle(self) -> None:
        """Off and on again: the application starts afresh (and dials again)."""
        await self._stop_app()
        await self._start_app()

    def pause_app(self, paused: bool) -> None:
        assert self.app is not None
        self.app.process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    async def stop(self) -> None:
        await self._stop_app()
        await super().stop()


@pytest.fixture
async def board(tmp_path: Path) -> Any:
    made = Board(find_tool("micropython"), tmp_path / "board")
    await made.start()
    yield made
    await made.stop()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gateway's state directory (the device registry's folder), as systemd's StateDirectory= sets it."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    return tmp_path / "state"


def identities_auth() -> dict[str, Any]:
    """[providers.auth] mode identities: one configured identity (the simulators'), none for pump-7."""
    digest = hashlib.sha256(BENCH_TOKEN.encode()).hexdigest()
    return {"mode": "identities", "identities": [{"name": "bench", "sha256": digest, "slots": ["sim-*"]}]}


def cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-gateway")
    commands = parser.add_subparsers(dest="command", required=True)
    add_device(commands)
    add_devices(commands)
    return parser


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """One `mcp-gateway` command, in a thread as in its own process; its exit code, stdout and stderr."""
    capsys.readouterr()
    args = cli_parser().parse_args(list(argv))
    code = await asyncio.to_thread(args.func, args)
    out, err = capsys.readouterr()
    return code, out, err


def bumped_source(tmp_path: Path, version: str) -> Path:
    """A copy of device/micropython whose firmware version is `version`."""
    source = tmp_path / "source"
    shutil.copytree(DEVICE_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    init = source / "pump1" / "__init__.py"
    text = re.sub(r'FIRMWARE_VERSION = "[^"]+"', f'FIRMWARE_VERSION = "{version}"', init.read_text())
    init.write_text(text)
    shutil.copy(DEVICE_DIR.parent / "schemas" / "pump-1.json", source / "pump-1.json")
    return source


async def status_of(gateway: GatewayServer, slot: str) -> dict[str, Any]:
    from gateway.client import GatewayClient

    async with GatewayClient(gateway.url, "_broker") as client:
        result = await client.call_tool("provider_status", {"name": slot})
    status: dict[str, Any] = result["structuredContent"]
    return status


async def test_install_serve_and_update_a_board(
    gateway_factory: GatewayFactory, board: Board, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    url = f"ws://127.0.0.1:{gateway.port}"
    wifi_password = tmp_path / "wifi-password"
    wifi_password.write_text("plant-wifi-password\n")

    # --dry-run: what would be written, secrets masked; nothing on the board, nothing in the registry.
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", SLOT, "--gateway-url", url,
        "--wifi-ssid", "plant-wifi", "--wifi-password-file", str(wifi_password), "--dry-run",
    )  # fmt: skip
    assert (code, err) == (0, ""), err
    assert "plant-wifi-password" not in out
    assert '"wifi":{"ssid":"plant-wifi","password":"***"}' in out
    assert '"provider_token":"***"' in out
    assert "  mcpdevice/dispatcher.mpy (" in out
    assert list(board.root.iterdir()) == []
    assert not default_registry_path().exists()
    print_for_docs("install --dry-run", out)

    # The install: code, schema and config.json through the raw REPL; the board's identity adopted.
    code, out, err = await run_cli(
        capsys, "device", "install", board.port, "--slot", SLOT, "--gateway-url", url, "--pace-ms", "0"
    )
    assert (code, err) == (0, ""), err
    print_for_docs("install", out)
    assert f"{SLOT}: MicroPython on {board.port} (platform linux, .mpy 6.3, arch x64), device id unix-{SLOT}" in out
    assert "with mpy-cross -march=x64 (pump-1-micropython 0.1.0)" in out
    assert f"adopted unix-{SLOT}: identity device:unix-{SLOT}, slot {SLOT}" in out
    modules = sorted(p.relative_to(DEVICE_DIR).with_suffix(".mpy") for p in DEVICE_DIR.glob("*/*.py"))
    assert sorted(p.relative_to(board.root) for p in board.root.glob("*/*.mpy")) == modules
    assert (board.root / "main.py").read_bytes() == (DEVICE_DIR / "main.py").read_bytes()
    assert (board.root / "boot.py").read_bytes() == (DEVICE_DIR / "boot.py").read_bytes()
    assert (board.root / "pump-1.json").read_bytes() == (DEVICE_DIR.parent / "schemas" / "pump-1.json").read_bytes()
    assert not list(board.root.rglob("*.new"))
    config = orjson.loads((board.root / "config.json").read_bytes())
    token = config.pop("provider_token")
    assert config == {"transport": "websocket", "slot": SLOT, "gateway_url": url, "watchdog_s": 10}
    assert token not in out
    registry = DeviceRegistry(default_registry_path())
    adopted = registry.by_digest(hashlib.sha256(token.encode()).hexdigest())
    assert adopted is not None and (adopted.device_id, adopted.slot, adopted.revoked) == (f"unix-{SLOT}", SLOT, False)

    # The board resets into the application, which publishes pump-7 with its own identity.
    await wait_ready_slot(gateway, SLOT, timeout=20)
    status = await status_of(gateway, SLOT)
    assert status["identity"] == f"device:unix-{SLOT}"
    assert status["hello"]["firmware"] == {"name": "pump-1-micropython", "version": "0.1.0"}
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        result = await client.call_tool("get_status", {})
        assert result.structured_content is not None
        assert result.structured_content["state"] == "stopped"

    # The gateway recorded the hello: `devices` lists the board.
    await wait_for(lambda: any(row.seen for row in registry.devices()), 5, "the hello in the registry")
    code, out, err = await run_cli(capsys, "devices")
    assert code == 0, err
    print_for_docs("devices", out)
    header, row = out.splitlines()
    assert header.split() == [
        "device", "adopted", "seen", "last", "seen", "firmware", "schema", "transport", "slot", "last", "flash"
    ]  # fmt: skip
    cells = row.split()
    assert cells[:3] == [f"unix-{SLOT}", "yes", "1"]
    assert cells[5:] == ["pump-1-micropython", "0.1.0", status["hello"]["schema"], "websocket", SLOT, "-"]

    # Update refused while a call is in flight: the application is frozen mid-call.
    assert board.app is not None
    board.pause_app(True)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("get_status", {}))
        await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live.in_flight == 1, 5, "the call in flight")  # type: ignore[union-attr]
        source = bumped_source(tmp_path, "0.2.0")
        update = ("device", "update", SLOT, "--url", gateway.url, "--source", str(source), "--pace-ms", "0")
        code, out, err = await run_cli(capsys, *update, "--wait-s", "20")
        assert code == 1
        assert err == (
            f"mcp-gateway: {SLOT} has 1 call(s) in flight: update refused (the board would stop mid-call); "
            "try again when they are done\n"
        )
        print_for_docs("update refused", err)
        board.pause_app(False)
        await asyncio.wait_for(call, 10)

    # The update: new code through the same console, config.json kept; the board comes back as 0.2.0.
    kept = (board.root / "config.json").read_bytes()
    code, out, err = await run_cli(capsys, *update, "--wait-s", "20")
    assert (code, err) == (0, ""), err
    print_for_docs("update", out)
    assert out.splitlines()[-1] == (
        f"{SLOT} is back: pump-1-micropython 0.2.0, device unix-{SLOT}, schema {status['hello']['schema']}"
    )
    assert (board.root / "config.json").read_bytes() == kept
    assert len(board.apps) == 2
    status = await status_of(gateway, SLOT)
    assert status["hello"]["firmware"]["version"] == "0.2.0"
    assert status["identity"] == f"device:unix-{SLOT}"
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        result = await client.call_tool("get_status", {})
        assert result.structured_content is not None and result.structured_content["state"] == "stopped"
    await wait_for(lambda: registry.devices()[0].version == "0.2.0", 5, "the new version in the registry")
    registry.close()

    # Revoked: the gateway closes the board's link at once (1008, with the reason), and refuses it from
    # its next dial, with the reason.
    code, out, err = await run_cli(capsys, "devices", "revoke", f"unix-{SLOT}", "--url", gateway.url)
    assert (code, err) == (0, ""), err
    print_for_docs("devices revoke", out)
    assert out.splitlines()[1] == (
        f"the gateway at {gateway.url} ended {SLOT} (websocket, device:unix-{SLOT}): closed its WebSocket with 1008 "
        "(policy violation)"
    )
    assert gateway.gateway.registry.slots[SLOT].live is None
    assert board.app is not None
    closed = await board.app.wait_event("link_down", timeout=10)
    print_for_docs("the board's log, closed", orjson.dumps(closed).decode())
    assert "1008" in closed["reason"] and "revoked" in closed["reason"], closed
    refused = await board.app.wait_event("link_down", count=2, timeout=10)
    assert "HTTP 401" in refused["reason"] and "provider_identity_revoked" in refused["reason"], refused
    print_for_docs("the board's log", orjson.dumps(refused).decode())
    code, out, err = await run_cli(capsys, "devices")
    assert out.splitlines()[1].split()[:2] == [f"unix-{SLOT}", "revoked"]
    print_for_docs("devices after revoke", out)


def print_for_docs(title: str, text: str) -> None:
    """The commands' output, shown with `pytest -s` (docs/field-devices.md quotes it)."""
    with open(os.environ.get("FIELD_DOCS_OUT", os.devnull), "a", encoding="utf-8") as handle:
        handle.write(f"--- {title}\n{text}\n")
