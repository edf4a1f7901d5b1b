"""`_all` and the tool groups answer logging/setLevel themselves and hold each session's calls to the
level it set there: a call's log messages come back from the provider whatever endpoint it came
through, so an endpoint that relays them declares `logging` and lets the caller quiet them
(docs/protocol-clients.md, "Request-tied notifications"). A real SDK provider logs at three levels;
real SDK clients listen."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_session_log_level import SLOT, chatty_server, collector

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ENDPOINTS = {"/_all/mcp": f"{SLOT}-chatter", "/mcp/chat": f"{SLOT}__chatter"}


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(providers={"era": "session"}, groups={"chat": {"slots": [SLOT]}})
    await publishers.start(server, SLOT, chatty_server(), aggregate=True)
    return server


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_a_session_quiets_its_calls_on_all_and_on_a_group(gateway: GatewayServer, path: str) -> None:
    quiet: list[str] = []
    loud: list[str] = []
    async with (
        Client(f"{gateway.url}{path}", mode="legacy", logging_callback=collector(quiet)) as warned,
        Client(f"{gateway.url}{path}", mode="legacy", logging_callback=collector(loud)) as unset,
    ):
        assert warned.server_capabilities.logging is not None
        await warned.set_logging_level("warning")
        await warned.call_tool(ENDPOINTS[path], {"tag": "A"})
        await unset.call_tool(ENDPOINTS[path], {"tag": "B"})
        with pytest.raises(Exception, match="level"):
            await warned.set_logging_level("loud")  # type: ignore[arg-type]
    assert quiet == ["A warning"]
    assert loud == ["B debug", "B info", "B warning"]  # no level set: every message, as on a slot


async def test_a_stateless_caller_still_has_no_set_level_on_all(gateway: GatewayServer) -> None:
    async with Client(f"{gateway.url}/_all/mcp", mode="2026-07-28") as client:
        tools = await client.list_tools()
        assert any(tool.name == ENDPOINTS["/_all/mcp"] for tool in tools.tools)
        result = await client.call_tool(ENDPOINTS["/_all/mcp"], {"tag": "C"})
        assert isinstance(result.content[0], types.TextContent)
