"""Tool groups through real clients: /mcp and /mcp/<group> with SDK clients of both eras, simulated pumps
and SDK providers behind the gateway, toggles by config and by MCP_GROUP_<NAME> in a real gateway
process, list_changed, scopes, guidance and search checked against the live catalog, GET /groups and
GET /mcp-servers."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import orjson
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ToolsListChanged

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.publish import Publisher
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.answers import decode_answer
from tests.support.oauth import ISSUER, access_token, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
MODES = ["legacy", "2026-07-28"]
ORIGIN_META_KEY = "io.github.mcp-gateway/origin"
PUMP_TOOLS = ["get_status", "start", "set_speed", "stop", "reset_fault"]
DEMO_TOOLS = ["add", "echo", "sleep", "fail"]
GROUPS: dict[str, Any] = {
    "pumps": {"slots": ["pump-*"], "description": "Run the circulation pumps"},
    "lab": {"slots": ["lab-*"], "tools": ["add", "echo"], "description": "Bench arithmetic"},
    # Overlaps pumps: get_status of a pump is in both and listed once at /mcp.
    "readers": {"slots": ["*"], "tools": ["get_"], "description": "Read-only status"},
    "maintenance": {"slots": ["pump-*"], "tools": ["reset_"], "enabled": False},
}


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, publishers: Publishers) -> AsyncIterator[GatewayServer]:
    """Two simulated pumps (the board's own firmware modules) and an SDK server lab-1, with GROUPS."""
    server = await gateway_factory(groups=GROUPS)
    simulator = Simulator(server.url, SimulatorSettings(pumps=2, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await publishers.start(server, "lab-1", demo_server("lab"))
        for slot in ("pump-1", "pump-2"):
            await wait_ready_slot(server, slot)
        yield server
    finally:
        await simulator.stop()


async def names_of(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


def text_of(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


async def post(
    http: aiohttp.ClientSession, url: str, body: Any = INITIALIZE, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    async with http.post(url, data=orjson.dumps(body), headers={**MCP_HEADERS, **(headers or {})}) as response:
        return response.status, dict(response.headers), decode_answer(response.content_type, await response.read())


async def get_json(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with http.get(url, headers=headers or {}) as response:
        return response.status, await response.json()


# -- /mcp and /mcp/<group> ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_serves_every_enabled_group_named_slot_double_underscore_tool(
    plant: GatewayServer, mode: str
) -> None:
    async with Client(f"{plant.url}/mcp", mode=mode) as client:
        tools = (await client.list_tools()).tools
        names = [tool.name for tool in tools]
        # Built-ins first, then slots in name order, each slot's tools in its provider's order; the
        # pumps' get_status is in two groups (pumps, readers) and listed once; maintenance is off.
        assert names == [
            "guidance",
            "search",
            "lab-1__add",
            "lab-1__echo",
            *(f"pump-1__{tool}" for tool in PUMP_TOOLS),
            *(f"pump-2__{tool}" for tool in PUMP_TOOLS),
        ]
        set_speed = next(tool for tool in tools if tool.name == "pump-1__set_speed")
        assert set_speed.meta is not None and set_speed.meta[ORIGIN_META_KEY] == {"slot": "pump-1", "tool": "set_speed"}
        assert set_speed.description is not None and set_speed.description.startswith("Change the speed")
        status = await client.call_tool("pump-2__get_status", {})
        assert not status.is_error and status.structured_content is not None
        assert status.structured_content["state"] == "stopped"
        assert (await client.call_tool("lab-1__add", {"a": 2, "b": 3})).structured_content == {"result": 5}
        with pytest.raises(MCPError, match="Unknown tool: lab-1__sleep is not offered by /mcp"):
            await client.call_tool("lab-1__sleep", {"seconds": 0})  # not under a lab prefix


@pytest.mark.parametrize("mode", MODES)
async def test_a_group_endpoint_serves_that_group_only(plant: GatewayServer, mode: str) -> None:
    async with Client(f"{plant.url}/mcp/readers", mode=mode) as client:
        assert await names_of(client) == ["guidance", "search", "pump-1__get_status", "pump-2__get_status"]
        if mode == "legacy":
            assert client.server_info is not None and client.server_info.name == "mcp-gateway /mcp/readers"
        result = await client.call_tool("pump-1__get_status", {})
        assert result.structured_content is not None and result.structured_content["state"] == "stopped"
        with pytest.raises(MCPError, match="Unknown tool: pump-1__start is not offered by /mcp/readers"):
            await client.call_tool("pump-1__start", {})
    async with Client(f"{plant.url}/mcp/lab", mode=mode) as client:
        assert await names_of(client) == ["guidance", "search", "lab-1__add", "lab-1__echo"]
        with pytest.raises(MCPError, match=r"^Invalid cursor: the gateway lists all tools at once$"):
            await client.list_tools(cursor="garbage")  # one page: no cursor was ever given out


async def test_disabled_and_unknown_groups_are_404_naming_the_enabled_ones(
    plant: GatewayServer, http: aiohttp.ClientSession
) -> None:
    for group, why in (("maintenance", "is disabled"), ("nope", "does not exist")):
        status, _, body = await post(http, f"{plant.url}/mcp/{group}")
        assert status == 404
        assert body == {
            "error": "unknown_group",
            "error_description": f'Tool group "{group}" {why}. Enabled groups: /mcp/pumps, /mcp/lab, /mcp/readers; '
            "/mcp serves all of them, GET /groups lists every group.",
            "enabled_groups": ["pumps", "lab", "readers"],
        }


async def test_mcp_mcp_stays_the_endpoint_of_a_slot_named_mcp(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(groups={"all": {}})
    await publishers.start(server, "mcp", demo_server("odd"))
    async with Client(f"{server.url}/mcp/mcp", mode="legacy") as client:
        assert await names_of(client) == DEMO_TOOLS
    async with Client(f"{server.url}/mcp", mode="legacy") as client:
        assert await names_of(client) == ["guidance", "search", *(f"mcp__{tool}" for tool in DEMO_TOOLS)]


async def test_a_session_is_bound_to_the_endpoint_that_opened_it(
    plant: GatewayServer, http: aiohttp.ClientSession
) -> None:
    status, headers, _ = await post(http, f"{plant.url}/mcp")
    assert status == 200
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    status, _, body = await post(http, f"{plant.url}/mcp/pumps", listing, session)
    assert status == 404
    assert body["error"]["message"] == "Unknown or expired session; send initialize to start a new one"
    status, _, body = await post(http, f"{plant.url}/mcp", listing, session)
    assert status == 200 and len(body["result"]["tools"]) == 14
    async with http.delete(f"{plant.url}/mcp", headers=session) as response:
        assert response.status == 200
    status, _, _ = await post(http, f"{plant.url}/mcp", listing, session)
    assert status == 404


async def test_a_tool_name_that_is_not_a_string_is_named_as_the_callers_mistake(
    plant: GatewayServer, http: aiohttp.ClientSession
) -> None:
    """Found by tests/fuzz/test_live_http.py: a list or an object as the name crashed the handler
    (it does not hash) with an HTTP 500. It is invalid params that say what was sent, never looked up
    as a tool called "None" or "7", and the session goes on."""
    status, headers, _ = await post(http, f"{plant.url}/mcp/pumps")
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
    names: list[Any] = [[], {"a": 1}, 7, None]
    kinds = ["an array", "an object", "an integer", "null"]
    for request_id, (name, kind) in enumerate(zip(names, kinds, strict=True), start=2):
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name}}
        status, _, body = await post(http, f"{plant.url}/mcp/pumps", call, session)
        assert status == 200, body
        error = body["error"]
        assert (error["code"], error["message"]) == (-32602, f'"params.name" must be a string, not {kind}')
    call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"arguments": {}}}
    status, _, body = await post(http, f"{plant.url}/mcp/pumps", call, session)
    assert (body["error"]["code"], body["error"]["message"]) == (-32602, 'tools/call needs "params.name", a string')
    listing = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
    status, _, body = await post(http, f"{plant.url}/mcp/pumps", listing, session)
    assert status == 200 and body["result"]["tools"]


async def test_group_tools_calls_count_against_the_routed_slots_rate_limit(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(groups={"lab": {}}, limits={"rate": {"per_slot": {"rate_per_s": 0.01, "burst": 1}}})
    await publishers.start(server, "lab-1", demo_server("lab"))
    async with Client(f"{server.url}/mcp", mode="legacy") as client:
        assert (await client.call_tool("lab-1__add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        with pytest.raises(MCPError, match="rate") as refused:
            await client.call_tool("lab-1__add", {"a": 1, "b": 1})
        assert refused.value.error.code == -32029
        assert refused.value.error.data["scope"] == "slot"
        # guidance and search reach no slot: they are not charged to one.
        assert not (await client.call_tool("search", {"query": "add"})).is_error


# -- the catalog changes -----------------------------------------------------------------------------


@pytest.fixture
async def grouped(gateway_factory: GatewayFactory) -> GatewayServer:
    return await gateway_factory(groups=GROUPS)


async def test_list_changed_reaches_the_groups_a_new_member_joins(
    grouped: GatewayServer, publishers: Publishers
) -> None:
    changes: dict[str, int] = {"/mcp": 0, "/mcp/lab": 0, "/mcp/pumps": 0}

    def counter(path: str) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changes[path] += 1

        return on_message

    async with contextlib.AsyncExitStack() as stack:
        clients = {
            path: await stack.enter_async_context(
                Client(f"{grouped.url}{path}", mode="legacy", message_handler=counter(path))
            )
            for path in changes
        }
        for client in clients.values():
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            assert await names_of(client) == ["guidance", "search"]
        publisher = await publishers.start(grouped, "lab-1", demo_server("lab"))
        await wait_for(lambda: changes["/mcp"] == 1 and changes["/mcp/lab"] == 1, what="list_changed on join")
        assert await names_of(clients["/mcp/lab"]) == ["guidance", "search", "lab-1__add", "lab-1__echo"]
        await publisher.stop()
        await wait_for(lambda: changes["/mcp"] == 2 and changes["/mcp/lab"] == 2, what="list_changed on leave")
        assert await names_of(clients["/mcp"]) == ["guidance", "search"]
        # lab-1 was never a pump: the pumps group never changed, so its clients were not disturbed.
        assert changes["/mcp/pumps"] == 0


async def test_a_first_client_after_the_members_came_is_told_of_no_change(
    grouped: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(grouped, "lab-1", demo_server("lab"))
    await wait_for(lambda: "lab-1__add" in grouped.gateway.groups.by_name, what="lab-1 in the catalog")
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    # A board that came before anyone listened (the catalog is rebuilt when read): no news to them.
    await publishers.start(grouped, "lab-2", demo_server("lab"))
    async with Client(f"{grouped.url}/mcp/lab", mode="legacy", message_handler=on_message) as client:
        await wait_for(
            lambda: any(s.stream is not None for s in grouped.gateway.sessions.sessions.values()), what="GET stream"
        )
        assert "lab-2__add" in await names_of(client)
        await asyncio.sleep(10 * grouped.gateway.config.limits.catalog_coalesce_ms / 1000)
        assert changes == []


async def test_stateless_listen_on_a_group_sees_a_member_join(grouped: GatewayServer, publishers: Publishers) -> None:
    async with Client(f"{grouped.url}/mcp/lab", mode="2026-07-28") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await publishers.start(grouped, "lab-1", demo_server("lab"))
            event = await asyncio.wait_for(anext(subscription), 5)
            assert isinstance(event, ToolsListChanged)
        assert "lab-1__add" in await names_of(client)


async def test_names_stay_stable_while_members_come_and_go(grouped: GatewayServer, publishers: Publishers) -> None:
    first = await publishers.start(grouped, "lab-2", demo_server("lab"))
    await publishers.start(grouped, "lab-1", demo_server("lab"))
    await first.stop()
    await wait_for(lambda: "lab-2__add" not in grouped.gateway.groups.by_name, what="lab-2 to leave")
    await publishers.start(grouped, "lab-2", demo_server("lab"))
    await wait_for(lambda: "lab-2__add" in grouped.gateway.groups.by_name, what="lab-2 to come back")
    async with Client(f"{grouped.url}/mcp/lab", mode="legacy") as client:
        assert await names_of(client) == [
            "guidance",
            "search",
            "lab-1__add",
            "lab-1__echo",
            "lab-2__add",
            "lab-2__echo",
        ]
        assert (await client.call_tool("lab-2__add", {"a": 20, "b": 22})).structured_content == {"result": 42}


# -- guidance and search against the live catalog ----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_search_speed_finds_a_pumps_set_speed_first(plant: GatewayServer, mode: str) -> None:
    async with Client(f"{plant.url}/mcp/readers", mode=mode) as client:
        result = await client.call_tool("search", {"query": "speed", "limit": 4})
        assert not result.is_error
        found = result.structured_content
        assert found is not None and orjson.loads(text_of(result)) == found
        first = found["results"][0]
        assert (first["name"], first["slot"], first["tool"]) == ("pump-1__set_speed", "pump-1", "set_speed")
        # set_speed is not in the readers group: it is called at /mcp, where it is listed.
        assert (first["endpoint"], first["callable_here"], first["groups"]) == (f"{plant.url}/mcp", False, ["pumps"])
        assert found["results"][1]["name"] == "pump-2__set_speed"
    async with Client(f"{plant.url}/mcp", mode=mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        found = (await client.call_tool("search", {"query": "speed"})).structured_content
        assert found is not None
        for entry in found["results"]:
            # Every result is callable by the name given, at the endpoint given, with the description listed.
            assert entry["endpoint"] == f"{plant.url}/mcp" and entry["callable_here"]
            description = listed[entry["name"]].description
            assert description is not None and description.startswith(entry["description"].rstrip("…"))
        # A tool outside every enabled group is found too, with its slot's own endpoint.
        sleep = (await client.call_tool("search", {"query": "sleep"})).structured_content
        assert sleep is not None
        assert sleep["results"][0] | {"score": 0} == {
            "name": "sleep",
            "endpoint": f"{plant.url}/lab-1/mcp",
            "callable_here": False,
            "slot": "lab-1",
            "tool": "sleep",
            "groups": [],
            "description": "Wait, then answer (for deadlines, cancellation and concurrency tests).",
            "score": 0,
        }


async def test_guidance_overview_matches_the_live_catalog(plant: GatewayServer) -> None:
    async with Client(f"{plant.url}/mcp", mode="legacy") as client:
        listed = await names_of(client)
        text = text_of(await client.call_tool("guidance", {}))
        assert text.startswith(f"# What this endpoint offers\n\nYou are connected to {plant.url}/mcp, every enabled")
        assert f"It offers {len(listed) - 2} tools of 3 slots (lab-1, pump-1, pump-2)" in text
        assert f"| `pumps` | Run the circulation pumps | pump-1, pump-2 | 10 | {plant.url}/mcp/pumps |" in text
        assert f"| `readers` | Read-only status | lab-1, pump-1, pump-2 | 2 | {plant.url}/mcp/readers |" in text
        assert "Disabled groups (not served): `maintenance`." in text
        # The two pumps' identical set_speed is one entry with both names.
        assert "- **set_speed** on pump-1, pump-2: Change the speed of a running pump to speed_rpm" in text
        assert "Call as `pump-1__set_speed`, `pump-2__set_speed`." in text
        # lab lists lab-1's add and echo: lab-1 is in a group, with sleep and fail outside every one.
        assert "## Slots in no enabled group" not in text
        assert f"- `lab-1`: 2 of 4 tools outside, at {plant.url}/lab-1/mcp" in text
        groups = text_of(await client.call_tool("guidance", {"topic": "groups"}))
        assert (
            "| `maintenance` | disabled (enabled = true under [groups.maintenance], then `mcp-gateway reload`; "
            "or MCP_GROUP_MAINTENANCE=true in the gateway's environment, then a restart) |"
        ) in groups


async def test_guidance_on_a_tool_is_its_live_description_and_arguments(plant: GatewayServer) -> None:
    async with Client(f"{plant.url}/pump-1/mcp", mode="legacy") as direct:
        own = next(tool for tool in (await direct.list_tools()).tools if tool.name == "set_speed")
    async with Client(f"{plant.url}/mcp/pumps", mode="2026-07-28") as client:
        text = text_of(await client.call_tool("guidance", {"topic": "pump-1__set_speed"}))
    assert own.description is not None and own.description in text
    assert "Call it here as `pump-1__set_speed`." in text
    schema = own.input_schema["properties"]["speed_rpm"]
    assert f"- `speed_rpm` (integer, required, {schema['minimum']} to {schema['maximum']})" in text
    assert "## The same tool on other slots\n\n- `pump-2`: Call it here as `pump-2__set_speed`." in text


async def test_guidance_on_a_group_and_an_unknown_topic(plant: GatewayServer) -> None:
    async with Client(f"{plant.url}/mcp", mode="legacy") as client:
        lab = text_of(await client.call_tool("guidance", {"topic": "lab"}))
        assert lab.startswith("# Group `lab`\n\nBench arithmetic\n\nServed at")
        assert "- **add** on lab-1: Add two integers. Arguments: `a` (required), `b` (required)." in lab
        unknown = await client.call_tool("guidance", {"topic": "spead"})
        assert unknown.is_error
        assert text_of(unknown).startswith("Unknown guidance topic 'spead'. Topics: overview, groups, a group name")


# -- scopes --------------------------------------------------------------------------------------------

PUMPS_ONLY = secrets.token_urlsafe(32)  # may call the pumps and the bridge
EVERYTHING = secrets.token_urlsafe(32)
NO_BRIDGE = secrets.token_urlsafe(32)  # may call the pumps directly, not the bridge


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


SCOPED_AUTH: dict[str, Any] = {
    "tokens": [
        {"name": "operator", "scopes": ["pumps", "bridge"], "sha256": sha(PUMPS_ONLY)},
        {"name": "engineer", "scopes": ["pumps", "lab", "bridge"], "sha256": sha(EVERYTHING)},
        {"name": "scada", "scopes": ["pumps"], "sha256": sha(NO_BRIDGE)},
    ],
    "required_scopes": {"pump-*": ["pumps"], "lab-*": ["lab"], "_mcp": ["bridge"]},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def sdk_client(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=bearer(token), timeout=httpx2.Timeout(30, read=300)) as transport_http,
        Client(streamable_http_client(url, http_client=transport_http), mode=mode) as client,
    ):
        yield client


@pytest.fixture
async def scoped(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(groups=GROUPS, auth=SCOPED_AUTH)
    await publishers.start(server, "pump-1", demo_server("pump"))
    await publishers.start(server, "lab-1", demo_server("lab"))
    return server


@pytest.mark.parametrize("mode", MODES)
async def test_a_caller_sees_and_calls_only_the_slots_its_scopes_cover(scoped: GatewayServer, mode: str) -> None:
    async with sdk_client(f"{scoped.url}/mcp", PUMPS_ONLY, mode) as client:
        assert await names_of(client) == ["guidance", "search", *(f"pump-1__{tool}" for tool in DEMO_TOOLS)]
        with pytest.raises(MCPError, match="Unknown tool: lab-1__add is not offered by /mcp"):
            await client.call_tool("lab-1__add", {"a": 1, "b": 2})
        found = (await client.call_tool("search", {"query": "add integers"})).structured_content
        assert found is not None and {entry["slot"] for entry in found["results"]} == {"pump-1"}
        for topic in ("overview", "groups", "lab", "readers"):
            assert "lab-1" not in text_of(await client.call_tool("guidance", {"topic": topic}))
        assert (await client.call_tool("guidance", {"topic": "lab-1__add"})).is_error
    async with sdk_client(f"{scoped.url}/mcp/lab", EVERYTHING, mode) as client:
        assert await names_of(client) == ["guidance", "search", "lab-1__add", "lab-1__echo"]
        assert (await client.call_tool("lab-1__add", {"a": 1, "b": 2})).structured_content == {"result": 3}


async def test_guidance_says_slots_are_withheld_rather_than_not_ready(scoped: GatewayServer) -> None:
    async with sdk_client(f"{scoped.url}/mcp/lab", PUMPS_ONLY, "legacy") as client:
        overview = text_of(await client.call_tool("guidance", {"topic": "overview"}))
        group = text_of(await client.call_tool("guidance", {"topic": "lab"}))
    assert "none you may call; slots outside your access are not shown" in overview, overview
    assert "| `lab` | Bench arithmetic | none you may call | 0 |" in overview, overview
    assert "members now: none you may call." in group, group
    assert "Slots you may call: pump-1; slots outside your access are not shown." in group, group
    for text in (overview, group):
        assert "none ready now" not in text and "lab-1" not in text, text


async def test_the_bridge_needs_its_own_scope_and_lists_only_visible_slots(
    scoped: GatewayServer, http: aiohttp.ClientSession
) -> None:
    for path in ("/mcp", "/mcp/pumps", "/groups", "/mcp-servers"):
        async with http.get(f"{scoped.url}{path}") as response:
            assert response.status == 401, path
        async with http.get(f"{scoped.url}{path}", headers=bearer(NO_BRIDGE)) as response:
            assert response.status == 403, path
            assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]
    status, servers = await get_json(http, f"{scoped.url}/mcp-servers", bearer(PUMPS_ONLY))
    assert status == 200 and [entry["name"] for entry in servers] == ["pump-1"]
    status, listing = await get_json(http, f"{scoped.url}/groups", bearer(PUMPS_ONLY))
    assert status == 200
    members = {group["name"]: (group["members"], group["tools"]) for group in listing["groups"]}
    assert members["lab"] == ([], 0)
    assert members["readers"] == (["pump-1"], 0)  # the demo provider has no get_ tool
    status, servers = await get_json(http, f"{scoped.url}/mcp-servers", bearer(EVERYTHING))
    assert [entry["name"] for entry in servers] == ["lab-1", "pump-1"]


async def test_an_access_token_for_mcp_serves_every_group_endpoint(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        auth = {"oauth": {"issuer": ISSUER, "jwks_url": authority.url}, "required_scopes": {"lab-*": ["lab"]}}
        server = await gateway_factory(groups=GROUPS, auth=auth)
        await publishers.start(server, "lab-1", demo_server("lab"))
        status, headers, _ = await post(http, f"{server.url}/mcp/lab")
        assert status == 401
        metadata = f"{server.url}/.well-known/oauth-protected-resource/mcp"
        assert headers["WWW-Authenticate"] == f'Bearer scope="lab", resource_metadata="{metadata}"'
        status, document = await get_json(http, metadata)
        assert status == 200 and document["resource"] == f"{server.url}/mcp"
        # Discovery by path insertion (RFC 9728) finds the same resource from a group's URL.
        assert await get_json(http, f"{metadata}/lab") == (200, document)
        token = access_token(rsa_key(), f"{server.url}/mcp", scope="lab")
        async with sdk_client(f"{server.url}/mcp/lab", token, "legacy") as client:
            assert (await client.call_tool("lab-1__add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        status, _ = await get_json(http, f"{server.url}/groups", bearer(token))
        assert status == 200
        # A token meant for one slot is not one for the bridge.
        slot_token = access_token(rsa_key(), f"{server.url}/lab-1/mcp", scope="lab")
        status, _, body = await post(http, f"{server.url}/mcp", headers=bearer(slot_token))
        assert status == 401 and body["error"] == "invalid_token"


# -- GET /groups, GET /mcp-servers, broker_info ---------------------------------------------------------


async def test_groups_lists_every_configured_group(plant: GatewayServer, http: aiohttp.ClientSession) -> None:
    status, listing = await get_json(http, f"{plant.url}/groups")
    assert status == 200
    assert {key: listing[key] for key in ("endpoint", "separator", "count", "enabled")} == {
        "endpoint": f"{plant.url}/mcp",
        "separator": "__",
        "count": 4,
        "enabled": 3,
    }
    by_name = {group["name"]: group for group in listing["groups"]}
    assert list(by_name) == ["pumps", "lab", "readers", "maintenance"]
    assert by_name["pumps"] == {
        "name": "pumps",
        "enabled": True,
        "enabled_by": "config",
        "toggle": "MCP_GROUP_PUMPS",
        "description": "Run the circulation pumps",
        "endpoint": f"{plant.url}/mcp/pumps",
        "slot_patterns": ["pump-*"],
        "tool_prefixes": [],
        "members": ["pump-1", "pump-2"],
        "tools": 10,
    }
    assert (by_name["lab"]["members"], by_name["lab"]["tools"]) == (["lab-1"], 2)
    assert (by_name["readers"]["members"], by_name["readers"]["tools"]) == (["lab-1", "pump-1", "pump-2"], 2)
    # A disabled group shows what it would serve.
    assert (by_name["maintenance"]["enabled"], by_name["maintenance"]["tools"]) == (False, 2)
    async with http.post(f"{plant.url}/groups") as response:
        assert response.status == 405 and response.headers["Allow"] == "GET"


async def test_mcp_servers_lists_every_slot_with_its_groups(plant: GatewayServer, http: aiohttp.ClientSession) -> None:
    plant.gateway.registry.slot("pump-9")  # asked for by a client; no provider yet
    status, servers = await get_json(http, f"{plant.url}/mcp-servers")
    assert status == 200
    assert servers == [
        {
            "name": "lab-1",
            "url": f"{plant.url}/lab-1/mcp",
            "transport": "websocket",
            "connected": True,
            "ready": True,
            "tools": 4,
            "groups": ["lab", "readers"],
        },
        *(
            {
                "name": slot,
                "url": f"{plant.url}/{slot}/mcp",
                "transport": "websocket",
                "connected": True,
                "ready": True,
                "tools": 5,
                "groups": ["pumps", "readers"],
            }
            for slot in ("pump-1", "pump-2")
        ),
        {
            "name": "pump-9",
            "url": f"{plant.url}/pump-9/mcp",
            "transport": None,
            "connected": False,
            "ready": False,
            "tools": 0,
            "groups": ["pumps", "readers"],
        },
    ]


async def test_broker_info_shows_the_groups(plant: GatewayServer) -> None:
    async with Client(f"{plant.url}/_broker/mcp", mode="legacy") as client:
        info = (await client.call_tool("broker_info", {})).structured_content
    assert info is not None
    assert info["urls"]["mcp"] == f"{plant.url}/mcp"
    assert info["groups"]["separator"] == "__"
    assert info["groups"]["configured"][0] == {
        "name": "pumps",
        "enabled": True,
        "enabled_by": "config",
        "members": ["pump-1", "pump-2"],
        "tools": 10,
    }
    assert info["groups"]["mcp_tools"] == 12  # listed at /mcp besides guidance and search


async def test_broker_diagnose_points_at_a_group_that_matches_nothing(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(groups={"pumps": {"slots": ["pmup-*"]}})
    await publishers.start(server, "pump-1", demo_server("pump"))
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        diagnosis = (await client.call_tool("broker_diagnose", {})).structured_content
    assert diagnosis is not None
    (problem,) = [problem for problem in diagnosis["problems"] if problem["id"].startswith("group.")]
    assert problem["id"] == "group.no_members"
    assert problem["evidence"] == "its slot patterns pmup-* match none of the 1 ready slots (pump-1)"


# -- toggles in a real gateway process --------------------------------------------------------------


async def run_gateway(config: Path, env: dict[str, str], port: int) -> asyncio.subprocess.Process:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("MCP_GROUP_", "MCP_GATEWAY_"))
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        "--config",
        str(config),
        "--port",
        str(port),
        "--log-level",
        "warning",
        cwd=REPO,
        env={**environment, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.fixture
async def processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10)
        if process.returncode is None:
            process.kill()
            await process.wait()


GROUPS_TOML = """
[groups.pumps]
slots = ["pump-*"]
description = "Run the circulation pumps"

[groups.lab]
slots = ["lab-*"]
enabled = false
"""


async def test_environment_toggles_groups_in_a_real_gateway_process(
    tmp_path: Path, processes: list[asyncio.subprocess.Process], http: aiohttp.ClientSession
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(GROUPS_TOML, encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = await run_gateway(config, {"MCP_GROUP_PUMPS": "false", "MCP_GROUP_LAB": "true"}, port)
    processes.append(process)
    await wait_for_listener(http, url, process)
    publisher = Publisher(demo_server("lab"), url, "lab-1")
    task = asyncio.create_task(publisher.run())
    try:
        status, listing = await get_json(http, f"{url}/groups")
        assert status == 200
        states = {group["name"]: (group["enabled"], group["enabled_by"]) for group in listing["groups"]}
        assert states == {
            "pumps": (False, "environment variable MCP_GROUP_PUMPS"),
            "lab": (True, "environment variable MCP_GROUP_LAB"),
        }
        status, _, body = await post(http, f"{url}/mcp/pumps")
        assert status == 404 and body["enabled_groups"] == ["lab"]
        async with Client(f"{url}/mcp/lab", mode="2026-07-28") as client:
            await wait_for_names(client, ["guidance", "search", *(f"lab-1__{tool}" for tool in DEMO_TOOLS)])
    finally:
        await publisher.stop()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MCP_GROUP_PUMPS": "maybe"},
            "mcp-gateway: environment variable MCP_GROUP_PUMPS: 'maybe' is not true or false",
        ),
        (
            {"MCP_GROUP_PUMSP": "true"},
            "mcp-gateway: environment variable MCP_GROUP_PUMSP: no such group; toggles of the configured groups: "
            "MCP_GROUP_LAB, MCP_GROUP_PUMPS.",
        ),
    ],
)
async def test_a_bad_toggle_stops_the_gateway_naming_the_variable(
    tmp_path: Path, processes: list[asyncio.subprocess.Process], env: dict[str, str], message: str
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(GROUPS_TOML, encoding="utf-8")
    process = await run_gateway(config, env, free_port())
    processes.append(process)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert stderr.decode().startswith(message)


async def wait_for_listener(http: aiohttp.ClientSession, url: str, process: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + 20
    while asyncio.get_running_loop().time() < deadline:
        if process.returncode is not None:
            _, err = await process.communicate()
            raise AssertionError(f"gateway exited with {process.returncode}: {err.decode()}")
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"{url}/readyz") as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway did not become ready")


async def wait_for_names(client: Client, expected: list[str]) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    names: list[str] = []
    while asyncio.get_running_loop().time() < deadline:
        names = await names_of(client)
        if names == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"tools/list never became {expected}; last: {names}")
