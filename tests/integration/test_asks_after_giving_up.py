"""Requests a session-era stdio child sends towards a client for a call the gateway gave up
(docs/protocol-clients.md, "Attribution"; docs/upstreams.md, "Requests to clients").

The child is hand-written (`serve` below, run on its own with `python -c`): its tool `ask` keeps working after
notifications/cancelled, as docs/upstreams.md says tools may, and then asks its client a question that
carries the caller's argument, untagged, as a stdio child does. When its caller cancelled the call, went
away, or the gateway's deadline ended it, that question belongs to nobody who can still answer: another
client with the only call pending must never see it nor answer it; the child gets the gateway's -32601
`unattributed` refusal. Real SDK clients with real callbacks ask and answer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import threading
import time
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import MCPError

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.integration.test_relay import Answers, open_session, text

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(60),
]

SLOT = "asker"
START_S = 20.0
SECRET = "A-PRIVATE-7731"
RELATED = "io.github.mcp-gateway/relatedRequest"


# -- the child --------------------------------------------------------------------------------------


def question(method: str, secret: str) -> dict[str, Any]:
    """The params of the child's request of `method`, carrying its caller's `secret`."""
    if method == "elicitation/create":
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        return {"message": f"Confirm the transfer for the caller whose secret is {secret}", "requestedSchema": schema}
    if method == "sampling/createMessage":
        content = {"type": "text", "text": f"Summarise the account whose secret is {secret}"}
        return {"messages": [{"role": "user", "content": content}], "maxTokens": 20}
    return {}


def serve() -> None:
    """A session-era MCP server on stdin/stdout, one JSON object a line. `ask` waits `delay_s`, then
    sends `method` (untagged unless `tag`), and answers its call with the answer it got; it ignores
    notifications/cancelled. `hold` answers with every answer `ask` got, once there is one."""
    lock = threading.Lock()
    answered = threading.Condition()
    answers: list[Any] = []
    waiting: dict[int, list[Any]] = {}
    numbers = iter(range(1000, 10**6))

    def send(message: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def ask(call_id: Any, args: dict[str, Any]) -> None:
        time.sleep(float(args.get("delay_s", 0)))
        params = question(args["method"], str(args.get("secret", "")))
        if args.get("tag"):
            params["_meta"] = {RELATED: call_id}
        ask_id = next(numbers)
        done = threading.Event()
        waiting[ask_id] = [done, None]
        send({"jsonrpc": "2.0", "id": ask_id, "method": args["method"], "params": params})
        done.wait(20)
        answer = waiting.pop(ask_id)[1]
        # The call's answer goes out before `hold` can answer: the gateway stops holding it first.
        send({"jsonrpc": "2.0", "id": call_id, "result": {"content": [{"type": "text", "text": json.dumps(answer)}]}})
        with answered:
            answers.append(answer)
            answered.notify_all()

    def hold(call_id: Any, args: dict[str, Any]) -> None:
        with answered:
            answered.wait_for(lambda: bool(answers), timeout=float(args.get("wait_s", 10)))
            seen = list(answers)
        send({"jsonrpc": "2.0", "id": call_id, "result": {"content": [{"type": "text", "text": json.dumps(seen)}]}})

    schema = {"type": "object"}
    tools = [
        {"name": "ask", "description": "asks its client mid-call", "inputSchema": schema},
        {"name": "hold", "description": "waits for an answer to ask", "inputSchema": schema},
    ]
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, message_id = message.get("method"), message.get("id")
        if method is None:  # an answer to one of ours
            if message_id in waiting:
                waiting[message_id][1] = message
                waiting[message_id][0].set()
        elif message_id is None:
            continue  # notifications, notifications/cancelled too: the tool works on
        elif method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "late-asker", "version": "1"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            send({"jsonrpc": "2.0", "id": message_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": message_id, "result": {"tools": tools}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": message_id, "result": {}})
        elif method == "tools/call":
            work = ask if message["params"]["name"] == "ask" else hold
            arguments = message["params"].get("arguments") or {}
            threading.Thread(target=work, args=(message_id, arguments), daemon=True).start()
        else:
            error = {"code": -32601, "message": "Method not found"}
            send({"jsonrpc": "2.0", "id": message_id, "error": error})


# -- the tests --------------------------------------------------------------------------------------


def child_source() -> str:
    """The child's program: `serve` and what it uses, without this module's imports (quick to start)."""
    head = f"from __future__ import annotations\nimport json, sys, threading, time\nRELATED = {RELATED!r}\n"
    return head + inspect.getsource(question) + inspect.getsource(serve) + "serve()\n"


async def started(gateway_factory: GatewayFactory, **overrides: Any) -> GatewayServer:
    command = [sys.executable, "-c", child_source()]
    upstream = {"name": SLOT, "command": command, "era": "session"}
    server = await gateway_factory(upstreams={"stdio": [upstream]}, **overrides)
    await wait_ready_slot(server, SLOT, START_S)
    return server


def refusal_of(answer: Any) -> dict[str, Any]:
    assert isinstance(answer, dict) and "error" in answer, answer
    error: dict[str, Any] = answer["error"]
    return error


async def after_giving_up(server: GatewayServer, method: str, way: str) -> tuple[Answers, Answers, list[Any]]:
    """Client A's call of `ask` is given up `way`; the child asks `method` for it while client B (every
    capability declared) has the only call pending. Returns what A and B were asked, and the answers the
    child got, read through B's `hold`."""
    url = f"{server.url}/{SLOT}/mcp"
    first, second = Answers("Ada"), Answers("Bob")
    args = {"method": method, "secret": SECRET, "delay_s": 1.2}
    async with second.client(url) as other:
        if way == "cancelled":
            async with first.client(url) as caller:
                with pytest.raises(MCPError):  # the SDK gives up after 0.4 s and cancels the call
                    await caller.call_tool("ask", args, read_timeout_seconds=0.4)
                held = await other.call_tool("hold", {"wait_s": 10})
        elif way == "deadline":
            async with first.client(url) as caller:
                with pytest.raises(MCPError) as failure:
                    await caller.call_tool("ask", args)
                assert isinstance(failure.value.error.data, dict)
                assert failure.value.error.data["reason"] == "deadline"
                held = await other.call_tool("hold", {"wait_s": 10})
        else:  # the client goes away while its call runs: its connection closes, its session ends
            async with aiohttp.ClientSession() as http:
                headers = await open_session(http, url, {"elicitation": {}, "sampling": {}, "roots": {}})
                call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask", "arguments": args}}
                posting = asyncio.create_task(http.post(url, data=orjson.dumps(call), headers=headers))
                await asyncio.sleep(0.3)
                posting.cancel()
                async with http.delete(url, headers=headers) as response:
                    assert response.status in (200, 204)
            held = await other.call_tool("hold", {"wait_s": 10})
        seen = json.loads(text(held))
        # Once the child answered the given-up call, B's own call gets its own question again.
        own = await other.call_tool("ask", {"method": method, "secret": "B-OWN"})
    assert second.asked == [method]
    assert "error" not in json.loads(text(own))
    return first, second, seen


@pytest.mark.parametrize("method", ["elicitation/create", "sampling/createMessage", "roots/list"])
async def test_a_cancelled_calls_question_reaches_no_other_client(gateway_factory: GatewayFactory, method: str) -> None:
    server = await started(gateway_factory)
    first, second, seen = await after_giving_up(server, method, "cancelled")
    assert first.asked == []  # A ended its call: nothing more reaches it for that call
    assert second.asked == [method]  # only its own question, never A's
    error = refusal_of(seen[0])
    assert error["code"] == -32601
    assert error["data"] == {"reason": "unattributed"}
    assert "gave up" in error["message"] and RELATED in error["message"]
    async with aiohttp.ClientSession() as http:
        metrics = await scrape(http, server)
    assert metrics.get("mcpgw_relay_requests_total", method=method, outcome="unattributed") == 1


@pytest.mark.parametrize("way", ["deadline", "disconnect"])
async def test_a_given_up_calls_question_reaches_no_other_client(gateway_factory: GatewayFactory, way: str) -> None:
    overrides: dict[str, Any] = {}
    if way == "deadline":
        overrides["slots"] = {"declared": {SLOT: {"tool_timeouts_ms": {"ask": 500}}}}
    server = await started(gateway_factory, **overrides)
    first, second, seen = await after_giving_up(server, "elicitation/create", way)
    assert first.asked == []
    assert second.asked == ["elicitation/create"]
    assert refusal_of(seen[0])["data"] == {"reason": "unattributed"}


async def test_a_question_tagged_with_a_given_up_call_is_refused(gateway_factory: GatewayFactory) -> None:
    server = await started(gateway_factory)
    url = f"{server.url}/{SLOT}/mcp"
    first, second = Answers("Ada"), Answers("Bob")
    args = {"method": "elicitation/create", "secret": SECRET, "delay_s": 1.2, "tag": True}
    async with first.client(url) as caller, second.client(url) as other:
        with pytest.raises(MCPError):
            await caller.call_tool("ask", args, read_timeout_seconds=0.4)
        held = await other.call_tool("hold", {"wait_s": 10})
    assert first.asked == second.asked == []
    error = refusal_of(json.loads(text(held))[0])
    assert error["code"] == -32601 and error["data"] == {"reason": "ended"}


async def test_a_clients_own_given_up_call_does_not_stop_its_next_call_being_asked(
    gateway_factory: GatewayFactory,
) -> None:
    """A held call of the same client is no other client's: the question stays within that client."""
    server = await started(gateway_factory)
    url = f"{server.url}/{SLOT}/mcp"
    first = Answers("Ada")
    args = {"method": "elicitation/create", "secret": SECRET, "delay_s": 1.2}
    async with first.client(url) as caller:
        with pytest.raises(MCPError):
            await caller.call_tool("ask", args, read_timeout_seconds=0.4)
        held = await caller.call_tool("hold", {"wait_s": 10})
    assert first.asked == ["elicitation/create"]
    assert json.loads(text(held))[0]["result"]["action"] == "accept"
