"""A slot with no provider says what the gateway knows of it, and which slots the caller could use
instead, keeping mcp-broker's text at the start (docs/protocol.md, "Requests and ids")."""

from __future__ import annotations

import hashlib
import secrets
from unittest.mock import ANY

import aiohttp
import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.raw_mcp import MCP_HEADERS
from tests.support.servers import demo_server

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "get_status", "arguments": {}, "_meta": META},
}


async def test_a_mistyped_slot_names_the_connected_ones(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()
    await publishers.start(gateway, "pump-1", demo_server())
    await publishers.start(gateway, "pump-2", demo_server())
    async with Client(f"{gateway.url}/pmup-1/mcp") as client:
        with pytest.raises(MCPError) as failure:
            await client.list_tools()
    error = failure.value.error
    assert error.message == (
        'Provider "pmup-1" not connected: no provider has connected to this slot; connected slots: pump-1, pump-2'
    )
    assert error.data == {
        "slot": "pmup-1",
        "reason": "not_connected",
        "connectedSlots": ["pump-1", "pump-2"],
        "traceId": ANY,  # the request's trace (docs/telemetry.md)
    }


async def test_a_slot_whose_provider_left_says_when_and_why(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()
    publisher = await publishers.start(gateway, "pump-1", demo_server())
    await publisher.stop()
    await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].session is None, what="the provider to leave")
    async with Client(f"{gateway.url}/pump-1/mcp") as client:
        with pytest.raises(MCPError) as failure:
            await client.call_tool("get_status", {})
    message = failure.value.error.message
    assert message.startswith('Provider "pump-1" not connected: its provider left ')
    assert "s ago (" in message
    assert message.endswith("; no slot you may call has a provider now")


async def test_a_declared_slot_says_it_is_expected(gateway_factory: GatewayFactory) -> None:
    gateway = await gateway_factory(slots={"declared": {"tank-1": {}}})
    async with Client(f"{gateway.url}/tank-1/mcp") as client:
        with pytest.raises(MCPError) as failure:
            await client.list_tools()
    assert failure.value.error.message == (
        'Provider "tank-1" not connected: the slot is declared, but no provider has connected to it yet; '
        "no slot you may call has a provider now"
    )


async def test_only_slots_the_caller_may_call_are_named(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    token = secrets.token_urlsafe(32)
    auth = {
        "tokens": [{"name": "scada", "scopes": ["pump-1"], "sha256": hashlib.sha256(token.encode()).hexdigest()}],
        "required_scopes": {"pump-1": ["pump-1"], "pump-2": ["pump-2"], "pump-3": ["pump-1"]},
    }
    gateway = await gateway_factory(auth=auth)
    await publishers.start(gateway, "pump-1", demo_server())
    await publishers.start(gateway, "pump-2", demo_server())
    headers = {
        **MCP_HEADERS,
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "get_status",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{gateway.url}/pump-3/mcp", json=CALL, headers=headers) as answer,
    ):
        body = await answer.json()
    assert body["error"]["message"].endswith("; connected slots: pump-1")
    assert body["error"]["data"]["connectedSlots"] == ["pump-1"]
