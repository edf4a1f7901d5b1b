"""`mcp-gateway schema-hash --slot` prints the hash of what the board lists, the one the gateway
compares with the board's hello, even when a [policy] hides some of the board's tools from the
caller; a caller not granted `_broker`'s status gets the hash of what it may see, with a note. A real
gateway with a [policy] and simulated pumps; the command runs in a process of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.app import GatewayServer
from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory
from tests.integration.test_governance import AGENT, OPERATOR, POLICY, auth
from tests.support.gateway_process import run_cli
from tests.support.southbound import simulated_pumps

PUMP_1_SCHEMA = Path(__file__).parents[2] / "device" / "schemas" / "pump-1.json"
# The operator may read _broker's status; a deny hides reset_fault from its tools/list (POLICY).
SYSTEM = {"principal": "token:operator", "role": "observer", "resources": ["/_system/**"]}


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[GatewayServer]:
    policy: dict[str, Any] = {**POLICY, "assign": [*POLICY["assign"], SYSTEM]}
    server = await gateway_factory(auth=auth(), policy=policy, audit={"path": str(tmp_path / "audit.db")})
    async with simulated_pumps(server):
        yield server


async def test_the_slot_hash_is_the_boards_whatever_the_policy_hides(plant: GatewayServer) -> None:
    board = tools_hash(orjson.loads(PUMP_1_SCHEMA.read_bytes()))
    code, out, err = await run_cli(
        "schema-hash", "--slot", "pump-1", "--url", plant.url, env={"MCP_GATEWAY_TOKEN": OPERATOR}
    )
    assert (code, out, err) == (0, f"{board}\n", "")
    # The agent may not read _broker's status: it gets what it sees, and is told why that may differ.
    code, out, err = await run_cli(
        "schema-hash", "--slot", "pump-1", "--url", plant.url, env={"MCP_GATEWAY_TOKEN": AGENT}
    )
    assert code == 0
    assert out != f"{board}\n"
    assert "the hash of the tools this client may see" in err
