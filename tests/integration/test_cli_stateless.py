"""The commands speak the 2026-07-28 era: one POST per request and no session, so an operator's command
works while `limits.max_sessions` is full; a tool whose arguments travel in `Mcp-Param-*` headers gets
them; a 2025-era server is spoken to in the session era (gateway/client.py)."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.client import GatewayClient
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_conformance_regressions import routed_server
from tests.support.gateway_process import run_cli
from tests.support.remote_server import Refusal, RemoteServer
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def test_a_command_works_while_every_session_is_held(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(limits={"max_sessions": 1})
    await publishers.start(server, "pump-1", demo_server("pump"))
    async with Client(streamable_http_client(f"{server.url}/pump-1/mcp"), mode="legacy") as agent:
        await agent.list_tools()
        assert len(server.gateway.sessions.sessions) == 1  # the agent holds the only session, and is not idle
        code, out, err = await run_cli("call", "pump-1", "add", "a=2", "b=3", "--url", server.url)
        assert code == 0, err
        assert '"result": 5' in out
        assert "resultType" not in out and "serverInfo" not in out  # the tool's result, not the era's keys
        code, out, err = await run_cli("tools", "pump-1", "--url", server.url)
        assert code == 0, err
        assert out.startswith("add ")
        assert len(server.gateway.sessions.sessions) == 1


async def test_a_tool_with_header_arguments_is_called_with_its_headers(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory()
    await publishers.start(server, "router", routed_server())
    code, out, err = await run_cli("call", "router", "route", "region=eu", "priority=3", "--url", server.url)
    assert code == 0, err
    assert "eu/3/" in out


@pytest.mark.parametrize("refusal", ["http-400", "method-not-found"])
async def test_a_session_era_server_is_spoken_to_in_its_era(refusal: Refusal) -> None:
    remote = RemoteServer(lambda: demo_server("adder"), session_era_only=refusal)
    await remote.start()
    try:
        async with GatewayClient("http://unused", "adder") as client:
            client.url = remote.url  # an SDK server serves /mcp, not /<slot>/mcp
            assert "add" in [tool["name"] for tool in await client.list_tools()]
            result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result["structuredContent"] == {"result": 5}
        assert not client.stateless
        assert remote.refused == ["tools/list"]  # refused once, then the session era
    finally:
        await remote.stop()
