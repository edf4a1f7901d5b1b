"""The gateway's session with a provider (ProviderSession.receive) under arbitrary frames from a board.

What must hold, whatever a board sends: receive() never raises and no task it starts dies of an
exception; everything the session passes on towards clients is JSON the gateway can write; and the
link keeps working: after the noise, a well-formed response still resolves a pending request. Frames
sent during the handshake may make initialize fail; then the session closes the link with 1008, as a
board that cannot initialize must be told.

The far end of the link is the test (an in-memory link, as in tests/unit/test_provider_session.py):
the transport's own framing is fuzzed over real sockets in test_live_websocket.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.jsonrpc import JsonObject
from gateway.core.link import CLOSE_POLICY, LinkInfo, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import SessionSettings
from gateway.core.relay import RELATED_REQUEST_KEY
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally

SLOT = "pump-1"
INIT_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {}}
TOOLS = {"tools": [{"name": "add", "inputSchema": {"type": "object"}}]}


class MemoryLink(ProviderLink):
    """A provider link whose far end is the test: what the session sends lands in `outbox`."""

    def __init__(self, numeric_ids: bool) -> None:
        self.info = LinkInfo(transport="memory", numeric_ids=numeric_ids, native_ping=True)
        self.outbox: asyncio.Queue[JsonObject] = asyncio.Queue()
        self.closed: tuple[int, str] | None = None

    async def send(self, data: bytes) -> None:
        self.outbox.put_nowait(orjson.loads(data))

    def send_ping(self) -> None:
        return None

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class Observer:
    """The slot registry's side: what the session passes on must be writable to a client."""

    def __init__(self) -> None:
        self.notifications: list[JsonObject] = []

    def session_ready(self, session: ProviderSession) -> None:
        return None

    def session_tools_changed(self, session: ProviderSession, *, noticed: bool = False) -> None:
        orjson.dumps(session.tools)

    def session_notification(self, session: ProviderSession, message: JsonObject) -> None:
        assert isinstance(message.get("method"), str)
        orjson.dumps(message)
        self.notifications.append(message)

    def session_closed(self, session: ProviderSession, reason: str) -> None:
        return None

    def session_registered(self, session: ProviderSession) -> None:
        orjson.dumps(session.hello)


our_ids = st.one_of(
    st.sampled_from([f"brk-{n}" for n in range(1, 8)]),
    st.integers(min_value=0, max_value=8),
    # Values equal to an id in Python but not in JSON (True == 1), and ids no table can hold.
    st.sampled_from((True, False, None, 1.0, 2.0, "2", {}, [], {"id": 1}, ["brk-1"])),
)
aimed = st.one_of(
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": our_ids},
        optional={"result": fz.json_values, "error": fz.errors},
    ),
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "method": st.just("notifications/progress")},
        optional={"params": st.fixed_dictionaries({"progressToken": our_ids}, optional={"progress": fz.json_values})},
    ),
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "method": st.sampled_from(fz.METHODS)},
        optional={
            "params": st.fixed_dictionaries(
                {"_meta": st.fixed_dictionaries({RELATED_REQUEST_KEY: our_ids}, optional={"x": fz.json_values})},
                optional={"level": fz.json_values, "data": fz.json_values, "hello": fz.json_values},
            ),
            "id": our_ids,
        },
    ),
)
"""Frames aimed at the session's state: answers and progress for ids it may be waiting on."""
session_frames = st.lists(st.one_of(fz.frames, aimed.map(fz.dumps), aimed.map(fz.dumps)), min_size=1, max_size=6)


async def next_sent(link: MemoryLink, wanted: Any) -> JsonObject:
    """The next message the session sent that `wanted` accepts (others, e.g. re-lists, are answered)."""
    while True:
        message = await asyncio.wait_for(link.outbox.get(), 2.0)
        if wanted(message):
            return message


async def serve_handshake(session: ProviderSession, link: MemoryLink) -> None:
    """Answer the era probe, initialize and tools/list like a good board until the session is ready or closed."""
    deadline = asyncio.get_running_loop().time() + 2.0
    while session.state == "initializing":
        assert asyncio.get_running_loop().time() < deadline, "the handshake never ended"
        if link.outbox.empty():
            await asyncio.sleep(0)
            continue
        message = link.outbox.get_nowait()
        if message.get("method") == "server/discover":  # a board of the session era refuses the probe
            error = {"code": -32601, "message": "Method not found"}
            session.receive(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}))
        elif message.get("method") == "initialize":
            session.receive(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": INIT_RESULT}))
        elif message.get("method") == "tools/list":
            session.receive(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": TOOLS}))


async def probe_call(session: ProviderSession, link: MemoryLink, marker: str) -> None:
    """A well-formed request and its well-formed answer: must resolve with exactly that answer."""
    delivered: list[JsonObject] = []
    call = asyncio.ensure_future(session.request("tools/call", {"name": marker}, sink=delivered.append))
    sent = await next_sent(link, lambda m: isinstance(m.get("params"), dict) and m["params"].get("name") == marker)
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": {"content": [], "marker": marker}}))
    reply = await asyncio.wait_for(call, 2.0)
    assert reply["result"]["marker"] == marker


async def scenario(frames: list[bytes], during_handshake: bool, numeric_ids: bool) -> None:
    loop = asyncio.get_running_loop()
    crashes: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: crashes.append(context))
    link = MemoryLink(numeric_ids)
    observer = Observer()
    session = ProviderSession(SLOT, link, SessionSettings(), observer)
    session.start()
    try:
        if during_handshake:
            await asyncio.sleep(0)  # initialize is on its way
            for frame in frames:
                session.receive(frame)
            await serve_handshake(session, link)
            if session.state == "closed":
                # The noise answered initialize or tools/list badly: the board is told, with 1008.
                assert link.closed is not None and link.closed[0] == CLOSE_POLICY
                return
        else:
            await serve_handshake(session, link)
        assert session.ready
        # A request in flight while the noise arrives: it ends with a response (the noise may be
        # one), never with an exception; the sink only ever gets writable notifications.
        delivered: list[JsonObject] = []
        pending = asyncio.ensure_future(session.request("tools/call", {"name": "in-flight"}, sink=delivered.append))
        await next_sent(link, lambda m: m.get("params", {}).get("name") == "in-flight")
        for frame in frames:
            session.receive(frame)
        await asyncio.sleep(0)
        assert session.ready, "noise from a board must not end its session"
        for message in delivered:
            orjson.dumps(message)
        await probe_call(session, link, "probe-after-noise")
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            reply = await pending
            assert "result" in reply or "error" in reply
    finally:
        session.link_lost("end of the example")
        for _ in range(3):
            await asyncio.sleep(0)
        loop.set_exception_handler(None)
    assert not crashes, f"a task of the session died: {crashes[0].get('exception')!r}"


@fuzz_settings(300)
@given(frames=session_frames, during_handshake=st.booleans(), numeric_ids=st.booleans())
def test_no_frame_from_a_board_breaks_its_session(
    frames: list[bytes], during_handshake: bool, numeric_ids: bool
) -> None:
    tally("provider_session.receive", len(frames))
    with asyncio.Runner() as runner:
        runner.run(scenario(frames, during_handshake, numeric_ids))
