"""The provider WebSocket ways in, `/provider/<slot>` and `/providers` (docs/protocol.md, "WebSocket
ways in", "Liveness and takeover").

Real SDK servers published with gateway.publish, real SDK clients in both eras, and raw sockets
where a test needs exact bytes, close codes and reasons.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from aiohttp import web
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from yarl import URL

from gateway.app import GatewayServer
from gateway.publish import Publisher
from gateway.publish.websocket import SPOKEN_VERSIONS
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.support.servers import demo_server
from tests.support.southbound import Boards, provider_status, ws_url

MODES = ["legacy", "2026-07-28"]


async def call_add(gateway: GatewayServer, slot_path: str, mode: str = "legacy") -> Any:
    async with Client(f"{gateway.url}/{slot_path}/mcp", mode=mode) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    return result.structured_content


async def all_tool_names(gateway: GatewayServer, mode: str = "legacy") -> set[str]:
    async with Client(f"{gateway.url}/_all/mcp", mode=mode) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


# -- serving ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_dedicated_and_multiplexed_providers_serve_sdk_clients(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    await publishers.start(gateway, "ded-1", demo_server("ded"))
    await publishers.start_multiplexed(gateway, {"mux-a": demo_server("a"), "mux-b": demo_server("b")})
    for slot in ("ded-1", "mux-a", "mux-b"):
        async with Client(f"{gateway.url}/{slot}/mcp", mode=mode) as client:
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} == {"add", "echo", "sleep", "fail"}
            result = await client.call_tool("add", {"a": 20, "b": 22})
            assert result.structured_content == {"result": 42}
            slept = await client.call_tool("sleep", {"seconds": 0})
            assert slept.content[0].text == "slept 0.0"  # type: ignore[union-attr]
    dedicated, multiplexed = await provider_status(gateway.url, "ded-1"), await provider_status(gateway.url, "mux-a")
    assert dedicated["transport"] == "websocket"
    assert dedicated["provider_url"] == gateway.url.replace("http://", "ws://") + "/provider/ded-1"
    assert multiplexed["transport"] == "websocket-mux"
    # Where the board comes back: the socket it holds, not a dedicated one it never dialled.
    assert multiplexed["provider_url"] == gateway.url.replace("http://", "ws://") + "/providers"


SITE: contextvars.ContextVar[str] = contextvars.ContextVar("site", default="unset")


def server_with_a_lifespan_context(name: str) -> MCPServer:
    """A server whose lifespan sets a context variable its tool reads, as SDK servers may."""

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict[str, str]]:
        token = SITE.set(f"plant-{name}")
        try:
            yield {}
        finally:
            SITE.reset(token)

    server = MCPServer(name, lifespan=lifespan)

    @server.tool()
    async def site() -> str:
        """The context variable the lifespan set."""
        return SITE.get()

    return server


async def test_tools_see_the_context_their_server_lifespan_set(gateway: GatewayServer, publishers: Publishers) -> None:
    """Handlers start in the SDK session's context (as under the SDK's own stream reader), not in the
    link reader's: a lifespan's context variables reach them over both ways in."""
    await publishers.start(gateway, "ded-ctx", server_with_a_lifespan_context("ded"))
    await publishers.start_multiplexed(gateway, {"mux-ctx": server_with_a_lifespan_context("mux")})
    for slot, expected in (("ded-ctx", "plant-ded"), ("mux-ctx", "plant-mux")):
        async with Client(f"{gateway.url}/{slot}/mcp", mode="2026-07-28") as client:
            result = await client.call_tool("site", {})
            assert result.content[0].text == expected  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_aggregate_is_opt_in_per_slot(gateway: GatewayServer, publishers: Publishers, mode: str) -> None:
    await publishers.start(gateway, "joined", demo_server("joined"), aggregate=True)
    await publishers.start(gateway, "private", demo_server("private"))
    await publishers.start_multiplexed(gateway, {"mux-joined": demo_server("m")}, aggregate=True)
    await publishers.start_multiplexed(gateway, {"mux-private": demo_server("p")})
    names = await all_tool_names(gateway, mode)
    assert {"joined-add", "joined-sleep", "mux-joined-add"} <= names
    assert not any(name.startswith(("private-", "mux-private-")) for name in names)
    async with Client(f"{gateway.url}/_all/mcp", mode=mode) as client:
        result = await client.call_tool("mux-joined-add", {"a": 1, "b": 2})
        assert result.structured_content == {"result": 3}
    assert (await provider_status(gateway.url, "joined"))["aggregate"] is True
    assert (await provider_status(gateway.url, "private"))["aggregate"] is False


async def test_hello_in_register_frame_is_shown_in_provider_status(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    hello = {"device_id": "24:6f:28:aa:bb:cc", "firmware": {"name": "pump-fw", "version": "1.4.2"}}
    await publishers.start(gateway, "pump-1", demo_server("pump"), hello=hello)
    await publishers.start_multiplexed(gateway, {"pump-2": demo_server("pump")}, hello={"pump-2": hello})
    for slot in ("pump-1", "pump-2"):
        status = await provider_status(gateway.url, slot)
        assert status["connected"] is True
        # The Python provider API adds the protocol versions an SDK server speaks (docs/protocol.md,
        # "Hello `versions`").
        assert status["hello"] == {**hello, "versions": SPOKEN_VERSIONS}
        assert status["aggregate"] is False  # a hello alone does not opt in


async def read_events(response: aiohttp.ClientResponse, into: list[dict[str, Any]]) -> None:
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data:") and line[5:].strip():
            into.append(orjson.loads(line[5:].strip()))


@pytest.mark.parametrize("path", ["/provider/pump-1", "/providers"])
async def test_register_frame_is_consumed_not_forwarded(gateway: GatewayServer, boards: Boards, path: str) -> None:
    """A client listening on the slot before the board connects sees the board's log, never its register."""
    base = f"{gateway.url}/pump-1/mcp"
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    async with boards.http.post(base, json=initialize, headers=headers) as response:
        assert response.status == 200
        headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
        headers["MCP-Protocol-Version"] = "2025-06-18"
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with boards.http.post(base, json=initialized, headers=headers) as response:
        assert response.status == 202
    events: list[dict[str, Any]] = []
    stream = await boards.http.get(base, headers={**headers, "Accept": "text/event-stream"})
    reader = asyncio.create_task(read_events(stream, events))
    try:
        register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"hello": {"device_id": "d1"}}}
        first = register if path != "/providers" else {"provider": "pump-1", "payload": register}
        board = await boards.connect(gateway.url, path, first_frame=first)
        await wait_ready_slot(gateway, "pump-1")
        # A second register later on (a new hello) is consumed as well.
        await board.send({**register, "params": {"hello": {"device_id": "d2"}}}, "pump-1")
        log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "up"}}
        await board.send(log, "pump-1")
        await wait_for(lambda: any(e.get("method") == "notifications/message" for e in events), what="log event")
        assert not any(e.get("method") == "notifications/register" for e in events), events
        assert (await provider_status(gateway.url, "pump-1"))["hello"] == {"device_id": "d2"}
    finally:
        reader.cancel()
        stream.close()


@pytest.mark.parametrize("path", ["/provider/counter", "/providers"])
async def test_register_frame_asking_for_numeric_ids_is_followed_from_the_first_request(
    gateway: GatewayServer, boards: Boards, path: str
) -> None:
    """A board whose register frame says `ids: "numeric"` never sees a `brk-` id, not even on the
    gateway's own initialize (on /provider/<slot> the slot is attached before that frame is read;
    docs/protocol.md, "Requests and ids", "Hello")."""
    hello = {"device_id": "24:6f:28:00:00:01", "ids": "numeric", "schema": "sha256:abc"}
    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True, "hello": hello}}
    first = register if path != "/providers" else {"provider": "counter", "payload": register}
    board = await boards.connect(gateway.url, path, first_frame=first)
    await wait_ready_slot(gateway, "counter")
    requests = [message for _, message in board.received if isinstance(message, dict) and "id" in message]
    assert [message["method"] for message in requests] == ["initialize", "tools/list"]
    first_id, second_id = (message["id"] for message in requests)
    assert type(first_id) is int and second_id == first_id + 1  # integers, never "brk-<n>"
    status = await provider_status(gateway.url, "counter")
    assert status["id_style"] == "numeric"
    assert status["hello"] == hello
    assert status["aggregate"] is True

    for url in (f"{gateway.url}/counter/mcp", f"{gateway.url}/_all/mcp"):
        async with Client(url, mode="legacy") as client:
            tool = "valve" if url.endswith("/counter/mcp") else "counter-valve"
            call = asyncio.create_task(client.call_tool(tool, {"open": True}))
            request = await board.request("tools/call")
            assert type(request["id"]) is int
            await board.reply(request, {"content": [{"type": "text", "text": "open"}]}, "counter")
            result = await asyncio.wait_for(call, 5.0)
        assert not result.is_error
        assert result.content[0].type == "text" and result.content[0].text == "open"


async def test_percent_encoded_slot_name_is_one_slot(gateway: GatewayServer, publishers: Publishers) -> None:
    publisher = await publishers.start(gateway, "a/b", demo_server("ab"))
    assert publisher.url().endswith("/provider/a%2Fb")
    assert await call_add(gateway, "a%2Fb") == {"result": 5}
    status = await provider_status(gateway.url, "a/b")
    assert status["name"] == "a/b"
    assert status["connected"] is True
    assert "a" not in gateway.gateway.registry.slots


# -- refusals -----------------------------------------------------------------------------------


def upgrade_headers() -> dict[str, str]:
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    }


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("/provider", "Missing slot name"),
        ("/provider/", "Empty slot name"),
        ("/provider/a/b", "Too many path segments"),
        ("/provider/a/", "Too many path segments"),
    ],
)
async def test_path_without_exactly_one_slot_is_http_400(
    gateway: GatewayServer, boards: Boards, path: str, hint: str
) -> None:
    async with boards.http.get(gateway.url + path, headers=upgrade_headers()) as response:
        assert response.status == 400
        assert response.content_type == "application/json"
        body = await response.json()
    assert body["error"] == "bad_provider_path"
    assert body["error_description"].startswith(hint)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await boards.http.ws_connect(ws_url(gateway.url, path))
    assert refused.value.status == 400


@pytest.mark.parametrize(
    ("name", "reason_start"),
    [
        ("_all", 'Provider "_all" is reserved'),
        ("_broker", 'Provider "_broker" is reserved'),
        ("_x", 'Provider "_x" is reserved'),
        ("a" * 65, "Slot name is 65 bytes; the limit is 64"),
        ("é" * 33, "Slot name is 66 bytes; the limit is 64"),
        ("_" + "é" * 31, 'Provider "_ééé'),  # a reason longer than a close frame holds is cut
    ],
)
async def test_unusable_names_are_closed_1008_with_short_reason(
    gateway: GatewayServer, boards: Boards, name: str, reason_start: str
) -> None:
    encoded = quote(name, safe="")
    board = await boards.connect(gateway.url, f"/provider/{encoded}")
    code, reason = await board.wait_closed()
    assert code == 1008
    assert reason.startswith(reason_start)
    assert len(reason.encode()) <= 123
    if name.startswith("_é"):
        assert reason.endswith("...")  # cut on a character boundary, so it still decodes as UTF-8
    assert name not in gateway.gateway.registry.slots


def every_byte_encoded(name: str) -> str:
    """The name with every UTF-8 byte percent-encoded, dots included (`%2E%2E`), as a board may send it."""
    return "".join(f"%{byte:02X}" for byte in name.encode())


INVISIBLE_AND_DOT_NAMES = [
    ("pump\u00851", "Slot name contains control characters (U+0085 at character 5); use printable characters only"),
    ("pump\u202e1", "Slot name contains bidirectional controls (U+202E at character 5); use printable characters only"),
    ("pump\u200b1", "Slot name contains format characters (U+200B at character 5); use printable characters only"),
    ("..", 'Slot name ".." is a path step in URLs; pick another name, e.g. pump-1'),
    (".", 'Slot name "." is a path step in URLs; pick another name, e.g. pump-1'),
]


@pytest.mark.parametrize(("name", "reason"), INVISIBLE_AND_DOT_NAMES)
async def test_invisible_characters_and_dot_segments_on_the_dedicated_path_are_closed_1008(
    gateway: GatewayServer, boards: Boards, name: str, reason: str
) -> None:
    # Encoded, so that no client library resolves "/provider/%2E%2E" to "/" before sending it.
    url = URL(ws_url(gateway.url, "/provider/" + every_byte_encoded(name)), encoded=True)
    ws = await boards.http.ws_connect(url, autoping=False)
    try:
        message = await ws.receive(timeout=5)
        assert message.type is aiohttp.WSMsgType.CLOSE
        assert (message.data, message.extra) == (1008, reason)
    finally:
        await ws.close()
    assert name not in gateway.gateway.registry.slots
    assert (await scrape(boards.http, gateway)).get("mcpgw_provider_refusals_total", reason="bad_name") == 1


async def test_invisible_characters_and_dot_segments_in_envelopes_are_refused_and_never_advertised(
    gateway: GatewayServer, boards: Boards
) -> None:
    board = await boards.connect(gateway.url, "/providers")
    for name, reason in INVISIBLE_AND_DOT_NAMES:
        await board.send({"jsonrpc": "2.0", "method": "notifications/register"}, name)
        refusal = await board.take(lambda m: isinstance(m, dict) and m.get("id", 0) is None, what="the refusal")
        assert refusal["error"] == {"code": -32000, "message": reason}
        assert board.received[-1][0] == name  # addressed to the name the board used
    await board.send({"jsonrpc": "2.0", "method": "notifications/register"}, "mux-ok")
    await wait_ready_slot(gateway, "mux-ok")  # the socket keeps serving its other slots
    assert sorted(gateway.gateway.registry.slots) == ["mux-ok"]
    async with boards.http.get(f"{gateway.url}/mcp-servers") as response:
        servers = await response.json()
    assert [server["url"] for server in servers] == [f"{gateway.url}/mux-ok/mcp"]  # no http://h/../mcp


async def test_longest_names_are_accepted(gateway: GatewayServer, publishers: Publishers) -> None:
    for name in ("a" * 64, "é" * 32):
        await publishers.start(gateway, name, demo_server("long"))
        status = await provider_status(gateway.url, name)
        assert status["connected"] is True


async def test_only_declared_slots_refuse_other_names(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards
) -> None:
    gateway = await gateway_factory(slots={"only_declared": True, "declared": {"pump-1": {}, "pump-2": {}}})
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    assert await call_add(gateway, "pump-1") == {"result": 5}

    board = await boards.connect(gateway.url, "/provider/pump-9")
    code, reason = await board.wait_closed()
    assert code == 1008
    assert reason == "Slot not declared on this gateway; add it under [slots.declared] or fix the name. Slot: pump-9"
    # A 64-byte name is cut, the fix is not.
    board = await boards.connect(gateway.url, "/provider/" + "p" * 64)
    code, reason = await board.wait_closed()
    assert code == 1008 and len(reason.encode()) <= 123
    assert reason.startswith(
        "Slot not declared on this gateway; add it under [slots.declared] or fix the name. Slot: p"
    )

    mux = await boards.connect(gateway.url, "/providers")
    await mux.send({"jsonrpc": "2.0", "method": "notifications/register"}, "pump-9")
    refusal = await mux.take(lambda m: m.get("id", 0) is None, what="the refusal envelope")
    assert refusal["error"]["code"] == -32001
    assert refusal["error"]["message"].endswith("or fix the name. Slot: pump-9")
    # The same socket may still publish a declared slot.
    await mux.send({"jsonrpc": "2.0", "method": "notifications/register"}, "pump-2")
    await wait_ready_slot(gateway, "pump-2")
    assert not mux.closed.is_set()


async def test_envelope_on_dedicated_path_is_a_framing_mismatch(gateway: GatewayServer, boards: Boards) -> None:
    envelope = {"provider": "other", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, "/provider/pump-1", first_frame=envelope)
    code, reason = await board.wait_closed()
    assert code == 1008
    assert reason.startswith("Envelope frame on slot-scoped path /provider/pump-1")
    assert "/providers" in reason
    # The explanation comes in the framing the peer speaks: an envelope addressed to the announced slot.
    answers = [text for text in board.texts if text.startswith('{"provider":"other"')]
    assert len(answers) == 1
    answer = orjson.loads(answers[0])
    assert answer["payload"]["id"] is None
    assert answer["payload"]["error"]["code"] == -32000
    assert answer["payload"]["error"]["message"].startswith('Provider "pump-1" is registered on the slot-scoped path')
    assert not (await provider_status(gateway.url, "pump-1"))["connected"]


@pytest.mark.parametrize("slot", ["p" * 64, "é" * 32])
async def test_framing_mismatch_reason_names_both_fixes_for_the_longest_slot_names(
    gateway: GatewayServer, boards: Boards, slot: str
) -> None:
    """The reason fits 123 bytes and names both fixes; the slot quote is what gets cut (docs/protocol.md,
    "Framing mismatch (first frame only)")."""
    envelope = {"provider": "other", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, f"/provider/{quote(slot, safe='')}", first_frame=envelope)
    code, reason = await board.wait_closed()
    assert code == 1008
    assert len(reason.encode("utf-8")) <= 123
    assert reason.startswith("Envelope frame on slot-scoped path /provider/" + slot[:8])
    assert "...: " in reason  # the slot is cut, visibly
    assert reason.endswith(": use DirectTransport here, or connect to /providers")


async def test_bare_jsonrpc_on_multiplexed_path_is_a_framing_mismatch(gateway: GatewayServer, boards: Boards) -> None:
    first = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
    board = await boards.connect(gateway.url, "/providers", first_frame=first)
    code, reason = await board.wait_closed()
    assert code == 1008
    assert reason == (
        "Plain JSON-RPC on multiplex path /providers: use MultiplexTransport here, or connect to /provider/<name>"
    )
    assert len(board.texts) == 1
    answer = orjson.loads(board.texts[0])
    assert list(answer) == ["jsonrpc", "id", "error"]
    assert answer["id"] is None
    assert answer["error"]["code"] == -32000
    assert 'plain JSON-RPC frame (method "notifications/register")' in answer["error"]["message"]


async def test_refused_slot_on_multiplexed_link_keeps_its_other_slots(
    gateway: GatewayServer, publishers: Publishers, boards: Boards
) -> None:
    await publishers.start(gateway, "held", demo_server("held"))
    publisher = await publishers.start_multiplexed(
        gateway, {"mux-ok": demo_server("ok"), "_broker": demo_server("x"), "held": demo_server("y")}, wait_ready=False
    )
    await wait_ready_slot(gateway, "mux-ok")
    await wait_for(lambda: len(publisher.errors) == 2, what="two refusals")
    refusals = {error["slot"]: error for error in publisher.errors}
    assert refusals["_broker"]["code"] == -32000
    assert refusals["_broker"]["message"] == 'Provider "_broker" is reserved by the broker'
    assert refusals["held"]["code"] == -32000
    assert refusals["held"]["message"].startswith("Slot already held by a live provider")
    assert await call_add(gateway, "mux-ok") == {"result": 5}
    assert (await provider_status(gateway.url, "held"))["transport"] == "websocket"

    # The exact bytes of a refusal envelope, and a socket that keeps serving afterwards.
    board = await boards.connect(gateway.url, "/providers")
    await board.send({"jsonrpc": "2.0", "method": "notifications/register"}, "_all")
    await board.take(lambda m: m.get("id", 0) is None, what="the refusal")
    assert board.texts[0] == (
        '{"provider":"_all","payload":{"jsonrpc":"2.0","id":null,"error":'
        '{"code":-32000,"message":"Provider \\"_all\\" is reserved by the broker"}}}'
    )
    await board.send({"jsonrpc": "2.0", "method": "notifications/register"}, "raw-ok")
    await wait_ready_slot(gateway, "raw-ok")


# -- size and liveness --------------------------------------------------------------------------


TOO_BIG_REASON = "Frame over 4096 bytes; raise limits.max_frame_bytes or send smaller messages"


def sized_answer(request_id: str, size: int) -> str:
    """A tools/call answer of exactly `size` bytes."""
    frame = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": ""}]}})
    return frame.decode().replace('"text":""', '"text":"' + "x" * (size - len(frame)) + '"')


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # echo logs via ctx.info
async def test_frame_over_the_limit_closes_1009(
    gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards
) -> None:
    gateway = await gateway_factory(limits={"max_frame_bytes": 4096})
    await publishers.start(gateway, "bystander", demo_server("b"))
    board = await boards.connect(gateway.url, "/provider/big")
    await wait_ready_slot(gateway, "big")
    # The limit is the largest message accepted: an answer of exactly 4096 bytes reaches its caller.
    async with Client(f"{gateway.url}/big/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("valve", {"open": True}))
        request = await board.request("tools/call")
        await board.send_raw(sized_answer(request["id"], 4096))
        result = await asyncio.wait_for(call, 5.0)
    assert result.content[0].type == "text" and set(result.content[0].text) == {"x"}
    await board.send_raw(sized_answer("brk-99", 4097))
    code, reason = await board.wait_closed()
    assert code == 1009
    # At most 123 bytes, and what to do (docs/protocol.md, "Size").
    assert reason == TOO_BIG_REASON
    await wait_for(lambda: gateway.gateway.registry.slots["big"].live is None, what="slot freed")
    status = await provider_status(gateway.url, "big")
    assert status["last_disconnect_reason"] == f"{TOO_BIG_REASON} (close code 1009)"

    # The same on a multiplexed socket, where the envelope counts too.
    mux = await boards.connect(gateway.url, "/providers")
    await mux.send({"jsonrpc": "2.0", "method": "notifications/register"}, "big-mux")
    await wait_ready_slot(gateway, "big-mux")
    await mux.send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x" * 4096}}, "big-mux")
    assert await mux.wait_closed() == (1009, TOO_BIG_REASON)
    await wait_for(lambda: gateway.gateway.registry.slots["big-mux"].live is None, what="mux slot freed")

    # An SDK provider whose answer is too big for the gateway, even with its own max_frame_bytes set higher:
    # the publisher keeps to the bound the gateway announces, so that call alone fails and the link stays.
    publisher = await publishers.start(gateway, "chatty", demo_server("c"), reconnect=False, max_frame_bytes=1_048_576)
    async with Client(f"{gateway.url}/chatty/mcp", mode="legacy") as client:
        with pytest.raises(Exception, match="Response too large"):
            await client.call_tool("echo", {"text": "y" * 6000})
        assert (await client.call_tool("echo", {"text": "short"})).content
    assert publisher.last_close is None and publisher.connections == 1
    assert await call_add(gateway, "bystander") == {"result": 5}
    metrics = await scrape(boards.http, gateway)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_frame_bytes") == 2


@pytest.mark.parametrize("path", ["/provider/cut", "/providers"])
async def test_a_cut_connection_is_logged_as_such_and_a_closed_one_with_its_code(
    gateway: GatewayServer, boards: Boards, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.slots")
    register = {"jsonrpc": "2.0", "method": "notifications/register"}
    first = register if path != "/providers" else {"provider": "cut", "payload": register}
    board = await boards.connect(gateway.url, path, first_frame=first)
    await wait_ready_slot(gateway, "cut")
    transport = board.ws.get_extra_info("socket")
    assert transport is not None
    transport.shutdown(socket.SHUT_RDWR)  # a board reset: no close frame
    await wait_for(lambda: gateway.gateway.registry.slots["cut"].live is None, what="the slot to be freed")
    left = [record.getMessage() for record in caplog.records if record.getMessage().startswith("provider left")]
    assert left == ["provider left slot cut: connection lost without a close frame"]
    assert (await provider_status(gateway.url, "cut"))["last_disconnect_reason"] == (
        "connection lost without a close frame"
    )

    board = await boards.connect(gateway.url, path, first_frame=first)
    await wait_ready_slot(gateway, "cut")
    await board.ws.close(code=1001)
    await wait_for(lambda: gateway.gateway.registry.slots["cut"].live is None, what="the slot to be freed again")
    assert (await provider_status(gateway.url, "cut"))["last_disconnect_reason"] == (
        "provider closed the connection (close code 1001)"
    )


HEARTBEAT = {"providers": {"heartbeat_interval_s": 0.25}}


@pytest.mark.parametrize("path", ["/provider/silent", "/providers"])
async def test_provider_that_never_answers_pings_is_dropped(
    gateway_factory: GatewayFactory, boards: Boards, path: str
) -> None:
    gateway = await gateway_factory(**HEARTBEAT)
    first = {"provider": "silent", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, path, first_frame=first if path == "/providers" else None)
    await wait_ready_slot(gateway, "silent")
    board.answers_pings = False
    await wait_for(lambda: gateway.gateway.registry.slots["silent"].live is None, what="silent slot to be freed")
    assert board.pings_seen >= 1
    status = await provider_status(gateway.url, "silent")
    assert status["connected"] is False
    assert "heartbeat" in status["last_disconnect_reason"]
    if path == "/providers":
        # Each slot of the socket is told why it lost the slot, then the dead socket is closed.
        refusal = await board.take(lambda m: m.get("id", 0) is None, what="the slot's error envelope")
        assert "heartbeat" in refusal["error"]["message"]
    code, reason = await board.wait_closed()
    assert code == 1008
    assert "heartbeat" in reason


async def test_a_provider_that_never_answers_initialize_is_closed_naming_the_handshake_deadline(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    gateway = await gateway_factory(providers={"initialize_timeout_ms": 300, "request_timeout_ms": 5000})
    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"hello": {"device_id": "x"}}}
    board = await boards.connect(gateway.url, "/provider/noinit", first_frame=register)
    board.handshake = False  # it hears initialize and never answers
    code, reason = await board.wait_closed()
    # The setting that bounds the handshake, whole, within a close frame's 123 bytes; not request_timeout_ms.
    assert (code, reason) == (
        1008,
        "Provider must answer initialize within 300ms (providers.initialize_timeout_ms); it sent no answer",
    )
    status = await provider_status(gateway.url, "noinit")
    assert status["last_disconnect_reason"] == reason
    assert "initialize_timeout_ms" in status["last_error"] and "request_timeout_ms" not in status["last_error"]


async def test_providers_that_answer_pings_stay(gateway_factory: GatewayFactory, publishers: Publishers) -> None:
    gateway = await gateway_factory(**HEARTBEAT)
    dedicated = await publishers.start(gateway, "alive-1", demo_server("a"))
    multiplexed = await publishers.start_multiplexed(gateway, {"alive-2": demo_server("b"), "alive-3": demo_server()})
    await asyncio.sleep(1.3)  # five heartbeat sweeps
    assert dedicated.connections == 1
    assert multiplexed.connections == 1
    for slot in ("alive-1", "alive-2", "alive-3"):
        status = await provider_status(gateway.url, slot)
        assert status["connected"] is True
        assert status["heartbeat_misses"] == 0
        assert await call_add(gateway, slot) == {"result": 5}


def broker_initialize(version: str) -> bytes:
    """The initialize a gateway sends a provider first (id brk-1)."""
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}
    return orjson.dumps({"jsonrpc": "2.0", "id": "brk-1", "method": "initialize", "params": params})


@contextlib.asynccontextmanager
async def stand_in_gateway(endpoint: Callable[[web.Request], Awaitable[web.WebSocketResponse]]) -> AsyncIterator[str]:
    """A loopback server whose /provider/{slot} is `endpoint`, for wire details a real gateway hides; yields its URL."""
    app = web.Application()
    app.router.add_get("/provider/{slot}", endpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_the_publisher_sends_every_frame_as_text_as_mcp_broker_reads_them() -> None:
    """One JSON-RPC message per *text* frame, so a provider written for this gateway works against
    mcp-broker too (docs/protocol.md, "Compatibility with mcp-broker"). A stand-in broker endpoint
    records each frame's type."""
    frames: list[tuple[aiohttp.WSMsgType, Any]] = []
    answered = asyncio.Event()

    async def provider_endpoint(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(broker_initialize("2025-06-18").decode())
        async for msg in ws:
            frames.append((msg.type, orjson.loads(msg.data)))
            if frames[-1][1].get("id") == "brk-1":
                answered.set()
        return ws

    async with stand_in_gateway(provider_endpoint) as url:
        publisher = Publisher(demo_server("pump"), url, "pump-1", aggregate=True, reconnect=False)
        task = asyncio.create_task(publisher.run())
        try:
            await asyncio.wait_for(answered.wait(), 10)
        finally:
            await publisher.stop()
            await asyncio.wait_for(task, 10)
    assert frames[0][1]["method"] == "notifications/register"
    assert {kind for kind, _ in frames} == {aiohttp.WSMsgType.TEXT}


async def test_a_call_running_when_the_link_drops_ends_with_it_and_the_publisher_dials_again(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    """The provider's half: the tool still running is cancelled (its answer has no link to go out on)
    and the publisher is back in the slot without waiting for it."""
    started = asyncio.Event()
    ended: list[str] = []
    server = MCPServer("slow")

    @server.tool()
    async def hold() -> str:
        started.set()
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "held"

    publisher = await publishers.start(gateway, "slow", server, backoff_initial_s=0.05, backoff_max_s=0.1)
    async with Client(f"{gateway.url}/slow/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("hold", {}))
        await asyncio.wait_for(started.wait(), 10)
        await publisher.drop()
        await wait_for(lambda: ended == ["cancelled"], what="the running tool cancelled with its link")
        await wait_for(lambda: publisher.connections == 2, what="the publisher back in its slot")
        with pytest.raises(MCPError, match='Provider "slow" disconnected'):  # the gateway told the caller
            await asyncio.wait_for(call, 10)


async def test_an_answer_written_as_the_link_breaks_is_dropped_and_the_publisher_dials_again() -> None:
    """A connection reset under a tool that is just answering: the answer has nowhere to go, and the
    publisher must carry on (dial again) instead of failing with the write's error."""
    links: list[web.WebSocketResponse] = []
    server = MCPServer("breaking")
    publisher: Publisher | None = None

    @server.tool()
    async def answer_into_a_reset() -> str:
        assert publisher is not None and publisher._ws is not None
        transport = publisher._ws._response.connection.transport  # type: ignore[union-attr]
        assert transport is not None
        transport.close()  # as a reset would: the answer below meets a closing transport
        return "lost"

    async def provider_endpoint(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        links.append(ws)
        if len(links) == 1:
            await ws.send_bytes(broker_initialize("2025-11-25"))
            call = {"jsonrpc": "2.0", "id": "brk-2", "method": "tools/call", "params": {"name": "answer_into_a_reset"}}
            async for msg in ws:
                if orjson.loads(msg.data).get("id") == "brk-1":
                    await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                    await ws.send_bytes(orjson.dumps(call))
        else:
            async for _ in ws:
                pass
        return ws

    async with stand_in_gateway(provider_endpoint) as url:
        publisher = Publisher(server, url, "pump-1", backoff_initial_s=0.05, backoff_max_s=0.1)
        task = asyncio.create_task(publisher.run())
        try:
            await wait_for(lambda: publisher.connections >= 2 or task.done(), what="the publisher dialling again")
            assert not task.done(), task.exception()
        finally:
            await publisher.stop()
            await asyncio.wait_for(task, 10)


async def test_a_call_cancelled_while_the_link_is_backed_up_leaves_the_other_answers_whole() -> None:
    """Messages go out from the tasks that produced them, and every sender held up by a backed-up link
    waits on the one flow-control waiter of its connection. A call cancelled in that wait (here in
    the middle of reporting progress) must not fail the other senders' waits: the other call's
    answer arrives, the session carries on without a new connection, and the cancelled call ends
    once its report is out."""
    size = 8 * 1024 * 1024  # far beyond what loopback's kernel buffers hold for a reader that stopped
    server = MCPServer("big")
    publisher: Publisher | None = None
    received: dict[str, Any] = {}
    ended: list[str] = []
    all_in = asyncio.Event()

    @server.tool()
    async def report(ctx: Context) -> str:
        try:
            await ctx.report_progress(0.5, 1.0, "p" * size)
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "never"

    @server.tool()
    async def big() -> str:
        return "b" * size

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    def backlog() -> int:
        assert publisher is not None and publisher._ws is not None
        transport = publisher._ws._response.connection.transport  # type: ignore[union-attr]
        assert transport is not None
        return transport.get_write_buffer_size()

    def call(request_id: str, name: str, **params: Any) -> bytes:
        request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, **params}}
        return orjson.dumps(request)

    async def provider_endpoint(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        assert request.transport is not None
        request.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        await ws.send_bytes(broker_initialize("2025-11-25"))
        frames = aiter(ws)
        while orjson.loads((await anext(frames)).data).get("id") != "brk-1":
            pass
        await ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        request.transport.pause_reading()  # this gateway stops reading: the provider's link backs up
        await ws.send_bytes(call("a", "report", _meta={"progressToken": "pa"}))
        await wait_for(lambda: backlog() > size // 2, what="the progress report held up", timeout=30)
        await ws.send_bytes(call("b", "big"))
        await wait_for(lambda: backlog() > size + size // 2, what="the answer held up behind it", timeout=30)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "a"}}
        await ws.send_bytes(orjson.dumps(cancel))
        # The provider still reads: it takes the cancel in while call a waits to send. (No event
        # shows that moment from here; if it came later the cancel would just meet a sleeping call.)
        await asyncio.sleep(0.5)
        request.transport.resume_reading()
        async for msg in ws:
            frame = orjson.loads(msg.data)
            received[frame.get("id") or frame["method"]] = frame
            if frame.get("id") == "b":
                await ws.send_bytes(call("c", "add", arguments={"a": 2, "b": 3}))
            if frame.get("id") == "c":
                all_in.set()
        return ws

    async with stand_in_gateway(provider_endpoint) as url:
        # The stand-in takes frames past the gateway's 1 MiB bound, which the publisher keeps by default.
        publisher = Publisher(
            server, url, "pump-1", backoff_initial_s=0.05, backoff_max_s=0.1, max_frame_bytes=4 * size
        )
        task = asyncio.create_task(publisher.run())
        try:
            await wait_for(all_in.is_set, timeout=30, what="the answers to b and to c after it")
            await wait_for(lambda: ended == ["cancelled"], what="call a cancelled once its report was out")
            assert len(received["notifications/progress"]["params"]["message"]) == size
            assert received["b"]["result"]["content"][0]["text"] == "b" * size
            assert received["c"]["result"]["structuredContent"] == {"result": 5}
            assert "a" not in received  # a cancelled call is not answered
            assert publisher.connections == 1
            assert not task.done()
        finally:
            await publisher.stop()
            await asyncio.wait_for(task, 10)
