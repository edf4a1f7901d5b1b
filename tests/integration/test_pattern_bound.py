"""A provider's inputSchema pattern that backtracks catastrophically, through a real governed gateway:
the call is refused within limits.max_pattern_ms, recorded and counted, and the event loop stays free
for every other client and provider (docs/governance-arguments.md, docs/security-limits.md).

The board is a raw WebSocket provider (tests/support/southbound.py); the callers are real SDK clients.
Before the bound, `(a|a)+$` against forty a's and a "!" held the event loop for longer than the
universe is old, and `(a+)+$` for seconds (27 a's: 8.6 s)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.refusals import refusal, refused_argument_text
from tests.support.servers import demo_server
from tests.support.southbound import Boards, ScriptedBoard

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

CRAFTED = "a" * 40 + "!"
BOUND_MS = 80
EMAIL = r"^[a-z.]+@[a-z]+\.[a-z]{2,}$"
TOOLS: list[dict[str, Any]] = [
    # Nested quantifiers that re backtracks on (regex needs no timeout for this one).
    {"name": "nested", "inputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(a+)+$"}}}},
    # An alternation whose two branches match the same: exponential in every backtracking engine.
    {"name": "alternation", "inputSchema": {"type": "object", "properties": {"s": {"pattern": "(a|a)+$"}}}},
    {"name": "keys", "inputSchema": {"type": "object", "patternProperties": {"(a|a)+$": {"type": "string"}}}},
    {
        "name": "mail",
        "inputSchema": {
            "type": "object",
            "properties": {"to": {"type": "string", "pattern": EMAIL}},
            "required": ["to"],
        },
    },
]
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/**"]}],
}


class AnsweringBoard(ScriptedBoard):
    """A board that answers every tools/call it gets at once with the tool's name."""

    async def _on_text(self, data: str | bytes) -> None:
        message = orjson.loads(data)
        if isinstance(message, dict) and message.get("method") == "tools/call":
            self.received.append((None, message))
            text = f"done: {message['params']['name']}"
            await self.reply(message, {"content": [{"type": "text", "text": text}]})
            return
        await super()._on_text(data)


@pytest.fixture
async def governed(
    gateway_factory: GatewayFactory, boards: Boards, publishers: Publishers, tmp_path: Path
) -> AsyncIterator[tuple[GatewayServer, AnsweringBoard]]:
    server = await gateway_factory(
        policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, limits={"max_pattern_ms": BOUND_MS}
    )
    board = await forms_board(server, boards, TOOLS)
    await publishers.start(server, "demo", demo_server())
    yield server, board


async def forms_board(server: GatewayServer, boards: Boards, tools: list[dict[str, Any]]) -> AnsweringBoard:
    """A board in slot `forms` that lists `tools` and answers every call, ready."""
    board = await boards.connect(server.url, "/provider/forms", AnsweringBoard, tools=tools)
    assert isinstance(board, AnsweringBoard)
    await wait_ready_slot(server, "forms")
    return board


def trail(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions ORDER BY id"))


def text_of(result: types.CallToolResult) -> str:
    return " ".join(item.text for item in result.content if isinstance(item, types.TextContent))


async def refused_while_another_slot_answers(
    server: GatewayServer, tool: str, arguments: dict[str, Any]
) -> tuple[tuple[str, dict[str, Any]], float]:
    """Call `tool` of the forms board with `arguments` and, meanwhile, `add` of the demo slot (a real SDK
    provider) from another client: the refusal (its words, without "Not forwarded to forms: ", and its
    data), and how long the other call took."""
    async with (
        Client(f"{server.url}/forms/mcp", mode="legacy") as crafted,
        Client(f"{server.url}/demo/mcp", mode="legacy") as other,
    ):

        async def crafted_call() -> tuple[str, dict[str, Any]]:
            text, refused = refusal(await crafted.call_tool(tool, arguments))
            return refused_argument_text(text, "forms"), refused

        async def other_call() -> float:
            await asyncio.sleep(0.02)  # the crafted call is on its way first
            started = time.monotonic()
            result = await other.call_tool("add", {"a": 2, "b": 3})
            assert not result.is_error
            assert text_of(result) == "5"
            return time.monotonic() - started

        refused, other_took = await asyncio.wait_for(asyncio.gather(crafted_call(), other_call()), 20)
    return refused, other_took


async def test_a_backtracking_pattern_is_refused_within_the_bound_and_blocks_nobody(
    governed: tuple[GatewayServer, AnsweringBoard], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    server, board = governed
    (message, data), other_took = await refused_while_another_slot_answers(server, "alternation", {"s": CRAFTED})
    assert message == (
        f'Argument "s" could not be checked against the pattern "(a|a)+$" of the tool\'s inputSchema within '
        f"limits.max_pattern_ms ({BOUND_MS} ms), so the call is refused; send a shorter or simpler value, or have "
        "the provider's pattern fixed (it backtracks too much)"
    )
    assert data == {
        "slot": "forms",
        "reason": "pattern_timeout",
        "argument": "s",
        "pattern": "(a|a)+$",
        "source": "inputSchema",
        "limit": BOUND_MS,
        "setting": "limits.max_pattern_ms",
    }
    assert other_took < 5  # answered while the crafted call was checked, not after it
    assert [message for _, message in board.received if message.get("method") == "tools/call"] == []
    # Recorded as any refused call is, and counted against the bound.
    path = tmp_path / "audit.db"
    await wait_for(lambda: any(row["tool"] == "alternation" for row in trail(path)), what="the refusal's record")
    row = next(row for row in trail(path) if row["tool"] == "alternation")
    assert (row["effect"], row["reason"]) == ("refuse-arguments", message)
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_pattern_ms") == 1
    assert metrics.get("mcpgw_limit", limit="max_pattern_ms") == BOUND_MS
    # The provider link was never starved: the board still answers through the gateway.
    async with Client(f"{server.url}/forms/mcp", mode="legacy") as client:
        result = await client.call_tool("alternation", {"s": "aaa"})
    assert text_of(result) == "done: alternation"


async def test_a_backtracking_pattern_property_is_refused_the_same_way(
    governed: tuple[GatewayServer, AnsweringBoard], http: aiohttp.ClientSession
) -> None:
    server, board = governed
    (message, data), other_took = await refused_while_another_slot_answers(server, "keys", {CRAFTED: "x"})
    assert message.startswith(
        f'The argument name "{CRAFTED}" could not be checked against the pattern "(a|a)+$" of the tool\'s '
        f"inputSchema within limits.max_pattern_ms ({BOUND_MS} ms)"
    )
    assert (data["reason"], data["argument"]) == ("pattern_timeout", CRAFTED)
    assert other_took < 5
    assert [message for _, message in board.received if message.get("method") == "tools/call"] == []
    assert (await scrape(http, server)).get("mcpgw_limit_hits_total", limit="max_pattern_ms") == 1


async def test_nested_quantifiers_refuse_a_mismatch_at_once(governed: tuple[GatewayServer, AnsweringBoard]) -> None:
    server, _ = governed
    (message, data), other_took = await refused_while_another_slot_answers(server, "nested", {"s": CRAFTED})
    assert message == 'Argument "s" must match the pattern "(a+)+$" (the tool\'s inputSchema)'
    assert data["reason"] == "invalid_arguments"
    assert other_took < 5


async def test_a_normal_pattern_checks_as_before(governed: tuple[GatewayServer, AnsweringBoard]) -> None:
    server, board = governed
    async with Client(f"{server.url}/forms/mcp", mode="legacy") as client:
        result = await client.call_tool("mail", {"to": "shift.lead@plant.example"})
        assert text_of(result) == "done: mail"
        text, _ = refusal(await client.call_tool("mail", {"to": "shift lead at plant"}))
    assert refused_argument_text(text, "forms") == (
        f'Argument "to" must match the pattern {orjson.dumps(EMAIL).decode()} (the tool\'s inputSchema)'
    )
    calls = [message for _, message in board.received if message.get("method") == "tools/call"]
    assert [call["params"]["arguments"] for call in calls] == [{"to": "shift.lead@plant.example"}]
