"""Confirmation of device writes on every way in, through a real gateway (docs/governance.md,
"Confirmation of device writes"): `_all` and a tool group with the official SDK client in both eras, a
raw WebSocket client that answers the gateway's elicitation/create on its own socket, and a raw
2026-07-28 HTTP client that answers the gateway's input_required round by hand. Accept forwards the
call, decline is a tool error, and the audit trail records the way in."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration.test_confirmation import POLICY as CONFIRM_POLICY
from tests.integration.test_confirmation import Person
from tests.integration.test_governance import AGENT, ERAS, auth, text_of
from tests.integration.test_http_stateless_era import META_CAPABILITIES, post, request
from tests.support.refusals import refusal_of

POLICY: dict[str, Any] = {
    **CONFIRM_POLICY,
    "assign": [
        *CONFIRM_POLICY["assign"],
        {"principal": "token:agent", "role": "operator", "resources": ["/plant/valve-1"]},
    ],
    "resources": {"valve-1": "/plant/valve-1"},
}
GROUPS = {
    "pumps": {"slots": ["pump-*"], "description": "the pumps"},
    "valves": {"slots": ["valve-*"], "description": "the valves"},
}
JsonObject = dict[str, Any]


@dataclass
class Plant:
    gateway: GatewayServer
    simulator: Simulator
    trail: Path


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[Plant]:
    server = await gateway_factory(
        auth=auth(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")}, groups=GROUPS
    )
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        yield Plant(server, simulator, tmp_path / "audit.db")
    finally:
        await simulator.stop()


def pump(plant: Plant) -> dict[str, Any]:
    status: dict[str, Any] = plant.simulator.state("pump-1")["status"]
    return status


def running(plant: Plant) -> bool:
    return pump(plant)["state"] in ("starting", "running")


def decisions(path: Path, tools: tuple[str, ...]) -> list[sqlite3.Row]:
    marks = ", ".join("?" for _ in tools)
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute(f"SELECT * FROM decisions WHERE tool IN ({marks}) ORDER BY id", tools))


@contextlib.asynccontextmanager
async def sdk_client(server: GatewayServer, path: str, mode: str, person: Person) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}, timeout=30) as transport,
        Client(
            streamable_http_client(f"{server.url}{path}", http_client=transport),
            mode=mode,
            elicitation_callback=person.elicit,
        ) as sdk,
    ):
        yield sdk


# -- _all and a tool group, with the SDK client ------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(("path", "separator"), [("/_all/mcp", "-"), ("/mcp/pumps", "__")], ids=["_all", "group"])
async def test_all_and_a_group_ask_the_person_and_forward_only_what_is_accepted(
    plant: Plant, path: str, separator: str, mode: str
) -> None:
    person = Person(approve=True)
    async with sdk_client(plant.gateway, path, mode, person) as agent:
        started = await agent.call_tool(f"pump-1{separator}start", {"speed_rpm": 1200})
        assert not started.is_error, text_of(started)
        assert running(plant) and pump(plant)["setpoint_rpm"] == 1200
        assert len(person.asked) == 1
        question = person.asked[0].message
        # The question names the slot and the tool as the provider knows them, not the name at `path`.
        assert "token:agent asks to call start on pump-1 (/plant/pump-1)" in question
        assert '{"speed_rpm":1200}' in question
        assert "The device reports now:" in question and '"state":"stopped"' in question
        assert "confirm[0]" in question

        person.approve = False
        declined = await agent.call_tool(f"pump-1{separator}set_speed", {"speed_rpm": 1500})
        assert declined.is_error
        how = "elicitation" if mode == "legacy" else "input_required"
        assert text_of(declined) == (
            f"Not done: set_speed on pump-1 was not forwarded to the device; token:agent via {how} declined it "
            "(the operator's policy confirm[0] has a person confirm this call)."
        )
        assert pump(plant)["setpoint_rpm"] == 1200  # the pump never saw it
        assert len(person.asked) == 2

    rows = decisions(plant.trail, ("start", "set_speed"))
    if mode != "legacy":  # the input_required question is on record as the attempt waiting for it
        assert [(row["tool"], row["effect"]) for row in rows[::2]] == [
            ("start", "wait-confirmation"),
            ("set_speed", "wait-confirmation"),
        ]
        rows = rows[1::2]
    assert [(row["tool"], row["effect"], row["slot"]) for row in rows] == [
        ("start", "allow", "pump-1"),
        ("set_speed", "declined", "pump-1"),
    ]
    assert {row["transport"] for row in rows} == {"streamable-http"}
    assert [row["confirmed_by"] for row in rows] == [f"token:agent via {how}"] * 2


# -- a raw WebSocket client --------------------------------------------------------------------------


class RawSocket:
    """A raw WebSocket client at ws://host/<slot>, one JSON-RPC message per text frame."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def initialize(self, capabilities: JsonObject) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "ws"}}
        await self.ws.send_json({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params})
        assert "result" in await self.answer_to("init")
        await self.ws.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, request_id: str, name: str, arguments: JsonObject) -> None:
        params = {"name": name, "arguments": arguments}
        await self.ws.send_json({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    async def next_request(self) -> JsonObject:
        """The next request the gateway sends this client (notifications are skipped)."""
        while True:
            message: JsonObject = await self.ws.receive_json(timeout=10)
            if "method" in message and "id" in message:
                return message
            assert "method" in message, f"an answer before the gateway's question: {message}"

    async def answer_to(self, request_id: str) -> JsonObject:
        """The gateway's answer to this client's request `request_id` (notifications are skipped)."""
        while True:
            message: JsonObject = await self.ws.receive_json(timeout=10)
            if "method" not in message and message.get("id") == request_id:
                return message
            assert "method" not in message or "id" not in message, f"an unexpected request: {message}"

    async def reply(self, request: JsonObject, result: JsonObject) -> None:
        await self.ws.send_json({"jsonrpc": "2.0", "id": request["id"], "result": result})


@contextlib.asynccontextmanager
async def raw_socket(plant: Plant, capabilities: JsonObject) -> AsyncIterator[RawSocket]:
    url = plant.gateway.url.replace("http://", "ws://") + "/pump-1"
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, headers={"Authorization": f"Bearer {AGENT}"}) as ws,
    ):
        socket = RawSocket(ws)
        await socket.initialize(capabilities)
        yield socket


async def test_a_raw_websocket_client_answers_the_question_on_its_own_socket(plant: Plant) -> None:
    async with raw_socket(plant, {"elicitation": {}}) as client:
        await client.call("start", "start", {"speed_rpm": 1200})
        question = await client.next_request()
        assert question["method"] == "elicitation/create"
        message = question["params"]["message"]
        assert "token:agent asks to call start on pump-1 (/plant/pump-1)" in message
        assert "The device reports now:" in message
        approve = question["params"]["requestedSchema"]["properties"]["approve"]
        assert (approve["type"], approve["default"]) == ("boolean", False)  # submitted unread: not confirmed
        assert not running(plant)  # held while the person reads
        await client.reply(question, {"action": "accept", "content": {"approve": True}})
        started = await client.answer_to("start")
        assert started["result"].get("isError") is not True, started
        assert running(plant) and pump(plant)["setpoint_rpm"] == 1200

        await client.call("speed", "set_speed", {"speed_rpm": 1500})
        question = await client.next_request()
        assert question["method"] == "elicitation/create"
        await client.reply(question, {"action": "decline"})
        declined = await client.answer_to("speed")
        assert declined["result"]["isError"] is True
        assert declined["result"]["content"][0]["text"].startswith(
            "Not done: set_speed on pump-1 was not forwarded to the device; token:agent via elicitation declined it"
        )
        assert pump(plant)["setpoint_rpm"] == 1200

    # A raw client that declares no elicitation cannot be asked: the call waits for an operator.
    async with raw_socket(plant, {}) as silent:
        await silent.call("speed", "set_speed", {"speed_rpm": 1600})
        waiting = await silent.answer_to("speed")
        assert refusal_of(waiting["result"])[1]["reason"] == "confirmation_required"
    assert pump(plant)["setpoint_rpm"] == 1200

    rows = decisions(plant.trail, ("start", "set_speed"))
    assert [(row["tool"], row["effect"], row["transport"]) for row in rows] == [
        ("start", "allow", "websocket"),
        ("set_speed", "declined", "websocket"),
        ("set_speed", "wait-confirmation", "websocket"),
    ]
    assert [row["confirmed_by"] for row in rows[:2]] == ["token:agent via elicitation"] * 2


# -- a raw 2026-07-28 HTTP client and its requestState -----------------------------------------------


def valve(moves: list[int]) -> MCPServer:
    """A valve whose every move is recorded: what reached the device, exactly."""
    server = MCPServer("valve")
    position = {"percent": 0}

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def get_position() -> dict[str, int]:
        """Where the valve stands."""
        return dict(position)

    @server.tool()
    def set_position(percent: int) -> str:
        """Move the valve."""
        moves.append(percent)
        position["percent"] = percent
        return f"moved to {percent}"

    return server


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    ("path", "name"),
    [("/valve-1/mcp", "set_position"), ("/_all/mcp", "valve-1-set_position"), ("/mcp/valves", "valve-1__set_position")],
    ids=["slot", "_all", "group"],
)
async def test_the_question_shows_a_2026_providers_state_to_callers_of_both_eras(
    plant: Plant, publishers: Publishers, path: str, name: str, mode: str
) -> None:
    """The device's state is read for the question on the caller's behalf; a 2026-07-28 provider gets
    the caller's own envelope with that read, as with the call itself."""
    moves: list[int] = []
    await publishers.start(plant.gateway, "valve-1", valve(moves), aggregate=True)
    person = Person(approve=True)
    async with sdk_client(plant.gateway, path, mode, person) as agent:
        moved = await agent.call_tool(name, {"percent": 30})
        assert not moved.is_error, text_of(moved)
    assert moves == [30]
    question = person.asked[0].message
    assert "token:agent asks to call set_position on valve-1 (/plant/valve-1)" in question
    assert 'The device reports now: {"percent":0}' in question


def answer_of(body: Any) -> JsonObject:
    """The final message of an answer (a JSON body, or the last event of an SSE body)."""
    final: JsonObject = body[-1] if isinstance(body, list) else body
    return final


async def test_a_raw_2026_client_answers_input_required_once_and_only_for_its_own_call(
    plant: Plant, publishers: Publishers
) -> None:
    moves: list[int] = []
    await publishers.start(plant.gateway, "valve-1", valve(moves))
    url = f"{plant.gateway.url}/valve-1/mcp"
    asks: JsonObject = {META_CAPABILITIES: {"elicitation": {}}}
    accept = {"confirm": {"action": "accept", "content": {"approve": True}}}

    async def first(http: aiohttp.ClientSession, request_id: int, percent: int) -> JsonObject:
        """A call the gateway answers with its input_required round; that round's result."""
        body = request("tools/call", {"name": "set_position", "arguments": {"percent": percent}}, request_id, asks)
        status, _, answer = await post(http, url, body)
        assert status == 200, answer
        result: JsonObject = answer_of(answer)["result"]
        assert result["resultType"] == "input_required"
        return result

    async def retry(
        http: aiohttp.ClientSession, request_id: int, percent: int, state: str, responses: JsonObject
    ) -> JsonObject:
        params = {
            "name": "set_position",
            "arguments": {"percent": percent},
            "inputResponses": responses,
            "requestState": state,
        }
        _, _, answer = await post(http, url, request("tools/call", params, request_id, asks))
        return answer_of(answer)

    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {AGENT}"}) as http:
        round_1 = await first(http, 1, 40)
        assert set(round_1["inputRequests"]) == {"confirm"}
        asked = round_1["inputRequests"]["confirm"]
        assert asked["method"] == "elicitation/create"
        assert "token:agent asks to call set_position on valve-1 (/plant/valve-1)" in asked["params"]["message"]
        assert '"percent":0' in asked["params"]["message"]  # the valve's state, read with get_position
        state_1 = round_1["requestState"]
        assert state_1.startswith("mcpgwc1.")
        assert moves == []

        done = await retry(http, 2, 40, state_1, accept)
        assert done["result"]["resultType"] == "complete"
        assert done["result"]["content"][0]["text"] == "moved to 40"
        assert moves == [40]

        # The same retry again: the answer counted once.
        replayed = await retry(http, 3, 40, state_1, accept)
        assert replayed["error"]["code"] == -32602
        assert replayed["error"]["data"]["reason"] == "used"
        assert moves == [40]

        # An answer is bound to its call: other arguments with a fresh state are another call.
        state_2 = (await first(http, 4, 60))["requestState"]
        mismatched = await retry(http, 5, 70, state_2, accept)
        assert mismatched["error"]["code"] == -32602
        assert mismatched["error"]["data"]["reason"] == "mismatch"
        assert moves == [40]
        # A state refused as a mismatch was not used: the call it was issued for still goes ahead, once.
        assert (await retry(http, 6, 60, state_2, accept))["result"]["content"][0]["text"] == "moved to 60"
        assert moves == [40, 60]

        # A declining answer is a tool error, and the valve stays where it is.
        state_3 = (await first(http, 7, 90))["requestState"]
        declined = await retry(http, 8, 90, state_3, {"confirm": {"action": "decline"}})
        assert declined["result"]["isError"] is True
        assert "token:agent via input_required declined it" in declined["result"]["content"][0]["text"]
        assert moves == [40, 60]

    # The trail: the two confirmed calls forwarded (each with its result), the replayed and the mismatched
    # retries refused with their reasons and never forwarded, the declined one; all by Streamable HTTP.
    # The input_required questions are on record as the attempts waiting for an answer; the reads of the
    # valve's position quoted in them (get_position, via confirmation-question) have results of their own.
    await wait_for(lambda: len(results(plant.trail)) == 2 + 3, what="the results of the forwarded calls")
    rows = decisions(plant.trail, ("set_position",))
    assert [row["effect"] for row in rows] == [
        "wait-confirmation",
        "allow",
        "refuse-confirmation",
        "wait-confirmation",
        "refuse-confirmation",
        "allow",
        "wait-confirmation",
        "declined",
    ]
    assert {row["transport"] for row in rows} == {"streamable-http"}
    assert {row["confirmed_by"] for row in (rows[1], rows[5], rows[7])} == {"token:agent via input_required"}
    assert rows[2]["reason"].startswith("requestState was already answered")
    assert rows[4]["reason"].startswith("requestState does not belong to this call")
    assert set(results(plant.trail)) - {row["id"] for row in decisions(plant.trail, ("get_position",))} == {
        rows[1]["id"],
        rows[5]["id"],
    }


def results(path: Path) -> dict[int, str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT decision_id, status FROM results"))
