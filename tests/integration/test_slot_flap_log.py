"""A slot whose provider attaches and leaves over and over (two boards on one slot pushing each other off)
is logged as one summary per logging.repeat_interval_s, not as a line per attach and per leave; a board
that reconnects once is logged as before (docs/operations.md, "Logs")."""

from __future__ import annotations

import logging
import re

import pytest

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import Boards

INTERVAL_S = 3.0
FLAPS = 5


def lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gateway.slots" and r.getMessage().startswith(start)]


async def test_a_flapping_slot_is_summarized_once_per_interval(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await gateway_factory(logging={"repeat_interval_s": INTERVAL_S})
    for _ in range(FLAPS):
        board = await boards.connect(server.url, "/provider/pump")
        await wait_ready_slot(server, "pump")
        await board.close()
        await wait_for(lambda: server.gateway.registry.slots["pump"].live is None, what="the board to leave")
    # The first attach and leave, the first quick attach again (a reboot, a takeover) and its leave, and
    # the second quick attach are written as they come.
    assert len(lines(caplog, "provider attached to slot pump")) == 3
    assert len(lines(caplog, "provider left slot pump")) == 2
    # The rest is summarized, once per interval (more than one window if the machine is slow); a window
    # with nothing in it ends the quiet.
    windows = server.gateway.registry.flaps._windows
    await wait_for(lambda: "pump" not in windows, 3 * INTERVAL_S + 3, "the quiet to end")
    summaries = lines(caplog, "slot pump attached")
    assert 1 <= len(summaries) <= 2, summaries
    attaches = leaves = 0
    for summary in summaries:
        counts = re.match(
            r"slot pump attached (?:and left (\d+) times?|(\d+) times? and left (\d+) times?) in the last 3 s ", summary
        )
        assert counts is not None, summary
        attaches += int(counts[1] or counts[2])
        leaves += int(counts[1] or counts[3])
        assert "last reason: provider closed the connection (close code 1000); last attach from 127.0.0.1:" in summary
        # Every attach came from one host here: the hint names both causes it cannot tell apart.
        assert summary.endswith(
            " over websocket; two providers on one slot push each other off, or one provider keeps reconnecting "
            "(docs/operations.md, Logs)"
        )
        (record,) = [r for r in caplog.records if r.getMessage() == summary]
        assert record.levelno == logging.WARNING
    # Every attach and leave from the second quick attach on is counted (that attach is also written).
    assert (attaches, leaves) == (FLAPS - 2, FLAPS - 2)
    assert "(vacant now)" in summaries[-1]
    await boards.connect(server.url, "/provider/pump")
    await wait_ready_slot(server, "pump")
    assert len(lines(caplog, "provider attached to slot pump")) == 4
    assert len(lines(caplog, "slot pump attached")) == 1


async def test_a_board_that_reconnects_once_is_logged_as_it_comes(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = await gateway_factory(logging={"repeat_interval_s": 0.5})
    board = await boards.connect(server.url, "/provider/pump")
    await wait_ready_slot(server, "pump")
    await board.close()
    await wait_for(lambda: server.gateway.registry.slots["pump"].live is None, what="the board to leave")
    await boards.connect(server.url, "/provider/pump")
    await wait_ready_slot(server, "pump")
    await wait_for(lambda: not server.gateway.registry.flaps._windows, 3, "the quiet window to pass")
    assert len(lines(caplog, "provider attached to slot pump")) == 2
    assert len(lines(caplog, "provider left slot pump")) == 1
    assert not lines(caplog, "slot pump attached")
