"""`_broker` seen by a real SDK client in both eras: tools, resources, guide pages, diagnosis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.core.policy_interface import REFUSED_META_KEY
from gateway.publish.websocket import SPOKEN_VERSIONS
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server

MODES = ["legacy", "2026-07-28"]
TOPICS = ["index", "publish-provider", "connect-client", "host-config", "deploy", "troubleshooting"]
HELLO = {"device_id": "a4:cf:12:34:56:78", "firmware": "pump1 1.0.0", "schema": "abc123"}


def broker_url(server: GatewayServer) -> str:
    return f"{server.url}/_broker/mcp"


async def call(server: GatewayServer, mode: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with Client(broker_url(server), mode=mode) as client:
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    if result.structured_content is not None:
        # The text block carries the same JSON, for clients that ignore structuredContent.
        assert orjson.loads(text) == result.structured_content
        return result.structured_content
    return text


async def call_refused(server: GatewayServer, mode: str, tool: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    """A call whose arguments _broker cannot use: a tool error (its text, and its `_meta` refusal)."""
    async with Client(broker_url(server), mode=mode) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    assert result.structured_content is None
    meta = result.meta or {}
    return result.content[0].text, meta.get(REFUSED_META_KEY)  # type: ignore[union-attr]


def parse_iso(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class RawBoard:
    """A provider written by hand on a raw WebSocket, so it can misbehave on purpose."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, *, initialize_error: bool = False) -> None:
        self.ws = ws
        self.initialize_error = initialize_error
        self.requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self.ws:  # pings are not answered: autoping is off
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    continue
                message = orjson.loads(msg.data)
                method = message.get("method")
                if method == "initialize":
                    if self.initialize_error:
                        await self.send({"jsonrpc": "2.0", "id": message["id"], "error": {"message": "flash corrupt"}})
                        continue
                    result = {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw-board", "version": "0.1"},
                    }
                    await self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
                elif method == "tools/list":
                    tool = {"name": "valve", "inputSchema": {"type": "object"}}
                    await self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [tool]}})
                elif method == "server/discover":  # a board of the session era: method not found
                    error = {"code": -32601, "message": "Method not found"}
                    await self.send({"jsonrpc": "2.0", "id": message["id"], "error": error})
                elif "id" in message and method is not None:
                    await self.requests.put(message)
        finally:
            self.closed.set()

    async def send(self, value: Any) -> None:
        await self.ws.send_str(value if isinstance(value, str) else orjson.dumps(value).decode())

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@pytest.fixture
async def raw_boards() -> AsyncIterator[Any]:
    http = aiohttp.ClientSession()
    boards: list[RawBoard] = []

    async def connect(server: GatewayServer, slot: str, **options: Any) -> RawBoard:
        ws = await http.ws_connect(f"ws://127.0.0.1:{server.port}/provider/{quote(slot, safe='')}", autoping=False)
        board = RawBoard(ws, **options)
        boards.append(board)
        return board

    yield connect
    for board in boards:
        await board.close()
    await http.close()


# -- tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_described_for_agents(gateway: GatewayServer, mode: str) -> None:
    async with Client(broker_url(gateway), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"broker_info", "providers_list", "provider_status", "broker_diagnose", "broker_guide"}
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.description and len(tool.description) > 60
    assert all(tools[name].output_schema for name in tools if name != "broker_guide")
    assert tools["provider_status"].input_schema["required"] == ["name"]
    assert tools["broker_guide"].input_schema["properties"]["topic"]["enum"] == TOPICS


@pytest.mark.parametrize("mode", MODES)
async def test_broker_info_names_the_real_address_and_paths(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    info = await call(gateway, mode, "broker_info")
    assert info["name"] == "mcp-gateway"
    assert info["url"] == gateway.url
    assert info["port"] == gateway.port
    assert info["host"] == "127.0.0.1"
    assert info["insecure_lan"] is False
    assert info["warnings"] == []
    assert info["paths"] == {
        "provider": "/provider/<slot>",
        "providers": "/providers",
        "client": "/<slot>/mcp",
        "all": "/_all/mcp",
        "broker": "/_broker/mcp",
        "mcp": "/mcp",
        "mcp_group": "/mcp/<group>",
        "groups": "/groups",
        "mcp_servers": "/mcp-servers",
        "sse": "/<slot>/sse",
        "messages": "/<slot>/messages?sessionId=<id>",
        "client_websocket": "/<slot>",
        "healthz": "/healthz",
        "readyz": "/readyz",
        "metrics": "/metrics",
    }
    assert info["urls"]["provider"] == f"ws://127.0.0.1:{gateway.port}/provider/<slot>"
    assert info["urls"]["sse"] == f"{gateway.url}/<slot>/sse"
    assert info["urls"]["client_websocket"] == f"ws://127.0.0.1:{gateway.port}/<slot>"
    assert (datetime.now(UTC) - parse_iso(info["started_at"])).total_seconds() < 60
    assert info["uptime_s"] >= 0
    assert info["counts"]["slots"] == 1
    assert info["counts"]["connected"] == 1
    assert info["counts"]["sessions"] >= (1 if mode == "legacy" else 0)
    assert info["limits"]["max_pending_per_slot"] == 256


@pytest.mark.parametrize("mode", MODES)
async def test_providers_list_is_sorted_and_includes_declared_slots(
    gateway_factory: GatewayFactory, publishers: Publishers, mode: str
) -> None:
    gateway = await gateway_factory(slots={"declared": {"c-3": {}}})
    await publishers.start(gateway, "b-2", demo_server("b"))
    await publishers.start(gateway, "a-1", demo_server("a"))
    listing = await call(gateway, mode, "providers_list")
    assert listing["count"] == 3
    assert listing["connected"] == 2
    assert [entry["name"] for entry in listing["providers"]] == ["a-1", "b-2", "c-3"]
    declared = listing["providers"][2]
    assert declared["declared"] is True
    assert declared["connected"] is False
    assert declared["state"] == "empty"
    assert declared["transport"] is None


@pytest.mark.parametrize("mode", MODES)
async def test_provider_status_of_a_published_server(gateway: GatewayServer, publishers: Publishers, mode: str) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True, hello=HELLO)
    async with Client(f"{gateway.url}/pump-1/mcp", mode=mode) as client:
        await client.call_tool("add", {"a": 1, "b": 2})
    status = await call(gateway, mode, "provider_status", {"name": "pump-1"})
    assert status["name"] == "pump-1"
    assert status["connected"] is True
    assert status["state"] == "ready"
    assert status["transport"] == "websocket"
    assert status["remote"].startswith("127.0.0.1:")
    assert (datetime.now(UTC) - parse_iso(status["connected_since"])).total_seconds() < 60
    assert status["connected_for_s"] >= 0
    assert status["pending"] == 0
    assert status["aggregate"] is True
    assert status["in_aggregate"] is True
    assert status["hello"] == {**HELLO, "versions": SPOKEN_VERSIONS}  # the provider API adds its SDK's versions
    assert status["server_info"]["name"] == "pump"
    assert status["protocol_version"] == "2026-07-28"  # an SDK server is spoken to in its newest era
    assert status["era"] == "2026-07-28"
    assert status["tools"] == 4
    assert status["tools_hash"]
    assert status["heartbeat_misses"] == 0
    assert status["id_style"] == "brk"
    assert status["counters"]["requests"] >= 1
    assert status["counters_total"]["requests"] >= 1
    assert status["last_error"] is None
    assert status["last_disconnect"] is None
    assert status["client_url"] == f"{gateway.url}/pump-1/mcp"
    assert status["provider_url"] == f"ws://127.0.0.1:{gateway.port}/provider/pump-1"


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_tool_errors_that_say_what_to_do(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    # As MCP answers input validation: the caller's model reads the text and retries.
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    unknown, refused = await call_refused(gateway, mode, "provider_status", {"name": "nope"})
    assert 'Unknown provider: "nope"' in unknown
    assert "pump-1" in unknown
    assert "providers_list" in unknown
    assert refused == {"reason": "invalid_arguments", "slot": "_broker", "name": "nope", "known": ["pump-1"]}
    missing, _ = await call_refused(gateway, mode, "provider_status", {})
    assert '"name"' in missing
    extra, _ = await call_refused(gateway, mode, "providers_list", {"verbose": True})
    assert "unexpected argument(s) verbose" in extra
    topic, refused = await call_refused(gateway, mode, "broker_guide", {"topic": "faq"})
    assert "index, publish-provider, connect-client, host-config, deploy, troubleshooting" in topic
    assert refused["topics"][:2] == ["index", "publish-provider"]
    async with Client(broker_url(gateway), mode=mode) as client:  # an unknown provider's URI: a protocol error
        with pytest.raises(MCPError) as caught:
            await client.read_resource("broker://providers/nope")
    assert caught.value.code == -32602
    assert 'Unknown provider: "nope"' in caught.value.error.message


# -- guide ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_guide_pages_use_the_real_addresses(
    gateway_factory: GatewayFactory, publishers: Publishers, mode: str
) -> None:
    gateway = await gateway_factory(slots={"declared": {"pump-9": {}}})
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    ws = f"ws://127.0.0.1:{gateway.port}"
    pages = {topic: await call(gateway, mode, "broker_guide", {"topic": topic}) for topic in TOPICS}
    for topic, page in pages.items():
        assert page.startswith("# "), topic
        assert gateway.url in page, topic
    index = pages["index"]
    for needle in (f"{ws}/provider/<slot>", f"{ws}/providers", f"{gateway.url}/_all/mcp", "broker://guide/deploy"):
        assert needle in index
    assert "Effective configuration" in index
    publish = pages["publish-provider"]
    # The example points a new provider at the declared slot that waits for one, not at a held one.
    assert f"e.g. `{ws}/provider/pump-9`" in publish
    assert f"| `pump-1` | ready | websocket | 4 | no | {ws}/provider/pump-1 |" in publish
    assert '"method":"notifications/register","params":{"aggregate":true' in publish
    assert '{"provider":"pump-9","payload":{"jsonrpc":"2.0","method":"notifications/register"' in publish
    assert f"{gateway.url}/pump-1/mcp" in pages["connect-client"]
    assert f"mcp-gateway call pump-1 <tool> key=value --url {gateway.url}" in pages["connect-client"]
    host = pages["host-config"]
    assert f'"url": "{gateway.url}/pump-1/mcp"' in host
    # A host that only launches commands gets the bridge, pointed at this gateway.
    stdio_entry = host[host.index("## Hosts that only launch commands") :]
    assert '"command": "mcp-gateway"' in stdio_entry
    assert f'"{gateway.url}"' in stdio_entry and '"--slot"' in stdio_entry
    assert f"{gateway.url}/healthz" in pages["deploy"]
    assert f"{gateway.url}/metrics" in pages["deploy"]
    trouble = pages["troubleshooting"]
    for needle in ("1008", "1009", "1001", 'Provider "<slot>" not connected', "Slot already held", "413"):
        assert needle in trouble
    # The tool errors the gateway answers itself, by their _meta reason.
    assert "## What a client sees: tool errors the gateway answers itself" in trouble
    assert "| `confirmation_required` | `Not forwarded yet:" in trouble


async def test_guide_without_topic_is_the_index(gateway: GatewayServer) -> None:
    page = await call(gateway, "legacy", "broker_guide")
    assert page.startswith("# mcp-gateway guide")


# -- resources --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_resources_show_the_same_data(gateway: GatewayServer, publishers: Publishers, mode: str) -> None:
    await publishers.start(gateway, "a/b", demo_server("slash"))
    async with Client(broker_url(gateway), mode=mode) as client:
        listed = {resource.uri: resource for resource in (await client.list_resources()).resources}
        assert set(map(str, listed)) == {
            "broker://info",
            "broker://providers",
            "broker://diagnose",
            *(f"broker://guide/{topic}" for topic in TOPICS),
        }
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"broker://providers/{name}", "broker://guide/{topic}"}

        info = (await client.read_resource("broker://info")).contents[0]
        assert info.mime_type == "application/json"
        assert orjson.loads(info.text)["url"] == gateway.url  # type: ignore[union-attr]

        one = (await client.read_resource(f"broker://providers/{quote('a/b', safe='')}")).contents[0]
        status = orjson.loads(one.text)  # type: ignore[union-attr]
        assert status["name"] == "a/b"
        assert status["connected"] is True

        providers = orjson.loads((await client.read_resource("broker://providers")).contents[0].text)  # type: ignore[union-attr]
        assert [entry["name"] for entry in providers["providers"]] == ["a/b"]

        guide = (await client.read_resource("broker://guide/publish-provider")).contents[0]
        assert guide.mime_type == "text/markdown"
        assert f"/provider/{quote('a/b', safe='')}" in guide.text  # type: ignore[union-attr]

        diagnosis = orjson.loads((await client.read_resource("broker://diagnose")).contents[0].text)  # type: ignore[union-attr]
        assert diagnosis["status"] in ("ok", "info")

        with pytest.raises(MCPError) as caught:
            await client.read_resource("broker://nothing")
        assert caught.value.code == -32602
        assert "broker://guide/<topic>" in caught.value.error.message
        with pytest.raises(MCPError) as caught:
            await client.read_resource("broker://providers/ghost")
        assert caught.value.code == -32602
        assert 'Unknown provider: "ghost"' in caught.value.error.message


# -- diagnosis --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_diagnose_finds_a_declared_slot_without_provider(
    gateway_factory: GatewayFactory, publishers: Publishers, mode: str
) -> None:
    gateway = await gateway_factory(slots={"declared": {"pump-9": {}, "pump-1": {}}})
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    diagnosis = await call(gateway, mode, "broker_diagnose")
    assert diagnosis["status"] == "error"
    assert diagnosis["count"] == len(diagnosis["problems"])
    first = diagnosis["problems"][0]
    assert first["id"] == "slot.disconnected"
    assert first["severity"] == "error"
    assert first["slot"] == "pump-9"
    assert f"ws://127.0.0.1:{gateway.port}/provider/pump-9" in first["fix"]
    assert not [p for p in diagnosis["problems"] if p.get("slot") == "pump-1"]
    assert "security.insecure_lan" not in {p["id"] for p in diagnosis["problems"]}

    only_nine = await call(gateway, mode, "broker_diagnose", {"slot": "pump-9"})
    assert only_nine["slot"] == "pump-9"
    assert [p["id"] for p in only_nine["problems"]] == ["slot.disconnected"]
    assert (await call(gateway, mode, "broker_diagnose", {"slot": "pump-1"}))["status"] == "ok"

    ghost = await call(gateway, mode, "broker_diagnose", {"slot": "ghost"})
    assert [p["id"] for p in ghost["problems"]] == ["slot.unknown"]
    assert "known slots: pump-1, pump-9" in ghost["problems"][0]["evidence"]


async def test_insecure_lan_is_said_in_info_diagnosis_and_guide(gateway_factory: GatewayFactory) -> None:
    # Bound to every interface for the length of the test: the posture under test only exists off loopback.
    public = "http://gateway.plant.lan:3000"
    gateway = await gateway_factory(host="0.0.0.0", insecure_lan=True, public_url=public)
    info = await call(gateway, "legacy", "broker_info")
    assert info["insecure_lan"] is True
    assert info["insecure_lan_open"] == info["security"]["insecure_lan_open"] == ["clients", "providers"]
    assert info["security"]["loopback_only"] is False
    assert info["warnings"] and info["warnings"][0].startswith(
        "INSECURE-LAN: listening on the network without client authentication or provider authentication"
    )
    assert info["url"] == public
    assert info["urls"]["provider"] == "ws://gateway.plant.lan:3000/provider/<slot>"
    diagnosis = await call(gateway, "2026-07-28", "broker_diagnose")
    insecure = next(p for p in diagnosis["problems"] if p["id"] == "security.insecure_lan")
    assert insecure["severity"] == "warning"
    assert "0.0.0.0" in insecure["evidence"]
    index = await call(gateway, "legacy", "broker_guide", {"topic": "index"})
    assert "INSECURE-LAN" in index
    assert "ws://gateway.plant.lan:3000/provider/<slot>" in index
    async with Client(broker_url(gateway), mode="legacy") as client:
        assert "INSECURE-LAN" in (client.instructions or "")


async def test_provider_status_and_diagnosis_after_a_provider_misbehaves(
    gateway_factory: GatewayFactory, raw_boards: Any
) -> None:
    gateway = await gateway_factory(slots={"declared": {"bad-1": {"request_timeout_ms": 300}}})
    board: RawBoard = await raw_boards(gateway, "bad-1")
    await wait_ready_slot(gateway, "bad-1")

    async def call_valve() -> None:
        async with Client(f"{gateway.url}/bad-1/mcp", mode="legacy") as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("valve", {})
            assert "did not respond within 300ms" in caught.value.error.message

    caller = asyncio.create_task(call_valve())
    request = await asyncio.wait_for(board.requests.get(), 5)
    assert isinstance(request["id"], str) and request["id"].startswith("brk-")
    # A board that parsed the id as a number answers with the wrong type: nobody waits for that.
    await board.send({"jsonrpc": "2.0", "id": int(request["id"].removeprefix("brk-")), "result": {}})
    await board.send("this is not json")
    await board.send([{"jsonrpc": "2.0", "method": "notifications/progress"}])
    await caller

    status = await call(gateway, "legacy", "provider_status", {"name": "bad-1"})
    assert status["connected"] is True
    for key in ("unmatched_responses", "unparsable", "protocol_violations", "deadlines"):
        assert status["counters"][key] == 1, key
    diagnosis = await call(gateway, "2026-07-28", "broker_diagnose", {"slot": "bad-1"})
    problems = {p["id"]: p for p in diagnosis["problems"]}
    assert set(problems) == {
        "provider.unmatched_responses",
        "provider.unparsable_messages",
        "provider.protocol_violations",
        "provider.deadlines",
    }
    assert 'id_style = "numeric"' in problems["provider.unmatched_responses"]["fix"]
    assert "300 ms" in problems["provider.deadlines"]["evidence"]

    # The evidence outlives the link.
    await board.close()
    await wait_for(lambda: gateway.gateway.registry.slots["bad-1"].live is None, what="bad-1 to be freed")
    status = await call(gateway, "legacy", "provider_status", {"name": "bad-1"})
    assert status["connected"] is False
    assert status["counters"] is None
    assert status["counters_total"]["unparsable"] == 1
    assert status["connects"] == 1
    assert (datetime.now(UTC) - parse_iso(status["last_disconnect"])).total_seconds() < 60
    assert "provider closed the connection" in status["last_disconnect_reason"]
    assert status["transport"] is None  # no link now; who held it last is named apart
    assert status["last_provider"]["transport"] == "websocket"
    assert status["last_provider"]["remote"].startswith("127.0.0.1:")
    ids = [p["id"] for p in (await call(gateway, "legacy", "broker_diagnose", {"slot": "bad-1"}))["problems"]]
    assert ids[0] == "slot.disconnected"
    assert "provider.unparsable_messages" in ids


async def test_failed_initialize_and_missed_heartbeats_are_diagnosed(
    gateway_factory: GatewayFactory, raw_boards: Any
) -> None:
    # register_wait_ms 0: these boards send no register frame and answer no ping, so with a heartbeat
    # this short the default wait for a register frame would outlast them.
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.2, "register_wait_ms": 0})
    broken: RawBoard = await raw_boards(gateway, "broken", initialize_error=True)
    await asyncio.wait_for(broken.closed.wait(), 5)
    await raw_boards(gateway, "silent")  # never answers a ping
    await wait_ready_slot(gateway, "silent")
    await wait_for(lambda: gateway.gateway.registry.slots["silent"].live is None, what="silent to be dropped")

    status = await call(gateway, "legacy", "provider_status", {"name": "broken"})
    assert status["last_error"] == "initialize failed: flash corrupt"
    assert "Provider must answer initialize and tools/list: flash corrupt" in status["last_disconnect_reason"]
    silent = await call(gateway, "legacy", "provider_status", {"name": "silent"})
    assert silent["heartbeat_misses"] == 1
    assert "heartbeat" in silent["last_disconnect_reason"]

    problems = (await call(gateway, "legacy", "broker_diagnose"))["problems"]
    by_slot = {(p.get("slot"), p["id"]): p for p in problems}
    failed = by_slot[("broken", "provider.initialize_failed")]
    assert failed["severity"] == "error"
    assert "flash corrupt" in failed["evidence"]
    misses = by_slot[("silent", "provider.heartbeat_misses")]
    assert "1 missed heartbeat(s) at an interval of 0.2s" in misses["evidence"]
