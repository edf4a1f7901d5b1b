"""pump-1 in C (build/c/pump1-host) behind a real gateway on every way in a board has: the dedicated
WebSocket `/provider/<slot>`, the multiplexed `/providers`, a serial line (a pseudo-terminal the
gateway opens by path, as /dev/ttyUSB0), and the MQTT plain profile through a real mosquitto. Real SDK
clients in both protocol eras call all five tools; every structured result is checked against the
outputSchema of device/schemas/pump-1.json.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.device.harness import SCHEMA_FILE
from tests.device_c.conftest import SLOT, CBoardFactory, exercise_every_tool
from tests.support.serial_ports import PtyPair, SerialRelay
from tests.support.southbound import provider_status

MODES = ["legacy", "2026-07-28"]
EXPECTED_HASH = tools_hash(orjson.loads(SCHEMA_FILE.read_bytes()))


def assert_hello(hello: dict[str, Any] | None, device_id: str) -> None:
    assert hello == {
        "device_id": device_id,
        "firmware": {"name": "libmcpb-idf", "version": "0.1.0"},
        "schema": EXPECTED_HASH,
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("multiplex", [False, True], ids=["dedicated", "multiplexed"])
async def test_sdk_client_calls_every_tool_over_websocket(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory, mode: str, multiplex: bool
) -> None:
    gateway = await gateway_factory()
    args = ["--url", f"ws://127.0.0.1:{gateway.port}", "--slot", SLOT, "--device-id", "c-board-ws"]
    board = await c_boards(*args, *(["--multiplex"] if multiplex else []))
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    connected = await board.wait_link("connected")
    assert connected["code"] == "0"
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    assert session.tools_hash == EXPECTED_HASH  # what the gateway computed from the board's paged tools/list
    assert_hello(session.hello, "c-board-ws")

    await exercise_every_tool(f"{gateway.url}/{SLOT}/mcp", mode)

    status = await provider_status(gateway.url, SLOT)
    assert status["transport"] == ("websocket-mux" if multiplex else "websocket")
    path = "/providers" if multiplex else f"/provider/{SLOT}"
    assert status["provider_url"] == gateway.url.replace("http://", "ws://") + path
    assert status["aggregate"] is True


async def test_two_boards_on_one_host_are_two_devices(gateway_factory: GatewayFactory, c_boards: CBoardFactory) -> None:
    """Without --device-id each names itself HOSTNAME-SLOT: one PC's boards are not one device. A board
    that left is still named by provider_status (last_provider)."""
    gateway = await gateway_factory()
    boards = []
    for slot in (SLOT, f"{SLOT}-b"):
        boards.append(await c_boards("--url", f"ws://127.0.0.1:{gateway.port}", "--slot", slot))
        await wait_ready_slot(gateway, slot, timeout=10)
        session = gateway.gateway.registry.slots[slot].live
        assert session is not None
        assert_hello(session.hello, f"{socket.gethostname()}-{slot}")
    assert await boards[0].stop() == 0
    await wait_for(lambda: gateway.gateway.registry.slots[SLOT].live is None, 5, "the board to leave")
    status = await provider_status(gateway.url, SLOT)
    assert (status["connected"], status["hello"]) == (False, None)
    assert status["last_provider"]["transport"] == "websocket"
    assert_hello(status["last_provider"]["hello"], f"{socket.gethostname()}-{SLOT}")


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_calls_every_tool_over_a_serial_line(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,
    ptys: Callable[[], PtyPair],
    relays: Callable[[PtyPair, PtyPair], SerialRelay],
    mode: str,
) -> None:
    board_side, gateway_side = ptys(), ptys()
    relays(board_side, gateway_side)
    gateway = await gateway_factory(
        serial={"ports": [{"path": gateway_side.path}], "retry_initial_s": 0.05, "retry_max_s": 0.3}
    )
    board = await c_boards("--serial", board_side.path, "--slot", SLOT, "--device-id", "c-board-serial")
    try:
        await wait_ready_slot(gateway, SLOT, timeout=15)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    assert session.tools_hash == EXPECTED_HASH
    assert_hello(session.hello, "c-board-serial")

    await exercise_every_tool(f"{gateway.url}/{SLOT}/mcp", mode)

    status = await provider_status(gateway.url, SLOT)
    assert status["transport"] == "serial"
    assert status["remote"] == gateway_side.path
    assert status["counters"]["unparsable"] == 0
    assert status["upstream"]["dropped_total"] == 0


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_calls_every_tool_over_mqtt(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    c_boards: CBoardFactory,
    tmp_path: Path,
    mode: str,
) -> None:
    # Each its own broker credential, as on the appliance; the board reads its password from a file.
    broker = await mosquitto_factory(users={"mcp-gateway": "gateway-secret", SLOT: "board-secret"})
    (tmp_path / "gateway-password").write_text("gateway-secret\n")
    (tmp_path / "board-password").write_text("board-secret\n")
    entry = {
        "url": f"mqtt://127.0.0.1:{broker.port}",
        "profiles": ["plain"],
        "username": "mcp-gateway",
        "password": {"file": str(tmp_path / "gateway-password")},
    }
    gateway = await gateway_factory(mqtt={"brokers": [entry]})
    board = await c_boards(
        "--mqtt", f"127.0.0.1:{broker.port}", "--slot", SLOT, "--device-id", "c-board-mqtt",
        "--mqtt-user", SLOT, "--mqtt-password-file", str(tmp_path / "board-password"),
    )  # fmt: skip
    try:
        await wait_ready_slot(gateway, SLOT, timeout=15)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    assert session.tools_hash == EXPECTED_HASH
    assert_hello(session.hello, "c-board-mqtt")

    await exercise_every_tool(f"{gateway.url}/{SLOT}/mcp", mode)

    status = await provider_status(gateway.url, SLOT)
    assert status["transport"] == "mqtt"
    assert "board-secret" not in "\n".join(board.lines), "a password never reaches the log"

    # SIGTERM: the board clears its retained status itself, and the gateway lets the slot go.
    assert await board.stop() == 0, board.output()
    await _wait_detached(gateway, SLOT)


async def _wait_detached(gateway: Any, slot: str) -> None:
    def detached() -> bool:
        entry = gateway.gateway.registry.slots.get(slot)
        return entry is None or entry.live is None

    await wait_for(detached, 10, f"{slot} to be let go")
