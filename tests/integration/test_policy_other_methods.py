"""Methods outside MCP's governed families, MCP tasks and `_all` listings, through a real gateway with a
[policy] in front of real stdio providers (docs/governance.md, docs/protocol-clients.md).

Run as a module, this file is the provider: an ordinary SDK server with one tool, plus a vendor method,
logging/setLevel and the tasks/* methods of MCP 2025-11-25, advertising `tasks`; every request of those
it receives is appended to the file named by $RECORD, so a test sees what reached the provider.

    python -m tests.integration.test_policy_other_methods
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.support.answers import decode_answer
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS

pytestmark = pytest.mark.timeout(60)

AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)

POLICY: dict[str, Any] = {
    "roles": {
        "observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]},
        "operator": {"inherits": ["observer"], "capabilities": ["tool.control"]},
    },
    "assign": [
        {"principal": "token:agent", "role": "observer", "resources": ["/public"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/**"]},
    ],
}
LIST_DENIED: dict[str, Any] = {
    **POLICY,
    "deny": [{"principal": "token:agent", "capabilities": ["mcp.tools.list"], "resources": ["/public"]}],
}


# -- the provider ------------------------------------------------------------------------------------


def serve_provider() -> None:
    import anyio
    import mcp_types as types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.stdio import stdio_server

    record = Path(os.environ["RECORD"])
    server = MCPServer("vendor-tasks", version="1.0")

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def read_secret(plant: str) -> str:
        """Read a plant's recipe."""
        return f"SECRET recipe of {plant}"

    def heard(method: str) -> None:
        with record.open("a") as file:
            file.write(method + "\n")

    async def reboot(ctx: Any, params: types.RequestParams) -> types.EmptyResult:
        heard("vendor/reboot")
        return types.EmptyResult()

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        heard(f"logging/setLevel {params.level}")
        return types.EmptyResult()

    async def list_tasks(ctx: Any, params: types.PaginatedRequestParams) -> types.ListTasksResult:
        heard("tasks/list")
        return types.ListTasksResult(tasks=[])

    async def listen(ctx: Any, params: types.RequestParams) -> types.EmptyResult:
        heard("subscriptions/listen")
        return types.EmptyResult()

    low = server._lowlevel_server
    low.add_request_handler("vendor/reboot", types.RequestParams, reboot)
    low.add_request_handler("subscriptions/listen", types.RequestParams, listen)
    low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    low.add_request_handler("tasks/list", types.PaginatedRequestParams, list_tasks)
    options = low.create_initialization_options()
    options.capabilities.tasks = types.ServerTasksCapability.model_validate(
        {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    )

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, options)

    anyio.run(main)


# -- the gateway and a raw client --------------------------------------------------------------------


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def upstream(name: str, record: Path) -> dict[str, Any]:
    return {
        "name": name,
        "command": [sys.executable, "-m", "tests.integration.test_policy_other_methods"],
        "env": {"RECORD": str(record)},
        "aggregate": True,
    }


async def start(
    gateway_factory: GatewayFactory, tmp_path: Path, policy: dict[str, Any] | None, **more: Any
) -> GatewayServer:
    governance: dict[str, Any] = {} if policy is None else {"policy": policy}
    server = await gateway_factory(
        **more,
        auth={"tokens": [{"name": "agent", "sha256": sha(AGENT)}, {"name": "operator", "sha256": sha(OPERATOR)}]},
        audit={"path": str(tmp_path / "audit.db")},
        providers={"era": "session"},  # logging/setLevel goes upstream only in the session era
        upstreams={"stdio": [upstream("public", tmp_path / "public.log"), upstream("secret", tmp_path / "secret.log")]},
        **governance,
    )
    for slot in ("public", "secret"):
        await wait_ready_slot(server, slot, timeout=30)
    return server


def heard(tmp_path: Path, slot: str) -> list[str]:
    record = tmp_path / f"{slot}.log"
    return record.read_text().splitlines() if record.exists() else []


class Session:
    """One session-era MCP session over raw HTTP: what any client sends, with methods an SDK client has no call for."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        self.http = http
        self.url = url
        self.headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        self.next_id = 1
        self.initialized: dict[str, Any] = {}

    async def post(self, body: dict[str, Any]) -> Any:
        async with self.http.post(self.url, json=body, headers=self.headers) as response:
            assert response.status in (200, 202), await response.text()
            if "Mcp-Session-Id" in response.headers:
                self.headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
            return decode_answer(response.content_type, await response.read())

    async def open(self) -> Session:
        self.initialized = (await self.post(INITIALIZE))["result"]
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        answer: dict[str, Any] = await self.post(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        return answer


@contextlib.asynccontextmanager
async def session(server: GatewayServer, slot: str, token: str) -> AsyncIterator[Session]:
    async with aiohttp.ClientSession() as http:
        path = slot if slot.startswith("mcp/") else f"{slot}/mcp"  # a tool group's endpoint, else a slot's
        yield await Session(http, f"{server.url}/{path}", token).open()


# -- the tests ---------------------------------------------------------------------------------------


async def test_a_vendor_method_is_refused_under_a_policy_and_never_reaches_the_provider(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await start(gateway_factory, tmp_path, POLICY)
    for token in (AGENT, OPERATOR):  # not even a caller holding every capability on the slot
        async with session(server, "secret", token) as caller:
            answer = await caller.request("vendor/reboot", {"now": True})
            error = answer["error"]
            assert error["code"] == -32001, answer
            assert "vendor/reboot" in error["message"]
            assert "governed families" in error["message"]
            assert error["data"]["method"] == "vendor/reboot"
            assert error["data"]["slot"] == "secret"
            assert "tools/call" in error["data"]["governed_families"]
    assert "vendor/reboot" not in heard(tmp_path, "secret")


async def test_a_vendor_method_is_relayed_without_a_policy(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await start(gateway_factory, tmp_path, None)
    async with session(server, "secret", AGENT) as caller:
        answer = await caller.request("vendor/reboot", {"now": True})
    assert answer.get("result") == {}, answer
    assert heard(tmp_path, "secret") == ["vendor/reboot"]


async def test_logging_set_level_needs_a_capability_on_the_slot(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await start(gateway_factory, tmp_path, POLICY)
    async with session(server, "secret", AGENT) as agent:
        answer = await agent.request("logging/setLevel", {"level": "debug"})
        assert answer["error"]["code"] == -32001, answer
        assert "log level" in answer["error"]["message"]
        assert "mcp.tools.list" in answer["error"]["message"]  # what to ask the operator for
    assert not [line for line in heard(tmp_path, "secret") if line.startswith("logging/setLevel")]
    async with session(server, "secret", OPERATOR) as operator:
        assert (await operator.request("logging/setLevel", {"level": "debug"})).get("result") == {}
    assert "logging/setLevel debug" in heard(tmp_path, "secret")


@pytest.mark.parametrize("policy", [POLICY, None], ids=["policy", "no-policy"])
async def test_a_listen_sent_in_a_session_is_refused_not_relayed(
    gateway_factory: GatewayFactory, tmp_path: Path, policy: dict[str, Any] | None
) -> None:
    # Only the stateless transport serves subscriptions/listen (and filters what the stream gets); sent
    # inside a session it would reach the provider, and its stream the caller, unchecked.
    server = await start(gateway_factory, tmp_path, policy)
    async with session(server, "secret", AGENT) as agent:
        listen = await agent.request("subscriptions/listen", {"notifications": {"resourceSubscriptions": ["x://y"]}})
        assert listen["error"]["code"] == -32601, listen
        assert "Method not found: subscriptions/listen" in listen["error"]["message"]
    assert not [line for line in heard(tmp_path, "secret") if line.startswith("subscriptions/listen")]


@pytest.mark.parametrize("policy", [POLICY, None], ids=["policy", "no-policy"])
async def test_mcp_tasks_are_neither_advertised_nor_relayed(
    gateway_factory: GatewayFactory, tmp_path: Path, policy: dict[str, Any] | None
) -> None:
    server = await start(gateway_factory, tmp_path, policy)
    provider = server.gateway.registry.slots["secret"].live
    assert provider is not None and "tasks" in provider.capabilities  # the provider offers them
    async with session(server, "secret", OPERATOR) as operator:
        assert "tasks" not in operator.initialized["capabilities"]
        call = {"name": "read_secret", "arguments": {"plant": "hall2"}, "task": {"ttl": 60000}}
        answer = await operator.request("tools/call", call)  # served as a plain call: no provider task
        assert "SECRET recipe of hall2" in str(answer["result"]), answer
        assert "task" not in answer["result"]
        listed = await operator.request("tasks/list", {})
        assert listed["error"]["code"] == -32601, listed
        assert "does not relay MCP tasks" in listed["error"]["message"]
        assert listed["error"]["data"]["reason"] == "tasks_not_relayed"
        assert listed["error"]["data"]["method"] == "tasks/list"
    async with session(server, "_all", OPERATOR) as aggregate:
        assert "tasks" not in aggregate.initialized["capabilities"]
        listed = await aggregate.request("tasks/list", {})
        assert listed["error"]["code"] == -32601, listed
    assert "tasks/list" not in heard(tmp_path, "secret")


async def test_all_and_groups_list_no_tool_of_a_slot_whose_tools_list_is_denied(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await start(gateway_factory, tmp_path, LIST_DENIED, groups={"plant": {}})
    async with session(server, "public", AGENT) as agent:
        refused = await agent.request("tools/list", {})
        assert refused["error"]["code"] == -32001, refused
        assert "deny[0]" in refused["error"]["message"]
    async with session(server, "_all", AGENT) as agent:
        listed = await agent.request("tools/list", {})
        assert [tool["name"] for tool in listed["result"]["tools"]] == []
    async with session(server, "_all", OPERATOR) as operator:  # the deny is the agent's alone
        listed = await operator.request("tools/list", {})
        names = sorted(tool["name"] for tool in listed["result"]["tools"])
        assert names == ["public-read_secret", "secret-read_secret"]
    # A tool group lists as `_all` does.
    async with session(server, "mcp/plant", AGENT) as agent:
        listed = await agent.request("tools/list", {})
        assert [tool["name"] for tool in listed["result"]["tools"]] == ["guidance", "search"]
    async with session(server, "mcp/plant", OPERATOR) as operator:
        listed = await operator.request("tools/list", {})
        names = sorted(tool["name"] for tool in listed["result"]["tools"])
        assert names == ["guidance", "public__read_secret", "search", "secret__read_secret"]
    # GET /mcp-servers counts what the caller's listings show.
    async with aiohttp.ClientSession() as http:
        for token, counted in ((AGENT, {"public": 0, "secret": 0}), (OPERATOR, {"public": 1, "secret": 1})):
            async with http.get(f"{server.url}/mcp-servers", headers={"Authorization": f"Bearer {token}"}) as response:
                servers = await response.json()
            assert {entry["name"]: entry["tools"] for entry in servers} == counted


if __name__ == "__main__":
    serve_provider()
