"""The C board's link under stress, against real gateways: a gateway restarted under it, the board
killed while a call waits, a second board refused a held slot (over a WebSocket and over a serial line),
a board with a wrong provider token.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import SLOT, CBoardFactory, structured_call
from tests.support.serial_ports import PtyPair, SerialRelay
from tests.support.southbound import provider_status

REFUSED_BACKOFF_MS = 15_000
"""A refusal at the door sends the back-off ceiling to its maximum (30 s by default) at once, and the
wait is between half the ceiling and the ceiling (include/mcpb/backoff.h): never a tight loop."""


async def test_the_board_comes_back_after_the_gateway_restarts(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory
) -> None:
    first = await gateway_factory()
    board = await c_boards("--url", first.url, "--slot", SLOT)  # an http:// URL is dialled as ws://
    await wait_ready_slot(first, SLOT, timeout=10)
    async with Client(f"{first.url}/{SLOT}/mcp", mode="legacy") as client:
        await structured_call(client, "start", {"speed_rpm": 900})

    await first.stop()
    closed = await board.wait_link("closed")
    assert closed["code"] == "1001", board.output()  # the gateway said it is going away
    second = await gateway_factory(port=first.port)
    try:
        await wait_ready_slot(second, SLOT, timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    assert len(board.links("connected")) == 2
    async with Client(f"{second.url}/{SLOT}/mcp", mode="2026-07-28") as client:
        # A short outage is not a dead link: the pump kept running toward its setpoint.
        status = await structured_call(client, "get_status")
        assert status["state"] in ("starting", "running")
        assert status["setpoint_rpm"] == 900
        assert status["fault"] is None


@pytest.mark.parametrize("multiplex", [False, True], ids=["dedicated", "multiplexed"])
async def test_callers_get_the_disconnect_at_once_when_the_board_is_killed_mid_call(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory, multiplex: bool
) -> None:
    gateway = await gateway_factory()
    board = await c_boards("--url", gateway.url, "--slot", SLOT, *(["--multiplex"] if multiplex else []))
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Client(f"{gateway.url}/{SLOT}/mcp", mode=mode))
            for mode in ("legacy", "2026-07-28")
        ]
        # Frozen, the board cannot answer: both calls are surely waiting at it when it dies.
        board.signal(signal.SIGSTOP)
        calls = [asyncio.create_task(client.call_tool("get_status", {})) for client in clients]
        try:

            def both_pending() -> bool:
                session = gateway.gateway.registry.slots[SLOT].live
                return session is not None and session.in_flight == 2

            await wait_for(both_pending, what="two calls pending at the board")
            board.signal(signal.SIGKILL)
            for call in calls:
                # A bound, not a speed assertion: "at once" must not mean "at the 60 s deadline".
                with pytest.raises(MCPError) as failure:
                    await asyncio.wait_for(call, 2.0)
                # killed: no close frame, and the caller is told so
                assert failure.value.error.message.startswith(f'Provider "{SLOT}" disconnected: ')
                assert failure.value.error.data["detail"] in failure.value.error.message
        finally:
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
    assert await board.stop() == -signal.SIGKILL


async def test_a_second_board_on_a_held_slot_is_refused_and_backs_off(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory
) -> None:
    gateway = await gateway_factory()
    await c_boards("--url", gateway.url, "--slot", SLOT, "--device-id", "first")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    second = await c_boards("--url", gateway.url, "--slot", SLOT, "--device-id", "second")
    refused = await second.wait_link("refused")
    assert refused["code"] == "1008"
    assert refused["reason"].startswith("Slot already held by a live provider"), refused["reason"]
    assert int(refused["retry"]) >= REFUSED_BACKOFF_MS, refused.string

    await asyncio.sleep(2.0)  # a tight loop would have dialled dozens of times by now
    # One dial (upgraded, then closed 1008 at registration) and nothing since.
    assert [link["kind"] for link in second.links()] == ["connected", "refused"], second.output()
    assert second.process.returncode is None, "a refused board keeps waiting to try again"
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None and session.hello is not None
    assert session.hello["device_id"] == "first"


@pytest.mark.timeout(120)
async def test_a_board_refused_on_a_serial_line_registers_again_after_the_longest_back_off(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,
    ptys: Callable[[], PtyPair],
    relays: Callable[[PtyPair, PtyPair], SerialRelay],
) -> None:
    board_side, gateway_side = ptys(), ptys()
    relays(board_side, gateway_side)
    gateway = await gateway_factory(
        serial={"ports": [{"path": gateway_side.path}], "retry_initial_s": 0.05, "retry_max_s": 0.3}
    )
    holder = await c_boards("--url", gateway.url, "--slot", SLOT, "--device-id", "holder")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    serial = await c_boards("--serial", board_side.path, "--slot", SLOT, "--device-id", "serial")
    refused = await serial.wait_link("refused")
    assert refused["reason"].startswith("Slot already held by a live provider"), refused["reason"]
    retry_s = int(refused["retry"]) / 1000
    assert REFUSED_BACKOFF_MS <= int(refused["retry"]) <= 2 * REFUSED_BACKOFF_MS, refused.string

    # The slot comes free; the board, waiting out its back-off, registers again on its own.
    await holder.stop()
    await wait_for(
        lambda: (
            (entry := gateway.gateway.registry.slots.get(SLOT)) is not None
            and entry.live is not None
            and entry.live.hello is not None
            and entry.live.hello["device_id"] == "serial"
        ),
        retry_s + 15,
        "the refused serial board to register again",
    )
    await wait_ready_slot(gateway, SLOT, timeout=10)
    # No tight loop: the line opened once more, after the wait the refusal announced.
    assert [link["kind"] for link in serial.links()] == ["connected", "refused", "connected"], serial.output()
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        assert (await structured_call(client, "get_status"))["state"] == "stopped"


async def test_a_board_with_a_wrong_provider_token_is_refused_with_the_reason(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory, tmp_path: Path
) -> None:
    (tmp_path / "identity").write_text("the-right-secret-for-pump-boards\n")
    identities = {
        "mode": "identities",
        "identities": [{"name": "pump-board", "file": str(tmp_path / "identity"), "slots": ["pump-*"]}],
    }
    gateway = await gateway_factory(providers={"auth": identities})
    (tmp_path / "wrong").write_text("not-the-secret\n")
    wrong = await c_boards("--url", gateway.url, "--slot", SLOT, "--token-file", str(tmp_path / "wrong"))
    refused = await wrong.wait_link("refused")
    assert refused["http"] == "401"
    # The gateway's error_description, decoded from its JSON body: its advice, not the JSON cut short.
    assert refused["reason"].startswith(
        "HTTP 401: The provider secret sent in X-Provider-Token (or Authorization: Bearer) is not known to this "
        "gateway."
    ), refused["reason"]
    assert int(refused["retry"]) >= REFUSED_BACKOFF_MS, refused.string
    assert "not-the-secret" not in "\n".join(wrong.lines), "a token never reaches the log"
    assert gateway.gateway.registry.slots.get(SLOT) is None  # nothing was claimed
    await wrong.stop()

    right = await c_boards(
        "--url", gateway.url, "--slot", SLOT, "--token-file", str(tmp_path / "identity"), "--multiplex"
    )
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{right.output()}") from None
    assert (await provider_status(gateway.url, SLOT))["identity"] == "pump-board"
