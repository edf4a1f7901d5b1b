"""A remote 2026-07-28 upstream's `subscriptions/listen` is reopened make-before-break when clients'
subscriptions change: a steady subscriber hears every update while another client churns its own
subscriptions (docs/protocol.md, the gateway's listen request).

The upstream is a real SDK server (tests/support/remote_server.py) that offers resource subscriptions
and announces updates only on listen streams, with no replay; the clients are SDK clients.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_remote_upstreams import SLOT, entry, slot_url, start_gateway
from tests.support.remote_server import remote_server

STEADY = "data://counter"
BUMPS = 30


def updating_server() -> MCPServer:
    server = MCPServer("updating")

    @server.resource(STEADY, mime_type="text/plain")
    def counter() -> str:
        """A resource that `bump` changes."""
        return "counter"

    @server.resource("data://churn/{index}", mime_type="text/plain")
    def churn(index: str) -> str:
        """Resources another client subscribes to and unsubscribes from."""
        return index

    @server.tool()
    async def bump(uri: str, ctx: Context) -> str:
        """Announce an update of `uri` to the listen streams that asked for it."""
        await ctx.notify_resource_updated(uri)
        return "bumped"

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        return types.EmptyResult()

    # Handlers for resources/subscribe make the server declare resources.subscribe, which is what the
    # gateway's listen asks resource updates of.
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    return server


@pytest.mark.timeout(90)
async def test_a_steady_subscriber_hears_every_update_while_another_client_churns(
    gateway_factory: GatewayFactory,
) -> None:
    async with remote_server(updating_server, "session") as remote:
        server = await start_gateway(gateway_factory, entry(remote.url))
        await wait_ready_slot(server, SLOT)
        heard: list[str] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                heard.append(str(message.params.uri))

        provider = server.gateway.registry.slots[SLOT].live
        assert provider is not None and provider.modern
        stop = asyncio.Event()

        async def churner(client: Client) -> int:
            changes = 0
            while not stop.is_set():
                uri = f"data://churn/{changes % 5}"
                await client.subscribe_resource(uri)
                await asyncio.sleep(0.02)
                await client.unsubscribe_resource(uri)
                await asyncio.sleep(0.02)
                changes += 2
            return changes

        async with (
            Client(slot_url(server), mode="legacy", message_handler=on_message) as steady,
            Client(slot_url(server), mode="legacy") as churning,
            Client(slot_url(server), mode="legacy") as bumper,
        ):
            await steady.subscribe_resource(STEADY)
            await wait_for(
                lambda: (
                    provider.listen.state == "open" and STEADY in provider.listen.asked.get("resourceSubscriptions", [])
                ),
                what="the listen asking for the steady subscriber's resource",
            )
            opens_before = provider.listen.opens
            churning_task = asyncio.create_task(churner(churning))
            for _ in range(BUMPS):
                await bumper.call_tool("bump", {"uri": STEADY})
                await asyncio.sleep(0.05)
            stop.set()
            changes = await churning_task
            with contextlib.suppress(AssertionError):  # the count is asserted below, with its context
                await wait_for(lambda: len(heard) >= BUMPS, timeout=5, what="every update")
            reopenings = provider.listen.opens - opens_before

    # An update heard on both listens during a handover may arrive twice; none may be lost.
    assert len(heard) >= BUMPS, (len(heard), changes, reopenings)
    assert set(heard) == {STEADY}
    assert reopenings > 0, "the churn reopened the listen"
