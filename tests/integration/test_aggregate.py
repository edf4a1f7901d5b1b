"""`_all` through real SDK clients: names, order, routing, and membership as providers come and go."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.server.lowlevel import Server

from gateway.app import GatewayServer
from tests.conftest import Publishers, wait_for
from tests.support.servers import demo_server
from tests.support.southbound import Boards, provider_status

MODES = ["legacy", "2026-07-28"]
AGGREGATE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ORIGIN_META_KEY = "io.github.mcp-gateway/origin"


def board(label: str, tool_names: list[str]) -> Server[Any]:
    """A provider with exactly these tool names (any characters); each call answers `<label>:<tool>`."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name=name, input_schema={"type": "object"}) for name in tool_names]
        )

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{label}:{params.name}")])

    return Server(label, on_list_tools=list_tools, on_call_tool=call_tool)


def all_url(server: GatewayServer) -> str:
    return f"{server.url}/_all/mcp"


async def names_of(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


async def answer_of(client: Client, name: str) -> str:
    result = await client.call_tool(name, {})
    assert not result.is_error, result
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


async def wait_members(server: GatewayServer, members: list[str]) -> None:
    await wait_for(lambda: server.gateway.aggregate.members() == members, what=f"_all members {members}")


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_named_slot_dash_tool(gateway: GatewayServer, publishers: Publishers, mode: str) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    await wait_members(gateway, ["pump-1"])
    async with Client(all_url(gateway), mode=mode) as client:
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == ["pump-1-add", "pump-1-echo", "pump-1-sleep", "pump-1-fail"]
        assert tools[0].meta is not None
        assert tools[0].meta[ORIGIN_META_KEY] == {"slot": "pump-1", "tool": "add"}
        assert tools[0].description == "Add two integers."
        result = await client.call_tool("pump-1-add", {"a": 2, "b": 3})
        assert result.structured_content == {"result": 5}


async def test_characters_outside_the_safe_set_become_underscores(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    tools = ["read.temp", "set point", "ok_name-1", "ünits", "a/b"]
    await publishers.start(gateway, "line.2", board("line", tools), aggregate=True)
    await wait_members(gateway, ["line.2"])
    async with Client(all_url(gateway), mode="legacy") as client:
        names = await names_of(client)
        assert names == [
            "line_2-read_temp",
            "line_2-set_point",
            "line_2-ok_name-1",
            "line_2-_nits_c6aadbd6",
            "line_2-a_b",
        ]
        for name, original in zip(names, tools, strict=True):
            assert await answer_of(client, name) == f"line:{original}"  # the provider gets its own name back


async def test_long_names_are_cut_with_a_hash_and_stay_within_64(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    fits = "f" * 57  # "pump-1-" + 57 = 64: kept as is
    long_a = "t" * 100
    long_b = "t" * 99 + "u"  # same first 55 characters as long_a
    await publishers.start(gateway, "pump-1", board("pump", [fits, long_a, long_b]), aggregate=True)
    await wait_members(gateway, ["pump-1"])
    async with Client(all_url(gateway), mode="2026-07-28") as client:
        names = await names_of(client)
        assert names[0] == f"pump-1-{fits}"
        assert len(set(names)) == 3
        for name in names:
            assert AGGREGATE_NAME.fullmatch(name), name
        for name in names[1:]:
            assert len(name) == 64
            assert re.fullmatch(r"pump-1-t+-[0-9a-f]{8}", name), name
        assert [await answer_of(client, name) for name in names] == [f"pump:{fits}", f"pump:{long_a}", f"pump:{long_b}"]


async def test_a_colliding_newcomer_never_takes_a_name_already_given(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(all_url(gateway), mode="legacy", message_handler=on_message) as client:
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()), what="GET stream"
        )
        await publishers.start(gateway, "a-b", board("slot a-b", ["c"]), aggregate=True)
        await wait_for(lambda: len(changes) == 1, what="list_changed for a-b")
        assert await names_of(client) == ["a-b-c"]
        await publishers.start(gateway, "a", board("slot a", ["b-c"]), aggregate=True)
        await wait_for(lambda: len(changes) == 2, what="list_changed for a")
        # Slots sort "a" before "a-b", but "a-b-c" already means a-b's tool: a client holding the old
        # list must never reach another device with it, so the newcomer gets the suffix.
        assert sorted(await names_of(client)) == ["a-b-c", "a-b-c-2"]
        assert await answer_of(client, "a-b-c") == "slot a-b:c"
        assert await answer_of(client, "a-b-c-2") == "slot a:b-c"


async def test_a_name_reaches_the_slot_it_names_whichever_came_first(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(all_url(gateway), mode="legacy", message_handler=on_message) as client:
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()), what="GET stream"
        )
        await publishers.start(gateway, "pump", board("slot pump", ["1-stop"]), aggregate=True)
        await wait_for(lambda: len(changes) == 1, what="list_changed for pump")
        assert await names_of(client) == ["pump-1-stop"]
        assert await answer_of(client, "pump-1-stop") == "slot pump:1-stop"
        await publishers.start(gateway, "pump-1", board("slot pump-1", ["stop"]), aggregate=True)
        await wait_for(lambda: len(changes) == 2, what="list_changed for pump-1")
        # The README's <slot>-<tool> for pump-1's stop is pump-1-stop: it reaches pump-1, and pump's tool
        # (whose name only happened to read the same) is numbered; the list_changed tells the client.
        assert await names_of(client) == ["pump-1-stop-2", "pump-1-stop"]
        assert await answer_of(client, "pump-1-stop") == "slot pump-1:stop"
        assert await answer_of(client, "pump-1-stop-2") == "slot pump:1-stop"


async def test_collisions_at_the_length_limit_stay_within_64(gateway: GatewayServer, publishers: Publishers) -> None:
    # Three names that differ only in characters the aggregate replaces, each exactly 64 long.
    tools = ["b.c" + "d" * 59, "b_c" + "d" * 59, "b c" + "d" * 59]
    await publishers.start(gateway, "a", board("a", tools), aggregate=True)
    await wait_members(gateway, ["a"])
    async with Client(all_url(gateway), mode="legacy") as client:
        names = await names_of(client)
        base = "a-b_c" + "d" * 59
        assert names == [base, base[:62] + "-2", base[:62] + "-3"]
        assert all(len(name) == 64 for name in names)
        assert [await answer_of(client, name) for name in names] == [f"a:{tool}" for tool in tools]


async def test_order_is_by_slot_then_provider_order_in_both_eras(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    for slot in ("zeta", "alpha", "mid"):
        await publishers.start(gateway, slot, board(slot, ["stop", "start", "status"]), aggregate=True)
    await wait_members(gateway, ["alpha", "mid", "zeta"])
    expected = [f"{slot}-{tool}" for slot in ("alpha", "mid", "zeta") for tool in ("stop", "start", "status")]
    for mode in MODES:
        async with Client(all_url(gateway), mode=mode) as client:
            assert await names_of(client) == expected


async def test_list_changed_on_join_and_leave_and_only_for_members(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(all_url(gateway), mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()), what="GET stream"
        )
        assert await names_of(client) == []
        first = await publishers.start(gateway, "pump-1", board("pump-1", ["run"]), aggregate=True)
        await wait_for(lambda: len(changes) == 1, what="list_changed on join")
        assert await names_of(client) == ["pump-1-run"]
        # A provider that did not opt in changes nothing; the next member's notice is the next one.
        await publishers.start(gateway, "secret", board("secret", ["run"]))
        await publishers.start(gateway, "pump-2", board("pump-2", ["run"]), aggregate=True)
        await wait_for(lambda: len(changes) >= 2, what="list_changed on the second join")
        assert await names_of(client) == ["pump-1-run", "pump-2-run"]
        assert len(changes) == 2
        await first.stop()
        await wait_for(lambda: len(changes) == 3, what="list_changed on leave")
        assert await names_of(client) == ["pump-2-run"]


async def test_a_first_client_after_the_members_came_is_told_of_no_change(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    # The boards attached before anyone listened (a gateway just started): the catalog is built when
    # the first client comes, which is no change to that client.
    await publishers.start(gateway, "pump-1", board("pump-1", ["run"]), aggregate=True)
    await wait_members(gateway, ["pump-1"])
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(message.method)

    async with Client(all_url(gateway), mode="legacy", message_handler=on_message) as client:
        await wait_for(
            lambda: any(s.stream is not None for s in gateway.gateway.sessions.sessions.values()), what="GET stream"
        )
        assert await names_of(client) == ["pump-1-run"]
        await asyncio.sleep(10 * gateway.gateway.config.limits.catalog_coalesce_ms / 1000)
        assert changes == []


@pytest.mark.parametrize("mode", MODES)
async def test_calls_reach_the_provider_the_name_came_from(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    await publishers.start_multiplexed(
        gateway, {"pump-1": board("pump-1", ["whoami"]), "pump-2": board("pump-2", ["whoami"])}, aggregate=True
    )
    await wait_members(gateway, ["pump-1", "pump-2"])
    async with Client(all_url(gateway), mode=mode) as client:
        assert await answer_of(client, "pump-2-whoami") == "pump-2:whoami"
        assert await answer_of(client, "pump-1-whoami") == "pump-1:whoami"


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_and_withheld_names_are_answered_alike(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    await publishers.start(gateway, "pump-1", board("pump-1", ["run"]), aggregate=True)
    await publishers.start(gateway, "secret", board("secret", ["run"]))  # not opted in
    await wait_members(gateway, ["pump-1"])
    answers: list[tuple[int, str]] = []
    async with Client(all_url(gateway), mode=mode) as client:
        assert await names_of(client) == ["pump-1-run"]
        for name in ("secret-run", "nobody-run", "pump-1-walk"):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(name, {})
            assert name in refused.value.message
            answers.append((refused.value.code, refused.value.message.replace(name, "<name>")))
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0] == -32602


@pytest.mark.parametrize("mode", MODES)
async def test_calls_after_the_provider_left_say_it_is_not_connected(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    publisher = await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    await wait_members(gateway, ["pump-1"])
    async with Client(all_url(gateway), mode=mode) as client:
        assert (await client.call_tool("pump-1-add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        await publisher.stop()
        await wait_members(gateway, [])
        with pytest.raises(MCPError) as refused:
            await client.call_tool("pump-1-add", {"a": 1, "b": 1})
        # The slot endpoint's answer (tests/integration/test_groups_offline.py compares the two).
        assert refused.value.message.startswith('Provider "pump-1" not connected: its provider left ')
        assert await names_of(client) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_cursor_the_gateway_never_gave_is_refused_on_every_list(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    # Every tools/list is one page, so no cursor is valid; a slot, _all and _broker all say so.
    await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    await wait_members(gateway, ["pump-1"])
    for path in ("pump-1", "_all", "_broker"):
        async with Client(f"{gateway.url}/{path}/mcp", mode=mode) as client:
            with pytest.raises(MCPError) as refused:
                await client.list_tools(cursor="garbage")
            assert refused.value.error.code == -32602, path
            assert refused.value.error.message == "Invalid cursor: the gateway lists all tools at once", path
            assert (await client.list_tools()).next_cursor is None


CARELESS_TOOLS: list[dict[str, Any]] = [
    {"name": "ok", "inputSchema": {"type": "object"}},
    {"name": "noschema"},
    {"name": "strschema", "inputSchema": "nope"},
    {"name": "", "inputSchema": {"type": "object"}},
]
"""A board's tool table with a bug in it (an SDK server cannot send this: it checks its own lists)."""


@pytest.mark.parametrize("mode", MODES)
async def test_tools_no_client_can_read_are_left_out_and_the_rest_is_served(
    gateway: GatewayServer, publishers: Publishers, boards: Boards, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    register = {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True}}
    board = await boards.connect(gateway.url, "/provider/careless", tools=CARELESS_TOOLS, first_frame=register)
    await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    await wait_members(gateway, ["careless", "pump-1"])
    async with Client(f"{gateway.url}/careless/mcp", mode=mode) as client:
        assert await names_of(client) == ["ok"]
        call = asyncio.create_task(answer_of(client, "ok"))
        request = await board.request("tools/call")
        await board.reply(request, {"content": [{"type": "text", "text": "careless:ok"}]})
        assert await asyncio.wait_for(call, 5) == "careless:ok"
    async with Client(all_url(gateway), mode=mode) as client:
        assert await names_of(client) == ["careless-ok", "pump-1-add", "pump-1-echo", "pump-1-sleep", "pump-1-fail"]
    status = await provider_status(gateway.url, "careless")
    assert status["tools"] == 1
    assert status["counters"]["protocol_violations"] == 3
    warned = [r.getMessage() for r in caplog.records if getattr(r, "fault", "") == "unreadable_tool"]
    assert warned == [
        'provider for slot careless lists tool "noschema", which clients cannot read ("inputSchema" is missing); '
        "it is left out of tools/list",
        'provider for slot careless lists tool "strschema", which clients cannot read ("inputSchema" is a string, '
        "not an object); it is left out of tools/list",
        "provider for slot careless lists a tool without a usable name, which clients cannot read "
        '("name" is an empty string); it is left out of tools/list',
    ]
