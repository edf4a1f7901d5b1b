"""A client's cancel that crosses the device's answer (docs/protocol.md, "Requests and ids";
docs/governance-audit.md, "Answers after a cancel").

The race is made deterministic by a scripted board that holds its answer until it has received the
gateway's notifications/cancelled, then answers. The caller is told -32800; the answer is no provider
fault (not counted, not logged as one); for a governed call the audit trail shows the call `cancelled`
and what the device answered after the cancel.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import logging
import secrets
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.policy.audit.records import MAX_ERROR_CHARS
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_http_session_era import RawSession
from tests.support.gateway_process import run_cli
from tests.support.southbound import Boards, ScriptedBoard, provider_status

AGENT = secrets.token_urlsafe(32)
POLICY: dict[str, Any] = {
    "roles": {"caller": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:agent", "role": "caller", "resources": ["/**"]}],
}
FAULT_LINE = "nobody waits for"
"""Words of the provider-fault warning for an unmatched response."""


class AgentSession(RawSession):
    """A raw session-era client that sends the agent's bearer token."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: str | None) -> None:
        super().__init__(http, url)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        headers = super().headers(**extra)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


async def counters_as_agent(gateway: GatewayServer) -> dict[str, int]:
    """The board's provider_status counters, asked with the agent's token (the gateway has [auth])."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{gateway.url}/_broker/mcp", http_client=transport), mode="legacy") as client,
    ):
        result = await client.call_tool("provider_status", {"name": "board"})
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    counters: dict[str, int] = result.structured_content["counters"]
    return counters


async def board_in(gateway: GatewayServer, boards: Boards) -> ScriptedBoard:
    board = await boards.connect(gateway.url, "/provider/board")
    await wait_ready_slot(gateway, "board")
    return board


def cancels(request_id: Any, message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("method") == "notifications/cancelled"
        and message["params"]["requestId"] == request_id
    )


def final(body: Any) -> dict[str, Any]:
    message: dict[str, Any] = body[-1] if isinstance(body, list) else body
    return message


async def cancel_crossing_the_answer(
    client: RawSession, board: ScriptedBoard, arguments: dict[str, Any], answer: dict[str, Any]
) -> dict[str, Any]:
    """A tools/call the client cancels while the board works on it; the board answers `answer` (a
    JSON-RPC response without its id) once it has the gateway's cancel. What the client was told."""
    body = client.request_body("tools/call", {"name": "valve", "arguments": arguments})
    call = asyncio.create_task(client.post(body))
    forwarded = await board.request("tools/call")
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"]}}
    assert (await client.post(cancel))[0] == 202
    await board.take(partial(cancels, forwarded["id"]), what="the gateway's notifications/cancelled")
    await board.send({"jsonrpc": "2.0", "id": forwarded["id"], **answer})
    status, _, told = await asyncio.wait_for(call, 5)
    assert status == 200, told
    return final(told)


async def answered_normally(client: RawSession, board: ScriptedBoard) -> None:
    """The link still serves: a call the board answers at once reaches its caller."""
    body = client.request_body("tools/call", {"name": "valve", "arguments": {"open": False}})
    call = asyncio.create_task(client.post(body))
    forwarded = await board.request("tools/call")
    await board.reply(forwarded, {"content": [{"type": "text", "text": "closed"}]})
    _, _, told = await asyncio.wait_for(call, 5)
    assert final(told)["result"]["content"][0]["text"] == "closed"


async def test_an_answer_crossing_the_clients_cancel_is_no_provider_fault(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.provider")
    gateway = await gateway_factory(slots={"declared": {"board": {}}})
    board = await board_in(gateway, boards)
    async with aiohttp.ClientSession() as http:
        client = AgentSession(http, f"{gateway.url}/board/mcp", None)
        await client.initialize()
        told = await cancel_crossing_the_answer(
            client, board, {"open": True}, {"result": {"content": [{"type": "text", "text": "opened"}]}}
        )
        assert told["error"]["code"] == -32800
        await answered_normally(client, board)
    counters = (await provider_status(gateway.url, "board"))["counters"]
    assert counters["unmatched_responses"] == 0
    faults = [r for r in caplog.records if r.levelno >= logging.WARNING and FAULT_LINE in r.getMessage()]
    assert faults == []
    # Said once at DEBUG, for whoever looks into it.
    assert any("after the gateway cancelled it" in r.getMessage() for r in caplog.records)


async def test_an_answer_to_an_id_never_sent_is_still_unmatched(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    gateway = await gateway_factory(slots={"declared": {"board": {}}})
    board = await board_in(gateway, boards)
    async with aiohttp.ClientSession() as http:
        client = AgentSession(http, f"{gateway.url}/board/mcp", None)
        await client.initialize()
        body = client.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
        call = asyncio.create_task(client.post(body))
        forwarded = await board.request("tools/call")
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"]}}
        await client.post(cancel)
        await board.take(partial(cancels, forwarded["id"]), what="the gateway's notifications/cancelled")
        await asyncio.wait_for(call, 5)
        # An id the gateway never sent, and a second answer to the cancelled one (forgotten once answered).
        await board.send({"jsonrpc": "2.0", "id": "brk-999999", "result": {}})
        await board.reply(forwarded, {"content": []})
        await board.reply(forwarded, {"content": []})
        await answered_normally(client, board)
    assert (await provider_status(gateway.url, "board"))["counters"]["unmatched_responses"] == 2
    faults = [r for r in caplog.records if FAULT_LINE in r.getMessage()]
    assert len(faults) == 1 and "brk-999999" in faults[0].getMessage()


async def audit(trail: Path, output: str) -> str:
    code, out, err = await run_cli("audit", "--path", str(trail), "--format", output)
    assert code == 0, err
    return out


async def answered_after_cancel(trail: Path, count: int) -> list[dict[str, Any]]:
    """The trail's records (jsonl) once `count` of them hold an answer after a cancel."""
    records: list[dict[str, Any]] = []
    for _ in range(100):
        records = [orjson.loads(line) for line in (await audit(trail, "jsonl")).splitlines()]
        if sum(1 for record in records if record["after_cancel"] is not None) >= count:
            return records
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} answers after a cancel in {records}")


async def test_the_audit_trail_shows_what_the_device_answered_after_the_cancel(
    gateway_factory: GatewayFactory, boards: Boards, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    trail = tmp_path / "audit.db"
    gateway = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]},
        policy=POLICY,
        audit={"path": str(trail)},
        slots={"declared": {"board": {}}},
    )
    board = await board_in(gateway, boards)
    stuck = "valve stuck at 40 % " * 100  # longer than max_error_chars
    answers: list[dict[str, Any]] = [
        {"result": {"content": [{"type": "text", "text": "opened"}]}},
        {"result": {"content": [{"type": "text", "text": "valve jammed"}], "isError": True}},
        {"error": {"code": -32000, "message": stuck}},
    ]
    async with aiohttp.ClientSession() as http:
        client = AgentSession(http, f"{gateway.url}/board/mcp", AGENT)
        await client.initialize()
        for percent, answer in enumerate(answers):
            told = await cancel_crossing_the_answer(client, board, {"open": True, "percent": percent}, answer)
            assert told["error"]["code"] == -32800
            assert told["error"]["message"] == "Request cancelled"
        await answered_normally(client, board)
    records = await answered_after_cancel(trail, 3)
    assert [(r["status"], r["after_cancel"], r["after_cancel_error"]) for r in records[:3]] == [
        ("cancelled", "ok", None),
        ("cancelled", "tool-error", "valve jammed"),
        ("cancelled", "error", stuck[: MAX_ERROR_CHARS - 1] + "…"),
    ]
    assert all(isinstance(r["after_cancel_ms"], int) for r in records[:3])
    assert records[3]["status"] in ("ok", None) and records[3]["after_cancel"] is None
    table = await audit(trail, "table")
    assert "cancelled, then ok" in table
    assert "cancelled, then tool-error: valve jammed" in table
    rows = list(csv.DictReader(io.StringIO(await audit(trail, "csv"))))
    assert (rows[0]["status"], rows[0]["after_cancel"]) == ("cancelled", "ok")
    assert (await counters_as_agent(gateway))["unmatched_responses"] == 0
    assert [r for r in caplog.records if FAULT_LINE in r.getMessage()] == []


async def test_the_audit_trail_shows_what_the_device_answered_after_its_deadline(
    gateway_factory: GatewayFactory, boards: Boards, tmp_path: Path
) -> None:
    """A deadline cancels the call upstream too: a slow board that carries the call out afterwards
    shows as `timeout, then ok`, not as a call that never happened."""
    trail = tmp_path / "audit.db"
    gateway = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": hashlib.sha256(AGENT.encode()).hexdigest()}]},
        policy=POLICY,
        audit={"path": str(trail)},
        slots={"declared": {"board": {"request_timeout_ms": 300}}},
    )
    board = await board_in(gateway, boards)
    async with aiohttp.ClientSession() as http:
        client = AgentSession(http, f"{gateway.url}/board/mcp", AGENT)
        await client.initialize()
        body = client.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
        call = asyncio.create_task(client.post(body))
        forwarded = await board.request("tools/call")
        await board.take(partial(cancels, forwarded["id"]), what="the gateway's cancel at the deadline")
        _, _, told = await asyncio.wait_for(call, 5)
        assert "did not respond within 300ms" in final(told)["error"]["message"]
        await board.reply(forwarded, {"content": [{"type": "text", "text": "opened"}]})
        await answered_normally(client, board)
    records = await answered_after_cancel(trail, 1)
    assert (records[0]["status"], records[0]["after_cancel"]) == ("timeout", "ok")
    assert "timeout, then ok" in await audit(trail, "table")
    assert (await counters_as_agent(gateway))["unmatched_responses"] == 0
