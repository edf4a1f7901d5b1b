"""Providers that misbehave (docs/protocol.md, "Requests and ids", "Tolerance"): each fault gets a
named answer, and neither the gateway nor any other slot suffers.

The misbehaving board is a raw WebSocket scripted by the test (it answers the gateway's initialize
and tools/list correctly, then does whatever the test says on tools/call). Lost providers are real
SDK servers, in-process or in a separate process that is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_http_session_era import RawSession
from tests.support.servers import demo_server
from tests.support.southbound import Boards, ScriptedBoard, provider_status

REPO = Path(__file__).resolve().parents[2]
# Short enough to keep the suite fast, long enough that a prompt answer never misses it on a busy machine.
DEADLINE_MS = 400
SLOW_DEADLINE_MS = 200
CONFIG: dict[str, Any] = {
    "slots": {
        "declared": {
            "board": {"request_timeout_ms": DEADLINE_MS, "tool_timeouts_ms": {"slow": SLOW_DEADLINE_MS}},
            "proc-1": {},
        }
    }
}


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert block.type == "text"
    return block.text


@dataclass
class Rig:
    """A gateway with a scripted board in slot `board` and a healthy SDK provider in `healthy`."""

    gateway: GatewayServer
    board: ScriptedBoard

    @property
    def url(self) -> str:
        return f"{self.gateway.url}/board/mcp"

    async def status(self) -> dict[str, Any]:
        return await provider_status(self.gateway.url, "board")

    async def counters(self) -> dict[str, int]:
        counters: dict[str, int] = (await self.status())["counters"]
        return counters

    async def call_answered_with(self, result: dict[str, Any]) -> CallToolResult:
        """A call the board answers properly: the link still works."""
        async with Client(self.url, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("valve", {"open": True}))
            request = await self.board.request("tools/call")
            await self.board.reply(request, result, "board")
            return await asyncio.wait_for(call, 5.0)

    async def assert_unharmed(self) -> None:
        """The board's link is still the first one, it still serves, and so does the other slot."""
        status = await self.status()
        assert status["connected"] is True
        assert status["connects"] == 1
        ok = await self.call_answered_with({"content": [{"type": "text", "text": "still here"}]})
        assert text_of(ok) == "still here"
        async with Client(f"{self.gateway.url}/healthy/mcp", mode="legacy") as client:
            result = await client.call_tool("add", {"a": 1, "b": 1})
        assert result.structured_content == {"result": 2}


@pytest.fixture(params=["/provider/board", "/providers"], ids=["dedicated", "multiplexed"])
async def rig(
    request: pytest.FixtureRequest, gateway_factory: GatewayFactory, publishers: Publishers, boards: Boards
) -> Rig:
    gateway = await gateway_factory(**CONFIG)
    await publishers.start(gateway, "healthy", demo_server("healthy"))
    path: str = request.param
    register = {"provider": "board", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    board = await boards.connect(gateway.url, path, first_frame=register if path == "/providers" else None)
    await wait_ready_slot(gateway, "board")
    return Rig(gateway, board)


async def pending_call(client: Client, tool: str = "valve") -> asyncio.Task[CallToolResult]:
    return asyncio.create_task(client.call_tool(tool, {}))


# -- bad frames ---------------------------------------------------------------------------------


async def test_malformed_json_is_counted_and_the_link_survives(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        await rig.board.send_raw('{"jsonrpc":"2.0","id":')
        await rig.board.send_raw("{{{{")
        if rig.board.multiplexed:
            # An unreadable envelope belongs to no slot; a readable one with a bad payload does.
            await rig.board.send({"provider": "board", "payload": "\x00garbage from a UART"})
        else:
            await rig.board.send_raw("\x00garbage from a UART")
        await rig.board.reply(request, {"content": [{"type": "text", "text": "opened"}]}, "board")
        assert text_of(await asyncio.wait_for(call, 5.0)) == "opened"
    assert (await rig.counters())["unparsable"] == (1 if rig.board.multiplexed else 3)
    # Logged once, counted every time: a chattering UART bridge must not flood the log.
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "unparsable" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    async with aiohttp.ClientSession() as http, http.get(f"{rig.gateway.url}/metrics") as response:
        metrics = await response.text()
    counted = [
        line for line in metrics.splitlines() if line.startswith('mcpgw_unparsable_messages_total{side="provider"}')
    ]
    assert counted, "the unparsable counter is not exported"
    assert float(counted[0].split()[-1]) >= 3
    await rig.assert_unharmed()


async def test_silent_provider_gets_the_deadline_error(rig: Rig) -> None:
    async with Client(rig.url, mode="legacy") as client:
        with pytest.raises(MCPError) as slot_deadline:
            await client.call_tool("valve", {})
        forwarded = await rig.board.request("tools/call")
        with pytest.raises(MCPError) as tool_deadline:
            await client.call_tool("slow", {})
        assert (await rig.board.request("tools/call"))["params"]["name"] == "slow"
    assert slot_deadline.value.code == -32000
    assert slot_deadline.value.error.message.startswith(f'Provider "board" did not respond within {DEADLINE_MS}ms')
    assert tool_deadline.value.code == -32000
    assert tool_deadline.value.error.message.startswith(f'Provider "board" did not respond within {SLOW_DEADLINE_MS}ms')
    # Each names the setting that set its deadline: raising the other would change nothing.
    assert slot_deadline.value.error.message.endswith("raise the slot's request_timeout_ms")
    assert tool_deadline.value.error.message.endswith("raise this tool's entry in the slot's tool_timeouts_ms")
    assert tool_deadline.value.error.data["setting"] == "tool_timeouts_ms"
    # The board is told the gateway gave up, so it can stop the work.
    cancelled = await rig.board.take(
        lambda m: m.get("method") == "notifications/cancelled" and m["params"]["requestId"] == forwarded["id"],
        what="notifications/cancelled for the expired request",
    )
    assert "deadline" in cancelled["params"]["reason"]
    # A late answer after the deadline is dropped, not delivered to anybody, and no fault: the board is
    # slow, its id right. A second answer to the same id is one.
    await rig.board.reply(forwarded, {"content": [{"type": "text", "text": "too late"}]}, "board")
    await rig.board.reply(forwarded, {"content": [{"type": "text", "text": "again"}]}, "board")
    await rig.assert_unharmed()
    counters = await rig.counters()
    assert counters["deadlines"] == 2
    assert counters["unmatched_responses"] == 1


async def test_a_slow_board_that_echoes_ids_right_is_not_told_it_echoes_them_wrongly(rig: Rig) -> None:
    """A board that works through one request at a time answers each after its deadline: the deadline
    error of the request pending meanwhile says it sent no answer, and gives no advice on echoing ids."""
    async with Client(rig.url, mode="legacy") as client:
        with pytest.raises(MCPError) as first:
            await client.call_tool("valve", {})
        given_up = await rig.board.request("tools/call")
        second = await pending_call(client)
        pending = await rig.board.request("tools/call")
        await rig.board.reply(given_up, {"content": [{"type": "text", "text": "late but right"}]}, "board")
        with pytest.raises(MCPError) as second_deadline:
            await asyncio.wait_for(second, 5.0)
        await rig.board.reply(pending, {"content": [{"type": "text", "text": "late too"}]}, "board")
    assert first.value.error.message.startswith(f'Provider "board" did not respond within {DEADLINE_MS}ms')
    message = second_deadline.value.error.message
    assert "sent no answer for this request" in message, message
    assert "echoes the request id" not in message
    assert "unmatched_responses" not in second_deadline.value.error.data
    await rig.assert_unharmed()
    counters = await rig.counters()
    assert counters["deadlines"] == 2
    assert counters["unmatched_responses"] == 0


async def test_second_answer_to_one_request_is_dropped(rig: Rig) -> None:
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        await rig.board.reply(request, {"content": [{"type": "text", "text": "first"}]}, "board")
        await rig.board.reply(request, {"content": [{"type": "text", "text": "second"}]}, "board")
        assert text_of(await asyncio.wait_for(call, 5.0)) == "first"
        # The next call gets its own answer, never the stray second one.
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        await rig.board.reply(request, {"content": [{"type": "text", "text": "third"}]}, "board")
        assert text_of(await asyncio.wait_for(call, 5.0)) == "third"
    assert (await rig.counters())["unmatched_responses"] == 1
    await rig.assert_unharmed()


async def test_answer_to_an_id_nobody_waits_for_is_dropped(rig: Rig) -> None:
    await rig.board.send({"jsonrpc": "2.0", "id": "brk-999999", "result": {}}, "board")
    await rig.board.send({"jsonrpc": "2.0", "id": "made-up", "error": {"code": -32000, "message": "x"}}, "board")
    await rig.assert_unharmed()  # the board's answer to this call is read after the two strays
    assert (await rig.counters())["unmatched_responses"] == 2


async def test_numeric_echo_of_a_brk_id_does_not_match(rig: Rig) -> None:
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        assert isinstance(request["id"], str)
        assert request["id"].startswith("brk-")
        number = int(request["id"].removeprefix("brk-"))
        await rig.board.send({"jsonrpc": "2.0", "id": number, "result": {"content": []}}, "board")
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 5.0)
    assert failure.value.code == -32000
    message = failure.value.error.message
    assert message.startswith(f'Provider "board" did not respond within {DEADLINE_MS}ms')
    # Not "sent no answer": the caller learns the board answered under an id of another type.
    assert "sent no answer" not in message
    assert f'while this request (id "{request["id"]}") was pending it sent 1 answer(s)' in message, message
    assert f"the last with id {number}:" in message, message
    assert "echoes the request id exactly as sent, a string id as a string" in message
    assert failure.value.error.data["unmatched_responses"] == 1
    assert failure.value.error.data["last_unmatched_id"] == str(number)
    assert (await rig.counters())["unmatched_responses"] == 1
    await rig.assert_unharmed()


@pytest.mark.parametrize(
    "error",
    [{"message": "valve jammed"}, {"code": "E_JAM", "message": "valve jammed"}],
    ids=["no-code", "string-code"],
)
async def test_error_without_numeric_code_becomes_internal_error(rig: Rig, error: dict[str, Any]) -> None:
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        await rig.board.send({"jsonrpc": "2.0", "id": request["id"], "error": error}, "board")
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 5.0)
    assert failure.value.code == -32603
    assert failure.value.error.message == "valve jammed"
    await rig.assert_unharmed()


async def test_batch_from_a_provider_is_not_relayed(rig: Rig) -> None:
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        batch = [
            {"jsonrpc": "2.0", "id": request["id"], "result": {"content": [{"type": "text", "text": "from batch"}]}},
            {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}},
            {"jsonrpc": "2.0", "id": "batch-ping", "method": "ping"},
        ]
        await rig.board.send(batch, "board")
        # Never left waiting: the board hears at once that nothing in its batch was read.
        refusal = await rig.board.answer_to(None)
        assert refusal == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "JSON-RPC batches are not supported: nothing in this batch was read; "
                "send one message at a time",
                "data": {"reason": "batch"},
            },
        }
        # Nor is the caller whose request the batch answers: it hears why at once, not at the deadline.
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 5.0)
        assert failure.value.code == -32603
        assert failure.value.error.message == (
            'Provider "board" answered, but the gateway refused the answer: it came inside a JSON-RPC batch, '
            "which providers may not send (nothing in a batch is read); send each answer as its own message"
        )
        assert failure.value.error.data == {"slot": "board", "reason": "answer_refused"}
    # One answer per batch: the ping inside it was not read, so it has no answer of its own.
    assert not [m for _, m in rig.board.received if isinstance(m, dict) and m.get("id") == "batch-ping"]
    assert (await rig.counters())["protocol_violations"] == 1
    await rig.assert_unharmed()


async def test_an_answer_without_result_or_error_ends_the_call_at_once(rig: Rig) -> None:
    async with Client(rig.url, mode="legacy") as client:
        call = await pending_call(client)
        request = await rig.board.request("tools/call")
        await rig.board.send({"jsonrpc": "2.0", "id": request["id"]}, "board")
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 5.0)
    # Not the deadline's -32000: the caller learns what the provider did wrong.
    assert failure.value.code == -32603
    assert failure.value.error.message == (
        'Provider "board" answered without a "result" or an "error"; the provider must send one of them'
    )
    counters = await rig.counters()
    assert (counters["unparsable"], counters["deadlines"], counters["errors"]) == (1, 0, 1)
    await rig.assert_unharmed()


async def test_the_gateways_own_probe_is_not_counted_as_a_provider_error(rig: Rig) -> None:
    # The board answered server/discover -32601 (it serves the session era only) when it registered.
    assert any(isinstance(m, dict) and m.get("method") == "server/discover" for _, m in rig.board.received)
    counters = await rig.counters()
    assert (counters["requests"], counters["errors"]) == (0, 0)


# -- requests a provider opens ------------------------------------------------------------------


async def test_provider_ping_is_answered_with_an_empty_result(rig: Rig) -> None:
    for request_id in ("p-1", 7):
        await rig.board.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"}, "board")
        answer = await rig.board.answer_to(request_id)
        assert answer == {"jsonrpc": "2.0", "id": request_id, "result": {}}
        assert type(answer["id"]) is type(request_id)
    expected = '{"jsonrpc":"2.0","id":"p-1","result":{}}'
    if rig.board.multiplexed:
        expected = '{"provider":"board","payload":' + expected + "}"
    assert expected in rig.board.texts
    await rig.assert_unharmed()


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("sampling/createMessage", {"messages": [], "maxTokens": 10}),
        ("roots/list", {}),
        ("elicitation/create", {"message": "Confirm?", "requestedSchema": {"type": "object", "properties": {}}}),
        ("broker/no-such-thing", {}),
    ],
)
async def test_other_provider_requests_get_method_not_found_at_once(
    rig: Rig, method: str, params: dict[str, Any]
) -> None:
    await rig.board.send({"jsonrpc": "2.0", "id": "r-1", "method": method, "params": params}, "board")
    answer = await rig.board.answer_to("r-1")
    assert answer["error"]["code"] == -32601
    assert method in answer["error"]["message"]
    assert "result" not in answer
    await rig.assert_unharmed()


async def test_a_declaration_needs_a_governed_gateway(rig: Rig) -> None:
    """Without [policy] the gateway decides nothing for providers: declare and authorize are answered
    -32601 at once, saying why (docs/governance-providers.md); an audit result is dropped."""
    declaration = {"version": "1", "domain": "plant", "namespace": {"resource": "/board"}, "capabilities": ["plant.x"]}
    for request_id, method, params in (
        ("d-1", "broker/authorization/declare", declaration),
        ("a-1", "broker/authorize", {"principal": {"type": "provider"}, "checks": []}),
    ):
        await rig.board.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, "board")
        answer = await rig.board.answer_to(request_id)
        assert answer["error"]["code"] == -32601
        assert answer["error"]["message"] == (
            f"Method not found: {method} needs a governed gateway, and this one has no [policy] "
            "(docs/governance-providers.md)"
        )
    await rig.board.send({"jsonrpc": "2.0", "method": "broker/audit/result", "params": {"decisionId": "d"}}, "board")
    await rig.assert_unharmed()


# -- lost providers -----------------------------------------------------------------------------


async def spawn_provider(url: str, slot: str, multiplexed: bool) -> asyncio.subprocess.Process:
    flags = ["--multiplexed"] if multiplexed else []
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.provider_process",
        "--url",
        url,
        "--slot",
        slot,
        *flags,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def two_pending_sleeps(
    gateway: GatewayServer, slot: str, stack: contextlib.AsyncExitStack
) -> list[asyncio.Task[CallToolResult]]:
    calls = []
    for mode in ("legacy", "2026-07-28"):
        client = await stack.enter_async_context(Client(f"{gateway.url}/{slot}/mcp", mode=mode))
        calls.append(asyncio.create_task(client.call_tool("sleep", {"seconds": 30})))

    def both_pending() -> bool:
        session = gateway.gateway.registry.slots[slot].live
        return session is not None and session.in_flight == 2

    await wait_for(both_pending, what="two calls pending at the provider")
    return calls


async def assert_all_disconnected(calls: list[asyncio.Task[CallToolResult]], slot: str) -> None:
    for call in calls:
        # A bound (never a speed assertion): "at once" must not mean "at the 60 s deadline".
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 1.0)
        assert failure.value.code == -32000
        detail = failure.value.error.data["detail"]  # why the link ended, after the text clients match on
        assert detail and failure.value.error.message == f'Provider "{slot}" disconnected: {detail}'


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_provider_killed_mid_call_fails_every_pending_call(
    gateway_factory: GatewayFactory, publishers: Publishers, multiplexed: bool
) -> None:
    gateway = await gateway_factory(**CONFIG)
    await publishers.start(gateway, "healthy", demo_server("healthy"))
    process = await spawn_provider(gateway.url, "proc-1", multiplexed)
    try:
        await wait_ready_slot(gateway, "proc-1", timeout=15.0)
        async with contextlib.AsyncExitStack() as stack:
            calls = await two_pending_sleeps(gateway, "proc-1", stack)
            process.send_signal(signal.SIGKILL)
            await assert_all_disconnected(calls, "proc-1")
            async with Client(f"{gateway.url}/proc-1/mcp", mode="legacy") as client:
                with pytest.raises(MCPError, match='Provider "proc-1" not connected'):
                    await client.call_tool("add", {"a": 1, "b": 2})
    finally:
        if process.returncode is None:
            process.kill()
        await process.communicate()
    async with Client(f"{gateway.url}/healthy/mcp", mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}


@pytest.mark.parametrize("multiplexed", [False, True], ids=["dedicated", "multiplexed"])
async def test_provider_closing_cleanly_mid_call_fails_every_pending_call(
    gateway: GatewayServer, publishers: Publishers, multiplexed: bool
) -> None:
    if multiplexed:
        publisher: Any = await publishers.start_multiplexed(gateway, {"leaver": demo_server()}, reconnect=False)
    else:
        publisher = await publishers.start(gateway, "leaver", demo_server(), reconnect=False)
    async with contextlib.AsyncExitStack() as stack:
        calls = await two_pending_sleeps(gateway, "leaver", stack)
        await publisher.stop()
        await assert_all_disconnected(calls, "leaver")
    status = await provider_status(gateway.url, "leaver")
    assert status["connected"] is False


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_two_clients_with_the_same_request_id_get_their_own_answers(
    gateway: GatewayServer, publishers: Publishers, mode: str
) -> None:
    """Both SDK clients number their requests the same way, so their ids collide at the gateway."""
    await publishers.start(gateway, "shared", demo_server())
    url = f"{gateway.url}/shared/mcp"
    async with Client(url, mode=mode) as first, Client(url, mode=mode) as second:
        for _ in range(3):
            slow, fast = await asyncio.gather(
                first.call_tool("sleep", {"seconds": 0.2}),
                second.call_tool("sleep", {"seconds": 0.05}),
            )
            assert text_of(slow) == "slept 0.2"
            assert text_of(fast) == "slept 0.05"
            echo_a, echo_b = await asyncio.gather(
                first.call_tool("add", {"a": 1, "b": 1}), second.call_tool("add", {"a": 100, "b": 100})
            )
            assert echo_a.structured_content == {"result": 2}
            assert echo_b.structured_content == {"result": 200}


def cancels(request_id: Any, message: dict[str, Any]) -> bool:
    return message.get("method") == "notifications/cancelled" and message["params"]["requestId"] == request_id


async def test_the_board_is_told_why_a_client_cancelled(rig: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        raw = RawSession(http, rig.url)
        await raw.initialize()
        reasons: list[str] = []
        for params in ({"reason": "operator pressed stop"}, {}):
            body = raw.request_body("tools/call", {"name": "valve", "arguments": {"open": True}})
            call = asyncio.create_task(raw.post(body))
            forwarded = await rig.board.request("tools/call")
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": body["id"], **params},
            }
            assert (await raw.post(cancel))[0] == 202
            notice = await rig.board.take(partial(cancels, forwarded["id"]), what="the board's notifications/cancelled")
            reasons.append(notice["params"]["reason"])
            await asyncio.wait_for(call, 5)
        # A session that ends (DELETE) cancels what it still waits for, and says so.
        call = asyncio.create_task(raw.post(raw.request_body("tools/call", {"name": "valve", "arguments": {}})))
        forwarded = await rig.board.request("tools/call")
        async with http.delete(rig.url, headers=raw.headers()) as ended:
            assert ended.status in (200, 204)
        notice = await rig.board.take(partial(cancels, forwarded["id"]), what="notifications/cancelled on DELETE")
        reasons.append(notice["params"]["reason"])
        with contextlib.suppress(Exception):
            await asyncio.wait_for(call, 5)
    assert reasons == ["operator pressed stop", "cancelled by the client", "the client's session ended"]


async def test_prompts_and_resources_of_a_board_that_declares_none_are_answered_by_the_gateway(rig: Rig) -> None:
    # The board declares tools only: its own not-found text would describe its session with the
    # gateway, not the caller's; the gateway answers and names the slot.
    for mode in ("legacy", "2026-07-28"):
        async with Client(rig.url, mode=mode) as client:
            with pytest.raises(MCPError) as prompts:
                await client.list_prompts()
            with pytest.raises(MCPError) as resources:
                await client.read_resource("pump://status")
        assert prompts.value.code == resources.value.code == -32601
        assert prompts.value.error.message == (
            'Method not found: prompts/list is not served by "board" (its provider declares no prompts capability)'
        )
        assert "resources/read" in resources.value.error.message
    methods = [str(message.get("method", "")) for _, message in rig.board.received if isinstance(message, dict)]
    assert not [method for method in methods if method.startswith(("prompts/", "resources/"))]
    await rig.assert_unharmed()


async def test_a_board_that_reconnects_is_warned_of_once_per_kind_of_fault(
    gateway: GatewayServer, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    # A board that puts a debug line on its link after each dial: one warning for the slot, not per link.
    caplog.set_level(logging.WARNING)
    slot = "junk-1"

    def unparsable() -> int:
        held = gateway.gateway.registry.slots[slot]
        live = held.live
        return held.history.unparsable + (live.counters.unparsable if live is not None else 0)

    for dial in range(1, 4):
        board = await boards.connect(gateway.url, f"/provider/{slot}")
        await wait_ready_slot(gateway, slot)
        await board.send_raw("boot: wifi up")
        await wait_for(lambda: unparsable() == dial, what="the line to be counted")  # noqa: B023
        await board.close()
        await wait_for(lambda: gateway.gateway.registry.slots[slot].live is None, what="the board to leave")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "unparsable" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
