"""The bounds a gateway announces in its answer to the provider upgrade (docs/protocol.md, "Bounds
announced on the upgrade"), as the publishers use them (docs/provider-api.md): a quiet link to a
gateway that pings less often than `silence_s` is kept, results up to a raised limits.max_frame_bytes
go through a default publisher, an explicit max_frame_bytes lowers the bound (never raises it), a
gateway that announces nothing (or nonsense) leaves the publisher's own bounds, and an upper-case URL
scheme is a scheme."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from mcp import Client, MCPError
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.publish import Publisher
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_publisher_hostile_gateway import running

pytestmark = pytest.mark.timeout(60)

RAISED_FRAME_BYTES = 4 * 1024 * 1024


def bulky_server(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def big(n: int) -> str:
        return "x" * n

    return server


async def big_call(gateway: GatewayServer, slot: str, n: int) -> str:
    async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
        result = await client.call_tool("big", {"n": n})
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def refused_call(gateway: GatewayServer, slot: str, n: int) -> str:
    """The error message of a `big` call the provider answers with an error."""
    async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("big", {"n": n})
    assert refused.value.code == -32603
    return str(refused.value)


async def upgrade_headers(url: str) -> dict[str, str]:
    """The headers of the gateway's 101 answer to a plain WebSocket client's upgrade."""
    seen: dict[str, str] = {}

    async def keep(response: aiohttp.ClientResponse) -> None:
        seen.update(response.headers)

    async with aiohttp.ClientSession(raise_for_status=keep) as http, http.ws_connect(url) as ws:
        await ws.close()
    return seen


# -- the gateway announces ------------------------------------------------------------------------


async def test_both_upgrade_paths_announce_the_gateways_bounds(gateway_factory: GatewayFactory) -> None:
    gateway = await gateway_factory(
        providers={"heartbeat_interval_s": 2.5}, limits={"max_frame_bytes": RAISED_FRAME_BYTES}
    )
    base = gateway.url.replace("http://", "ws://")
    for path in ("/provider/announced-1", "/providers"):
        headers = await upgrade_headers(base + path)
        assert headers.get("X-Heartbeat-Interval-S") == "2.5", (path, headers)
        assert headers.get("X-Max-Frame-Bytes") == str(RAISED_FRAME_BYTES), (path, headers)


async def test_a_whole_number_interval_is_announced_without_a_fraction(gateway_factory: GatewayFactory) -> None:
    gateway = await gateway_factory()
    headers = await upgrade_headers(gateway.url.replace("http://", "ws://") + "/provider/announced-2")
    assert headers.get("X-Heartbeat-Interval-S") == "30" and headers.get("X-Max-Frame-Bytes") == "1048576"


# -- silence ---------------------------------------------------------------------------------------


async def test_a_quiet_link_to_a_gateway_pinging_less_often_than_silence_s_is_kept(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    """Heartbeat 3 s, silence_s 1 s: 3 x 3 s applies, so the quiet link between pings stays up."""
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 3})
    publisher = await publishers.start(gateway, "quiet-1", bulky_server("quiet"), silence_s=1.0)
    await asyncio.sleep(7.0)  # two of the gateway's pings, each after 3 s of nothing
    assert publisher.connections == 1 and publisher.connected.is_set(), publisher.last_close
    assert await big_call(gateway, "quiet-1", 5) == "xxxxx"
    assert publisher.announced_heartbeat_s == 3.0
    assert publisher.silence_bound() == (9.0, "3 x the gateway's announced heartbeat of 3s")


async def test_a_longer_silence_s_than_three_pings_stands(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.5})
    publisher = await publishers.start(gateway, "patient-1", bulky_server("patient"), silence_s=20.0)
    assert publisher.silence_bound() == (20.0, "silence_s")


# -- frame bound ------------------------------------------------------------------------------------


async def test_a_default_publisher_sends_results_up_to_a_raised_gateway_bound(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory(limits={"max_frame_bytes": RAISED_FRAME_BYTES})
    publisher = await publishers.start(gateway, "bulky-1", bulky_server("bulky"))
    # The result carries the text twice (content and structuredContent): about 3 MB.
    assert len(await big_call(gateway, "bulky-1", 1_500_000)) == 1_500_000
    assert publisher.frame_bound() == (RAISED_FRAME_BYTES, "limits.max_frame_bytes, announced by the gateway")
    message = await refused_call(gateway, "bulky-1", RAISED_FRAME_BYTES + 10)
    assert "Response too large" in message, message
    assert f"{RAISED_FRAME_BYTES} bytes (limits.max_frame_bytes, announced by the gateway)" in message
    assert publisher.connections == 1


async def test_a_default_multiplexed_publisher_uses_the_raised_bound_less_its_envelope(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory(limits={"max_frame_bytes": RAISED_FRAME_BYTES})
    publisher = await publishers.start_multiplexed(gateway, {"bulky-m": bulky_server("bulky")})
    assert len(await big_call(gateway, "bulky-m", 1_500_000)) == 1_500_000
    message = await refused_call(gateway, "bulky-m", RAISED_FRAME_BYTES)
    assert "announced by the gateway, less the envelope" in message, message
    assert publisher.connections == 1


async def test_a_gateway_with_the_default_bound_still_fails_an_oversized_call_alone(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()
    publisher = await publishers.start(gateway, "bulky-2", bulky_server("bulky"))
    message = await refused_call(gateway, "bulky-2", 1_200_000)
    assert "Response too large" in message, message
    assert "1048576 bytes (limits.max_frame_bytes, announced by the gateway)" in message
    assert await big_call(gateway, "bulky-2", 10) == "x" * 10
    assert publisher.connections == 1


async def test_an_explicit_max_frame_bytes_under_the_announced_bound_applies(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory(limits={"max_frame_bytes": RAISED_FRAME_BYTES})
    publisher = await publishers.start(gateway, "tight-1", bulky_server("tight"), max_frame_bytes=65536)
    message = await refused_call(gateway, "tight-1", 100_000)
    assert "Response too large" in message, message
    assert "65536 bytes (the publisher's max_frame_bytes)" in message
    assert publisher.connections == 1


async def test_an_explicit_max_frame_bytes_over_the_announced_bound_does_not_raise_it(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()  # announces 1 MiB
    publisher = await publishers.start(gateway, "loose-1", bulky_server("loose"), max_frame_bytes=4 * 1024 * 1024)
    message = await refused_call(gateway, "loose-1", 1_400_000)
    assert "1048576 bytes (limits.max_frame_bytes, announced by the gateway)" in message, message
    assert publisher.connections == 1 and publisher.last_close is None  # the link was never closed 1009


# -- a gateway that announces nothing, or nonsense ---------------------------------------------------


@contextlib.asynccontextmanager
async def bare_gateway(headers: dict[str, str]) -> AsyncIterator[str]:
    """A WebSocket peer on /provider/<slot> that upgrades with `headers` and then only answers pings
    (a board-side broker or an older gateway): its ws:// base URL."""

    async def provider(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        ws.headers.update(headers)
        await ws.prepare(request)
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_get("/provider/{slot}", provider)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_without_announcements_the_publishers_own_bounds_apply() -> None:
    async with bare_gateway({}) as url:
        publisher = Publisher(bulky_server("plain"), url, "plain-1", silence_s=30.0)
        async with running(publisher):
            await asyncio.wait_for(publisher.connected.wait(), 10)
            assert publisher.announced_heartbeat_s is None and publisher.announced_max_frame_bytes is None
            assert publisher.silence_bound() == (30.0, "silence_s")
            assert publisher.frame_bound() == (
                1_048_576,
                "the publisher's 1 MiB default; the gateway announced no bound",
            )


@pytest.mark.parametrize(
    ("interval", "frame_bytes"),
    [("nan", "12"), ("inf", "1073741825"), ("-3", "4MiB"), ("0", "-2048"), ("1" * 40, "1e6")],
)
async def test_announcements_that_are_not_bounds_are_ignored_and_warned_of(
    interval: str, frame_bytes: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.publish")
    headers = {"X-Heartbeat-Interval-S": interval, "X-Max-Frame-Bytes": frame_bytes}
    async with bare_gateway(headers) as url:
        publisher = Publisher(bulky_server("odd"), url, "odd-1", silence_s=30.0)
        async with running(publisher):
            await asyncio.wait_for(publisher.connected.wait(), 10)
            assert publisher.silence_bound() == (30.0, "silence_s")
            assert publisher.frame_bound()[0] == 1_048_576
    warned = [record.getMessage() for record in caplog.records if "ignored the bound" in record.getMessage()]
    assert len(warned) == 2 and "X-Heartbeat-Interval-S" in warned[0] and "X-Max-Frame-Bytes" in warned[1], warned


# -- URL scheme ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("HTTP://127.0.0.1:3000", "ws://127.0.0.1:3000"),
        ("Https://gw.lan/x", "wss://gw.lan/x"),
        ("Ws://127.0.0.1:3000", "ws://127.0.0.1:3000"),
        ("WSS://gw.lan", "wss://gw.lan"),
    ],
)
def test_an_upper_case_scheme_is_a_scheme(given: str, expected: str) -> None:
    assert Publisher(bulky_server("s"), given, "case-1").base_url == expected


async def test_a_publisher_given_an_upper_case_scheme_connects(gateway: GatewayServer) -> None:
    publisher = Publisher(bulky_server("upper"), "Ws://" + gateway.url.removeprefix("http://"), "upper-1")
    async with running(publisher):
        await wait_for(lambda: publisher.connections == 1, 10, "the link")
        assert await big_call(gateway, "upper-1", 3) == "xxx"
