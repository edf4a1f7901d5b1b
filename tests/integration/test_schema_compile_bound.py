"""A provider's inputSchema that takes seconds to compile, through a real governed gateway: the
compile runs off the event loop (one thread, within limits.max_schema_compile_ms), so /healthz and
every other client are answered meanwhile; the call past the bound is checked against the operator
limits only, and calls after the compile ends are checked against the schema
(docs/governance-arguments.md, docs/security-limits.md).

`re` compiles each case-insensitive class of a wide range (`(?i:[\\u0100-\\uffff])`) in milliseconds:
a schema repeating it a thousand times held the event loop for seconds at the first governed call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_pattern_bound import POLICY, AnsweringBoard, forms_board, text_of
from tests.support.refusals import refusal, refused_argument_text
from tests.support.southbound import Boards

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

CLASSES = 800
"""About 4 ms each for `re` on a Raspberry-class core: seconds in all."""
SLOW = "^slow" + "(?i:[\u0100-\uffff])" * CLASSES
COMPILE_MS = 200
TOOLS: list[dict[str, Any]] = [
    {"name": "slow", "inputSchema": {"type": "object", "properties": {"p1": {"type": "string", "pattern": SLOW}}}},
]


@pytest.fixture
async def governed(
    gateway_factory: GatewayFactory, boards: Boards, tmp_path: Path
) -> AsyncIterator[tuple[GatewayServer, AnsweringBoard]]:
    server = await gateway_factory(
        policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, limits={"max_schema_compile_ms": COMPILE_MS}
    )
    yield server, await forms_board(server, boards, TOOLS)


async def test_a_slow_schema_compiles_off_the_event_loop(
    governed: tuple[GatewayServer, AnsweringBoard], http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    server, board = governed
    schemas = server.gateway.governance.schemas  # type: ignore[union-attr]
    caplog.set_level(logging.WARNING, logger="gateway.policy.schemas")
    async with Client(f"{server.url}/forms/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("slow", {"p1": "x"}))
        # While the schema compiles, the gateway (whose event loop this test shares) answers others at
        # once: a pause and a /healthz take what they take, where the compile held everything for seconds.
        slowest = 0.0
        while schemas.size == 0:
            started = time.monotonic()
            await asyncio.sleep(0.05)
            async with http.get(f"{server.url}/healthz") as response:
                assert response.status == 200
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 1.0
        # Past limits.max_schema_compile_ms the call met the operator limits only, as for a broken schema.
        result = await asyncio.wait_for(call, 30)
        assert text_of(result) == "done: slow"
        assert any("limits.max_schema_compile_ms (200 ms)" in record.getMessage() for record in caplog.records)
        # Compiled now: the calls after it are checked against the schema.
        text, _ = refusal(await client.call_tool("slow", {"p1": "x"}))
        assert refused_argument_text(text, "forms").startswith('Argument "p1" must match the pattern')
    assert schemas.compiles == 1
    calls = [message for _, message in board.received if message.get("method") == "tools/call"]
    assert len(calls) == 1
