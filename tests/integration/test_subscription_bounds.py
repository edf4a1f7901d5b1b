"""What one client can make the gateway hold through subscriptions: listen streams per caller, and the
resource URIs it subscribes to (which a 2026-07-28 provider is asked for in one listen request)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_http_stateless_era import open_listen, post, request, url_of
from tests.integration.test_metrics import scrape
from tests.support.ordinary_provider import make_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

LISTEN_TOOLS = {"toolsListChanged": True}


async def refused_listen(http: aiohttp.ClientSession, server: GatewayServer, request_id: Any) -> dict[str, Any]:
    body = request("subscriptions/listen", {"notifications": LISTEN_TOOLS}, request_id=request_id)
    status, _, answer = await post(http, url_of(server, "_all"), body)
    assert status == 200, answer
    assert answer["id"] == request_id
    error: dict[str, Any] = answer["error"]
    return error


async def test_one_caller_cannot_hold_every_listen_stream(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # max_subscriptions_per_principal unset: a quarter of max_subscriptions, here 1.
    server = await gateway_factory(limits={"max_subscriptions": 4})
    first, _, _ = await open_listen(http, url_of(server, "_all"), LISTEN_TOOLS, "mine-1")
    error = await refused_listen(http, server, "mine-2")
    assert error["code"] == -32000
    assert error["message"].startswith(
        'Too many subscriptions/listen streams for caller "anonymous" at 127.0.0.1 (limit 1, '
        "limits.max_subscriptions_per_principal)"
    )
    assert error["data"] == {
        "reason": "subscription_limit",
        "limit": 1,
        "setting": "limits.max_subscriptions_per_principal",
        "caller": 'caller "anonymous" at 127.0.0.1',
    }
    # Another program (another address) still gets its stream.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as elsewhere:
        other, _, ack = await open_listen(elsewhere, url_of(server, "_all"), LISTEN_TOOLS, "theirs-1")
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        other.close()
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_subscriptions_per_principal") == 1
    assert metrics.value("mcpgw_limit", limit="max_subscriptions_per_principal") == 1
    # The caller's stream ends: it may open one again.
    first.close()
    await wait_for(lambda: server.gateway.open_subscriptions == 0, what="the gateway to drop the closed streams")
    again, _, _ = await open_listen(http, url_of(server, "_all"), LISTEN_TOOLS, "mine-3")
    again.close()


async def test_the_gateway_wide_listen_bound_is_named(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_subscriptions": 1, "max_subscriptions_per_principal": 4})
    first, _, _ = await open_listen(http, url_of(server, "_all"), LISTEN_TOOLS, "one")
    error = await refused_listen(http, server, "two")
    assert error["code"] == -32000
    assert "limits.max_subscriptions)" in error["message"]
    assert error["data"] == {"reason": "subscription_limit", "limit": 1, "setting": "limits.max_subscriptions"}
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_subscriptions") == 1
    first.close()


# -- resource subscriptions ------------------------------------------------------------------------

SLOT = "ordinary"


async def modern_provider(gateway_factory: GatewayFactory, publishers: Publishers, **limits: Any) -> GatewayServer:
    server = await gateway_factory(limits=limits)
    await publishers.start(server, SLOT, make_server(), aggregate=True)
    return server


def subscription_refusal(refused: pytest.ExceptionInfo[MCPError], setting: str, limit: int) -> None:
    assert refused.value.error.code == -32000
    assert setting in refused.value.error.message
    data = dict(refused.value.error.data or {})
    data.pop("traceId", None)  # the gateway's trace of the request, when it has one
    assert data == {"slot": SLOT, "reason": "subscription_limit", "limit": limit, "setting": setting}


async def test_what_one_client_subscribes_never_takes_the_provider_link_down(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await modern_provider(gateway_factory, publishers, max_frame_bytes=4096)
    slot = server.gateway.registry.slots[SLOT]
    provider = slot.live
    assert provider is not None and provider.modern
    long_uris = [f"file:///data/{index}/" + "y" * 1500 for index in range(3)]
    async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as client:
        await client.subscribe_resource(long_uris[0])
        await wait_for(lambda: provider.listen.state == "open" and slot.upstream.subscribers != {}, what="the listen")
        # The next one would make the listen request (and the provider's echo of it) too large.
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource(long_uris[1])
        subscription_refusal(refused, "limits.max_frame_bytes", 4096)
        assert "half of limits.max_frame_bytes (2048 of 4096)" in refused.value.error.message
        assert list(slot.upstream.subscribers) == [long_uris[0]]
        # The provider was never asked for it and stays connected for every client.
        await asyncio.sleep(0.3)
        assert slot.live is provider and provider.state == "ready" and slot.connects == 1
        assert provider.listen.state == "open" and provider.listen.asked["resourceSubscriptions"] == [long_uris[0]]
        async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as other:
            assert "seen" in {tool.name for tool in (await other.list_tools()).tools}
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_frame_bytes") == 1
    assert not metrics.get("mcpgw_provider_disconnects_total", slot=SLOT)


async def test_subscribed_uris_are_bounded_in_length_and_number(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await modern_provider(gateway_factory, publishers, max_subscribed_uris_per_slot=2)
    slot = server.gateway.registry.slots[SLOT]
    async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource("file:///" + "z" * 2048)
        subscription_refusal(refused, "limits.max_subscription_uri_bytes", 2048)
        assert refused.value.error.message.startswith("Resource URI of 2056 bytes")
        await client.subscribe_resource("file:///plant/tank")
        await client.subscribe_resource("file:///plant/valve")
        await client.subscribe_resource("file:///plant/tank")  # already subscribed: nothing more is held
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource("file:///plant/pump")
        subscription_refusal(refused, "limits.max_subscribed_uris_per_slot", 2)
        assert sorted(slot.upstream.subscribers) == ["file:///plant/tank", "file:///plant/valve"]
        # Another client may subscribe to what is subscribed already, and to more once there is room.
        async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy") as other:
            await other.subscribe_resource("file:///plant/valve")
        await client.unsubscribe_resource("file:///plant/valve")
        await client.subscribe_resource("file:///plant/pump")
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_subscription_uri_bytes") == 1
    assert metrics.get("mcpgw_limit_hits_total", limit="max_subscribed_uris_per_slot") == 1


async def test_a_stateless_listen_over_a_subscription_bound_is_refused_whole(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await modern_provider(gateway_factory, publishers, max_subscribed_uris_per_slot=1)
    wanted = {"resourceSubscriptions": ["file:///plant/tank", "file:///plant/valve"]}
    body = request("subscriptions/listen", {"notifications": wanted}, request_id="sub-1")
    status, _, answer = await post(http, url_of(server, SLOT), body)
    assert status == 200
    assert answer["error"]["code"] == -32000
    assert answer["error"]["data"]["setting"] == "limits.max_subscribed_uris_per_slot"
    assert server.gateway.registry.slots[SLOT].upstream.subscribers == {}
    assert server.gateway.open_subscriptions == 0


async def test_a_listen_acknowledges_only_the_resources_the_policy_lets_it_subscribe(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    # The caller may list and call tools on the slot, not read its resources.
    viewer = {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]}
    policy = {
        "roles": {"viewer": viewer},
        "assign": [{"principal": "anonymous", "role": "viewer", "resources": ["/**"]}],
    }
    server = await gateway_factory(policy=policy)
    await publishers.start(server, SLOT, make_server(), aggregate=True)
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["file:///plant/tank"]}
    response, _, ack = await open_listen(http, url_of(server, SLOT), wanted, "sub-1")
    try:
        assert ack["params"]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": []}
        assert server.gateway.registry.slots[SLOT].upstream.subscribers == {}
    finally:
        response.close()
