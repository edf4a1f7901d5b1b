"""An audit trail at its [audit] max_bytes prunes after every batch, for as long as calls come: the
gateway logs the first pruning step at warning and then one line per logging.repeat_interval_s, which
sums the steps it stands for (docs/governance-audit.md, "Pruning"). A real gateway process, a provider
on its WebSocket, governed calls with large arguments; the log read from its stderr."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from gateway.publish.websocket import Publisher
from tests.support.gateway_process import GatewayProcess, gateway_process

REPEAT_INTERVAL_S = 4.0
BURST = 240
"""Calls of ARGUMENT_CHARS each: 1 MiB is full after about 80, and each step frees a tenth of it."""
ARGUMENT_CHARS = 12_000
CONFIG = """
[limits.rate.per_principal]
rate_per_s = 0
[limits.rate.per_slot]
rate_per_s = 0

[logging]
format = "json"
repeat_interval_s = {interval}

[policy.roles.worker]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.control"]
[[policy.assign]]
principal = "anonymous"
role = "worker"
resources = ["/**"]

[audit]
path = "{audit}"
max_bytes = 1048576
"""


def recorder() -> MCPServer:
    server = MCPServer("recorder")

    @server.tool()
    def note(text: str) -> str:
        return f"noted {len(text)}"

    return server


@contextlib.asynccontextmanager
async def governed_gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(interval=REPEAT_INTERVAL_S, audit=tmp_path / "audit.db"))
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        publisher = Publisher(recorder(), gateway.url, "recorder")
        publishing = asyncio.create_task(publisher.run())
        try:
            yield gateway
        finally:
            await publisher.stop()
            publishing.cancel()
            with contextlib.suppress(BaseException):
                await publishing


def prune_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    """The audit trail's lines about pruning (by their words: the numbers are extras of this fix)."""
    return [
        line
        for line in gateway.json_lines()
        if line.get("logger") == "gateway.policy.audit" and ": pruned " in str(line.get("msg"))
    ]


def records_pruned(audit: Path) -> int:
    """Decisions deleted from the trail: ids are never reused and only the oldest go."""
    with contextlib.closing(sqlite3.connect(f"file:{audit}?mode=ro", uri=True)) as db:
        newest, count = db.execute("SELECT max(id), count(*) FROM decisions").fetchone()
    return int(newest) - int(count)


async def first_answer(client: Client, gateway: GatewayProcess) -> None:
    """Call `note` until the recorder's slot is up and answers (its provider dials in after the start)."""
    for _ in range(100):
        with contextlib.suppress(Exception):
            await client.call_tool("note", {"text": "warm"})
            return
        await asyncio.sleep(0.1)
    pytest.fail("the provider never answered:\n" + gateway.log)


@pytest.mark.timeout(180)
async def test_pruning_at_max_bytes_is_logged_once_per_interval_with_sums(tmp_path: Path) -> None:
    async with governed_gateway(tmp_path) as gateway:
        async with Client(f"{gateway.url}/recorder/mcp", mode="2026-07-28") as client:
            await first_answer(client, gateway)
            started = time.monotonic()
            for number in range(BURST):
                await client.call_tool("note", {"text": f"{number:06d}" + "x" * ARGUMENT_CHARS})
            burst_s = time.monotonic() - started
            await asyncio.sleep(0.5)  # the writer's last batch and its pruning
            lines = prune_lines(gateway)
            # One line for the first step, one more per interval at most, however many steps there were.
            assert 1 <= len(lines) <= 1 + burst_s / REPEAT_INTERVAL_S, (burst_s, [line["msg"] for line in lines])
            assert lines[0]["level"] == "warning"
            assert "by size" in str(lines[0]["msg"])

            # After the interval, the next step's line stands for every step left out since the last.
            await asyncio.sleep(REPEAT_INTERVAL_S)
            seen = len(lines)
            for number in range(200):
                await client.call_tool("note", {"text": f"late{number:06d}" + "y" * ARGUMENT_CHARS})
                await asyncio.sleep(0.05)
                if len(prune_lines(gateway)) > seen:
                    break
        await asyncio.sleep(0.5)
        lines = prune_lines(gateway)
        assert len(lines) == seen + 1, [line["msg"] for line in lines]
    last = lines[-1]
    steps = sum(1 + int(line.get("repeats_left_out", 0)) for line in lines)
    assert steps >= 10, lines  # the bound was reached and pruned at again and again
    assert "more like it since the last line" in str(last["msg"]), last
    # Every step is in a line, its own or a summary's: the records add up to those gone from the file,
    # but for a step or two after the last line (the last calls' results are written a second later).
    records = sum(int(line["pruned_records"]) + int(line.get("pruned_records_left_out", 0)) for line in lines)
    freed = sum(int(line["pruned_bytes"]) + int(line.get("pruned_bytes_left_out", 0)) for line in lines)
    gone = records_pruned(tmp_path / "audit.db")
    # The last line may be the one said once the steps stopped coming (its own pruned_records 0).
    step = max(int(line["pruned_records"]) for line in lines)
    assert records <= gone <= records + 3 * step, (records, gone)
    assert freed > 0
