"""A [[confirm]]-covered tool whose provider asks its own question, in the 2026-07-28 era
(docs/governance.md, "Confirmation of device writes"): the person confirms once, the provider's
input_required round is relayed with a gateway requestState sealing the provider's own state and the
confirmation, and the client's retry continues the call without a second confirmation. Through a real
gateway, the real stdio provider tests/support/ordinary_provider.py (`greet` asks the user's name), real
MCP SDK clients and the real `mcp-gateway approve`; a tampered or moved state is refused."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_governance import AGENT, OPERATOR, auth
from tests.integration.test_http_stateless_era import META_CAPABILITIES, post, request, routing_headers
from tests.support.asking_server import asking_server
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal
from tests.support.remote_server import RemoteServer

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SLOT = "ordinary"
MODERN = "2026-07-28"
CONFIRM: dict[str, Any] = {"principal": "token:agent", "capabilities": ["tool:greet"], "resources": ["/ordinary"]}


def policy(by: str, slot: str = SLOT, tool: str = "greet") -> dict[str, Any]:
    return {
        "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
        "assign": [
            {"principal": "token:agent", "role": "operator", "resources": [f"/{slot}"]},
            {"principal": "token:operator", "role": "operator", "resources": [f"/{slot}", "/_system/**"]},
        ],
        "confirm": [
            {**CONFIRM, "capabilities": [f"tool:{tool}"], "resources": [f"/{slot}"], "by": by, "expires_s": 60}
        ],
    }


Start = Callable[[str], Awaitable[GatewayServer]]


@pytest.fixture
async def start(gateway_factory: GatewayFactory, tmp_path: Path) -> Start:
    async def make(by: str) -> GatewayServer:
        command = [sys.executable, "-m", "tests.support.ordinary_provider", "--stdio"]
        upstream = {"name": SLOT, "command": command, "startup_timeout_s": 30}
        gateway = await gateway_factory(
            auth=auth(),
            policy=policy(by),
            audit={"path": str(tmp_path / "audit.db")},
            upstreams={"stdio": [upstream]},
        )
        await wait_ready_slot(gateway, SLOT, timeout=30)
        return gateway

    return make


class Person:
    """Answers the gateway's confirmation with a yes and the provider's question with a name."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        schema = getattr(params, "requested_schema", None)
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if "approve" in properties:
            self.asked.append("confirm")
            return types.ElicitResult(action="accept", content={"approve": True})
        self.asked.append("name")
        return types.ElicitResult(action="accept", content={"name": "Bob"})


@contextlib.asynccontextmanager
async def client(server: GatewayServer, person: Person | None = None, slot: str = SLOT) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}, timeout=30) as transport,
        Client(
            streamable_http_client(f"{server.url}/{slot}/mcp", http_client=transport),
            mode=MODERN,
            elicitation_callback=person.elicit if person is not None else None,
        ) as sdk,
    ):
        yield sdk


async def recorded(path: Path, forwarded: int, tool: str = "greet") -> list[tuple[str, str | None, str | None]]:
    """greets(path, tool) once the results of `forwarded` calls are written (the trail writes them after the answer)."""
    await wait_for(lambda: sum(status is not None for *_, status in greets(path, tool)) >= forwarded, what="results")
    return greets(path, tool)


def greets(path: Path, tool: str = "greet") -> list[tuple[str, str | None, str | None]]:
    """Each decision on `tool`: its effect, who confirmed it, and the result of a forwarded one."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT d.effect, d.confirmed_by, r.status FROM decisions d LEFT JOIN results r ON r.decision_id = d.id"
            " WHERE d.tool = ? ORDER BY d.id",
            (tool,),
        )
        return [(effect, by, status) for effect, by, status in rows]


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


async def test_confirmed_once_then_the_providers_question_is_relayed(start: Start, tmp_path: Path) -> None:
    server = await start("caller")
    person = Person()
    async with client(server, person) as sdk:
        result = await sdk.call_tool("greet", {})
    assert text(result) == "Hello, Bob!", result
    assert person.asked == ["confirm", "name"]
    # One confirmation; the provider is called once per its own round (asks, then answers), and the
    # continued round records the yes it continues.
    assert await recorded(tmp_path / "audit.db", 2) == [
        ("wait-confirmation", None, None),
        ("allow", "token:agent via input_required", "ok"),
        ("allow", "token:agent via input_required", "ok"),
    ]


async def test_approved_by_another_then_the_providers_question_is_relayed(start: Start, tmp_path: Path) -> None:
    server = await start("another")
    person = Person()
    async with client(server, person) as sdk:
        waiting, refused = refusal(await sdk.call_tool("greet", {}))
        assert refused["reason"] == "confirmation_required", waiting
        token = tmp_path / "operator.token"
        token.write_text(OPERATOR)
        code, _, err = await run_cli("approve", refused["approval"], "--url", server.url, "--token-file", str(token))
        assert code == 0, err
        result = await sdk.call_tool("greet", {})
    assert text(result) == "Hello, Bob!", result
    assert person.asked == ["name"]  # the caller's own client is never asked to confirm
    # Both rounds record the operator's approval.
    assert await recorded(tmp_path / "audit.db", 2) == [
        ("wait-confirmation", None, None),
        ("allow", "token:operator", "ok"),
        ("allow", "token:operator", "ok"),
    ]


async def test_a_session_era_providers_question_continues_its_held_call(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    """A session-era provider asks mid-call (the gateway holds its call and answers input_required with a
    state of its own): once confirmed, the retry resumes that held call; the provider is called once."""
    remote = RemoteServer(asking_server, mode="session")
    await remote.start()
    try:
        gateway = await gateway_factory(
            auth=auth(),
            policy=policy("caller", "asker", "ask_name"),
            audit={"path": str(tmp_path / "audit.db")},
            upstreams={"remote": [{"name": "asker", "url": remote.url, "transport": "streamable-http"}]},
        )
        await wait_ready_slot(gateway, "asker", timeout=10)
        person = Person()
        async with client(gateway, person, "asker") as sdk:
            result = await sdk.call_tool("ask_name", {})
        assert text(result) == "Hello, Bob!", result
        assert person.asked == ["confirm", "name"]
        decided = await recorded(tmp_path / "audit.db", 2, "ask_name")
        assert [(effect, by) for effect, by, _ in decided] == [
            ("wait-confirmation", None),
            ("allow", "token:agent via input_required"),
            ("allow", "token:agent via input_required"),
        ]
    finally:
        await remote.stop()


# -- the continuation state on the wire --------------------------------------------------------------------


async def rpc(http: aiohttp.ClientSession, server: GatewayServer, params: dict[str, Any]) -> dict[str, Any]:
    """One stateless-era tools/call from a client that declares elicitation; its final answer."""
    body = request("tools/call", params, meta={META_CAPABILITIES: {"elicitation": {"form": {}}}})
    headers = {**routing_headers(body), "Authorization": f"Bearer {AGENT}"}
    _, _, answer = await post(http, f"{server.url}/{SLOT}/mcp", body, headers)
    final: dict[str, Any] = answer[-1] if isinstance(answer, list) else answer
    return final


async def confirmed_round(http: aiohttp.ClientSession, server: GatewayServer) -> dict[str, Any]:
    """Ask, confirm, and get the provider's own input_required round."""
    asked = (await rpc(http, server, {"name": "greet", "arguments": {}}))["result"]
    assert asked["resultType"] == "input_required", asked
    yes = {"confirm": {"action": "accept", "content": {"approve": True}}}
    retry = {"name": "greet", "arguments": {}, "requestState": asked["requestState"], "inputResponses": yes}
    provider: dict[str, Any] = (await rpc(http, server, retry))["result"]
    assert provider["requestState"] != asked["requestState"], provider
    assert provider["resultType"] == "input_required", provider
    assert "name" in provider["inputRequests"], provider
    return provider


NAME = {"name": {"action": "accept", "content": {"name": "Ada"}}}


async def test_a_tampered_moved_or_reused_state_is_refused(start: Start, tmp_path: Path) -> None:
    server = await start("caller")
    async with aiohttp.ClientSession() as http:
        provider = await confirmed_round(http, server)
        state = provider["requestState"]
        tampered = state[:-1] + ("0" if state[-1] != "0" else "1")
        for params in (
            {"name": "greet", "arguments": {}, "requestState": tampered, "inputResponses": NAME},
            {"name": "greet", "arguments": {"other": 1}, "requestState": state, "inputResponses": NAME},
        ):
            error = (await rpc(http, server, params))["error"]
            assert error["code"] == -32602, error
            assert error["data"]["reason"] == "mismatch", error
            assert "requestState does not belong to this call" in error["message"]
        done = await rpc(
            http, server, {"name": "greet", "arguments": {}, "requestState": state, "inputResponses": NAME}
        )
        assert done["result"]["content"][0]["text"] == "Hello, Ada!", done
        again = await rpc(
            http, server, {"name": "greet", "arguments": {}, "requestState": state, "inputResponses": NAME}
        )
        assert again["error"]["code"] == -32602 and again["error"]["data"]["reason"] == "used", again
    # Refused states reach no provider: one confirmation, two provider rounds, and each refused state on
    # record as refuse-confirmation, claiming no confirmation.
    by = "token:agent via input_required"
    assert await recorded(tmp_path / "audit.db", 2) == [
        ("wait-confirmation", None, None),
        ("allow", by, "ok"),
        ("refuse-confirmation", None, None),
        ("refuse-confirmation", None, None),
        ("allow", by, "ok"),
        ("refuse-confirmation", None, None),
    ]
