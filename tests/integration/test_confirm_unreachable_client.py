"""A session-era client that declared elicitation but cannot be asked, or answers the question with an
error (docs/governance.md, "Confirmation of device writes"): a tools/call POST that accepts only
application/json has no stream for the question, so its call waits for an operator's approval as a
client without elicitation does; and an error answer to the question is a no, answered as the
`declined` tool error. Through a real gateway, simulated pumps, raw HTTP (aiohttp), an SDK client and
the real `mcp-gateway approve`."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.core.policy_interface import REFUSED_META_KEY
from tests.conftest import GatewayFactory, wait_for
from tests.integration.test_confirmation import POLICY
from tests.integration.test_governance import AGENT, OPERATOR, auth
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal
from tests.support.southbound import simulated_pumps

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

VERSION = "2025-06-18"
BOTH = "application/json, text/event-stream"


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[GatewayServer]:
    server = await gateway_factory(auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")})
    async with simulated_pumps(server):
        yield server


def starts(path: Path) -> list[tuple[str, str | None]]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return list(db.execute("SELECT effect, confirmed_by FROM decisions WHERE tool = 'start' ORDER BY id"))


class Session:
    """A raw session-era client on /pump-1/mcp that declares elicitation."""

    def __init__(self, http: aiohttp.ClientSession, server: GatewayServer) -> None:
        self.http = http
        self.url = f"{server.url}/pump-1/mcp"
        self.headers = {"Authorization": f"Bearer {AGENT}", "Content-Type": "application/json", "Accept": BOTH}

    async def open(self) -> None:
        hello = {"protocolVersion": VERSION, "capabilities": {"elicitation": {}}, "clientInfo": {"name": "raw"}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        async with self.http.post(self.url, json=body, headers=self.headers) as response:
            assert response.status == 200, await response.text()
            self.headers = {**self.headers, "Mcp-Session-Id": response.headers["Mcp-Session-Id"]}
            await response.read()
        self.headers["MCP-Protocol-Version"] = VERSION
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.url, json=note, headers=self.headers) as response:
            assert response.status == 202, await response.text()

    async def start_json_only(self, request_id: int) -> dict[str, Any]:
        """tools/call start, on a POST that accepts only application/json (no stream for a question)."""
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"speed_rpm": 900}},
        }
        headers = {**self.headers, "Accept": "application/json"}
        async with self.http.post(self.url, json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            assert response.content_type == "application/json"
            answer: dict[str, Any] = await response.json()
            return answer


async def test_a_json_only_request_waits_for_an_operators_approval(plant: GatewayServer, tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:
        client = Session(http, plant)
        await client.open()
        answer = await client.start_json_only(2)
        assert "error" not in answer, answer  # not a raw -32601
        result = answer["result"]
        assert result["isError"] is True, result
        refused = result["_meta"][REFUSED_META_KEY]
        assert refused["reason"] == "confirmation_required", result
        text = result["content"][0]["text"]
        assert "this client cannot be asked (this request cannot carry the question" in text, text
        assert f"mcp-gateway approve {refused['approval']}" in text
        token = tmp_path / "operator.token"
        token.write_text(OPERATOR)
        code, _, err = await run_cli("approve", refused["approval"], "--url", plant.url, "--token-file", str(token))
        assert code == 0, err
        done = (await client.start_json_only(3))["result"]
        assert done.get("isError") is not True, done
    await wait_for(lambda: len(starts(tmp_path / "audit.db")) == 2, what="the retry's decision")
    decided = starts(tmp_path / "audit.db")
    assert decided[0] == ("wait-confirmation", None)
    assert decided[1][0] == "allow" and decided[1][1] is not None and "operator" in decided[1][1]


async def failing_form(context: Any, params: types.ElicitRequestParams) -> types.ErrorData:
    return types.ErrorData(code=-32603, message="the UI could not show the form")


async def test_an_error_answer_to_the_question_is_declined(plant: GatewayServer, tmp_path: Path) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}, timeout=30) as transport,
        Client(
            streamable_http_client(f"{plant.url}/pump-1/mcp", http_client=transport),
            mode="legacy",
            elicitation_callback=failing_form,
        ) as sdk,
    ):
        text, refused = refusal(await sdk.call_tool("start", {"speed_rpm": 900}))
    assert refused["reason"] == "declined", text
    assert text.startswith("Not done: start on pump-1 was not forwarded to the device"), text
    assert "the UI could not show the form" in text
    decided = starts(tmp_path / "audit.db")
    assert [effect for effect, _ in decided] == ["declined"]
    assert "an error answer: the UI could not show the form" in str(decided[0][1])


async def test_an_error_answer_on_the_raw_stream_is_declined(plant: GatewayServer, tmp_path: Path) -> None:
    """The same on the wire: the question arrives on the call's SSE stream, the answer is a JSON-RPC error."""
    async with aiohttp.ClientSession() as http:
        client = Session(http, plant)
        await client.open()
        body = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"speed_rpm": 900}},
        }
        async with http.post(client.url, json=body, headers=client.headers) as response:
            assert response.content_type == "text/event-stream"
            final: dict[str, Any] | None = None
            async for line in response.content:
                if not line.startswith(b"data:"):
                    continue
                message = orjson.loads(line[5:])
                if message.get("method") == "elicitation/create":
                    error = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "no UI"}}
                    async with http.post(client.url, json=error, headers=client.headers) as answered:
                        assert answered.status == 202, await answered.text()
                elif message.get("id") == 5:
                    final = message
                    break
    assert final is not None and "error" not in final, final
    result = final["result"]
    assert result["isError"] is True and result["_meta"][REFUSED_META_KEY]["reason"] == "declined", result
    assert [effect for effect, _ in starts(tmp_path / "audit.db")] == ["declined"]
