"""Calls of a slot whose provider connected and then left, through `/<slot>/mcp`, `_all` and a tool group:
each one is
decided and recorded, a caller limited to observing refused (its tool judged by its name alone, as a tool
that changes state) and an allowed call recorded with the not-connected error as its result
(docs/governance-audit.md)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.policy.audit import read_records
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_audit_outcomes import caller, policy, token_auth

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

OPERATOR = secrets.token_urlsafe(32)
WATCHER = secrets.token_urlsafe(32)
# The appliance's default policy: every caller with a token observes, the operator also acts.
POLICY = policy(("*", "observer"), ("token:operator", "operator"))


async def answer_of(client: Client, name: str, arguments: dict[str, Any]) -> str:
    with pytest.raises(MCPError) as refused:
        await client.call_tool(name, arguments)
    return refused.value.error.message


async def test_calls_of_a_slot_whose_provider_left_are_recorded_on_the_slot_on_all_and_in_a_group(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    trail = tmp_path / "audit.db"
    server: GatewayServer = await gateway_factory(
        auth=token_auth(operator=OPERATOR, watcher=WATCHER),
        policy=POLICY,
        audit={"path": str(trail)},
        groups={"pumps": {"slots": ["pump-*"]}},
    )
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        async with (
            caller(f"{server.url}/pump-1/mcp", OPERATOR) as operator_slot,
            caller(f"{server.url}/_all/mcp", OPERATOR) as operator_all,
            caller(f"{server.url}/pump-1/mcp", WATCHER) as watcher_slot,
            caller(f"{server.url}/_all/mcp", WATCHER) as watcher_all,
            caller(f"{server.url}/mcp/pumps", OPERATOR) as operator_group,
            caller(f"{server.url}/mcp/pumps", WATCHER) as watcher_group,
        ):
            # While the pump is connected the watcher sees its read-only tool on both targets.
            assert "get_status" in [tool.name for tool in (await watcher_slot.list_tools()).tools]
            assert "pump-1-get_status" in [tool.name for tool in (await watcher_all.list_tools()).tools]
            assert "pump-1__get_status" in [tool.name for tool in (await watcher_group.list_tools()).tools]
            simulator.apply("pump-1", "link_drop", seconds=60)
            slot = server.gateway.registry.slots["pump-1"]
            await wait_for(lambda: slot.live is None, 5.0, "pump-1's provider to leave")
            answers = [
                await answer_of(watcher_slot, "get_status", {}),
                await answer_of(watcher_all, "pump-1-get_status", {}),
                await answer_of(watcher_all, "pump-1-start", {"speed_rpm": 900}),
                await answer_of(operator_slot, "get_status", {}),
                await answer_of(operator_all, "pump-1-get_status", {}),
                await answer_of(operator_all, "pump-1-start", {"speed_rpm": 900}),
                await answer_of(watcher_group, "pump-1__get_status", {}),
                await answer_of(operator_group, "pump-1__start", {"speed_rpm": 900}),
            ]
    finally:
        await simulator.stop()
    assert answers[0].startswith('Unknown tool: get_status is not offered by "pump-1"')
    assert answers[1].startswith("Unknown tool: pump-1-get_status is not offered by _all")
    assert answers[2].startswith("Unknown tool: pump-1-start is not offered by _all")
    assert all(answer.startswith('Provider "pump-1" not connected: its provider left') for answer in answers[3:6])
    assert answers[6].startswith("Unknown tool: pump-1__get_status is not offered by /mcp/pumps"), answers[6]
    assert answers[7].startswith('Provider "pump-1" not connected: its provider left'), answers[7]

    records: list[dict[str, Any]] = []

    def all_ended() -> bool:
        nonlocal records
        records = [record for record in read_records(trail) if record["slot"] == "pump-1"]
        return len(records) == 8 and all(record["status"] is not None for record in records[3:6] + records[7:])

    with contextlib.suppress(AssertionError):
        await wait_for(all_ended, 5.0, "eight pump-1 records, the allowed four with results")
    # By name alone each tool is one that changes state: the watcher's calls are refused, the operator's
    # allowed and ended with the not-connected error, each recorded under the tool's own name.
    assert [(r["principal"], r["tool"], r["capability"], r["effect"], r["status"]) for r in records] == [
        (["token:watcher"], "get_status", "tool.control", "deny", None),
        (["token:watcher"], "get_status", "tool.control", "deny", None),
        (["token:watcher"], "start", "tool.control", "deny", None),
        (["token:operator"], "get_status", "tool.control", "allow", "error"),
        (["token:operator"], "get_status", "tool.control", "allow", "error"),
        (["token:operator"], "start", "tool.control", "allow", "error"),
        (["token:watcher"], "get_status", "tool.control", "deny", None),
        (["token:operator"], "start", "tool.control", "allow", "error"),
    ]
    assert [record["error"] for record in records[3:6] + records[7:]] == answers[3:6] + answers[7:]
    assert records[2]["arguments"] == records[5]["arguments"] == {"speed_rpm": 900}
    assert all(record["transport"] == "streamable-http" for record in records)
    assert all(record["reason"].startswith("Forbidden: token:watcher may not call tool") for record in records[:3])


async def test_a_name_all_never_routed_is_answered_as_unknown_and_not_recorded(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    """The bound of the rule above: a name `_all` does not route to any slot reaches no device."""
    trail = tmp_path / "audit.db"
    server = await gateway_factory(
        auth=token_auth(operator=OPERATOR),
        policy=POLICY,
        audit={"path": str(trail)},
    )
    async with caller(f"{server.url}/_all/mcp", OPERATOR) as operator_all:
        answer = await answer_of(operator_all, "pump-9-start", {"speed_rpm": 900})
    assert answer.startswith("Unknown tool: pump-9-start is not offered by _all")
    await asyncio.sleep(0.2)  # a record would be written before the answer; give a stray one time anyway
    assert read_records(trail) == []
