"""Under a [policy], a `_broker` resource is read only as the tools/call whose answer it is would be
made: `broker://providers/<name>` as provider_status with that name, `broker://guide/<topic>` as
broker_guide with that topic. Argument limits, `[[confirm]]` and `[[execution_limits]]` apply to the read
and it is recorded in the audit trail like the call (docs/governance.md, Resources). Real gateway, real
simulated pumps, the MCP SDK's client in both eras."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import MCPError

from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_governance import AGENT, ERAS, auth, client, text_of, trail_rows

pytestmark = pytest.mark.timeout(60)

POLICY = {
    "roles": {"observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "mcp.resources.read", "tool.observe"]}},
    "assign": [{"principal": "token:agent", "role": "observer", "resources": ["/**", "/_system/**"]}],
    # The agent may look at pump-1 only, even though it sees provider_status.
    "limits": [
        {"resources": ["/_system/broker"], "tool": "provider_status", "argument": "name", "allowed": ["pump-1"]}
    ],
    "confirm": [{"principal": "token:agent", "capabilities": ["tool:broker_guide"], "resources": ["/_system/broker"]}],
    "execution_limits": [
        {
            "id": "one-diagnosis",
            "match": {"capability": "tool:broker_diagnose"},
            "calls": {"max": 1, "window_ms": 3600000},
        }
    ],
}


async def read_refused(agent: object, uri: str) -> MCPError:
    with pytest.raises(MCPError) as refused:
        await agent.read_resource(uri)  # type: ignore[attr-defined]
    return refused.value


@pytest.mark.parametrize("mode", ERAS)
async def test_a_broker_resource_is_read_as_its_tool_call(
    gateway_factory: GatewayFactory, tmp_path: Path, mode: str
) -> None:
    trail = tmp_path / "audit.db"
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(trail)})
    simulator = Simulator(server.url, SimulatorSettings(pumps=2, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        for slot in ("pump-1", "pump-2"):
            await wait_ready_slot(server, slot)
        async with client(server, "/_broker/mcp", AGENT, mode) as agent:
            assert (await agent.read_resource("broker://providers/pump-1")).contents

            # The argument limit refuses the read as it refuses the call, in the same words.
            called = await agent.call_tool("provider_status", {"name": "pump-2"})
            assert called.is_error
            refused = await read_refused(agent, "broker://providers/pump-2")
            assert refused.error.code == -32001
            assert text_of(called) in refused.error.message
            assert "provider_status" in refused.error.message
            assert isinstance(refused.error.data, dict) and refused.error.data["reason"] == "argument_limit"

            # A name that is no slot names no slot the caller may not look at.
            malformed = await read_refused(agent, "broker://providers/%ZZ")
            assert '"pump-1"' in malformed.error.message and "pump-2" not in malformed.error.message

            # A read cannot ask a person: refused, naming the call to make; no approval is queued.
            confirmed = await read_refused(agent, "broker://guide/index")
            assert confirmed.error.code == -32001
            assert "call the tool broker_guide" in confirmed.error.message
            assert server.governor is not None and server.governor.approvals() == []

            # The read counts against the execution limits of its call.
            assert (await agent.read_resource("broker://diagnose")).contents
            limited = await read_refused(agent, "broker://diagnose")
            assert limited.error.code == -32029 and "one-diagnosis" in limited.error.message
    finally:
        await simulator.stop()
    recorded = [(row["tool"], row["arguments"], row["effect"]) for row in trail_rows(trail)]
    assert ("provider_status", '{"name":"pump-1"}', "allow") in recorded
    assert recorded.count(("provider_status", '{"name":"pump-2"}', "refuse-arguments")) == 2  # call and read
    assert ("provider_status", '{"name":"%ZZ"}', "refuse-arguments") in recorded
    assert ("broker_guide", '{"topic":"index"}', "refuse-confirmation") in recorded
    assert ("broker_diagnose", "{}", "allow") in recorded
