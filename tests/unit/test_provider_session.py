"""The gateway-owned session with one provider (gateway/core/provider_session.py; docs/protocol.md,
"Requests and ids", "The gateway owns the provider session").

Driven through an in-memory link that stands for a transport: the tests read the JSON-RPC messages
the core sends and feed it the messages a board would answer with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from gateway.core import errors
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import CLOSE_POLICY, LinkInfo, MessageRefused, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import SessionSettings
from gateway.core.relay import RELATED_REQUEST_KEY
from gateway.core.request_ids import LINGERING_MEDIA
from gateway.core.schema_hash import tools_hash
from gateway.core.versions import LATEST_HANDSHAKE
from tests.conftest import wait_for

SLOT = "pump-1"
ADD = {"name": "add", "inputSchema": {"type": "object"}}
ECHO = {"name": "echo", "inputSchema": {"type": "object"}}
INIT_RESULT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {"listChanged": True}, "logging": {}},
    "serverInfo": {"name": "pump-fw", "version": "1.2.0"},
    "instructions": "Start the pump before reading pressure.",
}


class MemoryLink(ProviderLink):
    """A provider link whose far end is the test: what the core sends lands in `outbox`."""

    def __init__(
        self, *, numeric_ids: bool = False, native_ping: bool = False, medium_outlives_session: bool = False
    ) -> None:
        self.info = LinkInfo(
            transport="memory",
            numeric_ids=numeric_ids,
            native_ping=native_ping,
            medium_outlives_session=medium_outlives_session,
        )
        self.outbox: asyncio.Queue[JsonObject] = asyncio.Queue()
        self.pings = 0
        self.closed: tuple[int, str] | None = None
        self.broken = False

    async def send(self, data: bytes) -> None:
        if self.broken:
            raise ConnectionError("peer went away")
        self.outbox.put_nowait(orjson.loads(data))

    def send_ping(self) -> None:
        self.pings += 1

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    async def next(self) -> JsonObject:
        return await asyncio.wait_for(self.outbox.get(), 2.0)

    def drain(self) -> list[JsonObject]:
        messages = []
        while not self.outbox.empty():
            messages.append(self.outbox.get_nowait())
        return messages


class Recorder:
    """The slot registry's side: records what the session tells it."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.notifications: list[JsonObject] = []
        self.closed_reasons: list[str] = []

    def session_ready(self, session: ProviderSession) -> None:
        self.events.append("ready")

    def session_tools_changed(self, session: ProviderSession, *, noticed: bool = False) -> None:
        self.events.append("tools_changed")

    def session_notification(self, session: ProviderSession, message: JsonObject) -> None:
        self.notifications.append(message)

    def session_closed(self, session: ProviderSession, reason: str) -> None:
        self.closed_reasons.append(reason)

    def session_registered(self, session: ProviderSession) -> None:
        self.events.append("registered")


def make_session(
    link: MemoryLink | None = None, recorder: Recorder | None = None, **settings: Any
) -> tuple[ProviderSession, MemoryLink, Recorder]:
    link = link or MemoryLink()
    recorder = recorder or Recorder()
    # The session-era handshake unless a test asks otherwise (the era probe has tests of its own).
    settings.setdefault("era", "session")
    return ProviderSession(SLOT, link, SessionSettings(**settings), recorder), link, recorder


def answer(session: ProviderSession, request_id: Any, result: Any = None, **extra: Any) -> None:
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, **extra}
    if not extra:
        message["result"] = {} if result is None else result
    session.receive(orjson.dumps(message))


def notify(session: ProviderSession, method: str, params: JsonObject) -> None:
    session.receive(orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}))


async def handshake(session: ProviderSession, link: MemoryLink, tools: list[JsonObject]) -> None:
    session.start()
    init = await link.next()
    answer(session, init["id"], INIT_RESULT)
    assert (await link.next())["method"] == "notifications/initialized"
    listing = await link.next()
    answer(session, listing["id"], {"tools": tools})
    await session.wait_ready(1.0)


# -- initialize handshake and caching ------------------------------------------------------------


async def test_handshake_sequence_and_cache() -> None:
    session, link, recorder = make_session()
    session.start()

    init = await link.next()
    assert init == {
        "jsonrpc": "2.0",
        "id": "brk-1",
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE,
            # Nothing: one session serves every caller, and each is named per call (gateway/core/relay.py).
            "capabilities": {},
            "clientInfo": {"name": "mcp-gateway", "version": init["params"]["clientInfo"]["version"]},
        },
    }
    assert session.state == "initializing"
    answer(session, "brk-1", INIT_RESULT)

    assert await link.next() == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    first_page = await link.next()
    assert first_page == {"jsonrpc": "2.0", "id": "brk-2", "method": "tools/list", "params": {}}
    answer(session, "brk-2", {"tools": [ADD], "nextCursor": "page-2"})
    second_page = await link.next()
    assert second_page == {"jsonrpc": "2.0", "id": "brk-3", "method": "tools/list", "params": {"cursor": "page-2"}}
    answer(session, "brk-3", {"tools": [ECHO, {"no": "name"}]})

    await session.wait_ready(1.0)
    assert session.ready
    assert recorder.events == ["ready"]
    assert session.capabilities == INIT_RESULT["capabilities"]
    assert session.server_info == {"name": "pump-fw", "version": "1.2.0"}
    assert session.instructions == "Start the pump before reading pressure."
    assert session.protocol_version == "2025-06-18"
    # Entries without a string name cannot be called and are not cached.
    assert session.tools == [ADD, ECHO]
    assert session.tools_hash == tools_hash([ADD, ECHO])
    assert session.status()["tools"] == 2
    assert link.drain() == []


async def test_defaults_when_the_provider_omits_server_info() -> None:
    session, link, _ = make_session()
    session.start()
    answer(session, (await link.next())["id"], {"protocolVersion": "2024-11-05", "capabilities": "odd"})
    await link.next()
    answer(session, (await link.next())["id"], {"tools": []})
    await session.wait_ready(1.0)
    assert session.server_info == {"name": SLOT, "version": ""}
    assert session.capabilities == {}
    assert session.instructions is None


async def test_cursor_loop_is_cut() -> None:
    session, link, _ = make_session()
    session.start()
    answer(session, (await link.next())["id"], INIT_RESULT)
    await link.next()
    answer(session, (await link.next())["id"], {"tools": [ADD], "nextCursor": "again"})
    repeat = await link.next()
    assert repeat["params"] == {"cursor": "again"}
    answer(session, repeat["id"], {"tools": [ECHO], "nextCursor": "again"})
    await session.wait_ready(1.0)
    assert session.tools == [ADD, ECHO]
    assert link.drain() == []


async def test_endless_paging_stops_at_the_page_cap() -> None:
    session, link, _ = make_session(max_tools_pages=3)
    session.start()
    answer(session, (await link.next())["id"], INIT_RESULT)
    await link.next()
    for page in range(3):
        listing = await link.next()
        tool = {"name": f"t{page}", "inputSchema": {"type": "object"}}
        answer(session, listing["id"], {"tools": [tool], "nextCursor": f"c{page}"})
    await session.wait_ready(1.0)
    assert [tool["name"] for tool in session.tools] == ["t0", "t1", "t2"]
    assert link.drain() == []


async def test_provider_without_tools_list_is_ready_with_no_tools() -> None:
    session, link, _ = make_session()
    session.start()
    answer(session, (await link.next())["id"], INIT_RESULT)
    await link.next()
    answer(session, (await link.next())["id"], error={"code": -32601, "message": "Method not found"})
    await session.wait_ready(1.0)
    assert session.tools == []


async def test_initialize_error_closes_the_link_with_the_reason() -> None:
    session, link, recorder = make_session()
    session.start()
    answer(session, (await link.next())["id"], error={"message": "busy"})
    with pytest.raises(errors.RpcError) as caught:
        await session.wait_ready(1.0)
    why = "Provider must answer initialize and tools/list: busy"
    assert caught.value.message == (
        f'Provider "{SLOT}" not connected: its provider ended before it was ready ({why}); the request was not sent'
    )
    assert link.closed == (CLOSE_POLICY, "Provider must answer initialize and tools/list: busy")
    assert session.last_error == "initialize failed: busy"
    assert recorder.closed_reasons == ["Provider must answer initialize and tools/list: busy"]


async def test_a_handshake_past_its_deadline_names_the_setting_in_a_close_frames_room() -> None:
    session, link, recorder = make_session(initialize_timeout_ms=50, request_timeout_ms=5000)
    session.start()
    assert (await link.next())["method"] == "initialize"
    with pytest.raises(errors.RpcError):
        await session.wait_ready(2.0)
    why = "Provider must answer initialize within 50ms (providers.initialize_timeout_ms); it sent no answer"
    assert link.closed == (CLOSE_POLICY, why)
    assert len(why.encode()) <= 123
    assert recorder.closed_reasons == [why]
    assert session.last_error == (
        f'initialize failed: Provider "{SLOT}" did not respond within 50ms: no answer to initialize '
        "(deadline: providers.initialize_timeout_ms)"
    )


async def test_a_caller_waiting_for_the_handshake_is_told_its_setting() -> None:
    session, link, _ = make_session(initialize_timeout_ms=5000)
    session.start()
    await link.next()
    with pytest.raises(errors.RpcError) as caught:
        await session.wait_ready(0.05)
    assert caught.value.message == (
        f'Provider "{SLOT}" did not respond within 50ms: it has not finished initialize and tools/list yet '
        "(deadline: providers.initialize_timeout_ms)"
    )
    assert caught.value.data["reason"] == "deadline"


async def test_tools_clients_cannot_read_are_left_out_counted_and_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    session, link, _ = make_session()
    unreadable: list[Any] = [
        {"name": "noschema"},
        {"name": "strschema", "inputSchema": "nope"},
        {"name": "", "inputSchema": {"type": "object"}},
        {"name": "quiet", "inputSchema": {"type": "object"}, "description": None},
        "not a tool",
    ]
    await handshake(session, link, [ADD, *unreadable, ECHO])
    assert session.tools == [ADD, ECHO]
    assert session.tools_hash == tools_hash([ADD, ECHO])
    assert session.counters.protocol_violations == 5
    said = "provider for slot pump-1 lists {}, which clients cannot read ({}); it is left out of tools/list"
    expected = [
        said.format('tool "noschema"', '"inputSchema" is missing'),
        said.format('tool "strschema"', '"inputSchema" is a string, not an object'),
        said.format("a tool without a usable name", '"name" is an empty string'),
        said.format('tool "quiet"', '"description" is null, not a string'),
        said.format("a tool without a usable name", "the tool is a string, not an object"),
    ]
    warned = [r for r in caplog.records if getattr(r, "fault", "") == "unreadable_tool"]
    assert [r.getMessage() for r in warned] == expected
    assert {getattr(r, "slot", None) for r in warned} == {SLOT}
    # Listed again, the same tools are neither named nor counted again on this connection.
    notify(session, "notifications/tools/list_changed", {})
    listing = await link.next()
    answer(session, listing["id"], {"tools": [ADD, *unreadable]})
    await asyncio.wait_for(session._relist_task, 1.0)  # type: ignore[arg-type]
    assert session.tools == [ADD]
    assert session.counters.protocol_violations == 5
    assert len([r for r in caplog.records if getattr(r, "fault", "") == "unreadable_tool"]) == 5


async def test_list_changed_relists_and_tells_the_registry() -> None:
    session, link, recorder = make_session()
    await handshake(session, link, [ADD])
    notify(session, "notifications/tools/list_changed", {})
    listing = await link.next()
    assert listing["method"] == "tools/list"
    answer(session, listing["id"], {"tools": [ADD, ECHO]})
    await asyncio.wait_for(session._relist_task, 1.0)  # type: ignore[arg-type]
    assert recorder.events == ["ready", "tools_changed"]
    assert session.tools_hash == tools_hash([ADD, ECHO])
    assert recorder.notifications == []


# -- ids -----------------------------------------------------------------------------------------


async def test_brk_ids_by_default() -> None:
    session, link, _ = make_session()
    task = asyncio.create_task(session.request("tools/call", {"name": "add"}))
    sent = await link.next()
    assert sent == {"jsonrpc": "2.0", "id": "brk-1", "method": "tools/call", "params": {"name": "add"}}
    answer(session, "brk-1", {"content": []})
    assert await task == {"jsonrpc": "2.0", "id": "brk-1", "result": {"content": []}}
    assert session.status()["id_style"] == "brk"


@pytest.mark.parametrize(
    "numeric_source",
    ["settings", "link", "hello"],
)
async def test_numeric_ids(numeric_source: str) -> None:
    link = MemoryLink(numeric_ids=numeric_source == "link")
    recorder = Recorder()
    session = ProviderSession(
        SLOT,
        link,
        SessionSettings(numeric_ids=numeric_source == "settings"),
        recorder,
        hello={"device_id": "24:6f", "ids": "numeric"} if numeric_source == "hello" else None,
    )
    first = asyncio.create_task(session.request("ping", None))
    second = asyncio.create_task(session.request("ping", None))
    assert (await link.next())["id"] == 1
    assert (await link.next())["id"] == 2
    answer(session, 2)
    answer(session, 1)
    assert (await first)["id"] == 1
    assert (await second)["id"] == 2
    assert session.status()["id_style"] == "numeric"


async def test_provider_must_echo_the_id_type() -> None:
    session, link, _ = make_session(numeric_ids=True)
    task = asyncio.create_task(session.request("ping", None))
    await link.next()
    answer(session, "1")  # a string where the gateway sent the integer 1
    assert session.counters.unmatched_responses == 1
    assert not task.done()
    answer(session, 1)
    assert (await task)["id"] == 1


async def test_boolean_id_does_not_steal_the_answer_to_request_1() -> None:
    # true == 1 in Python; a provider answering id true must not complete (or lose) request 1.
    session, link, _ = make_session(numeric_ids=True)
    task = asyncio.create_task(session.request("ping", None))
    await link.next()
    answer(session, True)
    assert session.counters.unmatched_responses == 1
    assert 1 in session.pending
    answer(session, 1)
    assert (await asyncio.wait_for(task, 1.0))["id"] == 1


# -- deadlines, bounds, failures -----------------------------------------------------------------


async def test_deadline_error_names_the_slot_and_the_time() -> None:
    session, link, _ = make_session()
    with pytest.raises(errors.RpcError) as caught:
        await session.request("tools/call", {"name": "sleep"}, timeout_ms=20)
    error = caught.value.to_error()
    assert error["code"] == -32000
    assert error["message"].startswith(f'Provider "{SLOT}" did not respond within 20ms')
    assert error["data"] == {"slot": SLOT, "reason": "deadline", "timeout_ms": 20, "setting": "request_timeout_ms"}
    assert session.counters.deadlines == 1
    assert session.pending == {}
    sent = await link.next()
    # The provider is told to stop working on it.
    cancel = await link.next()
    assert cancel == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": sent["id"], "reason": "gateway deadline of 20ms passed"},
    }
    # A late answer is never delivered, and no fault (the provider is slow, its id right); a second is one.
    answer(session, sent["id"])
    assert session.counters.unmatched_responses == 0
    answer(session, sent["id"])
    assert session.counters.unmatched_responses == 1


def test_per_tool_deadline() -> None:
    settings = SessionSettings(request_timeout_ms=5000, tool_timeouts_ms={"home_axis": 90_000})
    assert settings.timeout_for("tools/call", {"name": "home_axis"}) == 90_000
    assert settings.timeout_for("tools/call", {"name": "add"}) == 5000
    assert settings.timeout_for("resources/read", {"name": "home_axis"}) == 5000
    assert settings.timeout_for("tools/call", None) == 5000


async def test_pending_bound() -> None:
    session, link, _ = make_session(max_pending=1)
    first = asyncio.create_task(session.request("ping", None))
    await link.next()
    with pytest.raises(errors.RpcError) as caught:
        await session.request("ping", None)
    assert caught.value.code == -32000
    assert caught.value.message == (
        f'Too many requests in flight for slot "{SLOT}" (limit 1); wait for answers or raise the limit'
    )
    answer(session, "brk-1")
    await first
    # Room again once answered.
    second = asyncio.create_task(session.request("ping", None))
    answer(session, (await link.next())["id"])
    await second


async def test_the_gateways_own_requests_do_not_count_against_the_pending_bound() -> None:
    # A 2026-07-28 provider holds the gateway's subscriptions/listen open for the session's life.
    session, link, _ = make_session(max_pending=1)
    listen = asyncio.create_task(session.request("subscriptions/listen", None, timeout_ms=0, internal=True))
    await link.next()
    call = asyncio.create_task(session.request("tools/call", {"name": "add"}))
    assert (await link.next())["method"] == "tools/call"  # admitted: the limit is 1 client request
    with pytest.raises(errors.RpcError) as caught:
        await session.request("tools/call", {"name": "add"})
    assert "(limit 1)" in caught.value.message
    answer(session, "brk-2")
    assert await call == {"jsonrpc": "2.0", "id": "brk-2", "result": {}}
    listen.cancel()


async def test_send_failure_answers_disconnected_and_leaves_nothing_pending() -> None:
    session, link, recorder = make_session()
    link.broken = True
    with pytest.raises(errors.RpcError) as caught:
        await session.request("ping", None)
    assert caught.value.message == f'Provider "{SLOT}" disconnected: sending the request failed: peer went away'
    assert session.pending == {}
    assert session.state == "closed"
    assert recorder.closed_reasons == ["sending the request failed: peer went away"]


class RefusingLink(MemoryLink):
    """A link that cannot carry messages over `limit` bytes (as an MQTT broker's Maximum Packet Size)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def send(self, data: bytes) -> None:
        if len(data) > self.limit:
            raise MessageRefused(f"{len(data)} bytes; this link carries at most {self.limit}", {"limit": self.limit})
        await super().send(data)


async def test_a_message_the_link_refuses_fails_alone_and_the_link_stays() -> None:
    session, link, recorder = make_session(RefusingLink(200))
    other = asyncio.create_task(session.request("ping", None))
    waiting = await link.next()
    with pytest.raises(errors.RpcError) as caught:
        await session.request("tools/call", {"name": "echo", "arguments": {"pad": "x" * 300}})
    assert caught.value.code == -32000
    assert caught.value.message.endswith("this link carries at most 200")
    assert caught.value.data == {"slot": SLOT, "reason": "message_refused", "limit": 200}
    assert list(session.pending) == [waiting["id"]]  # only the request that was sent waits
    assert session.state != "closed" and recorder.closed_reasons == []
    answer(session, waiting["id"])
    assert "result" in await other


async def test_an_answer_the_link_refuses_reaches_the_provider_as_an_error_under_its_id() -> None:
    session, link, recorder = make_session(RefusingLink(300))
    # The provider's ping: answered as usual. Then an answer too large for the link (a request of a
    # method the gateway does not relay gets a long explanation): the provider hears why instead.
    session.receive(b'{"jsonrpc":"2.0","id":"dev-1","method":"ping"}')
    assert await link.next() == {"jsonrpc": "2.0", "id": "dev-1", "result": {}}
    method = "x/" + "m" * 300
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": "dev-2", "method": method}))
    refused = await link.next()
    assert refused["id"] == "dev-2" and refused["error"]["code"] == -32000
    assert "this link carries at most 300" in refused["error"]["message"]
    assert session.state != "closed" and recorder.closed_reasons == []


async def test_link_lost_answers_every_pending_request_at_once() -> None:
    session, link, recorder = make_session()
    calls = [asyncio.create_task(session.request("tools/call", {"name": "sleep"})) for _ in range(3)]
    for _ in calls:
        await link.next()
    session.link_lost("websocket closed")
    for call in calls:
        with pytest.raises(errors.RpcError) as caught:
            await call
        assert caught.value.code == -32000
        assert caught.value.message == f'Provider "{SLOT}" disconnected: websocket closed'
    assert session.pending == {}
    assert recorder.closed_reasons == ["websocket closed"]
    # Later requests fail at once, and a second loss is not reported twice.
    with pytest.raises(errors.RpcError, match="disconnected"):
        await session.request("ping", None)
    session.link_lost("again")
    assert recorder.closed_reasons == ["websocket closed"]


async def test_caller_going_away_cancels_upstream() -> None:
    session, link, _ = make_session()
    task = asyncio.create_task(session.request("tools/call", {"name": "sleep"}))
    sent = await link.next()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session.pending == {}
    cancel = await link.next()
    assert cancel["method"] == "notifications/cancelled"
    assert cancel["params"] == {"requestId": sent["id"], "reason": "client disconnected"}


# -- inbound routing -----------------------------------------------------------------------------


async def test_progress_token_is_mapped_back_to_the_clients_token() -> None:
    session, link, recorder = make_session()
    delivered: list[JsonObject] = []
    params = {"name": "sleep", "_meta": {"progressToken": "client-7", "traceparent": "00-abc"}}
    task = asyncio.create_task(
        session.request("tools/call", params, sink=delivered.append, client_progress_token="client-7")
    )
    sent = await link.next()
    # The provider sees the gateway's own id as the token; other _meta keys travel unchanged.
    assert sent["params"]["_meta"] == {"progressToken": "brk-1", "traceparent": "00-abc"}
    notify(session, "notifications/progress", {"progressToken": "brk-1", "progress": 0.5, "total": 1})
    notify(session, "notifications/progress", {"progressToken": "brk-99", "progress": 1})
    assert delivered == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "client-7", "progress": 0.5, "total": 1},
        }
    ]
    # Progress for nobody is dropped, never broadcast.
    assert recorder.notifications == []
    answer(session, "brk-1")
    await task


async def test_boolean_progress_token_is_not_request_1() -> None:
    session, link, _ = make_session(numeric_ids=True)
    delivered: list[JsonObject] = []
    task = asyncio.create_task(
        session.request("tools/call", {"name": "sleep"}, sink=delivered.append, client_progress_token="c")
    )
    assert (await link.next())["params"]["_meta"] == {"progressToken": 1}
    notify(session, "notifications/progress", {"progressToken": True, "progress": 1})
    notify(session, "notifications/progress", {"progressToken": 1, "progress": 2})
    assert [message["params"] for message in delivered] == [{"progressToken": "c", "progress": 2}]
    answer(session, 1)
    await task


async def test_progress_for_a_call_that_asked_for_none_is_dropped() -> None:
    # A provider may name the id of its request as a progress token; the client sent no token.
    session, link, recorder = make_session()
    delivered: list[JsonObject] = []
    task = asyncio.create_task(session.request("tools/call", {"name": "sleep"}, sink=delivered.append))
    sent = await link.next()
    notify(session, "notifications/progress", {"progressToken": sent["id"], "progress": 1, "total": 2})
    assert delivered == []
    assert recorder.notifications == []
    answer(session, sent["id"])
    await task


async def test_related_request_key_routes_a_log_message_to_the_request_and_is_stripped() -> None:
    session, link, recorder = make_session()
    delivered: list[JsonObject] = []
    task = asyncio.create_task(session.request("tools/call", {"name": "sleep"}, sink=delivered.append))
    await link.next()
    notify(
        session,
        "notifications/message",
        {"level": "info", "data": "step 1", "_meta": {RELATED_REQUEST_KEY: "brk-1"}},
    )
    notify(
        session,
        "notifications/message",
        {"level": "info", "data": "step 2", "_meta": {RELATED_REQUEST_KEY: "brk-1", "traceparent": "00-abc"}},
    )
    assert delivered == [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "step 1"}},
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "step 2", "_meta": {"traceparent": "00-abc"}},
        },
    ]
    assert recorder.notifications == []
    answer(session, "brk-1")
    await task


async def test_related_request_that_is_no_longer_pending_goes_to_the_slot_stripped() -> None:
    session, _, recorder = make_session()
    notify(session, "notifications/message", {"level": "info", "data": "late", "_meta": {RELATED_REQUEST_KEY: 5}})
    assert recorder.notifications == [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "late"}}
    ]


@pytest.mark.parametrize("related", [[1], {"id": 1}, None, True])
async def test_malformed_related_request_key_never_breaks_the_link(related: Any) -> None:
    session, _, recorder = make_session()
    notify(session, "notifications/message", {"level": "info", "data": "x", "_meta": {RELATED_REQUEST_KEY: related}})
    assert recorder.notifications == [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    ]


async def test_other_notifications_go_to_the_slot_unchanged() -> None:
    session, _, recorder = make_session()
    notify(session, "notifications/resources/updated", {"uri": "demo://a"})
    assert recorder.notifications == [
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "demo://a"}}
    ]


async def test_unmatched_and_duplicate_responses_are_counted() -> None:
    session, link, _ = make_session()
    task = asyncio.create_task(session.request("ping", None))
    await link.next()
    answer(session, "brk-1")
    answer(session, "brk-1")  # duplicate
    answer(session, "brk-404")  # nobody asked
    assert (await task)["result"] == {}
    assert session.counters.unmatched_responses == 2


async def test_sessions_on_a_medium_that_outlives_them_never_reuse_an_id() -> None:
    """A serial line or an MQTT topic outlives its session: a late answer to a request of the slot's
    previous session reaches nobody in the next one."""
    first, first_link, _ = make_session(MemoryLink(medium_outlives_session=True))
    old = asyncio.create_task(first.request("tools/call", {"name": "add"}))
    old_id = (await first_link.next())["id"]
    first.link_lost("the board registered again")
    with pytest.raises(errors.RpcError, match="disconnected"):
        await old

    second, second_link, _ = make_session(MemoryLink(medium_outlives_session=True))
    new = asyncio.create_task(second.request("tools/call", {"name": "add"}))
    new_id = (await second_link.next())["id"]
    assert new_id != old_id
    answer(second, old_id, {"content": [{"type": "text", "text": "stale"}]})
    assert second.counters.unmatched_responses == 1
    assert not new.done()
    answer(second, new_id, {"content": []})
    assert (await new)["result"] == {"content": []}
    for request_id in (old_id, new_id):
        assert request_id.startswith("brk-") and 1 <= int(request_id.removeprefix("brk-")) < 2**31


async def test_numeric_ids_on_a_medium_that_outlives_the_session_come_from_the_shared_sequence() -> None:
    session, link, _ = make_session(MemoryLink(numeric_ids=True, medium_outlives_session=True))
    upcoming = LINGERING_MEDIA.upcoming
    task = asyncio.create_task(session.request("ping", None))
    assert (await link.next())["id"] == upcoming
    answer(session, upcoming)
    assert (await task)["result"] == {}
    # A link whose connection is its session counts from 1, whatever the shared sequence says.
    session, link, _ = make_session(MemoryLink(numeric_ids=True))
    task = asyncio.create_task(session.request("ping", None))
    assert (await link.next())["id"] == 1
    answer(session, 1)
    await task


async def test_error_without_code_is_normalised() -> None:
    session, link, _ = make_session()
    task = asyncio.create_task(session.request("tools/call", {"name": "fail"}))
    await link.next()
    answer(session, "brk-1", error={"message": "motor stalled"})
    assert await task == {"jsonrpc": "2.0", "id": "brk-1", "error": {"code": -32603, "message": "motor stalled"}}
    assert session.counters.errors == 1


async def test_an_answer_without_result_or_error_ends_its_request_at_once() -> None:
    session, link, _ = make_session(request_timeout_ms=60_000)
    task = asyncio.create_task(session.request("tools/call", {"name": "add"}))
    sent = await link.next()
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": sent["id"]}))
    reply = await asyncio.wait_for(task, 1.0)
    assert reply == {
        "jsonrpc": "2.0",
        "id": sent["id"],
        "error": {
            "code": -32603,
            "message": f'Provider "{SLOT}" answered without a "result" or an "error"; '
            "the provider must send one of them",
            "data": {"slot": SLOT, "reason": "malformed_answer"},
        },
    }
    assert session.pending == {}
    assert session.counters.unparsable == 1
    # One that names no pending request is only counted.
    session.receive(b'{"jsonrpc":"2.0","id":"brk-77"}')
    assert session.counters.unparsable == 2


async def test_a_batch_is_answered_once_with_invalid_request_under_id_null() -> None:
    session, link, _ = make_session()
    session.receive(b'[{"jsonrpc":"2.0","id":"p-1","method":"ping"},{"jsonrpc":"2.0","id":"p-2","method":"ping"}]')
    assert await link.next() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "JSON-RPC batches are not supported: nothing in this batch was read; send one message at a time",
            "data": {"reason": "batch"},
        },
    }
    await asyncio.sleep(0.01)
    assert link.drain() == []  # one answer per batch, none for the requests in it
    assert session.counters.protocol_violations == 1


async def test_provider_ping_is_answered_with_an_empty_result() -> None:
    session, link, _ = make_session()
    session.receive(b'{"jsonrpc":"2.0","id":"dev-1","method":"ping"}')
    assert await link.next() == {"jsonrpc": "2.0", "id": "dev-1", "result": {}}


@pytest.mark.parametrize("method", ["sampling/createMessage", "roots/list", "elicitation/create", "broker/unknown"])
async def test_other_provider_requests_are_answered_method_not_found(method: str) -> None:
    session, link, _ = make_session()
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": 42, "method": method, "params": {}}))
    reply = await link.next()
    assert reply["id"] == 42
    assert reply["error"]["code"] == -32601
    assert method in reply["error"]["message"]


async def test_bad_input_is_counted_and_never_raises() -> None:
    session, link, recorder = make_session()
    session.receive(b"\x00garbage")
    session.receive(b'{"jsonrpc":"2.0"}')
    session.receive(b'[{"jsonrpc":"2.0","method":"ping","id":1}]')
    assert session.counters.unparsable == 2
    assert session.counters.protocol_violations == 1
    assert recorder.notifications == []
    assert (await link.next())["error"]["code"] == -32600  # the batch's answer, nothing else
    assert link.drain() == []
    assert session.state == "initializing"


async def test_hello_notification_updates_identity_and_ids() -> None:
    session, link, recorder = make_session()
    notify(session, "notifications/hello", {"device_id": "24:6f", "ids": "numeric"})
    assert recorder.events == ["registered"]
    assert session.hello == {"device_id": "24:6f", "ids": "numeric"}
    task = asyncio.create_task(session.request("ping", None))
    assert (await link.next())["id"] == 1
    answer(session, 1)
    await task


# -- heartbeat -----------------------------------------------------------------------------------


async def test_second_sweep_without_any_inbound_message_drops_the_provider() -> None:
    session, link, _ = make_session(link=MemoryLink(native_ping=True))
    assert session.heartbeat() is True
    assert link.pings == 1
    assert session.heartbeat() is False
    assert session.counters.heartbeat_misses == 1
    assert session.missed_heartbeats == 1


async def test_any_inbound_message_resets_the_heartbeat() -> None:
    session, link, _ = make_session(link=MemoryLink(native_ping=True))
    assert session.heartbeat() is True
    notify(session, "notifications/message", {"level": "debug", "data": "alive"})
    assert session.heartbeat() is True
    session.mark_alive()  # what a transport does on a pong frame
    assert session.heartbeat() is True
    session.receive(b"not even json")  # unparsable still proves the link carries bytes
    assert session.heartbeat() is True
    assert link.pings == 4
    assert session.counters.heartbeat_misses == 0


async def test_heartbeat_without_native_ping_sends_a_jsonrpc_ping() -> None:
    session, link, _ = make_session()
    assert session.heartbeat() is True
    ping = await link.next()
    assert ping == {"jsonrpc": "2.0", "id": "brk-1", "method": "ping"}
    answer(session, ping["id"])
    assert session.heartbeat() is True
    answer(session, (await link.next())["id"])


# -- nesting (limits.max_json_depth) ---------------------------------------------------------------


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


async def test_a_nested_answer_ends_its_request_at_once_with_the_bound_named() -> None:
    session, link, recorder = make_session(max_json_depth=32)
    call = asyncio.create_task(session.request("tools/call", {"name": "echo"}))
    sent = await link.next()
    session.receive(b'{"jsonrpc":"2.0","id":"' + sent["id"].encode() + b'","result":' + nested(300) + b"}")
    refused = await asyncio.wait_for(call, 1.0)
    assert refused["error"]["code"] == -32603
    assert refused["error"]["message"].startswith(f'Provider "{SLOT}" answered, but the gateway refused the answer')
    assert "nested more than 32 levels deep" in refused["error"]["message"]
    assert refused["error"]["data"] == {"slot": SLOT, "reason": "answer_refused", "limit": "max_json_depth"}
    assert session.pending == {}
    assert session.counters.unparsable == 1
    assert session.state != "closed" and recorder.closed_reasons == []


async def test_nested_notifications_and_requests_are_dropped_and_counted() -> None:
    session, link, recorder = make_session(numeric_ids=True, max_json_depth=32)
    call = asyncio.create_task(session.request("tools/call", {"name": "echo"}))
    sent = await link.next()
    assert sent["id"] == 1
    session.receive(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":' + nested(40) + b"}}")
    # The provider's own request 1 is not the answer to the gateway's request 1.
    session.receive(b'{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":' + nested(40) + b"}")
    assert recorder.notifications == []
    assert session.counters.unparsable == 2
    assert not call.done()
    answer(session, 1, {"content": []})
    assert (await call)["result"] == {"content": []}


async def test_a_request_the_gateway_cannot_encode_fails_alone() -> None:
    session, link, recorder = make_session()
    with pytest.raises(errors.RpcError) as caught:
        await session.request("tools/call", {"name": "echo", "arguments": {"values": {1, 2}}})
    assert caught.value.code == -32603
    assert caught.value.message.startswith(f'The gateway could not encode tools/call for provider "{SLOT}" as JSON')
    assert caught.value.data == {"slot": SLOT, "reason": "unencodable"}
    assert session.pending == {}
    assert session.state != "closed" and recorder.closed_reasons == []
    other = asyncio.create_task(session.request("ping", None))
    answer(session, (await link.next())["id"])
    assert "result" in await other


class StalledLink(MemoryLink):
    """A link whose sends wait until `flow` is set (a provider that does not read), then fail when `broken`."""

    def __init__(self) -> None:
        super().__init__()
        self.flow = asyncio.Event()

    async def send(self, data: bytes) -> None:
        await self.flow.wait()
        await super().send(data)


async def test_a_request_whose_send_outlives_its_deadline_leaves_no_unretrieved_error() -> None:
    link = StalledLink()
    session, _, _ = make_session(link)
    call = asyncio.create_task(session.request("tools/call", {"name": "sleep"}, timeout_ms=20))
    await wait_for(lambda: bool(session.pending), what="the request to be pending")
    [future] = [entry.future for entry in session.pending.values()]
    await wait_for(lambda: not session.pending, what="the deadline to pass while the send waits")
    link.broken = True
    link.flow.set()
    with pytest.raises(errors.RpcError, match="did not respond within 20ms"):
        await call
    # The caller got its deadline's error while its frame still waited; that error on the request's future
    # is marked seen, else asyncio reports "Future exception was never retrieved" when the future is collected.
    assert future.done() and not future._log_traceback


async def test_a_caller_that_leaves_while_its_send_waits_is_forgotten_at_once() -> None:
    link = StalledLink()
    session, _, _ = make_session(link)
    call = asyncio.create_task(session.request("tools/call", {"name": "sleep"}))
    await wait_for(lambda: bool(session.pending), what="the request to be pending")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert session.pending == {}  # not left to wait out its deadline
    link.flow.set()
    cancel = await link.next()
    cancel = cancel if cancel.get("method") == "notifications/cancelled" else await link.next()
    assert cancel["params"]["reason"] == "client disconnected"


class CountingStalledLink(StalledLink):
    """A stalled link with a drop counter of its own, as a serial port has (its `backlog`)."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def request_dropped(self) -> None:
        self.dropped += 1


@pytest.mark.parametrize(
    ("dropped", "named"),
    [
        (b'[{"jsonrpc":"2.0","id":"p-3","method":"ping"}]', "a batch"),
        (
            b'{"jsonrpc":"2.0","id":"p-3","method":"roots/list","params":' + nested(40) + b"}",
            "roots/list nested deeper than limits.max_json_depth",
        ),
        (b'{"jsonrpc":"2.0","id":"p-3","method":"roots/list"}', "roots/list"),
    ],
)
async def test_what_is_dropped_while_answers_wait_is_named_and_counted_on_the_link(
    dropped: bytes, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    link = CountingStalledLink()
    session, _, _ = make_session(link, max_pending=2, max_json_depth=32)
    session.receive(b'{"jsonrpc":"2.0","id":"p-1","method":"ping"}')
    session.receive(b'{"jsonrpc":"2.0","id":"p-2","method":"ping"}')  # two answers wait: the bound
    session.receive(dropped)
    session.receive(b'{"jsonrpc":"2.0","id":"p-4","method":"ping"}')
    assert link.dropped == 2 and session.requests.dropped == 2
    [warning] = [record.getMessage() for record in caplog.records if "faster than it reads" in record.getMessage()]
    assert f"(the first: {named})" in warning, warning
    link.flow.set()
    assert [(await link.next())["id"] for _ in range(2)] == ["p-1", "p-2"]
    await asyncio.sleep(0.01)
    assert link.drain() == []  # nothing dropped is answered later
