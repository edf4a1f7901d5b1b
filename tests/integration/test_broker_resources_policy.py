"""`_broker`'s resources under a [policy]: each is the answer of one of its tools (broker://info of
broker_info, broker://providers/{name} of provider_status, broker://guide/{topic} of broker_guide ...),
so a caller reads and lists only those whose tool it may see (docs/operations.md). Real gateway, real
simulated pump, the MCP SDK's client."""

from __future__ import annotations

import pytest
from mcp import MCPError

from tests.conftest import GatewayFactory
from tests.integration.test_governance import AGENT, OPERATOR, auth, client, one_pump

pytestmark = pytest.mark.timeout(60)

POLICY = {
    "roles": {
        # May read device resources, not observe the gateway: _broker's tools stay hidden.
        "reader": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "mcp.resources.read"]},
        "observer": {"inherits": ["reader"], "capabilities": ["tool:broker_guide", "tool:broker_info"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "reader", "resources": ["/**"]},
        {"principal": "token:operator", "role": "observer", "resources": ["/**"]},
    ],
}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_broker_resource_shows_only_what_its_tool_would(gateway_factory: GatewayFactory, mode: str) -> None:
    server = await gateway_factory(auth=auth(), policy=POLICY)
    async with one_pump(server):
        async with client(server, "/_broker/mcp", AGENT, mode) as agent:
            assert (await agent.list_tools()).tools == []
            assert (await agent.list_resources()).resources == []
            assert (await agent.list_resource_templates()).resource_templates == []
            for uri in ("broker://info", "broker://providers/pump-1", "broker://guide/index", "broker://diagnose"):
                with pytest.raises(MCPError) as refused:
                    await agent.read_resource(uri)
                assert refused.value.error.code == -32602
                assert refused.value.error.message.startswith(f"Resource {uri} is not offered to this caller")
        async with client(server, "/_broker/mcp", OPERATOR, mode) as operator:
            assert {tool.name for tool in (await operator.list_tools()).tools} == {"broker_guide", "broker_info"}
            listed = {str(resource.uri) for resource in (await operator.list_resources()).resources}
            assert "broker://info" in listed and "broker://guide/index" in listed
            assert "broker://providers" not in listed and "broker://diagnose" not in listed
            templates = {item.uri_template for item in (await operator.list_resource_templates()).resource_templates}
            assert templates == {"broker://guide/{topic}"}
            assert (await operator.read_resource("broker://info")).contents
            with pytest.raises(MCPError, match="the tool provider_status"):
                await operator.read_resource("broker://providers/pump-1")
