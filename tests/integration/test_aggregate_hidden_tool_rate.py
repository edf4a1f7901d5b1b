"""A tool the policy hides from a caller, called through `_all` or a tool group, is answered exactly as an
unknown name and is decided before the slot's rate limit is charged: the slot's `-32029` would tell the
caller the tool exists, and the hidden calls would drain the bucket the slot's other callers share
(docs/protocol-clients.md, `_all`). Real gateway, a real simulated pump, the MCP SDK's client."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import MCPError

from tests.conftest import GatewayFactory
from tests.integration.test_governance import AGENT, auth, client, one_pump, trail_rows

pytestmark = pytest.mark.timeout(60)

BURST = 3
POLICY = {
    # The agent sees pump-1's read-only get_status; stop (a control tool) is hidden from it.
    "roles": {"observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]}},
    "assign": [{"principal": "token:agent", "role": "observer", "resources": ["/**"]}],
}
# A slot bucket that does not refill within the test: every charge to it shows.
RATE = {"per_slot": {"rate_per_s": 0.001, "burst": BURST}}


async def refusal_of(agent: object, name: str) -> tuple[int, str]:
    with pytest.raises(MCPError) as refused:
        await agent.call_tool(name, {})  # type: ignore[attr-defined]
    return refused.value.error.code, refused.value.error.message.replace(name, "<name>")


@pytest.mark.parametrize(("path", "separator"), [("/_all/mcp", "-"), ("/mcp", "__")])
async def test_a_hidden_tool_is_an_unknown_name_and_charges_no_rate_limit(
    gateway_factory: GatewayFactory, tmp_path: Path, path: str, separator: str
) -> None:
    trail = tmp_path / "audit.db"
    server = await gateway_factory(
        auth=auth(),
        policy=POLICY,
        audit={"path": str(trail)},
        limits={"rate": RATE},
        groups={"pumps": {"slots": ["pump-*"]}},
    )
    async with one_pump(server), client(server, path, AGENT, "legacy") as agent:
        listed = {tool.name for tool in (await agent.list_tools()).tools}
        assert f"pump-1{separator}get_status" in listed and f"pump-1{separator}stop" not in listed
        unknown = await refusal_of(agent, f"pump-1{separator}no_such_tool")
        assert unknown[0] == -32602
        # More hidden calls than the slot's burst: each one the unknown-name answer, never -32029.
        for _ in range(BURST + 2):
            assert await refusal_of(agent, f"pump-1{separator}stop") == unknown
        # The bucket is untouched: the caller's visible tool still gets its whole burst.
        for _ in range(BURST):
            assert not (await agent.call_tool(f"pump-1{separator}get_status", {})).is_error
        code, message = await refusal_of(agent, f"pump-1{separator}get_status")
        assert code == -32029 and 'slot "pump-1"' in message
    # Each hidden call is decided and recorded as on the slot itself.
    denied = [row for row in trail_rows(trail) if row["tool"] == "stop"]
    assert len(denied) == BURST + 2 and {row["effect"] for row in denied} == {"deny"}
