"""Where the log messages of a session-era stdio child go, and what a call whose client never answered
the child's question ends with (docs/upstreams.md, "Log messages").

The child is an ordinary SDK server (tests/support/stdio_log_server.py): its `ctx.info(...)` names no
request. While the client requests pending on the slot are all one client's, the message is that
client's, at the level it set; with several clients' requests pending it is nobody's; a client that made
no call never gets another client's call's messages. Real SDK clients of the session era listen.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(90),
]

REPO = Path(__file__).resolve().parents[2]
SLOT = "chatty"
START_S = 20.0
"""How long a test waits for the Python child to import the SDK and answer (generous for a busy machine)."""


def child(**options: Any) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.support.stdio_log_server"]
    return {"name": SLOT, "command": command, "cwd": str(REPO), "era": "session", **options}


def listener(url: str, heard: list[str], mode: str = "legacy") -> Client:
    """An SDK client of `url` that keeps the data of each log message it gets in `heard`. A session-era
    client sets its level with logging/setLevel; a stateless-era one gets log messages only for requests
    that opt in, so this one opts every request in at debug."""

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(str(params.data))

    if mode == "legacy":
        return Client(url, mode="legacy", logging_callback=on_log)
    return Client(url, mode=mode, logging_callback=on_log, log_level="debug")


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    server = await gateway_factory(upstreams={"stdio": [child(aggregate=True)]}, groups={"chat": {"slots": [SLOT]}})
    await wait_ready_slot(server, SLOT, START_S)
    return server


async def settle() -> None:
    """Give a stray message time to arrive on a GET stream (it must not)."""
    await asyncio.sleep(0.5)


async def test_a_client_that_made_no_call_never_gets_another_clients_call_logs(gateway: GatewayServer) -> None:
    onlooker: list[str] = []
    caller: list[str] = []
    url = f"{gateway.url}/{SLOT}/mcp"
    async with (
        listener(url, onlooker) as idle,
        listener(url, caller) as calling,
    ):
        await idle.set_logging_level("debug")
        await calling.set_logging_level("info")  # the child logs at debug (the most verbose asked for)
        await calling.call_tool("chatter", {"tag": "B"})
        await settle()
    assert onlooker == []
    assert caller == ["B info", "B warning"]


@pytest.mark.parametrize(("path", "tool"), [("/_all/mcp", f"{SLOT}-chatter"), ("/mcp/chat", f"{SLOT}__chatter")])
async def test_all_and_group_callers_get_their_own_calls_logs(gateway: GatewayServer, path: str, tool: str) -> None:
    heard: list[str] = []
    onlooker: list[str] = []
    async with (
        listener(f"{gateway.url}/{SLOT}/mcp", onlooker) as idle,
        listener(f"{gateway.url}{path}", heard) as client,
    ):
        await idle.set_logging_level("debug")
        await client.set_logging_level("warning")
        await client.call_tool(tool, {"tag": "G"})
        await settle()
    assert heard == ["G warning"]
    assert onlooker == []


async def test_one_clients_parallel_calls_get_their_logs_and_two_clients_calls_get_none(
    gateway: GatewayServer,
) -> None:
    first: list[str] = []
    second: list[str] = []
    url = f"{gateway.url}/{SLOT}/mcp"
    async with (
        listener(url, first) as one,
        listener(url, second) as two,
    ):
        await one.set_logging_level("warning")
        await two.set_logging_level("warning")
        # One client, two calls pending: the messages are that client's, whichever call they came from.
        await asyncio.gather(
            one.call_tool("chatter", {"tag": "A1", "wait_s": 0.0}),
            one.call_tool("chatter", {"tag": "A2", "wait_s": 0.8}),
        )
        # Two clients' calls pending as X logs: a message naming no request cannot be told whose it is.
        # Y logs once X has been answered: its call is then the only one pending.
        await asyncio.gather(
            one.call_tool("chatter", {"tag": "X", "wait_s": 0.3}),
            two.call_tool("chatter", {"tag": "Y", "wait_s": 1.5}),
        )
        await settle()
    assert sorted(first) == ["A1 warning", "A2 warning"]
    assert second == ["Y warning"]


async def test_a_call_whose_client_never_answers_the_childs_question_names_the_client(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(upstreams={"stdio": [child()]}, providers={"request_timeout_ms": 1500})
    await wait_ready_slot(server, SLOT, START_S)
    asked = asyncio.Event()

    async def never_answers(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async with Client(f"{server.url}/{SLOT}/mcp", mode="legacy", elicitation_callback=never_answers) as client:
        with pytest.raises(MCPError) as failure:
            await client.call_tool("ask", {"question": "colour?"})
    assert asked.is_set()
    message = failure.value.error.message
    assert message.startswith(
        f'The client did not answer the elicitation/create request of provider "{SLOT}" within the call\'s '
        "deadline of 1500ms"
    ), message
    assert "did not respond" not in message
    data = failure.value.error.data
    assert isinstance(data, dict)
    assert data["reason"] == "deadline" and data["method"] == "elicitation/create" and data["waiting_for"] == "client"
