"""Names only clients asked for cannot keep a board out, and a refused request keeps no session alive.

A client may name any slot at /<name>/mcp, and its session's open GET stream listens to that slot.
With limits.max_slots full of such names, a provider's attach reclaims the oldest of them (its
clients' sessions end), instead of being refused. A request that another caller sends with someone
else's session id is refused without keeping that session from idling out.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

import aiohttp
import orjson

from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS, PROTOCOL_VERSION
from tests.support.southbound import Boards

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


async def open_session(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """Initialize a session-era session at `url`; the headers its later requests carry."""
    base = {**MCP_HEADERS, **(headers or {})}
    async with http.post(url, data=orjson.dumps(INITIALIZE), headers=base) as response:
        assert response.status == 200, await response.text()
        session_id = response.headers["Mcp-Session-Id"]
        session = {**base, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL_VERSION}
    async with http.post(url, data=orjson.dumps(INITIALIZED), headers=session) as response:
        assert response.status == 202
    return session


async def test_a_board_reclaims_a_slot_only_clients_named_even_with_an_open_stream(
    gateway_factory: GatewayFactory, boards: Boards, http: aiohttp.ClientSession
) -> None:
    gateway = await gateway_factory(limits={"max_slots": 2})
    registry = gateway.gateway.registry
    sessions: list[dict[str, str]] = []
    streams: list[aiohttp.ClientResponse] = []
    try:
        for index in range(2):
            url = f"{gateway.url}/ghost{index}/mcp"
            session = await open_session(http, url)
            stream = await http.get(url, headers={**session, "Accept": "text/event-stream"})
            assert stream.status == 200
            sessions.append(session)
            streams.append(stream)
        await wait_for(lambda: all(registry.slots[f"ghost{i}"].listeners for i in range(2)), what="the listeners")
        assert sorted(registry.slots) == ["ghost0", "ghost1"]

        board = await boards.connect(gateway.url, "/provider/pump-1")
        await wait_ready_slot(gateway, "pump-1")
        assert not board.closed.is_set()
        # The oldest client-only name went; the other stays with its stream.
        assert sorted(registry.slots) == ["ghost1", "pump-1"]
        # The reclaimed slot's stream ends and its session is gone; the other session still answers.
        await asyncio.wait_for(streams[0].content.read(), 5)
        assert streams[0].content.at_eof()
        assert sessions[0]["Mcp-Session-Id"] not in gateway.gateway.sessions.sessions
        ghost1 = f"{gateway.url}/ghost1/mcp"
        async with http.post(ghost1, data=orjson.dumps(PING), headers=sessions[1]) as response:
            assert response.status == 200
        # With room again (ghost1's session ends, its slot is vacant), the ended session gets the 404.
        async with http.delete(ghost1, headers=sessions[1]) as response:
            assert response.status == 200
        async with http.post(f"{gateway.url}/ghost0/mcp", data=orjson.dumps(PING), headers=sessions[0]) as response:
            assert response.status == 404
            body = await response.json()
            assert body["error"]["message"] == "Unknown or expired session; send initialize to start a new one"
    finally:
        for stream in streams:
            stream.close()


async def test_a_slot_a_provider_held_keeps_its_listeners_at_max_slots(
    gateway_factory: GatewayFactory, boards: Boards, http: aiohttp.ClientSession
) -> None:
    gateway = await gateway_factory(limits={"max_slots": 1})
    first = await boards.connect(gateway.url, "/provider/pump-1")
    await wait_ready_slot(gateway, "pump-1")
    url = f"{gateway.url}/pump-1/mcp"
    session = await open_session(http, url)
    stream = await http.get(url, headers={**session, "Accept": "text/event-stream"})
    try:
        await first.close()
        await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="pump-1 to leave")
        # A real board's slot, watched by a client: the newcomer is refused, not the watcher ended.
        refused = await boards.connect(gateway.url, "/provider/pump-2")
        assert await refused.wait_closed() == (
            1008,
            "Too many slots (limit 1); raise limits.max_slots. Slot: pump-2",
        )
        async with http.post(url, data=orjson.dumps(PING), headers=session) as response:
            assert response.status == 200
    finally:
        stream.close()


ALICE = secrets.token_urlsafe(32)
BOB = secrets.token_urlsafe(32)


async def test_a_request_refused_for_another_caller_does_not_keep_the_session_alive(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    tokens = [
        {"name": name, "scopes": ["*"], "sha256": hashlib.sha256(token.encode()).hexdigest()}
        for name, token in (("alice", ALICE), ("bob", BOB))
    ]
    gateway = await gateway_factory(auth={"tokens": tokens}, limits={"session_idle_timeout_s": 1.0})
    url = f"{gateway.url}/s1/mcp"
    alice = await open_session(http, url, {"Authorization": f"Bearer {ALICE}"})
    bob = {**alice, "Authorization": f"Bearer {BOB}"}
    # Bob keeps sending with Alice's session id, well past her idle timeout: refused (403), and once
    # the session has idled out, unknown (404).
    statuses = []
    for _ in range(15):
        async with http.post(url, data=orjson.dumps(PING), headers=bob) as response:
            statuses.append(response.status)
        await asyncio.sleep(0.2)
    assert statuses[0] == 403 and set(statuses) <= {403, 404}
    async with http.post(url, data=orjson.dumps(PING), headers=alice) as response:
        assert response.status == 404
        body = await response.json()
        assert body["error"]["message"] == "Unknown or expired session; send initialize to start a new one"
