"""A governed gateway SIGKILLed in the middle of a burst of calls: every call its provider saw is in
the audit trail afterwards, because a decision is committed before its call is forwarded
(docs/governance.md, "Durability and failing closed")."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from pathlib import Path

import orjson
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from gateway.publish.websocket import Publisher
from tests.conftest import wait_for
from tests.support.gateway_process import gateway_process

CALLS = 500
CONFIG = """
[limits.rate.per_principal]
rate_per_s = 0
[limits.rate.per_slot]
rate_per_s = 0

[policy.roles.worker]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.control"]
[[policy.assign]]
principal = "anonymous"
role = "worker"
resources = ["/**"]

[audit]
path = "{audit}"
"""


def recorder(seen: list[str]) -> MCPServer:
    """A provider written the ordinary way, noting every call that reaches it."""
    server = MCPServer("recorder")

    @server.tool()
    def note(text: str) -> str:
        seen.append(text)
        return "noted"

    return server


@pytest.mark.timeout(120)
async def test_every_call_the_provider_saw_is_in_the_trail_after_a_sigkill(tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(audit=audit))
    seen: list[str] = []
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        publisher = Publisher(recorder(seen), gateway.url, "recorder")
        publishing = asyncio.create_task(publisher.run())
        try:
            async with Client(f"{gateway.url}/recorder/mcp", mode="2026-07-28") as warm:
                await warm.list_tools()

            async def caller(first: int) -> None:
                with contextlib.suppress(Exception):  # the gateway dies under them
                    async with Client(f"{gateway.url}/recorder/mcp", mode="2026-07-28") as client:
                        for number in range(first, CALLS, 8):
                            await client.call_tool("note", {"text": f"call-{number}"})

            callers = asyncio.gather(*(caller(first) for first in range(8)))
            await wait_for(lambda: len(seen) >= CALLS // 3, 60.0, "a third of the calls to reach the provider")
            gateway.process.send_signal(signal.SIGKILL)
            await gateway.process.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(callers, 30)
        finally:
            await publisher.stop()
            publishing.cancel()
            with contextlib.suppress(BaseException):
                await publishing
    assert CALLS // 3 <= len(seen) < CALLS  # killed mid-burst
    with contextlib.closing(sqlite3.connect(f"file:{audit}?mode=ro", uri=True)) as db:
        recorded = {
            orjson.loads(arguments)["text"]
            for (arguments,) in db.execute("SELECT arguments FROM decisions WHERE tool = 'note' AND effect = 'allow'")
        }
    missing = sorted(set(seen) - recorded)
    assert missing == [], f"{len(missing)} calls reached the provider without a record: {missing[:5]}"
