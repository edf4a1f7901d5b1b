"""Live fuzzing of the provider WebSockets (/provider/<slot> and /providers) over real sockets.

Each example is one board: it connects to a dedicated or the multiplexed path (odd slot names and
percent-encodings included), perhaps behaves well first (answers initialize and tools/list, so the
noise reaches a ready session), then sends frames: text or binary, JSON-RPC and envelopes, register
frames, malformed and mutated bytes, messages just under and just over the frame cap. A ping at the
end tells when the gateway has read everything.

What must hold: the upgrade is refused only with the documented HTTP answers (400 for a path that
names no slot, 401/403 for credentials); after it, the socket is served or closed with 1008 (policy:
a refused name, a framing mismatch, a board that cannot initialize) or 1009 (too big), never with
anything else; nothing escapes a handler or a task of the gateway. After the run the gateway is
healthy: the slot published before the noise still answers a call, and a new provider can publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from gateway.publish import Publisher
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.live import LiveGateway
from tests.support.servers import demo_server

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


FRAME_CAP = 16_384
CONFIG: dict[str, Any] = {
    "limits": {"max_frame_bytes": FRAME_CAP, "max_slots": 4096},
    "providers": {"initialize_timeout_ms": 2000, "takeover_probe_ms": 300},
    "slots": {"declared": {"pump-1": {"request_timeout_ms": 300}}},
}
ALLOWED_CLOSE_CODES = (1000, 1008, 1009)
UNIQUE = "{unique}"
"""Stands for a slot name no other example used, so boards do not meet each other's slots."""
TOOLS = [{"name": "valve", "inputSchema": {"type": "object"}}]

TEXT, BINARY = aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY


def near_cap(size: int) -> bytes:
    """A well-formed JSON-RPC notification of exactly `size` bytes."""
    head, tail = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"', b'"}}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


board_envelopes = st.one_of(
    fz.envelopes,
    st.fixed_dictionaries(
        {"provider": st.just(UNIQUE), "payload": st.one_of(fz.jsonrpc_messages, fz.register_frames, fz.json_values)}
    ),
).map(fz.dumps)
frames = st.tuples(
    st.sampled_from((TEXT, TEXT, BINARY)),
    st.one_of(
        fz.frames,
        board_envelopes,
        fz.register_frames.map(fz.dumps),
        st.integers(min_value=FRAME_CAP - 3, max_value=FRAME_CAP + 3).map(near_cap),
        st.integers(min_value=FRAME_CAP - 1, max_value=FRAME_CAP + 1).map(lambda size: b"\xff" * size),
    ),
)
paths = st.one_of(
    st.just("/providers"),
    st.just("/provider/" + UNIQUE),
    st.just("/provider/pump-1"),  # held by a live provider: refused after the upgrade (1008)
    fz.path_segments.map(lambda segment: "/provider/" + segment),
    st.sampled_from(("/provider", "/provider/", "/provider/a/b", "/providers/x")),
)


@dataclass
class BoardCase:
    path: str
    handshake: bool
    frames: list[tuple[aiohttp.WSMsgType, bytes]]
    token: bytes | None


cases = st.builds(
    BoardCase,
    path=paths,
    handshake=st.booleans(),
    frames=st.lists(frames, min_size=1, max_size=5),
    # The client library refuses control characters in headers; any other byte goes.
    token=st.one_of(st.none(), fz.header_bytes.filter(lambda raw: all(0x20 <= byte != 0x7F for byte in raw))),
)


async def play_board(ws: aiohttp.ClientWebSocketResponse, slot: str | None, until: float) -> None:
    """Answer initialize and tools/list like a good board (enveloped for `slot` on /providers)."""
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        msg = await ws.receive(timeout=until - loop.time())
        if msg.type not in (TEXT, BINARY):
            return
        value = orjson.loads(msg.data)
        message = value.get("payload") if slot is not None else value
        if not isinstance(message, dict) or "id" not in message:
            continue
        method = message.get("method")
        reply: Any = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "f"},
            }
        elif method == "tools/list":
            reply["result"] = {"tools": TOOLS}
        elif method == "server/discover":
            reply["error"] = {"code": -32601, "message": "Method not found"}  # a board of the session era
        else:
            continue
        if slot is not None:
            reply = {"provider": slot, "payload": reply}
        await ws.send_bytes(orjson.dumps(reply))
        if method == "tools/list":
            return


async def run_board(live: LiveGateway, case: BoardCase, unique: str) -> None:
    url = "ws" + live.url.removeprefix("http") + case.path.replace(UNIQUE, unique)
    headers = {"X-Provider-Token": case.token.decode("latin-1")} if case.token else {}
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(url, headers=headers, autoping=False, autoclose=True, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status in (400, 401, 403, 404), f"upgrade refused with {exc.status} for {case.path!r}"
            return
        try:
            if case.handshake:
                until = asyncio.get_running_loop().time() + 2.0
                if case.path == "/providers":
                    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
                    await ws.send_bytes(orjson.dumps({"provider": unique, "payload": register}))
                    await play_board(ws, unique, until)
                elif UNIQUE in case.path:
                    await play_board(ws, None, until)
            for opcode, data in case.frames:
                if ws.closed:
                    break
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_frame(data.replace(UNIQUE.encode(), unique.encode()), opcode)
            # The gateway answers a ping after it has read every frame before it (or has closed).
            with contextlib.suppress(ConnectionError, RuntimeError):
                if not ws.closed:
                    await ws.ping()
            while not ws.closed:
                msg = await ws.receive(timeout=5.0)
                if msg.type in (aiohttp.WSMsgType.PONG, aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
                if msg.type is aiohttp.WSMsgType.ERROR:
                    raise AssertionError(f"WebSocket error on {case.path!r}: {ws.exception()!r}")
        finally:
            closed_by_gateway = ws.close_code
            await ws.close()
        assert closed_by_gateway in (None, *ALLOWED_CLOSE_CODES), f"closed with {closed_by_gateway} on {case.path!r}"


async def gateway_still_serves(live: LiveGateway) -> None:
    """The slot published before the noise answers a call; a new provider can publish and be called."""
    await live.wait_ready("pump-1")
    publisher = Publisher(demo_server("after"), live.url, "after-fuzz")
    task = asyncio.get_running_loop().create_task(publisher.run())
    try:
        await live.wait_ready("after-fuzz")
        for slot in ("pump-1", "after-fuzz"):
            async with Client(f"{live.url}/{slot}/mcp", mode="2026-07-28") as client:
                result = await client.call_tool("add", {"a": 20, "b": 22})
                assert not result.is_error
    finally:
        await publisher.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 5)


@pytest.fixture(scope="module")
def live() -> Iterator[LiveGateway]:
    with LiveGateway(CONFIG) as gateway:
        yield gateway


def test_no_frame_breaks_the_provider_websockets(live: LiveGateway) -> None:
    counter = itertools.count()

    @fuzz_settings(200, deadline=None)
    @given(case=cases)
    def fuzz(case: BoardCase) -> None:
        tally("live.websocket (provider boards)")
        tally("live.websocket frames", len(case.frames))
        live.run(run_board(live, case, f"fz-{next(counter)}"))
        assert not live.all_crashes(), live.all_crashes()[0]

    fuzz()
    live.run(gateway_still_serves(live), timeout=60)
    assert not live.all_crashes(), live.all_crashes()[0]
