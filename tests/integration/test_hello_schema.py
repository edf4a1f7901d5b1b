"""A hello whose `schema` is not the hash of the tools the provider lists (docs/pump-1.md, "Schema hash"):
the board is served as it is, and the mismatch is shown in broker_diagnose and logged once per connection.

The boards are raw WebSockets scripted by the test (tests/support/southbound.py); the simulator stands
for a board whose hello is right.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from mcp import Client

from gateway.core import jsonrpc
from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.sim.conftest import SimulatorFactory, simulators  # noqa: F401 (the fixture)
from tests.support.southbound import SLOW_TOOL, VALVE_TOOL, Boards, provider_status

STALE_HASH = "deadbeefdeadbeef"


def register_frame(schema: str) -> dict[str, Any]:
    hello = {"device_id": "aa:bb:cc:dd:ee:ff", "firmware": "scripted 1.0", "schema": schema}
    return {"jsonrpc": "2.0", "method": "notifications/register", "params": {"aggregate": True, "hello": hello}}


async def diagnosis(gateway_url: str, slot: str) -> dict[str, Any]:
    async with Client(f"{gateway_url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_diagnose", {"slot": slot})
    assert not result.is_error, result
    found = result.structured_content
    assert isinstance(found, dict)
    return found


def mismatch_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "announces schema" in record.getMessage()
    ]


async def test_a_stale_hello_schema_is_diagnosed_and_logged_once(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    gateway = await gateway_factory()
    board = await boards.connect(gateway.url, "/provider/th-2", first_frame=register_frame(STALE_HASH))
    await wait_ready_slot(gateway, "th-2")
    listed = tools_hash([VALVE_TOOL, SLOW_TOOL])

    # Served as it is: its tools are what they are.
    status = await provider_status(gateway.url, "th-2")
    assert status["tools_hash"] == listed
    assert status["hello"]["schema"] == STALE_HASH
    found = await diagnosis(gateway.url, "th-2")
    assert found["status"] == "warning"
    problems = [problem for problem in found["problems"] if problem["id"] == "provider.schema_mismatch"]
    assert len(problems) == 1, found
    problem = problems[0]
    assert problem["severity"] == "warning"
    assert problem["slot"] == "th-2"
    assert STALE_HASH in problem["evidence"] and listed in problem["evidence"]
    assert "pinned hash is stale or its tools changed" in problem["fix"]

    # Once per connection, though the same hello comes again.
    params = register_frame(STALE_HASH)["params"]["hello"]
    await board.send({"jsonrpc": "2.0", "method": "notifications/hello", "params": params})
    await asyncio.sleep(0.2)
    warnings = mismatch_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert STALE_HASH in warnings[0] and listed in warnings[0] and "th-2" in warnings[0]

    # A hello with the true hash ends the finding.
    await board.send({"jsonrpc": "2.0", "method": "notifications/hello", "params": {**params, "schema": listed}})
    for _ in range(100):
        found = await diagnosis(gateway.url, "th-2")
        if not any(problem["id"] == "provider.schema_mismatch" for problem in found["problems"]):
            break
        await asyncio.sleep(0.05)
    assert found["status"] == "ok", found


async def test_a_true_hello_schema_is_no_finding(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    gateway = await gateway_factory()
    listed = tools_hash([VALVE_TOOL, SLOW_TOOL])
    await boards.connect(gateway.url, "/provider/th-1", first_frame=register_frame(listed.upper()))
    await wait_ready_slot(gateway, "th-1")
    assert (await diagnosis(gateway.url, "th-1"))["status"] == "ok"
    assert mismatch_warnings(caplog) == []


async def test_a_list_cut_by_its_byte_bound_is_not_compared_with_the_hello(
    gateway_factory: GatewayFactory, boards: Boards, caplog: pytest.LogCaptureFixture
) -> None:
    # Room for the first tool only: the listed hash is of fewer tools than the board has.
    caplog.set_level(logging.WARNING)
    bound = len(jsonrpc.dumps(VALVE_TOOL))
    gateway = await gateway_factory(limits={"max_tool_list_bytes_per_slot": bound})
    true_hash = tools_hash([VALVE_TOOL, SLOW_TOOL])
    await boards.connect(gateway.url, "/provider/th-3", first_frame=register_frame(true_hash))
    await wait_ready_slot(gateway, "th-3")
    status = await provider_status(gateway.url, "th-3")
    assert status["tools_left_out"]["over_bytes"] == 1
    assert status["tools_hash"] == tools_hash([VALVE_TOOL])
    found = await diagnosis(gateway.url, "th-3")
    assert not any(problem["id"] == "provider.schema_mismatch" for problem in found["problems"]), found
    assert mismatch_warnings(caplog) == []


async def test_the_simulators_hello_schema_is_no_finding(
    gateway_factory: GatewayFactory,
    simulators: SimulatorFactory,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    gateway = await gateway_factory()
    await simulators(gateway.url, pumps=1, first=3)
    await wait_ready_slot(gateway, "pump-3")
    found = await diagnosis(gateway.url, "pump-3")
    assert not any(problem["id"] == "provider.schema_mismatch" for problem in found["problems"]), found
    assert mismatch_warnings(caplog) == []
