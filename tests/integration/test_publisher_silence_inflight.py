"""A link that ends while tool calls are still running on it (docs/provider-api.md, "Reconnecting"):
the gateway goes silent after starting a call that has not finished (a slow tool, or one whose answer
waits on a send buffer the gateway no longer drains). The link's end cancels the call, nothing more is
sent on the dead link, and the publisher dials again after its back-off, not after the tool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
import pytest
from aiohttp import web
from mcp.server.mcpserver import Context, MCPServer

from gateway.publish import MultiplexedPublisher, Publisher
from tests.conftest import wait_for
from tests.integration.test_publisher_hostile_gateway import Handler, fake_gateway, running

pytestmark = pytest.mark.timeout(60)

__all__ = ["fake_gateway"]  # the stand-in gateway fixture, used here by name

SILENCE_S = 0.5
BACKOFF_MAX_S = 0.2
CLOSE_WAIT_S = 1.0  # connect_timeout_s: also the bound on the wait for an answer to the publisher's close
REDIAL_WITHIN_S = SILENCE_S + CLOSE_WAIT_S + BACKOFF_MAX_S + 3.0  # the margin covers a loaded machine
TOOL_S = 30.0  # far past REDIAL_WITHIN_S: a redial that waits for the tool fails the test
BIG_BYTES = 32 << 20  # past any loopback socket's buffers, so the answer's send waits for a drain


def handshake(calls: list[str]) -> list[dict[str, Any]]:
    """A session-era opening, as the gateway sends it, and then a call of each tool in `calls`."""
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "stand-in gateway", "version": "1"},
    }
    return [
        {"jsonrpc": "2.0", "id": "gw-init", "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(
            {
                "jsonrpc": "2.0",
                "id": f"gw-call-{n}",
                "method": "tools/call",
                "params": {"name": call, "arguments": {}, "_meta": {"progressToken": f"gw-progress-{n}"}},
            }
            for n, call in enumerate(calls)
        ),
    ]


class Tools:
    """An MCPServer whose tools report when they start and how they end."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.ended: list[str] = []
        self.server = MCPServer("in-flight")

        @self.server.tool()
        async def hang(ctx: Context) -> str:
            self.started.set()
            try:
                await anyio.sleep(TOOL_S)
            except anyio.get_cancelled_exc_class():
                self.ended.append("cancelled")
                raise
            self.ended.append("finished")
            return "done"

        @self.server.tool()
        async def big(ctx: Context) -> str:
            self.started.set()
            return "x" * BIG_BYTES

        @self.server.tool()
        async def chatty(ctx: Context) -> str:
            self.started.set()
            try:
                for step in range(BIG_BYTES >> 20):  # progress past the socket buffers of a link not read
                    await ctx.report_progress(step, message="y" * (1 << 20))
                await anyio.sleep(TOOL_S)  # the rest of the tool's work
            except anyio.get_cancelled_exc_class():
                self.ended.append("cancelled")
                raise
            self.ended.append("finished")
            return "done"


class SilentGateway:
    """A gateway stand-in: on its first link it sends the opening and a call, then goes silent (sends
    nothing, no ping) and, with `reads=False`, stops reading too, so the publisher's sends back up.
    Every dial's time is kept; every frame read after the call is kept too."""

    def __init__(
        self, frames: list[dict[str, Any]], *, reads: bool = True, close_on: asyncio.Event | None = None
    ) -> None:
        self.frames = frames
        self.slot: str | None = None  # None: /provider/<slot>; else the envelope slot on /providers
        self.reads = reads
        self.close_on = close_on  # set: close 1001 once it is set, instead of going silent
        self.dials: list[float] = []
        self.after_call: list[Any] = []
        self.call_sent_at = 0.0
        self.release = asyncio.Event()

    def _wrap(self, frame: dict[str, Any]) -> bytes:
        return orjson.dumps(frame if self.slot is None else {"provider": self.slot, "payload": frame})

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        self.dials.append(time.monotonic())
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        await ws.receive()  # the register frame
        if len(self.dials) > 1:
            await self.release.wait()
            return ws
        for frame in self.frames:
            await ws.send_bytes(self._wrap(frame))
        self.call_sent_at = time.monotonic()
        if self.close_on is not None:
            await self.close_on.wait()
            await ws.close(code=1001, message=b"going away")
        if self.reads:
            async for msg in ws:
                payload = orjson.loads(msg.data)
                self.after_call.append(payload if self.slot is None else payload.get("payload"))
        await self.release.wait()
        return ws


ServeFn = Callable[[str, Handler], Awaitable[str]]


async def publish(
    fake: ServeFn, stand_in: SilentGateway, tools: Tools, multiplexed: bool
) -> Publisher | MultiplexedPublisher:
    options: dict[str, Any] = {
        "silence_s": SILENCE_S,
        "backoff_initial_s": BACKOFF_MAX_S / 2,
        "backoff_max_s": BACKOFF_MAX_S,
        "connect_timeout_s": CLOSE_WAIT_S,
        "max_frame_bytes": 64 << 20,
        "max_msg_size": 64 << 20,
    }
    if multiplexed:
        stand_in.slot = "slow-1"
        url = await fake("/providers", stand_in.handle)
        return MultiplexedPublisher({"slow-1": tools.server}, url, **options)
    url = await fake("/provider/{slot}", stand_in.handle)
    return Publisher(tools.server, url, "slow-1", **options)


@pytest.mark.parametrize("multiplexed", [False, True], ids=["provider", "providers"])
# chatty twice: two sends waiting on aiohttp's one flow-control waiter of the link.
@pytest.mark.parametrize("calls", [["hang"], ["big"], ["chatty"], ["chatty", "chatty"]], ids="+".join)
async def test_a_link_gone_silent_cancels_its_calls_and_the_publisher_dials_again_at_once(
    fake_gateway: ServeFn, multiplexed: bool, calls: list[str]
) -> None:
    tools = Tools()
    stand_in = SilentGateway(handshake(calls), reads=calls == ["hang"])
    publisher = await publish(fake_gateway, stand_in, tools, multiplexed)
    try:
        async with running(publisher):
            await asyncio.wait_for(tools.started.wait(), 10)
            await wait_for(lambda: len(stand_in.dials) >= 2, REDIAL_WITHIN_S + 2, "the second dial")
            waited = stand_in.dials[1] - stand_in.call_sent_at
            assert waited < REDIAL_WITHIN_S, waited
            assert publisher.last_close is not None and publisher.last_close[0] == 1006
            if "big" not in calls:
                await wait_for(lambda: len(tools.ended) == len(calls), 5, "the tools' end")
                assert tools.ended == ["cancelled"] * len(calls)
            # Nothing about the calls went out on the dead link: no error, no result.
            assert [f for f in stand_in.after_call if isinstance(f, dict) and "gw-call" in str(f.get("id"))] == []
    finally:
        stand_in.release.set()


@pytest.mark.parametrize("multiplexed", [False, True], ids=["provider", "providers"])
async def test_a_link_the_gateway_closes_cancels_its_calls_and_the_publisher_dials_again(
    fake_gateway: ServeFn, multiplexed: bool
) -> None:
    tools = Tools()
    stand_in = SilentGateway(handshake(["hang"]), close_on=tools.started)
    publisher = await publish(fake_gateway, stand_in, tools, multiplexed)
    try:
        async with running(publisher):
            await wait_for(lambda: len(stand_in.dials) >= 2, REDIAL_WITHIN_S, "the second dial")
            assert publisher.last_close == (1001, "going away")
            await wait_for(lambda: bool(tools.ended), 5, "the tool's end")
            assert tools.ended == ["cancelled"]
    finally:
        stand_in.release.set()
