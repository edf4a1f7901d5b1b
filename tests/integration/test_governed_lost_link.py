"""A governed call whose request reached the board, then lost its link before the answer: the trail
says `lost` (the device may have carried it out), not `error`, whether the board went away or the
gateway shut down; a call refused before it was sent (no provider) stays `error`. Against the C board
(build/c/pump1-host), stopped with SIGSTOP once the request is on its socket (docs/governance-audit.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import SLOT, CBoardFactory, c_boards, pump1_host, structured_call  # noqa: F401 (fixtures)
from tests.integration.test_audit_outcomes import POLICY, caller, ended, tokens

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def governed_gateway(gateway_factory: GatewayFactory, trail: Path, port: int = 0) -> GatewayServer:
    return await gateway_factory(
        port=port, auth=tokens(), policy=POLICY, audit={"path": str(trail)}, slots={"declared": {"away": {}}}
    )


async def call_in_flight(gateway: GatewayServer, board_pid: int) -> asyncio.Task[MCPError]:
    """Start the pump, stop the board (SIGSTOP), then send set_speed 1250: the task, once the gateway
    has written the request to the board's socket."""
    async with caller(f"{gateway.url}/{SLOT}/mcp") as agent:
        await structured_call(agent, "start", {"speed_rpm": 800})
    os.kill(board_pid, signal.SIGSTOP)

    async def set_speed() -> MCPError:
        async with caller(f"{gateway.url}/{SLOT}/mcp") as agent:
            try:
                answer = await agent.call_tool("set_speed", {"speed_rpm": 1250})
            except MCPError as exc:
                return exc
        raise AssertionError(f"set_speed was answered: {answer}")

    task = asyncio.create_task(set_speed())
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    await wait_for(lambda: len(session.pending) == 1, 10, "the set_speed request pending at the board")
    return task


def set_speed_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    [record] = [record for record in records if record["tool"] == "set_speed"]
    return record


async def test_a_call_whose_board_dies_before_answering_is_recorded_lost(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    trail = tmp_path / "audit.db"
    gateway = await governed_gateway(gateway_factory, trail)
    board = await c_boards("--url", gateway.url, "--slot", SLOT)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    task = await call_in_flight(gateway, board.pid)
    board.signal(signal.SIGKILL)  # the link ends with the request unanswered on the board's socket
    lost = await asyncio.wait_for(task, 10)
    assert lost.error.message.startswith(f'Provider "{SLOT}" disconnected')
    record = set_speed_record(await ended(trail, 2))
    assert (record["effect"], record["status"], record["error"]) == ("allow", "lost", lost.error.message)


async def test_a_call_in_flight_at_shutdown_is_recorded_lost_and_the_board_carries_it_out(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    trail = tmp_path / "audit.db"
    gateway = await governed_gateway(gateway_factory, trail)
    port = gateway.port
    board = await c_boards("--url", gateway.url, "--slot", SLOT)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    task = await call_in_flight(gateway, board.pid)
    await gateway.stop()
    lost = await asyncio.wait_for(task, 10)
    assert lost.error.message == f'Provider "{SLOT}" disconnected: the gateway is shutting down'
    board.signal(signal.SIGCONT)  # it reads the request that sat in its socket
    again = await governed_gateway(gateway_factory, trail, port)
    await wait_ready_slot(again, SLOT, timeout=15)
    async with caller(f"{again.url}/{SLOT}/mcp") as agent:
        status = await structured_call(agent, "get_status")
    assert status["setpoint_rpm"] == 1250, (status, board.output())  # what `lost` warns of
    record = set_speed_record(await ended(trail, 3))
    assert (record["effect"], record["status"], record["error"]) == ("allow", "lost", lost.error.message)


async def test_a_call_refused_before_it_is_sent_stays_error(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    trail = tmp_path / "audit.db"
    gateway = await governed_gateway(gateway_factory, trail)
    async with caller(f"{gateway.url}/away/mcp") as agent:
        with pytest.raises(MCPError) as offline:
            await agent.call_tool("set_speed", {"speed_rpm": 1250})
    assert offline.value.error.message.startswith('Provider "away" not connected')
    [record] = await ended(trail, 1)
    assert (record["status"], record["error"]) == ("error", offline.value.error.message)
