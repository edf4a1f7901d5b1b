"""Both eras end to end with an SDK server written the ordinary way, behind every way in (docs/protocol.md).

The provider (tests/support/ordinary_provider.py) knows nothing of the gateway. It speaks 2026-07-28,
so the gateway speaks 2026-07-28 to it: each caller's own envelope reaches it, `input_required`
results and retries pass through for 2026-07-28 callers and are turned into requests on the
caller's stream for session-era ones, and its list changes reach every listener. Real SDK clients
in both eras, and raw HTTP where the bytes matter.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from unittest.mock import ANY

import aiohttp
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_http_stateless_era import (
    META_CAPABILITIES,
    META_LOG_LEVEL,
    open_listen,
    post,
    request,
)
from tests.support.asking_server import asking_server
from tests.support.ordinary_provider import make_server
from tests.support.remote_server import RemoteServer
from tests.support.southbound import provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SLOT = "ordinary"
MODERN = "2026-07-28"
WAYS = ["ws", "mux", "stdio", "remote", "remote-json"]
JsonObject = dict[str, Any]

Attach = Callable[..., Awaitable[GatewayServer]]
"""`await attach(way, **config)`: a gateway (with `config`) whose SLOT holds the ordinary provider."""


@pytest.fixture
async def attach(gateway_factory: GatewayFactory, publishers: Publishers) -> AsyncIterator[Attach]:
    """A gateway with the ordinary provider in SLOT, reached one way (`await attach("stdio")`)."""
    remotes: list[RemoteServer] = []

    async def start(way: str, **config: Any) -> GatewayServer:
        if way in ("ws", "mux"):
            gateway = await gateway_factory(**config)
            if way == "ws":
                await publishers.start(gateway, SLOT, make_server(), aggregate=True)
            else:
                await publishers.start_multiplexed(gateway, {SLOT: make_server()}, aggregate=True)
            return gateway
        if way == "stdio":
            command = [sys.executable, "-m", "tests.support.ordinary_provider", "--stdio"]
            upstream = {"name": SLOT, "command": command, "aggregate": True, "startup_timeout_s": 30}
            gateway = await gateway_factory(upstreams={"stdio": [upstream]}, **config)
        else:
            remote = RemoteServer(make_server, json_response=way == "remote-json")
            await remote.start()
            remotes.append(remote)
            upstream = {"name": SLOT, "url": remote.url, "aggregate": True}
            gateway = await gateway_factory(upstreams={"remote": [upstream]}, **config)
        await wait_ready_slot(gateway, SLOT, timeout=30)
        return gateway

    yield start
    for remote in remotes:
        await remote.stop()


def url_of(gateway: GatewayServer, slot: str = SLOT) -> str:
    return f"{gateway.url}/{slot}/mcp"


def listed(gateway: GatewayServer) -> set[str]:
    session = gateway.gateway.registry.slots[SLOT].live
    return {tool["name"] for tool in session.tools} if session is not None else set()


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


class Asked:
    """A client's callbacks: what it was asked, and its answers."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation/create")
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling/createMessage")
        reply = types.TextContent(type="text", text="Paris")
        return types.CreateMessageResult(role="assistant", content=reply, model="m", stop_reason="endTurn")


# -- the era and the caller's own description ------------------------------------------------------


@pytest.mark.parametrize("way", WAYS)
async def test_an_sdk_provider_is_spoken_to_in_2026_and_sees_each_callers_own_capabilities(
    attach: Attach, way: str
) -> None:
    gateway = await attach(way)
    status = await provider_status(gateway.url, SLOT)
    assert status["era"] == MODERN
    assert status["protocol_version"] == MODERN
    asked = Asked()
    # A 2026-07-28 caller that can sample, and a session-era one that can elicit: the provider sees
    # each one's own capabilities and name, never the gateway's, never the other's.
    async with Client(url_of(gateway), mode=MODERN, sampling_callback=asked.sample) as modern:
        seen_modern = json.loads(text(await modern.call_tool("seen", {})))
    async with Client(url_of(gateway), mode="legacy", elicitation_callback=asked.elicit) as legacy:
        seen_legacy = json.loads(text(await legacy.call_tool("seen", {})))
    assert seen_modern["version"] == MODERN
    assert set(seen_modern["capabilities"]) == {"sampling"}
    assert seen_legacy["version"] == MODERN  # the provider is spoken to in its own era
    assert set(seen_legacy["capabilities"]) == {"elicitation"}
    assert seen_modern["client"] == seen_legacy["client"] == "mcp"  # the SDK client's own name


@pytest.mark.parametrize("way", WAYS)
async def test_input_required_in_both_eras(attach: Attach, way: str, http: aiohttp.ClientSession) -> None:
    gateway = await attach(way)
    # 2026-07-28, on the wire: the provider's own result and requestState come back unchanged.
    capabilities: JsonObject = {"elicitation": {"form": {}}}
    first = request("tools/call", {"name": "greet", "arguments": {}}, meta={META_CAPABILITIES: capabilities})
    status, _, answer = await post(http, url_of(gateway), first)
    answer = answer[-1] if isinstance(answer, list) else answer
    assert status == 200
    result = answer["result"]
    assert result["resultType"] == "input_required"
    assert set(result["inputRequests"]) == {"name"}  # the provider's key, not one the gateway minted
    state = result["requestState"]
    assert not state.startswith("mcpgw1.")  # the provider's own (sealed by the SDK), passed through
    retry = request(
        "tools/call",
        {
            "name": "greet",
            "arguments": {},
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
            "requestState": state,
        },
        request_id=2,
        meta={META_CAPABILITIES: capabilities},
    )
    status, _, answer = await post(http, url_of(gateway), retry)
    answer = answer[-1] if isinstance(answer, list) else answer
    assert answer["result"]["content"][0]["text"] == "Hello, Ada!"
    assert answer["result"]["resultType"] == "complete"
    # The SDK's own 2026-07-28 client retries by itself; a session-era client is asked on its own stream.
    for mode in (MODERN, "legacy"):
        asked = Asked()
        async with Client(url_of(gateway), mode=mode, elicitation_callback=asked.elicit) as client:
            assert text(await client.call_tool("greet", {})) == "Hello, Ada!"
        assert asked.asked == ["elicitation/create"]


@pytest.mark.parametrize("way", ["ws", "stdio", "remote"])
async def test_a_resolver_asks_in_both_eras(attach: Attach, way: str) -> None:
    gateway = await attach(way)
    for mode in (MODERN, "legacy"):
        asked = Asked()
        async with Client(url_of(gateway), mode=mode, sampling_callback=asked.sample) as client:
            assert text(await client.call_tool("ask_model", {"prompt": "capital?"})) == "model: Paris"
        assert asked.asked == ["sampling/createMessage"]


@pytest.mark.parametrize("way", ["ws", "stdio", "remote"])
async def test_a_capability_the_caller_did_not_declare_is_refused_by_the_provider(
    attach: Attach, way: str, http: aiohttp.ClientSession
) -> None:
    gateway = await attach(way)
    body = request("tools/call", {"name": "needs_sampling", "arguments": {}})
    status, _, answer = await post(http, url_of(gateway), body)
    assert status == 400  # -32021 is an HTTP 400 in 2026-07-28, through the gateway as from the server
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"]["requiredCapabilities"] == {"sampling": {}}
    async with Client(url_of(gateway), mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("needs_sampling", {})
    assert refused.value.error.code == -32021
    asked = Asked()
    async with Client(url_of(gateway), mode="legacy", sampling_callback=asked.sample) as client:
        assert text(await client.call_tool("needs_sampling", {})) == "can sample"


# -- logs, progress ---------------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["ws", "stdio", "remote"])
async def test_logs_and_progress_reach_the_caller_in_both_eras(
    attach: Attach, way: str, http: aiohttp.ClientSession
) -> None:
    gateway = await attach(way)
    logged: list[str] = []
    reported: list[float] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(str(params.data))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    async with Client(url_of(gateway), mode="legacy", logging_callback=log) as client:
        result = await client.call_tool("chat", {}, progress_callback=on_progress)
    assert text(result) == "chatted"
    assert logged == ["chatting"]  # a session-era client gets every level unless it set one
    assert reported == [1]
    # 2026-07-28: a log message only for a request that asked for one (its level travels with it).
    quiet = request("tools/call", {"name": "chat", "arguments": {}})
    _, _, answer = await post(http, url_of(gateway), quiet)
    messages = answer if isinstance(answer, list) else [answer]
    assert not [m for m in messages if m.get("method") == "notifications/message"]
    chatty = request("tools/call", {"name": "chat", "arguments": {}}, request_id=2, meta={META_LOG_LEVEL: "info"})
    _, _, answer = await post(http, url_of(gateway), chatty)
    assert [m["params"]["data"] for m in answer if m.get("method") == "notifications/message"] == ["chatting"]


# -- list changes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["ws", "mux", "stdio", "remote"])
async def test_a_change_made_and_undone_reaches_every_listener(
    attach: Attach, way: str, http: aiohttp.ClientSession
) -> None:
    gateway = await attach(way, groups={"ops": {"slots": [SLOT], "enabled": True}})
    before = list(gateway.gateway.registry.slots[SLOT].live.tools)  # type: ignore[union-attr]
    streams = {}
    for name, path in (("slot", SLOT), ("_all", "_all"), ("group", "mcp/ops")):
        url = f"{gateway.url}/{path}" if path == "mcp/ops" else url_of(gateway, path)
        response, reader, ack = await open_listen(http, url, {"toolsListChanged": True}, f"sub-{name}")
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        streams[name] = (response, reader)
    async with Client(url_of(gateway), mode="legacy") as legacy:
        async with Client(url_of(gateway), mode=MODERN) as client:
            # `extra` comes and goes before the gateway lists again: the list it fetches is the same.
            assert text(await client.call_tool("blink", {})) == "blinked"
        for name, (response, reader) in streams.items():
            event = await reader.next(timeout=10)
            assert event is not None, name
            assert event["method"] == "notifications/tools/list_changed", (name, event)
            response.close()
    await wait_for(
        lambda: gateway.gateway.registry.slots[SLOT].live.tools == before,  # type: ignore[union-attr]
        what="the tool list as it was",
    )
    del legacy


@pytest.mark.parametrize("way", ["ws", "stdio"])
async def test_a_session_era_listener_hears_the_change_on_its_get_stream(attach: Attach, way: str) -> None:
    gateway = await attach(way)
    heard: list[Any] = []

    async def messages(message: Any) -> None:
        heard.append(message)

    async with Client(url_of(gateway), mode="legacy", message_handler=messages) as listener:
        async with Client(url_of(gateway), mode=MODERN) as client:
            await client.call_tool("flip", {})
            await wait_for(lambda: "extra" in listed(gateway), what="the new tool at the gateway")
        await wait_for(lambda: any(isinstance(m, types.ServerNotification) for m in heard), what="list_changed")
        assert "extra" in {tool.name for tool in (await listener.list_tools()).tools}


async def test_the_sdk_listen_of_a_2026_client_on_the_slot(attach: Attach) -> None:
    gateway = await attach("ws")
    async with Client(url_of(gateway), mode=MODERN) as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("flip", {})
            event = await asyncio.wait_for(anext(subscription), 10)
            assert isinstance(event, ToolsListChanged)
        assert "extra" in {tool.name for tool in (await client.list_tools()).tools}


async def test_discover_and_initialize_keep_the_providers_capability_flags(
    attach: Attach, http: aiohttp.ClientSession
) -> None:
    gateway = await attach("ws")
    provider = gateway.gateway.registry.slots[SLOT].live
    assert provider is not None
    declared = provider.capabilities
    assert declared["prompts"] == {"listChanged": True}  # what the SDK server says in its own discover
    _, _, discovered = await post(http, url_of(gateway), request("server/discover", {}))
    async with Client(url_of(gateway), mode="legacy") as legacy:
        initialized = legacy.server_capabilities.model_dump(exclude_none=True, by_alias=True)
    for capabilities in (discovered["result"]["capabilities"], initialized):
        for kind, flags in declared.items():
            for flag, value in flags.items():
                assert capabilities[kind][flag] == value, (kind, flag)  # added to, never taken from


# -- session-era providers ----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_session_era_remote_asks_its_callers_on_their_streams(
    gateway_factory: GatewayFactory, transport: str
) -> None:
    """A remote server used in the session era (pinned, or the legacy transport): what it asks mid-call
    reaches the caller that caused it, as a request on its stream or an input_required round."""
    remote = RemoteServer(asking_server, mode="sse" if transport == "sse" else "session")
    await remote.start()
    try:
        upstream = {"name": "asker", "url": remote.url, "transport": transport}
        gateway = await gateway_factory(upstreams={"remote": [upstream]})
        await wait_ready_slot(gateway, "asker", timeout=10)
        status = await provider_status(gateway.url, "asker")
        assert status["era"] == "session"
        for mode in ("legacy", MODERN):
            asked = Asked()
            async with Client(url_of(gateway, "asker"), mode=mode, elicitation_callback=asked.elicit) as client:
                assert text(await client.call_tool("ask_name", {})) == "Hello, Ada!"
            assert asked.asked == ["elicitation/create"], mode
    finally:
        await remote.stop()


async def test_a_stateless_caller_without_the_capability_gets_32021_from_a_session_era_provider(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    """What a 2026-07-28 server answers a request that needs a capability its caller did not declare,
    the gateway answers for a session-era provider that asks anyway (and cancels the provider's call)."""
    outcomes: list[str] = []
    gateway = await gateway_factory(slots={"declared": {"asker": {"era": "session"}}})
    await publishers.start(gateway, "asker", asking_server(outcomes=outcomes))
    status = await provider_status(gateway.url, "asker")
    assert status["era"] == "session"
    body = request("tools/call", {"name": "ask_name", "arguments": {}})
    status_code, _, answer = await post(http, url_of(gateway, "asker"), body)
    assert status_code == 400
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}, "traceId": ANY}
    # The provider was told no, as an SDK client without the capability tells it.
    await wait_for(lambda: bool(outcomes), what="the provider's tool to end")
    assert outcomes[0].startswith("ask_name: refused -32600: Elicitation not supported")


async def test_a_sloppy_session_era_client_still_reaches_a_2026_provider(
    attach: Attach, http: aiohttp.ClientSession
) -> None:
    """The gateway answers a session-era client's `initialize` itself without judging it; the envelope
    it then makes for a 2026-07-28 provider (which validates every envelope) must still be valid."""
    gateway = await attach("ws")
    async with http.ws_connect(gateway.url.replace("http://", "ws://") + f"/{SLOT}") as ws:
        init = {"protocolVersion": "2025-06-18", "capabilities": {"sampling": 5}, "clientInfo": {"name": "fz"}}
        await ws.send_json({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init})
        assert "result" in await ws.receive_json(timeout=5)
        await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "seen"}})
        answer = await ws.receive_json(timeout=5)
        while answer.get("id") != 1:
            answer = await ws.receive_json(timeout=5)
    seen = json.loads(answer["result"]["content"][0]["text"])
    assert (seen["client"], seen["capabilities"]) == ("fz", {})  # "sampling": 5 is no capability


async def test_a_session_era_client_that_never_answers_keeps_to_the_calls_deadline(attach: Attach) -> None:
    gateway = await attach("ws", providers={"request_timeout_ms": 500})
    asked = asyncio.Event()

    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    async with Client(url_of(gateway), mode="legacy", elicitation_callback=never) as client:
        with pytest.raises(MCPError) as ended:
            await client.call_tool("greet", {})
    assert asked.is_set()
    assert ended.value.error.code == -32000
    assert "did not answer the questions" in ended.value.error.message
    assert (ended.value.error.data or {}).get("reason") == "deadline"


async def test_resource_subscriptions_of_session_era_clients_ride_the_gateways_listen(attach: Attach) -> None:
    gateway = await attach("ws")
    provider = gateway.gateway.registry.slots[SLOT].live
    assert provider is not None
    async with Client(url_of(gateway), mode="legacy") as client:
        await client.subscribe_resource("file:///plant/tank")
        await wait_for(lambda: "resourceSubscriptions" in provider.listen.asked, what="the listen to ask for it")
        assert provider.listen.asked["resourceSubscriptions"] == ["file:///plant/tank"]
        await client.unsubscribe_resource("file:///plant/tank")
        await wait_for(lambda: "resourceSubscriptions" not in provider.listen.asked, what="the listen without it")
