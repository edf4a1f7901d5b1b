"""The simulated pump's log while its gateway is away (docs/simulator.md): a long outage is never a
silent log, and a dial that times out says what did not answer and after how long."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time

import pytest

from bench.ports import free_port
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for

DOWN = re.compile(r"pump-1 link down \((?P<reason>.*)\); dialling again in [0-9.]+ s(?P<tries>.*)$")


def down_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[float, str]]:
    return [(record.created, record.getMessage()) for record in caplog.records if "link down" in record.getMessage()]


async def test_a_long_outage_is_logged_once_per_two_longest_back_offs_with_the_tries_since(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    port = free_port()  # nothing listens: every dial fails at once
    # Waits of 0.1 to 0.2 s once the ceiling is reached: a line every 0.4 s, every second or third dial.
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.01, backoff_max_s=0.2)
    simulator = Simulator(f"ws://127.0.0.1:{port}", settings)
    simulator.start()
    try:
        await wait_for(lambda: len(down_lines(caplog)) >= 6, 10, "six link-down lines")
    finally:
        await simulator.stop()
    lines = down_lines(caplog)
    parsed = [DOWN.match(text) for _, text in lines]
    assert all(parsed), lines
    # The first three failures of the run, each on its own line.
    assert [match["tries"] for match in parsed[:3] if match] == ["", "", ""]
    # Then one line per interval, saying how far the run has got and how many dials it passed over.
    later = [match for match in parsed[3:] if match]
    for match in later:
        tries = re.fullmatch(r" \(try (\d+) in a row; (\d+) not logged since the last line\)", match["tries"])
        assert tries is not None, match.string
        assert int(tries[1]) > 3 and int(tries[2]) >= 1
    times = [created for created, _ in lines[3:]]
    gaps = [after - before for before, after in itertools.pairwise(times)]
    assert all(0.35 <= gap <= 1.2 for gap in gaps), gaps  # once per 0.4 s, give or take one wait


async def test_a_dial_nobody_answers_names_the_url_and_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts the connection, never answers the upgrade (a hung appliance)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = SimulatorSettings(pumps=1, connect_timeout_s=0.3, backoff_min_s=5, backoff_max_s=5)
    simulator = Simulator(f"ws://127.0.0.1:{port}", settings)
    started = time.monotonic()
    simulator.start()
    try:
        await wait_for(lambda: bool(down_lines(caplog)), 10, "the link-down line")
    finally:
        await simulator.stop()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert time.monotonic() - started >= 0.3
    [(_, line)] = down_lines(caplog)
    match = DOWN.match(line)
    assert match is not None, line
    assert match["reason"] == f"TimeoutError: no answer from ws://127.0.0.1:{port}/provider/pump-1 within 0.3 s"
