"""The C board (build/c/pump1-host) on `/providers` at the edges a gateway can take it to, against real
gateways: a slot the gateway lets go while the socket stays (its pump stops at once, though pings go
on), and a request over the frame cap for a slot of the longest name (answered under its id at once,
not left to the caller's deadline).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host, structured_call  # noqa: F401 (fixtures)

KEPT = "edge-kept"
TAKEN = "edge-taken"
LONGEST = "edge-" + "s" * 59  # 64 bytes: the gateway's and the board's limit
DEADMAN_S = "30"  # far beyond the test: a pump stopped here was stopped by the let-go, not by silence


async def test_a_slot_let_go_on_providers_stops_its_pump_at_once(
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
    first = await gateway_factory(providers=providers)
    board = await c_boards(
        "--url", first.url, "--multiplex", "--slot", KEPT, "--slot", TAKEN,
        "--deadman-s", DEADMAN_S, "--token-file", str(secret),
    )  # fmt: skip
    await wait_ready_slot(first, KEPT, timeout=10)
    await wait_ready_slot(first, TAKEN, timeout=10)
    async with Client(f"{first.url}/{TAKEN}/mcp", mode="legacy") as client:
        await structured_call(client, "start", {"speed_rpm": 1500})

    # A second board of the same identity takes the slot: the gateway lets it go on the first board's
    # socket (an error envelope naming it), and that socket carries the other slot and its pings on.
    intruder = await c_boards(
        "--url", first.url, "--slot", TAKEN, "--device-id", "intruder", "--token-file", str(secret)
    )
    await board.wait_line(f"link closed slot={TAKEN} ", timeout=10)
    line = await board.wait_line(f"slot={TAKEN}")
    assert line.endswith("Replaced by a newer connection of the same provider identity"), line
    await wait_for(lambda: len(intruder.links("connected")) == 1, 10, "the intruder to connect")
    await asyncio.sleep(2)  # pings on the first board's socket meanwhile
    await intruder.stop()

    # The gateway restarts under the first board, which registers both slots again: the taken slot's
    # pump is seen stopped with link_lost, well inside its dead-man, the kept one untouched.
    await first.stop()
    await board.wait_line("Gateway shutting down")
    assert not [text for text in board.lines if "link refused" in text], board.output()
    second = await gateway_factory(port=first.port, providers=providers)
    await wait_ready_slot(second, TAKEN, timeout=15)
    await wait_ready_slot(second, KEPT, timeout=15)
    async with Client(f"{second.url}/{TAKEN}/mcp", mode="legacy") as client:
        status = await structured_call(client, "get_status")
    assert (status["state"], status["speed_rpm"]) == ("fault", 0), (status, board.output())
    assert status["fault"]["code"] == "link_lost", status
    async with Client(f"{second.url}/{KEPT}/mcp", mode="legacy") as client:
        assert (await structured_call(client, "get_status"))["fault"] is None


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
