"""While a slot flaps, another host taking it is still logged as it comes (docs/operations.md, "Logs").

Real boards on loopback: one from 127.0.0.1 that keeps reconnecting (a quiet window opens), one from
127.0.0.2 that takes the slot in between; the second host's attach is a line of its own, and the window's
summary names both hosts.
"""

from __future__ import annotations

import logging

import aiohttp
import pytest

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import Boards, ScriptedBoard

INTERVAL_S = 3.0


def lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gateway.slots" and r.getMessage().startswith(start)]


async def test_another_host_taking_a_flapping_slot_is_logged(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await gateway_factory(logging={"repeat_interval_s": INTERVAL_S})
    slot = server.gateway.registry.slots
    other_host = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0)))
    try:
        for http in (boards.http, boards.http, boards.http, other_host, boards.http):
            board = await ScriptedBoard.connect(http, server.url, "/provider/pump")
            await wait_ready_slot(server, "pump")
            await board.close()
            await wait_for(lambda: slot["pump"].live is None, what="the board to leave")
    finally:
        await other_host.close()
    attached = lines(caplog, "provider attached to slot pump")
    assert [line.rpartition(" from ")[2].partition(":")[0] for line in attached] == [
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.2",
    ], attached
    windows = server.gateway.registry.flaps._windows
    await wait_for(lambda: "pump" not in windows, 3 * INTERVAL_S + 3, "the quiet to end")
    summaries = lines(caplog, "slot pump attached")
    assert summaries, caplog.text
    assert "(vacant now); attaches from 127.0.0.1 (2), 127.0.0.2 (1); last reason: " in summaries[0], summaries
