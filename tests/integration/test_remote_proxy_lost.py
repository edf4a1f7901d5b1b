"""An HTTP failure answering a remote upstream's tools/call POST is recorded by what it says about the
request (docs/governance-audit.md, "Sent, no answer: lost"): 500, 502 and 504 without a JSON-RPC answer
(a server that failed while handling it, a proxy whose upstream answered wrongly or not in time) are
`lost`, the request may have run; 503, 403, 429 and a JSON-RPC error answer with HTTP 500 are `error`.
A real aiohttp server (session era, JSON answers) on a free loopback port.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from tests.conftest import GatewayFactory
from tests.integration.test_audit_outcomes import caller, ended
from tests.integration.test_remote_lost_or_error import ValveServer, failed_call, governed_remote
from tests.integration.test_remote_upstreams import SLOT, slot_url

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JSONRPC_500 = "jsonrpc-500"
CASES = [("500", "lost"), ("502", "lost"), ("504", "lost"), ("503", "error"), ("403", "error")]
CASES += [("429", "error"), (JSONRPC_500, "error")]


class ProxiedValve(ValveServer):
    """ValveServer behind a stand-in proxy: `behaviour` set to a status answers the tools/call POST with
    it (a text page), or with HTTP 500 and a JSON-RPC error for the request (JSONRPC_500)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and self.behaviour not in ("answer", "refuse", "drop", "forget"):
            message = json.loads(await request.read())  # aiohttp keeps the body for the server's read
            if message.get("method") == "tools/call":
                self.calls.append(message["params"])
                if self.behaviour == JSONRPC_500:
                    error = {"code": -32603, "message": "valve controller fault"}
                    return web.json_response({"jsonrpc": "2.0", "id": message["id"], "error": error}, status=500)
                status = int(self.behaviour)
                return web.Response(status=status, text=f"proxy says {status}", content_type="text/plain")
        return await super().handle(request)


async def test_each_http_failure_of_a_sent_call_is_recorded_by_what_it_says(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    valve = ProxiedValve()
    await valve.start()
    try:
        gateway = await governed_remote(gateway_factory, trail, valve.url, transport="streamable-http")
        errors: list[str] = []
        for behaviour, _ in CASES:
            valve.behaviour = behaviour
            failed = await failed_call(gateway, "open_valve", {"pct": 1})
            errors.append(failed.error.message)
        assert len(valve.calls) == len(CASES)  # every POST reached the server (or its proxy)
        records = await ended(trail, len(CASES))
        assert [(record["status"], record["error"]) for record in records] == [
            (status, message) for (_, status), message in zip(CASES, errors, strict=True)
        ]
        assert errors[1] == f'Upstream "{SLOT}" answered HTTP 502: proxy says 502', errors[1]
        assert errors[-1] == "valve controller fault", errors[-1]
        valve.behaviour = "answer"  # the link carries on
        async with caller(slot_url(gateway)) as agent:
            assert not (await agent.call_tool("open_valve", {"pct": 5})).is_error
    finally:
        await valve.stop()
