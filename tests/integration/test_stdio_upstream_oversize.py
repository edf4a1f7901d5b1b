"""A stdio upstream's stdout line over limits.max_frame_bytes: dropped without being held, and its caller
told at once when the line's first bytes name the request it answers (docs/upstreams.md); and what a
caller hears while the child has not served yet.

The child is the real SDK server of tests/support/stdio_server.py; clients are SDK clients of both eras.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_stdio_upstreams import MODES, START_S, diagnose, text_of, upstream, view

BOUND = 65_536


@pytest.mark.parametrize("mode", MODES)
async def test_an_answer_longer_than_the_line_bound_ends_its_call_at_once(
    gateway_factory: GatewayFactory, mode: str
) -> None:
    # The default deadline (60 s) is far beyond what the caller may wait here.
    server = await gateway_factory(upstreams={"stdio": [upstream()]}, limits={"max_frame_bytes": BOUND})
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode=mode) as client:
        started = time.monotonic()
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(client.call_tool("big", {"size": 4 * BOUND}), 20)
        assert time.monotonic() - started < 10
        error = failure.value.error
        assert error.code == -32603
        assert error.message.startswith(
            f'Provider "demo" answered, but the gateway refused the answer: the answer is larger than {BOUND} '
            "bytes (limits.max_frame_bytes"
        )
        assert "raise limits.max_frame_bytes" in error.message
        assert isinstance(error.data, dict) and error.data["limit"] == "limits.max_frame_bytes"
        # The rest of the line was skipped; the child and its link go on.
        assert text_of(await client.call_tool("big", {"size": 100})) == "y" * 100
        assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"
    status = view(server)
    assert status["connects"] == 1
    assert status["upstream"]["stdout_oversized_lines"] == 1
    assert status["upstream"]["stdout_max_line_bytes"] == BOUND
    problems = {problem["id"]: problem for problem in await diagnose(server)}
    assert "provider.deadlines" not in problems
    oversized = problems["upstream.stdout_oversized_lines"]
    assert f"1 stdout line(s) over {BOUND} bytes" in oversized["evidence"]
    assert f"Raise limits.max_frame_bytes (now {BOUND} bytes)" in oversized["fix"]


async def test_an_over_long_line_without_an_id_at_its_start_is_named_when_a_call_runs_out(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(
        upstreams={"stdio": [upstream()]},
        limits={"max_frame_bytes": BOUND},
        slots={"declared": {"demo": {"request_timeout_ms": 1500}}},
    )
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        waiting = asyncio.create_task(client.call_tool("sleep", {"seconds": 5}))
        # A line that names no request (here plain text): nobody can be told at once.
        assert text_of(await client.call_tool("print_stdout", {"size": 2 * BOUND})) == "printed"
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(waiting, 10)
        assert failure.value.error.message.startswith('Provider "demo" did not respond within 1500ms')
    assert view(server)["upstream"]["stdout_oversized_lines"] == 1
    problems = {problem["id"]: problem for problem in await diagnose(server)}
    deadlines = problems["provider.deadlines"]
    assert "1 stdout line(s) longer than limits.max_frame_bytes were dropped" in deadlines["evidence"]
    assert deadlines["fix"].startswith("Raise limits.max_frame_bytes first")
    assert "upstream.stdout_oversized_lines" in problems


async def test_a_child_that_cannot_start_is_named_with_its_command_and_why(gateway_factory: GatewayFactory) -> None:
    missing = "/nonexistent/mcp-server"
    server = await gateway_factory(
        upstreams={"stdio": [{"name": "demo", "command": [missing], "restart_initial_s": 0.05, "restart_max_s": 0.2}]}
    )
    await wait_for(lambda: view(server)["upstream"]["last_exit"] is not None, START_S, "a failed start")
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as failure:
            await client.call_tool("add", {"a": 1, "b": 1})
    assert failure.value.error.message == (
        f'Provider "demo" not connected: its provider, a child process the gateway starts itself ({missing}), '
        f"has not connected yet; last end: cannot start {missing!r}: No such file or directory "
        "(provider_status on _broker); no slot you may call has a provider now"
    )
