"""The publishers at the edges of their links (docs/provider-api.md, "Reconnecting"): a gateway gone
silent behind a half-open TCP link, a peer that never answers the upgrade, a slot freed after the
gateway refused it on `/providers`, a refused credential, a result over the frame bound, the code
of the gateway's close, and a gateway URL that already names an endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator

import anyio
import pytest
from aiohttp import web
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from gateway.publish import MultiplexedPublisher, Publisher, PublishRefused
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_provider_websocket import stand_in_gateway
from tests.integration.test_publisher_hostile_gateway import running

pytestmark = pytest.mark.timeout(60)

TOKEN = "lab-" + secrets.token_urlsafe(24)


def demo_server(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def hello() -> str:
        return "hi"

    @server.tool()
    def big(n: int) -> str:
        return "x" * n

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    return server


class Relay:
    """A loopback TCP relay to a gateway; `freeze()` makes every link open at that moment go silent
    both ways with its sockets kept open (a gateway that lost power or its cable). Later links relay."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen: list[dict[str, bool]] = []
        self.links = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def freeze(self) -> None:
        for link in self.frozen:
            link["frozen"] = True

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if not link["frozen"]:
                    writer.write(data)
                    await writer.drain()
        if not link["frozen"]:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]
        link = {"frozen": False}
        self.frozen.append(link)
        self.links += 1
        await asyncio.gather(self._pipe(reader, up_writer, link), self._pipe(up_reader, writer, link))

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])


# -- 1. a gateway gone silent ---------------------------------------------------------------------


async def test_a_gateway_gone_silent_is_noticed_and_the_slot_taken_again(gateway_factory: GatewayFactory) -> None:
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.3})
    relay = Relay(port_of(gateway.url))
    relay_port = await relay.start()
    publisher = Publisher(
        demo_server("pump"), f"ws://127.0.0.1:{relay_port}", "quiet-1", silence_s=1.5, backoff_max_s=0.5
    )
    try:
        async with running(publisher):
            await wait_ready_slot(gateway, "quiet-1")
            relay.freeze()
            await wait_for(lambda: publisher.connections >= 2, 15, "a second link after the silence")
            assert publisher.last_close is not None and publisher.last_close[0] == 1006
            assert "silence_s" in publisher.last_close[1]
            # The gateway dropped the old link for its missed pings; the new one holds the slot.
            await wait_ready_slot(gateway, "quiet-1", timeout=10)
    finally:
        await relay.close()


# -- 2. a peer that takes TCP and never answers ---------------------------------------------------


@contextlib.asynccontextmanager
async def blackhole() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    """A TCP listener that accepts and never says a word."""
    accepted: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        with contextlib.suppress(OSError):
            await reader.read()  # until the dialler gives up

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_stop_ends_run_while_a_dial_hangs() -> None:
    async with blackhole() as (port, accepted):
        publisher = Publisher(demo_server("pump"), f"ws://127.0.0.1:{port}", "pump-1")
        task = asyncio.create_task(publisher.run())
        try:
            await wait_for(lambda: bool(accepted), 5, "the TCP accept")
            await publisher.stop()
            await asyncio.wait_for(task, 2)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_an_upgrade_that_never_comes_times_out_and_is_warned_of_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.publish")
    async with blackhole() as (port, accepted):
        publisher = Publisher(
            demo_server("pump"), f"ws://127.0.0.1:{port}", "pump-1", connect_timeout_s=0.3, backoff_max_s=0.05
        )
        async with running(publisher):
            await wait_for(lambda: len(accepted) >= 3, 10, "three dials")
        assert publisher.connections == 0
        assert publisher.last_close is not None and "connect_timeout_s" in publisher.last_close[1]
        warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.publish"]
        assert len(warnings) == 1, warnings


# -- 3. a slot freed after /providers refused it --------------------------------------------------


async def test_a_multiplexed_slot_refused_as_held_is_claimed_once_freed(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    gateway = await gateway_factory()
    holder = await publishers.start(gateway, "held-1", demo_server("holder"))
    mux = MultiplexedPublisher(
        {"free-1": demo_server("free"), "held-1": demo_server("newcomer")}, gateway.url, backoff_max_s=0.5
    )
    async with running(mux):
        await wait_ready_slot(gateway, "free-1")
        await wait_for(lambda: [e["slot"] for e in mux.errors] == ["held-1"], 5, "the refusal of held-1")
        await holder.stop()
        await wait_for(lambda: mux.errors == [], 10, "held-1 claimed again")
        await wait_ready_slot(gateway, "held-1")
        async with Client(f"{gateway.url}/held-1/mcp", mode="legacy") as client:
            assert (await client.call_tool("hello", {})).content[0].text == "hi"  # type: ignore[union-attr]
        assert mux.connections == 1  # the same link: the slot was claimed on it


# -- 4. a refused credential ---------------------------------------------------------------------


@pytest.fixture
def lab_auth(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    return {
        "mode": "identities",
        "identities": [{"name": "lab", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "slots": ["lab-*"]}],
    }


async def test_a_wrong_secret_is_warned_of_once_with_the_gateways_description(
    gateway_factory: GatewayFactory, lab_auth: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.publish")
    gateway = await gateway_factory(providers={"auth": lab_auth})
    publisher = Publisher(
        demo_server("lab"), gateway.url, "lab-1", token=TOKEN + "x", backoff_initial_s=0.02, backoff_max_s=0.3
    )
    async with running(publisher):
        await wait_for(lambda: publisher.backoff.failures >= 3, 10, "three refused dials")
    assert publisher.connections == 0
    assert publisher.last_close is not None
    code, reason = publisher.last_close
    assert code is None and reason.startswith("HTTP 401 invalid_provider_token: "), reason
    warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.publish"]
    assert len(warnings) == 1, warnings
    assert "invalid_provider_token" in warnings[0] and "is not known to this gateway" in warnings[0]
    # A refusal puts the ceiling at backoff_max_s at once (0.02 s doubled four times is past 0.3 s).
    assert publisher.backoff.failures >= 4


async def test_without_reconnect_a_refused_publisher_raises(
    gateway_factory: GatewayFactory, publishers: Publishers, lab_auth: dict[str, object]
) -> None:
    gateway = await gateway_factory(providers={"auth": lab_auth})
    wrong = Publisher(demo_server("lab"), gateway.url, "lab-1", token="nope-" + TOKEN, reconnect=False)
    with pytest.raises(PublishRefused, match="HTTP 401"):
        await asyncio.wait_for(wrong.run(), 10)
    await publishers.start(gateway, "lab-2", demo_server("holder"), token=TOKEN)
    second = Publisher(demo_server("lab"), gateway.url, "lab-2", token=TOKEN, reconnect=False)
    with pytest.raises(PublishRefused, match="already held") as refused:
        await asyncio.wait_for(second.run(), 10)
    assert refused.value.last_close[0] == 1008


# -- 5 and 6. a result over the frame bound -------------------------------------------------------


async def test_a_result_over_the_frame_bound_fails_its_call_alone(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    publisher = await publishers.start(gateway, "bulky", demo_server("bulky"))
    url = f"{gateway.url}/bulky/mcp"
    async with Client(url, mode="legacy") as slow_client, Client(url, mode="legacy") as big_client:
        slow = asyncio.create_task(slow_client.call_tool("slow", {"seconds": 1.0}))
        await asyncio.sleep(0.3)
        with pytest.raises(MCPError, match="Response too large") as refused:
            await big_client.call_tool("big", {"n": 1_200_000})
        assert refused.value.code == -32603 and "1048576" in str(refused.value)
        done = await asyncio.wait_for(slow, 10)
        assert not done.is_error and done.content[0].text == "slept 1.0"  # type: ignore[union-attr]
        small = await big_client.call_tool("big", {"n": 10})
        assert small.content[0].text == "x" * 10  # type: ignore[union-attr]
    assert publisher.connections == 1


async def test_the_gateways_1009_close_is_recorded_with_its_code() -> None:
    """A close frame's own code and reason are what last_close says, not the 1006 aiohttp may report
    for the socket: a stand-in gateway closes 1009 as the real one does on a frame over its bound
    (a publisher keeps to the announced bound, so the real gateway never has to)."""
    reason = "Frame over 65536 bytes; raise limits.max_frame_bytes or send smaller messages"

    async def provider_endpoint(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()  # the first frame the publisher sends
        await ws.close(code=1009, message=reason.encode())
        return ws

    async with stand_in_gateway(provider_endpoint) as url:
        publisher = Publisher(demo_server("loose"), url, "loose", reconnect=False)
        task = asyncio.create_task(publisher.run())
        try:
            await wait_for(lambda: publisher.last_close is not None, 10, "the close")
        finally:
            await publisher.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)
    assert publisher.last_close == (1009, reason), publisher.last_close


# -- bad options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["ws://127.0.0.1:3000/provider/pump-1", "ws://127.0.0.1:3000/providers", "http://h:3000/provider/"]
)
def test_a_gateway_url_naming_an_endpoint_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="names the gateway, not a provider endpoint"):
        Publisher(demo_server("pump"), url, "pump-1")


def test_a_path_prefix_is_kept() -> None:
    publisher = Publisher(demo_server("pump"), "https://proxy.lan/gw/", "pump 1")
    assert publisher.url() == "wss://proxy.lan/gw/provider/pump%201"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("silence_s", 0),
        ("silence_s", -1.0),
        ("silence_s", True),
        ("connect_timeout_s", float("inf")),
        ("max_frame_bytes", 100),
        ("max_frame_bytes", 2.5),
    ],
)
def test_bad_bounds_are_named(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        Publisher(demo_server("pump"), "ws://127.0.0.1:3000", "pump-1", **{option: value})  # type: ignore[arg-type]


# -- a tool-list change on the default 2026-07-28 link ---------------------------------------------


async def test_notify_tools_changed_reaches_the_gateway_on_a_2026_07_28_link(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    """What provider-api.md tells a server to call when its tools change."""
    server = MCPServer("growing")

    @server.tool()
    async def grow(ctx: Context) -> str:
        def added() -> str:
            return "new"

        server.add_tool(added, name="added")
        await ctx.notify_tools_changed()
        return "grown"

    await publishers.start(gateway, "growing", server)
    async with Client(f"{gateway.url}/growing/mcp", mode="legacy") as client:
        await client.call_tool("grow", {})

        async def names() -> set[str]:
            return {tool.name for tool in (await client.list_tools()).tools}

        deadline = asyncio.get_running_loop().time() + 10
        while "added" not in await names():
            assert asyncio.get_running_loop().time() < deadline, "the new tool never showed"
            await asyncio.sleep(0.1)
