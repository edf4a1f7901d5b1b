"""Under [policy], a slot's notifications reach only the callers entitled to what they concern
(docs/governance.md, "Notifications"): a caller with no right on the slot hears nothing of it on its GET
stream or its listen stream, not even the provider's log line about another caller's call; a caller that
may only read resources hears no tools/list_changed. Decided per message, so a reload applies at once.

The provider is an ordinary SDK server run as a stdio child (this module, run with `python -m`): after
each call it logs a line about the call's arguments, once the call is answered (a line no request names,
which goes to the slot's listeners), and `grow` adds a tool and announces it. Real GET and listen streams
read the bytes the gateway sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp.server.mcpserver import Context, MCPServer

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_http_stateless_era import SseReader, request, routing_headers

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(90),
]

REPO = Path(__file__).resolve().parents[2]
SLOT = "secret"
START_S = 20.0
"""How long the Python child may take to import the SDK and answer (generous for a busy machine)."""
SETTLE_S = 0.5
"""How long a stray notification is given to arrive on a stream (it must not)."""
SESSION_VERSION = "2025-11-25"
JsonObject = dict[str, Any]
TOKENS = {name: secrets.token_urlsafe(24) for name in ("agent", "operator", "reader")}
RECIPE = "OPERATOR-ONLY-42"


def build_child() -> MCPServer:
    server = MCPServer("logs-after-calls")
    pending: set[asyncio.Task[None]] = set()

    @server.tool()
    async def mix(recipe: str, ctx: Context) -> str:
        """Answer at once; log a line about the call once it is answered."""
        session = ctx.session

        async def after() -> None:
            await asyncio.sleep(0.2)
            await session.send_log_message("info", f"after call: {recipe}", logger="dev")

        task = asyncio.get_running_loop().create_task(after())
        pending.add(task)
        task.add_done_callback(pending.discard)
        return f"mixed {recipe}"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool and announce the change."""
        server.add_tool(lambda: "new", name=f"extra_{len(server._tool_manager.list_tools())}", description="grown")
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


def policy_toml(agent_role: str | None) -> str:
    """The operator may use everything, the reader may only read resources; the agent holds `agent_role`
    on the slot (None: nothing at all)."""
    text = (
        "[roles.operator]\n"
        'capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control", "mcp.resources.read",'
        ' "mcp.prompts.read", "mcp.completion.use"]\n'
        "[roles.reader]\n"
        'capabilities = ["mcp.resources.read"]\n'
        "[roles.observer]\n"
        'capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]\n'
        '[[assign]]\nprincipal = "token:operator"\nrole = "operator"\nresources = ["/**"]\n'
        '[[assign]]\nprincipal = "token:reader"\nrole = "reader"\nresources = ["/**"]\n'
        '[[assign]]\nprincipal = "token:agent"\nrole = "observer"\nresources = ["/public"]\n'
    )
    if agent_role is not None:
        text += f'[[assign]]\nprincipal = "token:agent"\nrole = "{agent_role}"\nresources = ["/{SLOT}"]\n'
    return text


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory, tmp_path: Path) -> GatewayServer:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(None))
    command = [sys.executable, "-m", "tests.integration.test_policy_notifications"]
    server = await gateway_factory(
        auth={
            "tokens": [{"name": name, "sha256": hashlib.sha256(t.encode()).hexdigest()} for name, t in TOKENS.items()]
        },
        policy={"file": str(policy)},
        audit={"path": str(tmp_path / "audit.db")},
        upstreams={"stdio": [{"name": SLOT, "command": command, "cwd": str(REPO), "era": "session"}]},
    )
    await wait_ready_slot(server, SLOT, START_S)
    return server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Caller:
    """One token's session at the slot, with its GET stream read into `heard` as the messages arrive."""

    def __init__(self, http: aiohttp.ClientSession, url: str, name: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "Authorization": f"Bearer {TOKENS[name]}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self.heard: list[JsonObject] = []
        self.next_id = 0

    async def post(self, method: str, params: JsonObject | None = None, *, notify: bool = False) -> JsonObject:
        body: JsonObject = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            body["id"] = self.next_id
        async with self.http.post(self.url, data=orjson.dumps(body), headers=self.headers) as response:
            assert response.status in (200, 202), await response.text()
            session_id = response.headers.get("Mcp-Session-Id")
            if session_id is not None:
                self.headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": SESSION_VERSION}
            if notify:
                return {}
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                answer = await SseReader(response).next()
                assert answer is not None
                return answer
            found: JsonObject = orjson.loads(await response.read())
            return found

    async def open(self) -> None:
        info = {"name": "raw", "version": "1"}
        await self.post("initialize", {"protocolVersion": SESSION_VERSION, "capabilities": {}, "clientInfo": info})
        await self.post("notifications/initialized", notify=True)

    @contextlib.asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """The session's GET stream, read in the background while the block runs."""
        headers = {**self.headers, "Accept": "text/event-stream"}
        async with self.http.get(self.url, headers=headers) as response:
            assert response.status == 200, await response.text()
            reader = SseReader(response)

            async def read() -> None:
                while (message := await reader.next(timeout=60)) is not None:
                    self.heard.append(message)

            task = asyncio.create_task(read())
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def methods(self) -> list[str]:
        return [str(message.get("method")) for message in self.heard]


def log_lines(caller: Caller) -> list[str]:
    return [str(m["params"]["data"]) for m in caller.heard if m.get("method") == "notifications/message"]


async def test_a_caller_without_rights_on_the_slot_hears_none_of_its_notifications(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = f"{gateway.url}/{SLOT}/mcp"
    agent, operator, reader = (Caller(http, url, name) for name in ("agent", "operator", "reader"))
    for caller in (agent, operator, reader):
        await caller.open()
    refused = await agent.post("tools/list")
    assert refused["error"]["code"] == -32001  # the agent may not even list the slot's tools
    async with agent.listening(), operator.listening(), reader.listening():
        answer = await operator.post("tools/call", {"name": "mix", "arguments": {"recipe": RECIPE}})
        assert answer["result"]["content"][0]["text"] == f"mixed {RECIPE}"
        await wait_for(lambda: log_lines(operator) == [f"after call: {RECIPE}"], 10.0, "the operator's log line")
        grown = await operator.post("tools/call", {"name": "grow", "arguments": {}})
        assert grown["result"]["content"][0]["text"] == "grown"
        await wait_for(lambda: "notifications/tools/list_changed" in operator.methods(), 10.0, "the list change")
        await asyncio.sleep(SETTLE_S)
    assert agent.heard == []
    # Reading resources is a right on the slot: its log lines, but not its tool list's changes.
    assert reader.methods() == ["notifications/message"]
    assert log_lines(reader) == [f"after call: {RECIPE}"]
    assert operator.methods() == ["notifications/message", "notifications/tools/list_changed"]


async def test_a_policy_reload_applies_to_the_next_notification_on_an_open_stream(
    gateway: GatewayServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    url = f"{gateway.url}/{SLOT}/mcp"
    agent, operator = Caller(http, url, "agent"), Caller(http, url, "operator")
    for caller in (agent, operator):
        await caller.open()
    async with agent.listening(), operator.listening():
        await operator.post("tools/call", {"name": "mix", "arguments": {"recipe": "before"}})
        await wait_for(lambda: log_lines(operator) == ["after call: before"], 10.0, "the first log line")
        (tmp_path / "policy.toml").write_text(policy_toml("observer"))
        assert gateway.reload_policy() is None
        await operator.post("tools/call", {"name": "mix", "arguments": {"recipe": "after"}})
        await wait_for(lambda: "after call: after" in log_lines(agent), 10.0, "the agent's log line")
        await asyncio.sleep(SETTLE_S)
    # The reload told every listener its tools may differ; only the second line is the agent's to hear.
    assert log_lines(agent) == ["after call: after"]


async def test_a_listen_stream_without_rights_gets_no_tool_changes(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    url = f"{gateway.url}/{SLOT}/mcp"
    operator = Caller(http, url, "operator")
    await operator.open()
    streams: dict[str, SseReader] = {}
    responses = []
    for name in ("agent", "operator"):
        body = request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id=name)
        headers = routing_headers(body) | {"Authorization": f"Bearer {TOKENS[name]}"}
        response = await http.post(url, data=orjson.dumps(body), headers=headers)
        assert response.status == 200, await response.text()
        responses.append(response)
        streams[name] = SseReader(response)
        ack = await streams[name].next()
        assert ack is not None and ack["params"]["notifications"] == {"toolsListChanged": True}
    try:
        await operator.post("tools/call", {"name": "grow", "arguments": {}})
        change = await streams["operator"].next(timeout=10)
        assert change is not None and change["method"] == "notifications/tools/list_changed"
        with pytest.raises(TimeoutError):
            await streams["agent"].next(timeout=SETTLE_S)
    finally:
        for response in responses:
            response.close()


if __name__ == "__main__":
    build_child().run("stdio")
