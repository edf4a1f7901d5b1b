"""A real gateway under made-up slot names, a briefly locked audit trail and clients that leave early:
state stays within limits.max_slots and forgetting a name scans no family; /readyz recovers by itself
once the lock is gone and tells an unauthenticated caller only a reason code; a request the client
abandoned is counted under 499."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import MCPError
from prometheus_client import Counter, Gauge

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_governance import OPERATOR, POLICY, auth, client, one_pump

MAX_SLOTS = 32
MODERN = "2026-07-28"
TOOLS_LIST = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
)
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tools/list",
}
SLOT_LABEL = re.compile(r'slot="([^"]*)"')


async def test_made_up_names_stay_within_max_slots_and_forgetting_one_scans_no_family(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(limits={"max_slots": MAX_SLOTS})
    metrics = server.gateway.metrics
    collects = 0
    slot_families = [
        family
        for family in vars(metrics).values()
        if isinstance(family, Counter | Gauge) and "slot" in getattr(family, "_labelnames", ())
    ]
    assert len(slot_families) == 10
    for family in slot_families:
        collect = family.collect

        def counted(collect: Any = collect) -> Any:
            nonlocal collects
            collects += 1
            return collect()

        family.collect = counted  # type: ignore[method-assign]
    scrapes = 0
    async with aiohttp.ClientSession() as http:
        for round_ in range(4):
            for i in range(100):
                async with http.post(f"{server.url}/made-up-{round_}-{i}/mcp", data=TOOLS_LIST, headers=HEADERS) as r:
                    await r.read()
            async with http.get(f"{server.url}/metrics") as scrape:
                exposed = await scrape.text()
            scrapes += 1
            shown = set(SLOT_LABEL.findall(exposed))
            assert len(shown) <= MAX_SLOTS
            assert "made-up-0-0" not in shown  # the oldest went with its slot
            assert len(server.gateway.registry.slots) <= MAX_SLOTS
    # 368 names were forgotten: each scanned all ten families before; now only the scrapes collect them.
    assert collects == scrapes * len(slot_families)


@contextlib.asynccontextmanager
async def locked(path: Path) -> AsyncIterator[None]:
    """Another process holds BEGIN EXCLUSIVE on the SQLite file at `path` for the block."""
    script = (
        "import sqlite3, sys\n"
        f"db = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "db.execute('COMMIT')\n"
    )
    locker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert locker.stdin is not None and locker.stdout is not None
    try:
        assert await asyncio.wait_for(locker.stdout.readline(), 10) == b"locked\n"
        yield
    finally:
        locker.stdin.write(b"release\n")
        await locker.stdin.drain()
        try:
            await asyncio.wait_for(locker.wait(), 10)
        finally:
            if locker.returncode is None:
                locker.kill()
                await locker.wait()


async def readyz(server: GatewayServer) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/readyz") as answer:
        return answer.status, await answer.json()


async def ready_by_itself(server: GatewayServer, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while (await readyz(server))[0] != 200:
        assert time.monotonic() < deadline, "/readyz stayed 503 after the lock was gone"
        await asyncio.sleep(0.1)


async def test_a_trail_locked_at_start_is_ready_by_itself_once_the_lock_goes(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with locked(trail):
        server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(trail)})
        status, answer = await readyz(server)
        assert status == 503
        # Under [auth], anyone may ask: the reason code, never the file or SQLite's words.
        assert answer == {"status": "audit_unavailable", "reason": "locked"}
    await ready_by_itself(server, within_s=5)


async def test_a_lock_during_a_call_clears_from_readyz_without_another_call(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(trail)})
    async with one_pump(server):
        assert (await readyz(server))[0] == 200
        async with locked(trail), client(server, "/pump-1/mcp", OPERATOR, "legacy") as operator:
            with pytest.raises(MCPError) as refused:
                await operator.call_tool("get_status", {})
            assert "the audit trail cannot record it" in refused.value.error.message
            assert await readyz(server) == (503, {"status": "audit_unavailable", "reason": "locked"})
        await ready_by_itself(server, within_s=5)
        async with client(server, "/pump-1/mcp", OPERATOR, "legacy") as operator:
            assert not (await operator.call_tool("get_status", {})).is_error


async def test_without_auth_readyz_still_says_why_the_trail_cannot_be_written(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    async with locked(trail):
        server = await gateway_factory(policy=POLICY, audit={"path": str(trail)})
        status, answer = await readyz(server)
        assert status == 503 and answer["reason"] == "locked"
        assert "database is locked" in answer["error"] and str(trail) in answer["error"]
    await ready_by_itself(server, within_s=5)


async def test_a_request_the_client_abandons_is_counted_as_499(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory()
    port = int(server.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # A body promised and never sent in full: the client leaves while the gateway still reads it.
    writer.write(
        b"POST /pump-1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{"jsonrpc"'
    )
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    await writer.wait_closed()
    del reader
    line = 'mcpgw_http_requests_total{endpoint="slot",status="499"} 1.0'
    deadline = time.monotonic() + 5
    while line not in server.gateway.metrics.render().decode():
        assert time.monotonic() < deadline, "the abandoned request was never counted"
        await asyncio.sleep(0.05)
