"""Held stateless-era calls belong to the caller and the request that started them: a real gateway, a
real session-era SDK provider whose tools ask their client mid-call, and raw 2026-07-28 HTTP clients on
loopback addresses of their own (docs/protocol-clients.md, "Stateless era: input_required").

One caller's unanswered calls fill only its share of the held calls
(limits.max_input_required_states_per_caller); a requestState continues its call only for the same
arguments, for the same caller (an anonymous one per peer address), and only from the latest round."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_governance import AGENT, OPERATOR, auth
from tests.integration.test_metrics import Scrape

JsonObject = dict[str, Any]
SLOT = "plant-1"
STATELESS = "2026-07-28"
SESSION_ERA = {"era": "session"}
ELICITATION: JsonObject = {"elicitation": {}}
OK = {"action": "accept", "content": {"ok": True}}
EVERYONE_POLICY: JsonObject = {
    "roles": {"all": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "*", "role": "all", "resources": ["/**"]}],
}


class Ok(BaseModel):
    ok: bool


class Colour(BaseModel):
    colour: str


@dataclass
class Device:
    """What the provider behind the slot actually ran."""

    executed: list[str] = field(default_factory=list)

    def server(self) -> MCPServer:
        server = MCPServer("plant", instructions="A device whose writes ask first")

        @server.tool()
        async def act(value: str, ctx: Context) -> str:
            """Ask the client to confirm, then act on `value`."""
            answer = await ctx.elicit(f"Set {value}?", Ok)
            self.executed.append(value)
            return f"executed value={value} action={answer.action}"

        @server.tool()
        async def two_rounds(ctx: Context) -> str:
            """Ask twice, one question after the other: two input_required rounds."""
            first = await ctx.elicit("Go ahead?", Ok)
            second = await ctx.elicit("Which colour?", Colour)
            return f"{first.action}, {second.data.colour if second.action == 'accept' else second.action}"

        return server


@dataclass
class Caller:
    """A raw 2026-07-28 client at its own loopback address, with its own bearer token if any."""

    http: aiohttp.ClientSession
    url: str
    token: str | None = None
    next_id: int = 0

    async def call(self, tool: str, arguments: JsonObject, retry: JsonObject | None = None) -> tuple[int, JsonObject]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": ELICITATION,
        }
        params = {"name": tool, "arguments": arguments, **(retry or {}), "_meta": meta}
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params}
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        async with self.http.post(self.url, data=orjson.dumps(body), headers=headers) as response:
            decoded: JsonObject = orjson.loads(await response.read())
            return response.status, decoded

    async def asked(self, tool: str, arguments: JsonObject, retry: JsonObject | None = None) -> str:
        """Call `tool`, expect an input_required result, and give its requestState."""
        status, answer = await self.call(tool, arguments, retry)
        assert status == 200 and answer["result"]["resultType"] == "input_required", answer
        state: str = answer["result"]["requestState"]
        return state


@contextlib.asynccontextmanager
async def caller_at(server: GatewayServer, address: str, token: str | None = None) -> AsyncIterator[Caller]:
    """A caller whose connections come from `address` (another loopback address is another host)."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        yield Caller(http, f"{server.url}/{SLOT}/mcp", token)


def answered(state: str, key: str = "elicitation-1", answer: JsonObject = OK) -> JsonObject:
    return {"requestState": state, "inputResponses": {key: answer}}


def error_of(answer: JsonObject) -> tuple[int, str | None]:
    error = answer.get("error")
    assert isinstance(error, dict), answer
    return error["code"], (error.get("data") or {}).get("reason")


@pytest.fixture
def device() -> Device:
    return Device()


# -- one caller's share of the held calls -----------------------------------------------------------


@pytest.mark.parametrize("who", ["anonymous per peer address", "principal"])
async def test_one_caller_fills_only_its_share_of_held_calls(
    gateway_factory: GatewayFactory, publishers: Publishers, device: Device, who: str
) -> None:
    limits = {"max_input_required_states_per_caller": 2}
    first: tuple[str, str | None]
    other: tuple[str, str | None]
    if who == "principal":
        # Two principals from one address: each has its own share.
        server = await gateway_factory(providers=SESSION_ERA, limits=limits, auth=auth())
        first, other = ("127.0.0.1", AGENT), ("127.0.0.1", OPERATOR)
    else:
        server = await gateway_factory(providers=SESSION_ERA, limits=limits)
        first, other = ("127.0.0.1", None), ("127.0.0.2", None)
    await publishers.start(server, SLOT, device.server())
    async with caller_at(server, *first) as alice, caller_at(server, *other) as bob:
        states = [await alice.asked("act", {"value": f"a{number}"}) for number in range(2)]
        status, refused = await alice.call("act", {"value": "a2"})
        assert (status, error_of(refused)) == (200, (-32000, "input_required_caller_limit")), refused
        assert refused["error"]["data"]["limit"] == 2
        assert "limits.max_input_required_states_per_caller" in refused["error"]["message"]
        assert server.gateway.input_required.held_by  # alice's two are held, nobody else's
        # Another caller is still asked.
        bob_state = await bob.asked("act", {"value": "b0"})
        # Answering one of hers frees its place in her share.
        status, done = await alice.call("act", {"value": "a0"}, answered(states[0]))
        assert done["result"]["content"][0]["text"] == "executed value=a0 action=accept"
        await alice.asked("act", {"value": "a3"})
        _, done = await bob.call("act", {"value": "b0"}, answered(bob_state))
        assert done["result"]["content"][0]["text"] == "executed value=b0 action=accept"
    assert "a2" not in device.executed  # the refused call's provider call was cancelled, never answered
    metrics = Scrape(server.gateway.metrics.render().decode())  # what /metrics serves
    assert metrics.get("mcpgw_limit_hits_total", limit="max_input_required_states_per_caller") == 1


# -- a requestState continues only its own request ---------------------------------------------------


def audited(trail: Path) -> list[tuple[str, str | None]]:
    """(arguments, result status) of each audited tools/call of `act`, in order."""
    with contextlib.closing(sqlite3.connect(f"file:{trail}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT d.arguments, r.status FROM decisions d LEFT JOIN results r ON r.decision_id = d.id "
            "WHERE d.tool = 'act' ORDER BY d.id"
        )
        return [(str(arguments), status) for arguments, status in rows]


async def test_a_retry_with_other_arguments_is_refused_and_never_recorded_as_run(
    gateway_factory: GatewayFactory, publishers: Publishers, device: Device, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    server = await gateway_factory(providers=SESSION_ERA, policy=EVERYONE_POLICY, audit={"path": str(trail)})
    await publishers.start(server, SLOT, device.server())
    async with caller_at(server, "127.0.0.1") as client:
        state = await client.asked("act", {"value": "speed=10"})
        status, mismatch = await client.call("act", {"value": "speed=99"}, answered(state))
        assert (status, error_of(mismatch)) == (400, (-32602, "mismatch")), mismatch
        assert "same method, name and arguments" in mismatch["error"]["message"]
        assert device.executed == []  # the held call is untouched by the refused retry
        # The call's own retry still completes it, with the arguments the device got.
        _, done = await client.call("act", {"value": "speed=10"}, answered(state))
        assert done["result"]["content"][0]["text"] == "executed value=speed=10 action=accept"
    assert device.executed == ["speed=10"]
    await wait_for(lambda: len(audited(trail)) == 3 and None not in {status for _, status in audited(trail)})
    records = audited(trail)
    # The refused retry is recorded as an error: never as a speed=99 the device ran.
    assert [status for arguments, status in records if "speed=99" in arguments] == ["error"]


async def test_an_anonymous_callers_request_state_is_bound_to_its_peer_address(
    gateway_factory: GatewayFactory, publishers: Publishers, device: Device
) -> None:
    server = await gateway_factory(providers=SESSION_ERA)
    await publishers.start(server, SLOT, device.server())
    async with caller_at(server, "127.0.0.1") as owner, caller_at(server, "127.0.0.2") as stranger:
        state = await owner.asked("act", {"value": "open"})
        status, refused = await stranger.call("act", {"value": "open"}, answered(state))
        assert (status, error_of(refused)) == (400, (-32602, "mismatch")), refused
        assert refused["error"]["message"].startswith("requestState belongs to another caller")
        assert device.executed == []
        _, done = await owner.call("act", {"value": "open"}, answered(state))
        assert done["result"]["content"][0]["text"] == "executed value=open action=accept"


async def test_a_request_state_of_a_superseded_round_is_refused(
    gateway_factory: GatewayFactory, publishers: Publishers, device: Device
) -> None:
    server = await gateway_factory(providers=SESSION_ERA)
    await publishers.start(server, SLOT, device.server())
    async with caller_at(server, "127.0.0.1") as client:
        first = await client.asked("two_rounds", {})
        second = await client.asked("two_rounds", {}, answered(first))
        colour = {"action": "accept", "content": {"colour": "red"}}
        status, stale = await client.call("two_rounds", {}, answered(first, "elicitation-2", colour))
        assert (status, error_of(stale)) == (400, (-32602, "superseded")), stale
        assert "latest input_required result" in stale["error"]["message"]
        _, done = await client.call("two_rounds", {}, answered(second, "elicitation-2", colour))
        assert done["result"]["content"][0]["text"] == "accept, red"
