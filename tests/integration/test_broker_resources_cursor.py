"""`_broker` answers resources/list and resources/templates/list in one page, as every tools/list is: a
cursor it never gave out is refused with -32602 `Invalid cursor`, with a [policy] and without, in both
eras (docs/protocol-clients.md). `_all` and the tool groups serve tools only: their resources/list and
prompts/list are -32601 whatever the cursor. Real gateway, the MCP SDK's client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory
from tests.integration.test_broker_resources_policy import POLICY
from tests.integration.test_governance import OPERATOR, auth, client

pytestmark = pytest.mark.timeout(60)

MODES = ["legacy", "2026-07-28"]
MADE_UP = "garbage"


@contextlib.asynccontextmanager
async def broker_client(server: GatewayServer, mode: str, governed: bool) -> AsyncIterator[Client]:
    if governed:  # the operator of POLICY sees broker_info and broker_guide, so some resources are listed
        async with client(server, "/_broker/mcp", OPERATOR, mode) as sdk:
            yield sdk
    else:
        async with Client(f"{server.url}/_broker/mcp", mode=mode) as sdk:
            yield sdk


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("governed", [False, True], ids=["no-policy", "policy"])
async def test_broker_refuses_a_resources_cursor_it_never_gave(
    gateway_factory: GatewayFactory, mode: str, governed: bool
) -> None:
    server = await (gateway_factory(auth=auth(), policy=POLICY) if governed else gateway_factory())
    async with broker_client(server, mode, governed) as broker:
        resources = await broker.list_resources()
        assert resources.resources and resources.next_cursor is None
        templates = await broker.list_resource_templates()
        assert templates.resource_templates and templates.next_cursor is None
        with pytest.raises(MCPError) as refused:
            await broker.list_resources(cursor=MADE_UP)
        assert refused.value.error.code == -32602
        assert refused.value.error.message == "Invalid cursor: the gateway lists all resources at once"
        with pytest.raises(MCPError) as refused:
            await broker.list_resource_templates(cursor=MADE_UP)
        assert refused.value.error.code == -32602
        assert refused.value.error.message == "Invalid cursor: the gateway lists all resource templates at once"
        with pytest.raises(MCPError) as refused:  # the same answer tools/list gives
            await broker.list_tools(cursor=MADE_UP)
        assert refused.value.error.message == "Invalid cursor: the gateway lists all tools at once"
        # A refused cursor leaves the session usable.
        assert (await broker.list_resources()).resources == resources.resources


@pytest.mark.parametrize("mode", MODES)
async def test_tool_only_endpoints_serve_no_resources_or_prompts_with_any_cursor(
    gateway_factory: GatewayFactory, mode: str
) -> None:
    server = await gateway_factory()
    for path, where in (("/_all/mcp", "_all"), ("/mcp", "/mcp")):
        async with Client(f"{server.url}{path}", mode=mode) as sdk:
            for method, listing in (("resources/list", sdk.list_resources), ("prompts/list", sdk.list_prompts)):
                for cursor in (None, MADE_UP):
                    with pytest.raises(MCPError) as refused:
                        await listing(cursor=cursor)
                    assert refused.value.error.code == -32601, (path, method, cursor)
                    expected = f"Method not found: {method} is not served by {where} (it serves tools only)"
                    assert refused.value.error.message == expected
