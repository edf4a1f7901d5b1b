"""Where a provider's notification tagged with a request the gateway no longer waits for goes
(docs/protocol-clients.md, "Request-tied notifications").

A hand-written board on /provider/<slot> tags a log line with
`_meta["io.github.mcp-gateway/relatedRequest"]` = the gateway id of a call whose caller cancelled it,
whose deadline passed, or that it answered already, as the Python provider API tags every
notification written while serving a request. The line may hold that caller's data: it reaches
nobody, neither the caller nor another principal's session listening on the slot. Two principals
(static tokens) on raw WebSocket sessions listen; an untagged line sent afterwards, once nothing is
pending, reaches the listener and shows it has read everything the board sent before.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.core.input_required import CANNOT_ASK
from gateway.core.relay import RELATED_REQUEST_KEY
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.support.southbound import Boards, ScriptedBoard, ws_url
from tests.unit.test_provider_session import make_session, notify

pytestmark = pytest.mark.timeout(60)

SLOT = "leak"
CALLER = secrets.token_urlsafe(32)
BYSTANDER = secrets.token_urlsafe(32)
SECRET = "SECRET of the caller: recipe=42"
SENTINEL = "the server's own line"
DEADLINE_MS = 800

Message = dict[str, Any]


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def gateway_with_two_principals(gateway_factory: GatewayFactory) -> GatewayServer:
    auth = {"tokens": [{"name": "alice", "sha256": sha(CALLER)}, {"name": "bob", "sha256": sha(BYSTANDER)}]}
    return await gateway_factory(slots={"declared": {SLOT: {"request_timeout_ms": DEADLINE_MS}}}, auth=auth)


class LoggingBoard(ScriptedBoard):
    """A scripted board that declares logging, as a board that logs does."""

    @staticmethod
    def _initialize_result(request: Message) -> Message:
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "logging-board", "version": "1.0"},
        }


class WsClient:
    """A session-era client on the slot's raw WebSocket way in that keeps every message it receives."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.received: list[Message] = []
        self._arrived = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            if frame.type is aiohttp.WSMsgType.TEXT:
                self.received.append(orjson.loads(frame.data))
                self._arrived.set()

    async def send(self, message: Message) -> None:
        await self.ws.send_str(orjson.dumps(message).decode())

    async def wait_for(self, match: Any, what: str, timeout: float = 5.0) -> Message:
        async def found() -> Message:
            while True:
                for message in self.received:
                    if match(message):
                        return message
                self._arrived.clear()
                await self._arrived.wait()

        try:
            return await asyncio.wait_for(found(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {what}; received {self.received!r}") from None

    def log_lines(self) -> list[Any]:
        return [m["params"].get("data") for m in self.received if m.get("method") == "notifications/message"]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


@asynccontextmanager
async def client(http: aiohttp.ClientSession, gateway: GatewayServer, token: str) -> AsyncIterator[WsClient]:
    ws = await http.ws_connect(ws_url(gateway.url, f"/{SLOT}"), headers={"Authorization": f"Bearer {token}"})
    session = WsClient(ws)
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        await session.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        await session.wait_for(lambda m: m.get("id") == 0, "initialize answer")
        await session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield session
    finally:
        await session.close()


@asynccontextmanager
async def two_principals_on_a_board(
    gateway_factory: GatewayFactory, boards: Boards
) -> AsyncIterator[tuple[ScriptedBoard, WsClient, WsClient]]:
    """A logging board on the slot, and two principals' sessions on it: the bystander's, the caller's."""
    gateway = await gateway_with_two_principals(gateway_factory)
    board = await boards.connect(gateway.url, f"/provider/{SLOT}", LoggingBoard)
    await wait_ready_slot(gateway, SLOT)
    async with (
        aiohttp.ClientSession() as http,
        client(http, gateway, BYSTANDER) as bystander,
        client(http, gateway, CALLER) as caller,
    ):
        yield board, bystander, caller


async def only_the_servers_own_line_was_heard(board: ScriptedBoard, bystander: WsClient) -> None:
    """Nothing pending or held: an untagged line is the server's own, for the listeners; once it is
    heard, the bystander has read everything the board sent before, and that line alone reached it."""
    await board.send(log_line(SENTINEL))
    await bystander.wait_for(lambda m: m.get("params", {}).get("data") == SENTINEL, "server's own line")
    await asyncio.sleep(0.2)  # the caller's socket, read by another task, catches up
    assert bystander.log_lines() == [SENTINEL]


def log_line(data: str, related: Any = None) -> Message:
    params: Message = {"level": "info", "logger": "work", "data": data}
    if related is not None:
        params["_meta"] = {RELATED_REQUEST_KEY: related}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def cancels(request_id: Any, message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("method") == "notifications/cancelled"
        and message["params"]["requestId"] == request_id
    )


def answers(request_id: int, message: Message) -> bool:
    return message.get("id") == request_id and "method" not in message


@pytest.mark.parametrize("given_up", ["cancelled", "deadline"])
async def test_a_tagged_line_of_a_given_up_call_reaches_nobody(
    gateway_factory: GatewayFactory, boards: Boards, given_up: str
) -> None:
    async with two_principals_on_a_board(gateway_factory, boards) as (board, bystander, caller):
        await caller.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "valve"}})
        forwarded = await board.request("tools/call")
        if given_up == "cancelled":
            await caller.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
            await board.take(partial(cancels, forwarded["id"]), what="the gateway's notifications/cancelled")
        else:
            told = await caller.wait_for(partial(answers, 7), "deadline error")
            assert told["error"]["data"]["reason"] == "deadline", told
        # The board ignores the cancel (or is slow) and logs its caller's data, tagged with the call.
        await board.send(log_line(SECRET, forwarded["id"]))
        await board.reply(forwarded, {"content": [{"type": "text", "text": "done"}]})
        # Answered: a tag naming it still belongs to that call.
        await board.send(log_line(SECRET, forwarded["id"]))
        await only_the_servers_own_line_was_heard(board, bystander)
        assert SECRET not in caller.log_lines()


async def test_a_tagged_line_of_a_call_answered_reaches_nobody(gateway_factory: GatewayFactory, boards: Boards) -> None:
    async with two_principals_on_a_board(gateway_factory, boards) as (board, bystander, caller):
        await caller.send({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "valve"}})
        forwarded = await board.request("tools/call")
        await board.send(log_line("working", forwarded["id"]))
        await board.reply(forwarded, {"content": [{"type": "text", "text": "done"}]})
        assert "result" in await caller.wait_for(partial(answers, 8), "the call's answer")
        # A background task of the board logs on under the answered call's tag.
        await board.send(log_line(SECRET, forwarded["id"]))
        await only_the_servers_own_line_was_heard(board, bystander)
        assert caller.log_lines()[:1] == ["working"]  # the line while its call ran is the caller's
        assert SECRET not in caller.log_lines()


async def test_a_tag_of_another_form_is_routed_as_untagged(gateway_factory: GatewayFactory, boards: Boards) -> None:
    """A tag the gateway cannot have made (its ids are "brk-<n>" here) names no request of its own:
    the line is routed as one with no tag: the caller's while only its call is pending, the server's
    (for the listeners) once nothing is."""
    async with two_principals_on_a_board(gateway_factory, boards) as (board, bystander, caller):
        await caller.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "valve"}})
        forwarded = await board.request("tools/call")
        await board.send(log_line(SECRET, "job-17"))
        await board.reply(forwarded, {"content": [{"type": "text", "text": "done"}]})
        await caller.wait_for(partial(answers, 9), "the call's answer")
        await board.send(log_line(SENTINEL, "job-17"))
        heard = await bystander.wait_for(lambda m: m.get("method") == "notifications/message", "the line")
        assert heard["params"] == {"level": "info", "logger": "work", "data": SENTINEL}
        await asyncio.sleep(0.2)
        assert bystander.log_lines() == [SENTINEL]
        assert caller.log_lines()[:1] == [SECRET]


async def test_a_tagged_line_of_a_client_request_without_a_stream_reaches_nobody() -> None:
    """A client's request whose way in gave it nowhere to send notifications: its lines go to nobody,
    never to the slot's listeners."""
    session, link, recorder = make_session()
    call = asyncio.create_task(session.request("tools/call", {"name": "valve"}, relay=CANNOT_ASK))
    sent = await link.next()
    notify(
        session, "notifications/message", {"level": "info", "data": SECRET, "_meta": {RELATED_REQUEST_KEY: sent["id"]}}
    )
    assert recorder.notifications == []
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": {}}))
    await call


async def test_on_a_slot_with_numeric_ids_an_integer_tag_naming_no_request_reaches_nobody() -> None:
    session, link, recorder = make_session(numeric_ids=True)
    call = asyncio.create_task(session.request("tools/call", {"name": "valve"}, relay=CANNOT_ASK))
    sent = await link.next()
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": {}}))
    await call
    notify(
        session, "notifications/message", {"level": "info", "data": SECRET, "_meta": {RELATED_REQUEST_KEY: sent["id"]}}
    )
    notify(session, "notifications/message", {"level": "info", "data": SECRET, "_meta": {RELATED_REQUEST_KEY: 404}})
    assert recorder.notifications == []
