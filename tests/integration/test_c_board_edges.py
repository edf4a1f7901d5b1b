"""The C board (build/c/pump1-host) on `/providers` at the edges a gateway can take it to, against real
gateways: a slot the gateway lets go while the socket stays (its pump is fed no more, though pings go
on, and its dead-man stops it unless a new link comes in time), a quick gateway restart (a running
pump rides through it), and a request over the frame cap for a slot of the longest name (answered
under its id at once, not left to the caller's deadline; the slot still let go, not refused, at the
gateway's shutdown).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import CBoard, CBoardFactory, c_boards, pump1_host, structured_call  # noqa: F401 (fixtures)

KEPT = "edge-kept"
TAKEN = "edge-taken"
LONGEST = "edge-" + "s" * 59  # 64 bytes: the gateway's and the board's limit
DEADMAN_S = 6  # a few seconds: a gateway restart fits well inside it, and the test waits past it


async def status_of(gateway: GatewayServer, slot: str) -> dict[str, Any]:
    async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
        return await structured_call(client, "get_status")


async def start_pumps(gateway: GatewayServer, *slots: str) -> None:
    for slot in slots:
        async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
            await structured_call(client, "start", {"speed_rpm": 1500})
    await asyncio.sleep(3)  # up to speed: 600 rpm/s


async def restart(gateway: GatewayServer, gateway_factory: GatewayFactory, **config: Any) -> GatewayServer:
    """Stop the gateway under the board and start another on its port at once; both slots ready."""
    await gateway.stop()
    again = await gateway_factory(port=gateway.port, **config)
    for slot in (KEPT, TAKEN):
        await wait_ready_slot(again, slot, timeout=15)
    return again


def closed_lines(board: CBoard, slot: str) -> list[str]:
    return [line for line in board.lines if f"link closed slot={slot} " in line]


async def test_a_slot_let_go_on_providers_is_fed_no_more_and_its_dead_man_stops_it(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    secret = tmp_path / "identity"
    secret.write_text("the-edge-boards-share-this-secret\n")
    providers = {
        "takeover": "always",
        "heartbeat_interval_s": 1,  # pings every second on the socket that stays
        "auth": {"mode": "identities", "identities": [{"name": "edge", "file": str(secret), "slots": ["edge-*"]}]},
    }
    gateway = await gateway_factory(providers=providers)
    board = await c_boards(
        "--url", gateway.url, "--multiplex", "--slot", KEPT, "--slot", TAKEN,
        "--deadman-s", str(DEADMAN_S), "--token-file", str(secret),
    )  # fmt: skip
    for slot in (KEPT, TAKEN):
        await wait_ready_slot(gateway, slot, timeout=10)
    await start_pumps(gateway, KEPT, TAKEN)

    async def take_over(count: int) -> tuple[float, CBoard]:
        # A board of the same identity takes the slot: the gateway lets it go on the first board's
        # socket (an error envelope naming it), and that socket carries the other slot and its pings on.
        intruder = await c_boards(
            "--url", gateway.url, "--slot", TAKEN, "--device-id", f"intruder-{count}", "--token-file", str(secret)
        )
        await wait_for(lambda: len(closed_lines(board, TAKEN)) == count, 10, "the slot let go")
        let_go = time.monotonic()
        line = closed_lines(board, TAKEN)[-1]
        assert line.endswith("Replaced by a newer connection of the same provider identity"), line
        await wait_for(lambda: len(intruder.links("connected")) == 1, 10, "the intruder to connect")
        return let_go, intruder

    # Not at once: the let-go pump turns on until its dead-man, so a new link in time (the intruder
    # gone, the gateway restarted under the board) finds it still running.
    let_go, intruder = await take_over(1)
    await intruder.stop()
    gateway = await restart(gateway, gateway_factory, providers=providers)
    status = await status_of(gateway, TAKEN)
    assert time.monotonic() - let_go < DEADMAN_S - 1, "the restart took too long for this test"
    assert (status["state"], status["fault"]) == ("running", None), (status, board.output())

    # Past the dead-man: the pings that keep the other slot fed do not feed the let-go one, which
    # stops with link_lost and the dead-man's own text.
    let_go, intruder = await take_over(2)
    await asyncio.sleep(DEADMAN_S + 1.5)
    kept = await status_of(gateway, KEPT)
    assert (kept["state"], kept["fault"]) == ("running", None), (kept, board.output())
    await intruder.stop()
    gateway = await restart(gateway, gateway_factory, providers=providers)
    status = await status_of(gateway, TAKEN)
    assert (status["state"], status["speed_rpm"]) == ("fault", 0), (status, board.output())
    assert status["fault"]["code"] == "link_lost", status
    assert status["fault"]["text"].startswith(f"No request or ping from the gateway for {DEADMAN_S} s"), status
    assert (await status_of(gateway, KEPT))["fault"] is None
    assert not [text for text in board.lines if "link refused" in text], board.output()


async def test_a_quick_gateway_restart_leaves_a_running_pump_running(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    # The gateway's shutdown lets every slot go ("Gateway shutting down", an event naming each): the
    # pumps are fed no more until the next link, which comes well inside their dead-man.
    providers = {"heartbeat_interval_s": 1}
    gateway = await gateway_factory(providers=providers)
    board = await c_boards(
        "--url", gateway.url, "--multiplex", "--slot", KEPT, "--slot", TAKEN, "--deadman-s", str(DEADMAN_S)
    )
    for slot in (KEPT, TAKEN):
        await wait_ready_slot(gateway, slot, timeout=10)
    await start_pumps(gateway, TAKEN)
    stopped = time.monotonic()
    gateway = await restart(gateway, gateway_factory, providers=providers)
    status = await status_of(gateway, TAKEN)
    assert time.monotonic() - stopped < DEADMAN_S - 1, "the restart took too long for this test"
    assert closed_lines(board, TAKEN)[-1].endswith("Gateway shutting down"), board.output()
    assert (status["state"], status["speed_rpm"], status["fault"]) == ("running", 1500, None), (status, board.output())
    # Fed again on the new link: still running past the dead-man.
    await asyncio.sleep(DEADMAN_S + 1)
    status = await status_of(gateway, TAKEN)
    assert (status["state"], status["fault"]) == ("running", None), (status, board.output())


async def test_an_oversize_request_for_the_longest_slot_name_is_answered_under_its_id(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    gateway = await gateway_factory()
    board = await c_boards("--url", gateway.url, "--multiplex", "--slot", "edge-short", "--slot", LONGEST)
    for slot in ("edge-short", LONGEST):
        await wait_ready_slot(gateway, slot, timeout=10)
    for slot in ("edge-short", LONGEST):
        async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
            call = client.call_tool("get_status", {"pad": "a" * 5000})
            # At once, not at the 60 s deadline a refusal under id null would leave the caller to.
            with pytest.raises(MCPError) as refused:
                await asyncio.wait_for(call, 10)
            assert "Request too large" in str(refused.value), (slot, refused.value, board.output())
            assert "this device accepts frames of at most 4096 bytes" in str(refused.value)
    # The gateway held both slots: its shutdown lets them go ("closed"), it refuses neither.
    await gateway.stop()
    for slot in ("edge-short", LONGEST):
        line = await board.wait_line(f"slot={slot} ")
        assert f"link closed slot={slot} " in line and line.endswith("Gateway shutting down"), board.output()
