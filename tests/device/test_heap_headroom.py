"""The heap gate: pump-1 boots and serves in every transport configuration with 8 KB to spare.

A board in the field is an ESP32 without PSRAM (96 KB of heap, tests/device/harness.py DEVICE_HEAP).
Each configuration here runs from source, the stricter form (a board runs .mpy, which skips the
compiler's transient), in 96 KB less the headroom (with TLS, less half of it: see TLS_GATE_HEAP),
from a copy of device/micropython whose path
has a fixed length, wherever the temporary folder is: every module's `__file__`, the schema path found
beside the code and the config path stay on the heap (as interned names), so a path that grew with
pytest's run number or with where CI clones the repository would move the board across the line.
CHECKOUT_CHARS is longer than a usual checkout's path (a board's own paths, `/pump1/app.py`, are far
shorter). Behind a real gateway, called by a real SDK client: the board that passes here has the
headroom on every way in, and a change that eats into it fails here first.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, MosquittoFactory, wait_ready_slot
from tests.device.harness import DEVICE_DIR, DEVICE_HEAP, SCHEMA_FILE, Device, start_device
from tests.device.test_device_mqtt import mqtt_gateway_config, tls_broker
from tests.device.test_device_wss import https_client, self_signed
from tests.device.test_pump_gateway import status_of
from tests.device.umqtt_package import MODULE
from tests.support.serial_ports import PtyPair, SerialRelay

SLOT = "pump-1"
HEADROOM_KIB = 8
GATE_HEAP = f"{int(DEVICE_HEAP.removesuffix('K')) - HEADROOM_KIB}K"  # 88K
# The Unix port's mbedTLS allocates its context, records and handshake from the MicroPython heap
# (an ESP32's comes from the ESP-IDF heap, outside it): about 5 KB held and more while it shakes
# hands. With TLS the gate counts that share as part of the headroom and keeps 4 KB besides.
TLS_GATE_HEAP = f"{int(DEVICE_HEAP.removesuffix('K')) - HEADROOM_KIB // 2}K"  # 92K
CHECKOUT_CHARS = 64  # the checkout's folder: /home/engineer/src/mcp-gateway is 32
TOKEN = "a-provider-secret-of-forty-three-characters"
CONFIGURATIONS = ("websocket", "wss", "mqtt", "mqtts", "serial")


@pytest.fixture
def checkout(umqtt: Path) -> Iterator[Path]:
    """device/micropython and device/schemas copied into a folder whose path has CHECKOUT_CHARS
    characters, umqtt in lib/."""
    # In /tmp whatever TMPDIR says (a long TMPDIR would leave no room for the padding).
    folder = Path(tempfile.mkdtemp(prefix="heap-gate-", dir="/tmp" if Path("/tmp").is_dir() else None))
    padding = CHECKOUT_CHARS - len(str(folder)) - 1
    assert padding > 0, f"the temporary folder {folder} is too long for the gate's {CHECKOUT_CHARS} characters"
    root = folder / ("x" * padding)
    assert len(str(root)) == CHECKOUT_CHARS
    try:
        yield _copy(root, umqtt)
    finally:
        shutil.rmtree(folder)


def _copy(root: Path, umqtt: Path) -> Path:
    shutil.copytree(DEVICE_DIR, root / "device" / "micropython", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "device" / "schemas").mkdir()
    shutil.copy(SCHEMA_FILE, root / "device" / "schemas" / SCHEMA_FILE.name)
    (root / "lib" / "umqtt").mkdir(parents=True)
    shutil.copy(umqtt / MODULE, root / "lib" / MODULE)
    return root


@dataclass
class Setup:
    gateway: GatewayServer
    board: dict[str, Any]
    client_ca: Path | None = None
    cleanup: list[Any] = field(default_factory=list)


async def configure(
    kind: str, files: Path, gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, monkeypatch: Any
) -> Setup:
    """The gateway (and broker or serial line) for `kind`, and the board's config to reach it; the
    certificates and the broker's files go in `files` (the checkout: the CA file's path is on the
    board's heap too)."""
    if kind == "websocket":
        gateway = await gateway_factory()
        return Setup(gateway, {"gateway_url": gateway.url})
    if kind == "wss":
        tls = self_signed(files / "tls", "localhost", "127.0.0.1")
        monkeypatch.setenv("TEST_HEADROOM_BOARD_TOKEN", TOKEN)
        gateway = await gateway_factory(
            tls={"cert_file": str(tls / "server.pem"), "key_file": str(tls / "server-key.pem")},
            providers={
                "auth": {
                    "mode": "identities",
                    "identities": [{"name": "board", "env": "TEST_HEADROOM_BOARD_TOKEN", "slots": ["pump-*"]}],
                }
            },
        )
        board = {
            "gateway_url": f"wss://localhost:{gateway.port}",
            "ca_file": str(tls / "ca.pem"),
            "provider_token": TOKEN,
        }
        return Setup(gateway, board, client_ca=tls / "ca.pem")
    if kind == "mqtt":
        broker = await mosquitto_factory()
        gateway = await gateway_factory(**mqtt_gateway_config(broker))
        return Setup(gateway, {"transport": "mqtt", "mqtt": {"broker": "127.0.0.1", "port": broker.port}})
    if kind == "mqtts":
        tls = self_signed(files / "tls", "localhost")
        broker, tls_port = await tls_broker(mosquitto_factory, tls, files)
        gateway = await gateway_factory(**mqtt_gateway_config(broker))
        mqtts = {"broker": "localhost", "port": tls_port, "tls": True}
        return Setup(gateway, {"transport": "mqtt", "mqtt": mqtts, "ca_file": str(tls / "ca.pem")})
    assert kind == "serial"
    board_side, gateway_side = PtyPair(), PtyPair()
    relay = SerialRelay(board_side, gateway_side)
    gateway = await gateway_factory(
        serial={"ports": [{"path": gateway_side.path}], "retry_initial_s": 0.05, "retry_max_s": 0.3}
    )
    setup = Setup(gateway, {"transport": "serial", "serial": {"path": board_side.path}})
    setup.cleanup += [relay.stop, board_side.close, gateway_side.close]
    return setup


@contextlib.asynccontextmanager
async def client_of(setup: Setup) -> AsyncIterator[Client]:
    url = f"{setup.gateway.url}/{SLOT}/mcp"
    if setup.client_ca is not None:
        async with https_client(url, setup.client_ca) as client:
            yield client
    else:
        async with Client(url, mode="legacy") as client:
            yield client


@pytest.mark.parametrize("kind", CONFIGURATIONS)
async def test_the_board_boots_and_serves_with_8_kb_to_spare_from_a_fixed_path(
    kind: str,
    micropython: str,
    checkout: Path,
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = await configure(kind, checkout, gateway_factory, mosquitto_factory, monkeypatch)
    # No schema_path: the board finds the schema beside its code, as in a checkout.
    config = {"backoff_min_s": 0.1, "backoff_max_s": 0.5, "connect_timeout_s": 2, "heap_log_s": 0.2, **setup.board}
    heap_size = TLS_GATE_HEAP if kind in ("wss", "mqtts") else GATE_HEAP
    device: Device | None = None
    try:
        device = await start_device(
            micropython,
            checkout / "board.json",
            config,
            (checkout / "lib",),
            heap=heap_size,
            device_dir=checkout / "device" / "micropython",
        )
        await device.wait_event("link_up", timeout=15)
        try:
            await wait_ready_slot(setup.gateway, SLOT, timeout=15)  # the gateway listed every tool page
        except AssertionError as exc:
            said = "\n".join([*device.lines[:20], "...", *device.lines[-10:]])
            pytest.fail(f"{exc}; the board said:\n{said}")
        async with client_of(setup) as client:
            listed = await client.list_tools()
            assert [tool.name for tool in listed.tools] == ["get_status", "start", "set_speed", "stop", "reset_fault"]
            assert (await status_of(client))["state"] == "stopped"
            assert (await status_of(client, "start", {"speed_rpm": 1200}))["state"] == "starting"
            assert (await status_of(client, "set_speed", {"speed_rpm": 1800}))["setpoint_rpm"] == 1800
            refused = await client.call_tool("start", {"speed_rpm": 5000})
            assert refused.is_error
            assert (await status_of(client, "stop"))["state"] == "stopping"
        heap = await device.wait_event("heap", count=len(device.named("heap")) + 1)
        print(f"{kind} at {heap_size}: {heap['free']} bytes free, {heap['used']} used")
        assert device.process.returncode is None, device.output()
        assert "MemoryError" not in "\n".join(device.lines), device.output()
        assert not device.named("crashed"), device.output()
    finally:
        if device is not None:
            await device.stop()
        for stop in setup.cleanup:
            stop()
