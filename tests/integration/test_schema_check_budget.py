"""A tool whose inputSchema recurses through `oneOf` and `$ref`, through a real governed gateway: a call
nested 22 deep (263 bytes) is refused within limits.max_pattern_ms, recorded and counted, never
forwarded, and another caller's tools/list is answered meanwhile (docs/governance-arguments.md,
docs/security-limits.md). Unbounded, that check held the event loop for 43 s, doubling per level.

The provider is a stdio child that lists the tool and answers every call "ok"; the callers are real
SDK clients."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.refusals import refusal, refused_argument_text

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

BOUND_MS = 80
DEPTH = 22
START_S = 20.0
PROVIDER = """
import json, sys
NODE = {"$ref": "#/definitions/node"}
SCHEMA = {"type": "object", "properties": {"filter": NODE}, "definitions": {"node": {"type": "object",
    "oneOf": [{"properties": {"c": NODE}}, {"properties": {"c": NODE}}]}}}
ANY_OF = {"type": "object", "properties": {"filter": NODE}, "definitions": {"node": {"type": "object",
    "anyOf": [{"properties": {"c": NODE}}, {"properties": {"c": NODE}}]}}}
TOOLS = [{"name": "query", "description": "filtered read", "inputSchema": SCHEMA},
         {"name": "search", "description": "filtered read", "inputSchema": ANY_OF}]
calls = open(sys.argv[1], "a")
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "q", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        calls.write(json.dumps(message["params"]) + "\\n")
        calls.flush()
        result = {"content": [{"type": "text", "text": "ok"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "operator", "resources": ["/**"]}],
}


def trail(path: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM decisions ORDER BY id"))


async def test_a_recursive_schema_check_is_refused_within_the_bound_and_blocks_nobody(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    script, forwarded = tmp_path / "provider.py", tmp_path / "calls.jsonl"
    script.write_text(PROVIDER)
    forwarded.touch()
    server: GatewayServer = await gateway_factory(
        upstreams={"stdio": [{"name": "q", "command": [sys.executable, str(script), str(forwarded)]}]},
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db")},
        limits={"max_pattern_ms": BOUND_MS},
    )
    await wait_ready_slot(server, "q", START_S)
    tree: dict[str, Any] = {}
    for _ in range(DEPTH):
        tree = {"c": tree}
    async with Client(f"{server.url}/q/mcp", mode="legacy") as hostile, Client(f"{server.url}/q/mcp") as other:

        async def hostile_call() -> tuple[str, dict[str, Any]]:
            text, data = refusal(await hostile.call_tool("query", {"filter": tree}))
            return refused_argument_text(text, "q"), data

        async def other_list() -> float:
            await asyncio.sleep(0.02)  # the hostile call is on its way first
            started = time.monotonic()
            listed = await other.list_tools()
            assert [tool.name for tool in listed.tools] == ["query", "search"]
            return time.monotonic() - started

        (message, data), other_took = await asyncio.wait_for(asyncio.gather(hostile_call(), other_list()), 30)
    assert message.startswith('Argument "filter.c')
    assert (
        f"could not be checked against the tool's inputSchema within limits.max_pattern_ms ({BOUND_MS} ms), so "
        "the call is refused" in message
    )
    assert data["argument"].startswith("filter.c")
    assert {key: data[key] for key in ("slot", "reason", "rule", "source", "limit", "setting")} == {
        "slot": "q",
        "reason": "pattern_timeout",
        "rule": "$ref",
        "source": "inputSchema",
        "limit": BOUND_MS,
        "setting": "limits.max_pattern_ms",
    }
    assert other_took < 5  # answered while the hostile call was checked, not after it
    # Recorded as any refused call is, counted against the bound, and never forwarded.
    path = tmp_path / "audit.db"
    await wait_for(lambda: any(row["tool"] == "query" for row in trail(path)), what="the refusal's record")
    row = next(row for row in trail(path) if row["tool"] == "query")
    assert (row["effect"], row["reason"]) == ("refuse-arguments", message)
    assert (await scrape(http, server)).get("mcpgw_limit_hits_total", limit="max_pattern_ms") == 1
    assert forwarded.read_text() == ""
    # Ordinary recursive arguments are checked as before: refused by what the schema says, or forwarded.
    shallow: dict[str, Any] = {"filter": {"c": {"c": {"c": {"c": {"c": {}}}}}}}
    async with Client(f"{server.url}/q/mcp", mode="legacy") as client:
        refused, data = refusal(await client.call_tool("query", shallow))
        assert "must be valid exactly by one definition" in refused  # both branches match `{}`
        assert data["reason"] == "invalid_arguments"
        result = await client.call_tool("search", shallow)
        assert not result.is_error
    call = orjson.loads(forwarded.read_text())
    assert (call["name"], call["arguments"]) == ("search", shallow)
