"""Live fuzzing of the raw WebSocket way in for clients (`ws://HOST:PORT/<slot>`) over real sockets.

Each example is one client: it connects to a slot (the live pump-1, `_all`, `_broker`, a slot nobody
publishes, odd segments and percent-encodings), perhaps initializes first, then sends frames: JSON-RPC
requests and notifications of every method (tools/call with any arguments, cancellations and answers
naming ids nobody asked for), batches, malformed and mutated bytes, text and binary, frames just under
and just over the cap. A ping at the end tells when the gateway has read everything.

What must hold: the upgrade is refused only with the documented HTTP answers (400, 403, 404, 503);
after it, every text frame the gateway sends is one JSON object, and the socket is served or closed
with 1000, 1001, 1008 or 1009, never anything else; nothing escapes a handler or a task of the
gateway. After the run a new client initializes and calls pump-1 as before.
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

from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.live import LiveGateway

pytestmark = [
    # The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    # The live gateway thread draws its provider's reconnect jitter from `random` while Hypothesis draws.
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]

FRAME_CAP = 16_384
CONFIG: dict[str, Any] = {
    "limits": {"max_frame_bytes": FRAME_CAP, "max_slots": 4096},
    "slots": {"declared": {"pump-1": {"request_timeout_ms": 300}}},
}
ALLOWED_CLOSE_CODES = (1000, 1001, 1008, 1009)
TEXT, BINARY = aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "fz"}},
}
DEMO_TOOLS = ("add", "echo", "sleep", "fail")


def near_cap(size: int) -> bytes:
    """A well-formed tools/call of exactly `size` bytes."""
    head, tail = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"', b'"}}}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


tool_calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": fz.ids,
        "method": st.just("tools/call"),
        "params": st.fixed_dictionaries(
            {"name": st.one_of(st.sampled_from(DEMO_TOOLS), fz.strings)},
            optional={"arguments": fz.json_values, "_meta": fz.meta},
        ),
    }
).map(fz.dumps)
frames = st.tuples(
    st.sampled_from((TEXT, TEXT, TEXT, BINARY)),
    st.one_of(
        fz.frames,
        tool_calls,
        fz.jsonrpc_messages.map(fz.dumps),
        st.lists(fz.jsonrpc_messages, min_size=1, max_size=3).map(fz.dumps),  # batches
        st.integers(min_value=FRAME_CAP - 2, max_value=FRAME_CAP + 2).map(near_cap),
    ),
)
paths = st.one_of(
    st.sampled_from(("/pump-1", "/pump-1", "/_all", "/_broker", "/nobody-here", "/%70ump-1")),
    fz.path_segments.map(lambda segment: "/" + segment),
)


@dataclass
class ClientCase:
    path: str
    initialize: bool
    frames: list[tuple[aiohttp.WSMsgType, bytes]]


cases = st.builds(ClientCase, path=paths, initialize=st.booleans(), frames=st.lists(frames, min_size=1, max_size=6))


async def run_client(live: LiveGateway, case: ClientCase) -> None:
    url = "ws" + live.url.removeprefix("http") + case.path
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(url, autoping=False, autoclose=True, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status in (400, 403, 404, 503), f"upgrade refused with {exc.status} for {case.path!r}"
            return
        try:
            if case.initialize:
                await ws.send_str(orjson.dumps(INITIALIZE).decode())
            for opcode, data in case.frames:
                if ws.closed:
                    break
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_frame(data, opcode)
            with contextlib.suppress(ConnectionError, RuntimeError):
                if not ws.closed:
                    await ws.ping()
            while not ws.closed:
                msg = await ws.receive(timeout=5.0)
                if msg.type in (aiohttp.WSMsgType.PONG, aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
                if msg.type is aiohttp.WSMsgType.ERROR:
                    raise AssertionError(f"WebSocket error on {case.path!r}: {ws.exception()!r}")
                if msg.type is TEXT:  # answers, notifications, relayed requests: one JSON object each
                    assert isinstance(orjson.loads(msg.data), dict), msg.data[:200]
        finally:
            closed_by_gateway = ws.close_code
            await ws.close()
        assert closed_by_gateway in (None, *ALLOWED_CLOSE_CODES), f"closed with {closed_by_gateway} on {case.path!r}"


async def gateway_still_serves(live: LiveGateway) -> None:
    """A new raw client initializes on pump-1 and gets the sum back (after the rate limit the noise may
    have used up: a -32029 answer names when to come back)."""
    await live.wait_ready("pump-1")
    async with aiohttp.ClientSession() as http, http.ws_connect("ws" + live.url.removeprefix("http") + "/pump-1") as ws:
        await ws.send_str(orjson.dumps(INITIALIZE).decode())
        for attempt in range(50):
            call = {
                "jsonrpc": "2.0",
                "id": attempt,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
            }
            await ws.send_str(orjson.dumps(call).decode())
            while True:
                answer = orjson.loads((await ws.receive(timeout=10)).data)
                if answer.get("id") == attempt:
                    break
            error = answer.get("error")
            if error is None:
                assert answer["result"]["isError"] is False, answer
                return
            assert error["code"] == -32029, answer
            await asyncio.sleep(error["data"]["retryAfterMs"] / 1000)
        raise AssertionError(f"still rate limited after 50 attempts: {answer}")


@pytest.fixture(scope="module")
def live() -> Iterator[LiveGateway]:
    with LiveGateway(CONFIG) as gateway:
        yield gateway


def test_no_frame_breaks_the_client_websocket(live: LiveGateway) -> None:
    counter = itertools.count()

    @fuzz_settings(150, deadline=None)
    @given(case=cases)
    def fuzz(case: ClientCase) -> None:
        next(counter)
        tally("live.client_websocket (raw clients)")
        tally("live.client_websocket frames", len(case.frames))
        live.run(run_client(live, case))
        assert not live.all_crashes(), live.all_crashes()[0]

    fuzz()
    live.run(gateway_still_serves(live), timeout=60)
    assert not live.all_crashes(), live.all_crashes()[0]
