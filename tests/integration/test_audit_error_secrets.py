"""A device's error text that quotes a secret argument of the call is stored without it: the result's
error (a tool error's text, a JSON-RPC error's message) and the answer after a cancel, as the arguments
column and a refusal's reason are (gateway/policy/audit/records.py: stored_error; docs/governance-audit.md).
Neither `mcp-gateway audit`, broker_audit_recent nor the database file and its write-ahead log hold it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_audit_secret_reason import trail_bytes
from tests.integration.test_cancel_crosses_answer import (
    AGENT,
    POLICY,
    AgentSession,
    answered_after_cancel,
    board_in,
    cancel_crossing_the_answer,
)
from tests.support.gateway_process import run_cli
from tests.support.southbound import Boards

TOOL_ERROR_SECRET = "hunter2-" + secrets.token_hex(8)
RPC_ERROR_SECRET = "hunter3-" + secrets.token_hex(8)
AFTER_CANCEL_SECRETS = ["late-tool-" + secrets.token_hex(8), "late-rpc-" + secrets.token_hex(8)]

ANYONE_POLICY: dict[str, Any] = {
    "roles": {
        "op": {
            "capabilities": [
                "mcp.tools.list",
                "mcp.tools.call",
                "tool.observe",
                "tool.control",
                "broker.audit.read",
            ]
        }
    },
    "assign": [{"principal": "*", "role": "op", "resources": ["/**"]}],
}
JOIN_TOOL = {
    "name": "join_wifi",
    "description": "join a network",
    "inputSchema": {
        "type": "object",
        "properties": {"ssid": {"type": "string"}, "password": {"type": "string"}},
    },
}


class EchoingProvider:
    """A board on a raw WebSocket whose failures quote the arguments it got, as many devices' do:
    ssid "rpc" fails with a JSON-RPC error, any other with a tool error."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                continue
            request = orjson.loads(message.data)
            if "id" not in request or "method" not in request:
                continue
            await self.ws.send_str(orjson.dumps(self.answer(request)).decode())

    @staticmethod
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        method, request_id = request["method"], request["id"]
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "echo", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [JOIN_TOOL]}
        elif method == "tools/call":
            arguments = request["params"].get("arguments", {})
            ssid, password = arguments.get("ssid"), arguments.get("password")
            if ssid == "rpc":
                error = {"code": -32000, "message": f"auth failed with password {password}"}
                return {"jsonrpc": "2.0", "id": request_id, "error": error}
            text = f"could not join {ssid} with password {password}"
            result = {"content": [{"type": "text", "text": text}], "isError": True}
        else:
            error = {"code": -32601, "message": "Method not found"}
            return {"jsonrpc": "2.0", "id": request_id, "error": error}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def audit_jsonl(trail: Path) -> list[dict[str, Any]]:
    code, out, err = await run_cli("audit", "--path", str(trail), "--format", "jsonl")
    assert code == 0, err
    return [orjson.loads(line) for line in out.splitlines()]


async def with_results(trail: Path, tool: str, count: int) -> list[dict[str, Any]]:
    """The trail's records of `tool` once `count` of them have their result (written with a later batch)."""
    records: list[dict[str, Any]] = []
    for _ in range(100):
        records = [record for record in await audit_jsonl(trail) if record["tool"] == tool]
        if sum(1 for record in records if record["status"] is not None) >= count:
            return records
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} results of {tool} in {records}")


async def echoing_provider(server: GatewayServer, http: aiohttp.ClientSession) -> EchoingProvider:
    ws = await http.ws_connect(f"ws://127.0.0.1:{server.port}/provider/wifi")
    provider = EchoingProvider(ws)
    await wait_ready_slot(server, "wifi")
    return provider


@pytest.mark.timeout(90)
async def test_a_secret_the_device_quotes_in_its_error_never_reaches_the_trail(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    server = await gateway_factory(policy=ANYONE_POLICY, audit={"path": str(trail)})
    async with aiohttp.ClientSession() as http:
        provider = await echoing_provider(server, http)
        try:
            async with Client(f"{server.url}/wifi/mcp", mode="legacy") as client:
                failed = await client.call_tool("join_wifi", {"ssid": "plant", "password": TOOL_ERROR_SECRET})
                # The caller sent the value and gets the device's words as they came.
                assert failed.is_error
                assert TOOL_ERROR_SECRET in failed.content[0].text  # type: ignore[union-attr]
                with pytest.raises(Exception, match=RPC_ERROR_SECRET):
                    await client.call_tool("join_wifi", {"ssid": "rpc", "password": RPC_ERROR_SECRET})
            records = await with_results(trail, "join_wifi", 2)
            async with Client(f"{server.url}/_broker/mcp", mode="legacy") as broker:
                recent = await broker.call_tool("broker_audit_recent", {"limit": 20})
        finally:
            await provider.close()
    assert [(record["status"], record["error"]) for record in records] == [
        ("tool-error", "could not join plant with password ***"),
        ("error", "auth failed with password ***"),
    ]
    assert [record["arguments"]["password"] for record in records] == ["***", "***"]
    assert not recent.is_error, recent
    shown = orjson.dumps(recent.structured_content).decode() + recent.content[0].text  # type: ignore[union-attr]
    assert "with password ***" in shown
    stored = trail_bytes(trail)
    for value in (TOOL_ERROR_SECRET, RPC_ERROR_SECRET):
        assert value not in shown
        assert value.encode() not in stored


@pytest.mark.timeout(90)
async def test_a_secret_quoted_in_an_answer_after_the_cancel_never_reaches_the_trail(
    gateway_factory: GatewayFactory, boards: Boards, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    gateway = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]},
        policy=POLICY,
        audit={"path": str(trail)},
        slots={"declared": {"board": {}}},
    )
    board = await board_in(gateway, boards)
    tool_secret, rpc_secret = AFTER_CANCEL_SECRETS
    tool_error = {"result": {"content": [{"type": "text", "text": f"pin {tool_secret} refused"}], "isError": True}}
    rpc_error = {"error": {"code": -32000, "message": f"pin {rpc_secret} refused"}}
    async with aiohttp.ClientSession() as http:
        client = AgentSession(http, f"{gateway.url}/board/mcp", AGENT)
        await client.initialize()
        for secret, answer in ((tool_secret, tool_error), (rpc_secret, rpc_error)):
            told = await cancel_crossing_the_answer(client, board, {"open": True, "pin_code": secret}, answer)
            assert told["error"]["code"] == -32800
    records = await answered_after_cancel(trail, 2)
    assert [(r["status"], r["after_cancel"], r["after_cancel_error"]) for r in records[:2]] == [
        ("cancelled", "tool-error", "pin *** refused"),
        ("cancelled", "error", "pin *** refused"),
    ]
    stored = trail_bytes(trail)
    for secret in AFTER_CANCEL_SECRETS:
        assert secret.encode() not in stored
