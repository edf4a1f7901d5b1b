"""The era the core speaks to a provider: the server/discover probe, the 2026-07-28 session, its listen.

Driven through the in-memory link of test_provider_session: the tests read what the core sends and
answer as a board (session era only) or a 2026-07-28 server would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.core import eras
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import LinkInfo
from gateway.core.provider_session import ProviderSession
from gateway.core.relay import NoRelay
from tests.unit.test_provider_session import ADD, ECHO, INIT_RESULT, MemoryLink, answer, make_session, notify

DISCOVERED: JsonObject = {
    "supportedVersions": ["2026-07-28"],
    "capabilities": {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True},
    },
    "serverInfo": {"name": "modern-server", "version": "3.1"},
    "instructions": "Ask me anything",
}
GATEWAY_META = eras.gateway_envelope()


async def modern_session(**settings: Any) -> tuple[ProviderSession, MemoryLink, Any]:
    """A session that found a 2026-07-28 provider, ready, with its listen request open (not yet acknowledged)."""
    session, link, recorder = make_session(era="auto", **settings)
    session.start()
    discover = await link.next()
    answer(session, discover["id"], DISCOVERED)
    listing = await link.next()
    answer(session, listing["id"], {"tools": [ADD]})
    await session.wait_ready(1.0)
    return session, link, recorder


async def test_a_board_answering_method_not_found_is_initialized_the_session_way() -> None:
    session, link, _ = make_session(era="auto")
    session.start()
    discover = await link.next()
    assert discover == {
        "jsonrpc": "2.0",
        "id": "brk-1",
        "method": "server/discover",
        "params": {"_meta": GATEWAY_META},
    }
    answer(session, "brk-1", error={"code": -32601, "message": "Method not found: server/discover"})
    init = await link.next()
    assert init["method"] == "initialize"
    assert init["params"]["capabilities"] == {}  # the least: nothing any caller may not have declared
    answer(session, init["id"], INIT_RESULT)
    assert (await link.next())["method"] == "notifications/initialized"
    listing = await link.next()
    assert listing["params"] == {}  # no envelope in the session era
    answer(session, listing["id"], {"tools": [ADD]})
    await session.wait_ready(1.0)
    assert session.era == eras.SESSION_ERA
    assert not session.modern
    assert session.protocol_version == "2025-06-18"
    assert session.status()["era"] == "session"


async def test_the_gateways_own_probe_answered_with_an_error_is_no_provider_error() -> None:
    session, link, _ = make_session(era="auto")
    session.start()
    answer(session, (await link.next())["id"], error={"code": -32601, "message": "Method not found"})
    answer(session, (await link.next())["id"], INIT_RESULT)
    assert (await link.next())["method"] == "notifications/initialized"
    answer(session, (await link.next())["id"], {"tools": [ADD]})
    await session.wait_ready(1.0)
    assert (session.counters.requests, session.counters.errors) == (0, 0)
    # A client's request answered with an error is one.
    call = asyncio.create_task(session.request("tools/call", {"name": "add"}))
    answer(session, (await link.next())["id"], error={"code": -32602, "message": "bad arguments"})
    await call
    assert (session.counters.requests, session.counters.errors) == (1, 1)


async def test_a_provider_that_never_answers_discover_gets_initialize_at_the_deadline() -> None:
    session, link, _ = make_session(era="auto", initialize_timeout_ms=100)
    session.start()
    assert (await link.next())["method"] == "server/discover"
    # After 100 ms of silence: the probe is cancelled upstream and initialize goes out.
    sent = {message["method"]: message for message in [await link.next(), await link.next()]}
    assert set(sent) == {"notifications/cancelled", "initialize"}
    answer(session, sent["initialize"]["id"], INIT_RESULT)
    await link.next()
    answer(session, (await link.next())["id"], {"tools": []})
    await session.wait_ready(1.0)
    assert session.era == eras.SESSION_ERA


@pytest.mark.parametrize("where", ["settings", "link"])
async def test_no_probe_where_the_slot_or_the_link_says_session(where: str) -> None:
    if where == "settings":
        session, link, _ = make_session(era="session")
    else:
        session, link, _ = make_session(MemoryLink(), era="auto")
        link.info = LinkInfo(transport="memory", era=eras.SESSION_ERA)
    session.start()
    assert (await link.next())["method"] == "initialize"


async def test_a_2026_provider_is_described_by_discover_and_listed_with_the_gateways_envelope() -> None:
    session, link, recorder = make_session(era="auto")
    session.start()
    answer(session, (await link.next())["id"], DISCOVERED)
    listing = await link.next()
    assert listing == {"jsonrpc": "2.0", "id": "brk-2", "method": "tools/list", "params": {"_meta": GATEWAY_META}}
    answer(session, "brk-2", {"tools": [ADD], "nextCursor": "c2", "resultType": "complete"})
    second = await link.next()
    assert second["params"] == {"cursor": "c2", "_meta": GATEWAY_META}
    answer(session, second["id"], {"tools": [ECHO], "resultType": "complete"})
    await session.wait_ready(1.0)
    assert recorder.events == ["ready"]
    assert session.modern and session.era == "2026-07-28"
    assert session.protocol_version == "2026-07-28"
    assert session.capabilities == DISCOVERED["capabilities"]
    assert session.server_info == {"name": "modern-server", "version": "3.1"}
    assert session.instructions == "Ask me anything"
    assert session.tools == [ADD, ECHO]
    # No initialize, no initialized: the next message is the listen request for every announced change.
    listen = await link.next()
    assert listen == {
        "jsonrpc": "2.0",
        "id": "brk-4",
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True, "promptsListChanged": True}, "_meta": GATEWAY_META},
    }
    assert session.listen.state == "opening"
    notify(session, "notifications/subscriptions/acknowledged", {"_meta": {eras.META_SUBSCRIPTION_ID: "brk-4"}})
    assert session.listen.state == "open"
    assert session.status()["listen"]["state"] == "open"


async def test_a_provider_announcing_a_change_is_relayed_even_when_the_list_looks_the_same() -> None:
    session, link, recorder = await modern_session()
    listen = await link.next()
    tag = {"_meta": {eras.META_SUBSCRIPTION_ID: listen["id"]}}
    notify(session, "notifications/tools/list_changed", tag)
    listing = await link.next()
    assert listing["method"] == "tools/list"
    answer(session, listing["id"], {"tools": [ADD]})  # added and removed again before the gateway listed
    await asyncio.wait_for(session._relist_task, 1.0)  # type: ignore[arg-type]
    assert recorder.events == ["ready", "tools_changed"]
    # Prompt and resource changes go to the slot, without the gateway's subscription id.
    notify(session, "notifications/prompts/list_changed", tag)
    notify(session, "notifications/resources/updated", {"uri": "file:///a", **tag})
    assert recorder.notifications == [
        {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a"}},
    ]


async def test_subscriptions_reopen_the_listen_with_the_new_resources() -> None:
    uris: list[str] = []
    session, link, _ = await modern_session()
    session.listen_uris = lambda: list(uris)
    first = await link.next()
    uris.append("file:///a")
    session.listen.refresh()
    sent = {message["method"]: message for message in [await link.next(), await link.next()]}
    assert sent["notifications/cancelled"]["params"]["requestId"] == first["id"]
    second = sent["subscriptions/listen"]
    assert second["params"]["notifications"]["resourceSubscriptions"] == ["file:///a"]


async def test_a_listen_that_ends_is_opened_again_and_the_tools_are_listed_after_it() -> None:
    session, link, _ = await modern_session()
    first = await link.next()
    answer(session, first["id"], {"resultType": "complete"})  # the provider ended the stream gracefully
    second = await asyncio.wait_for(link.next(), 2.0)  # after the back-off (at most 0.5 s the first time)
    assert second["method"] == "subscriptions/listen"
    assert session.listen.drops == 1
    notify(session, "notifications/subscriptions/acknowledged", {})
    relist = await link.next()  # nothing is replayed across streams: list again
    assert relist["method"] == "tools/list"


async def test_a_provider_without_listen_is_polled_when_configured() -> None:
    session, link, _ = await modern_session(tools_poll_s=0.05)
    listen = await link.next()
    answer(session, listen["id"], error={"code": -32601, "message": "Method not found"})
    poll = await link.next()
    assert poll["method"] == "tools/list"
    assert session.listen.state == "unsupported"


async def test_heartbeat_of_a_2026_provider_is_a_discover() -> None:
    session, link, _ = await modern_session()
    await link.next()  # the listen request
    assert session.heartbeat() is True
    ping = await link.next()
    assert ping["method"] == "server/discover"
    assert ping["params"] == {"_meta": GATEWAY_META}


async def test_an_untagged_log_message_of_a_2026_provider_goes_to_the_only_caller() -> None:
    session, link, recorder = await modern_session()
    await link.next()  # the listen request (internal: not a caller)
    got: list[JsonObject] = []
    call = asyncio.ensure_future(session.request("tools/call", {"name": "add"}, sink=got.append, relay=NoRelay("test")))
    request = await link.next()
    notify(session, "notifications/message", {"level": "info", "data": "working"})
    assert got == [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}
    ]
    assert recorder.notifications == []
    answer(session, request["id"], {"content": []})
    await call
    # With no caller pending it goes to the slot.
    notify(session, "notifications/message", {"level": "info", "data": "idle"})
    assert len(recorder.notifications) == 1


async def test_closing_the_session_stops_the_listen() -> None:
    session, link, _ = await modern_session()
    await link.next()
    session.link_lost("gone")
    await asyncio.sleep(0)
    assert session.listen._task is None
