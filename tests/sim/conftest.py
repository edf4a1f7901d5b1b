"""Fixtures for simulator tests: simulated pumps publishing into the test's real gateway."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from mcp import Client

from gateway.cli import main as cli_main
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings

SimulatorFactory = Callable[..., Awaitable[Simulator]]
Status = dict[str, Any]


@pytest.fixture
async def simulators() -> AsyncIterator[SimulatorFactory]:
    """`await simulators(gateway.url, pumps=3, dry_run_s=0.3, ...)`: a running simulator with its control
    endpoint on a free port and a quick back-off; every one is stopped at the end of the test."""
    started: list[Simulator] = []

    async def start(gateway_url: str, pumps: int = 1, first: int = 1, **pump: Any) -> Simulator:
        settings = SimulatorSettings(
            pumps=pumps, first=first, pump=PumpSettings(**pump), backoff_min_s=0.05, backoff_max_s=0.2
        )
        simulator = Simulator(gateway_url, settings)
        await simulator.start_control(0)
        simulator.start()
        started.append(simulator)
        return simulator

    yield start
    for simulator in started:
        await simulator.stop()


async def status_of(client: Client, tool: str = "get_status", arguments: dict[str, Any] | None = None) -> Status:
    """A successful tool call's status object; old clients' text block carries the same object."""
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    structured = result.structured_content
    assert isinstance(structured, dict)
    assert orjson.loads(result.content[0].text) == structured  # type: ignore[union-attr]
    return structured


async def refusal_of(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> str:
    """The text of a tool error (isError: true), which tells the caller what to do."""
    result = await client.call_tool(tool, arguments or {})
    assert result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def poll(client: Client, until: Callable[[Status], bool], timeout: float = 5.0) -> list[Status]:
    """get_status until `until` holds: every sample seen, the last one satisfying it."""
    samples: list[Status] = []
    deadline = time.monotonic() + timeout
    while True:
        samples.append(await status_of(client))
        if until(samples[-1]):
            return samples
        assert time.monotonic() < deadline, f"the pump never reached the expected state: {samples[-3:]}"
        await asyncio.sleep(0.05)


async def cli(*argv: str) -> tuple[int, str, str]:
    """`mcp-gateway ...` in a thread (it runs its own event loop): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return cli_main(list(argv))

    code = await asyncio.to_thread(run)
    return code, out.getvalue(), err.getvalue()
