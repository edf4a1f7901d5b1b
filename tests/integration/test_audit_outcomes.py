"""How governed calls end, as the audit trail records it: the error text its caller got, the calls of an
offline device decided and recorded first, calls cancelled before they were sent; read back with
`mcp-gateway audit --format jsonl` from a real gateway's trail (docs/governance-audit.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import orjson
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.policy.audit import read_records
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_ready_slot
from tests.integration import test_confirmation as confirmation
from tests.integration import test_governance as governance
from tests.support.gateway_process import run_cli
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

AGENT = secrets.token_urlsafe(32)
VISITOR = secrets.token_urlsafe(32)
ROLES: dict[str, Any] = {
    "observer": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe"]},
    "operator": {"inherits": ["observer"], "capabilities": ["tool.control"]},
}


def policy(*assign: tuple[str, str]) -> dict[str, Any]:
    """ROLES, each (principal, role) given on every resource."""
    return {
        "roles": ROLES,
        "assign": [{"principal": principal, "role": role, "resources": ["/**"]} for principal, role in assign],
    }


def token_auth(**tokens: str) -> dict[str, Any]:
    """[auth] with one bearer token per name, `token:NAME` to the policy."""
    return {
        "tokens": [
            {"name": name, "sha256": hashlib.sha256(token.encode()).hexdigest()} for name, token in tokens.items()
        ]
    }


POLICY = policy(("token:agent", "operator"))


def tokens() -> dict[str, Any]:
    return token_auth(agent=AGENT, visitor=VISITOR)


@contextlib.asynccontextmanager
async def caller(url: str, token: str = AGENT) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as transport,
        Client(streamable_http_client(url, http_client=transport), mode="legacy") as client,
    ):
        yield client


async def audit_jsonl(trail: Path, *more: str) -> list[dict[str, Any]]:
    code, out, err = await run_cli("audit", "--path", str(trail), "--format", "jsonl", *more)
    assert code == 0, err
    return [orjson.loads(line) for line in out.splitlines()]


async def ended(trail: Path, count: int) -> list[dict[str, Any]]:
    """The trail's records once `count` of them have a result."""
    records: list[dict[str, Any]] = []

    async def read() -> bool:
        nonlocal records
        records = await audit_jsonl(trail)
        return sum(1 for record in records if record["status"] is not None) >= count

    for _ in range(100):
        if await read():
            return records
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} results in {records}")


@pytest.fixture
async def governed(gateway_factory: GatewayFactory, tmp_path: Path) -> GatewayServer:
    return await gateway_factory(
        auth=tokens(),
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db")},
        slots={"declared": {"demo": {"tool_timeouts_ms": {"sleep": 300}}, "away": {}}},
    )


async def test_each_result_records_the_error_its_caller_got(
    governed: GatewayServer, publishers: Publishers, tmp_path: Path
) -> None:
    await publishers.start(governed, "demo", demo_server())
    async with caller(f"{governed.url}/demo/mcp") as agent:
        failed = await agent.call_tool("fail", {"message": "valve stuck"})
        assert failed.is_error and isinstance(failed.content[0], types.TextContent)
        with pytest.raises(MCPError) as late:
            await agent.call_tool("sleep", {"seconds": 5})
        assert (await agent.call_tool("add", {"a": 1, "b": 2})).is_error is False
    records = await ended(tmp_path / "audit.db", 3)
    by_tool = {record["tool"]: record for record in records}
    assert by_tool["fail"]["status"] == "tool-error"
    assert by_tool["fail"]["error"] == failed.content[0].text
    assert by_tool["sleep"]["status"] == "timeout"
    assert by_tool["sleep"]["error"] == late.value.error.message
    assert by_tool["add"]["status"] == "ok" and by_tool["add"]["error"] is None


async def test_a_call_of_an_offline_device_is_decided_and_recorded_first(
    governed: GatewayServer, tmp_path: Path
) -> None:
    async with caller(f"{governed.url}/away/mcp") as agent:
        with pytest.raises(MCPError) as offline:
            await agent.call_tool("open_valve", {"percent": 40})
        assert offline.value.error.message.startswith('Provider "away" not connected')
    async with caller(f"{governed.url}/away/mcp", VISITOR) as visitor:
        with pytest.raises(MCPError) as refused:
            await visitor.call_tool("open_valve", {"percent": 40})
        # The policy's answer (it lets the visitor see no tool), not the device's state.
        assert refused.value.error.message.startswith("Unknown tool: open_valve")
    records = await ended(tmp_path / "audit.db", 1)
    assert [(r["principal"], r["tool"], r["effect"], r["status"]) for r in records] == [
        (["token:agent"], "open_valve", "allow", "error"),
        (["token:visitor"], "open_valve", "deny", None),
    ]
    assert records[0]["arguments"] == {"percent": 40}
    assert records[0]["error"] == offline.value.error.message


async def test_a_call_held_for_confirmation_is_answered_with_the_shutdown_error(tmp_path: Path) -> None:
    server = GatewayServer(
        GatewayConfig.model_validate(
            {
                "port": 0,
                "auth": governance.auth(),
                "policy": confirmation.POLICY,
                "audit": {"path": str(tmp_path / "a.db")},
            }
        )
    )
    await server.start()
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    stopping: list[asyncio.Task[None]] = []

    async def asked(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        stopping.append(asyncio.create_task(server.stop()))  # SIGTERM while the person is asked
        await asyncio.sleep(30)
        raise AssertionError("the question outlived the gateway")

    try:
        await wait_ready_slot(server, "pump-1")
        headers = {"Authorization": f"Bearer {governance.AGENT}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as transport,
            Client(
                streamable_http_client(f"{server.url}/pump-1/mcp", http_client=transport),
                mode="legacy",
                elicitation_callback=asked,
            ) as agent,
        ):
            started = asyncio.get_running_loop().time()
            with pytest.raises(MCPError) as ended:
                await agent.call_tool("start", {"speed_rpm": 700})
            assert asyncio.get_running_loop().time() - started < 0.9  # at once, not after the 1 s grace
        assert ended.value.error.code == -32000
        assert ended.value.error.message == 'Provider "pump-1" disconnected: the gateway is shutting down'
        assert isinstance(ended.value.error.data, dict) and ended.value.error.data["reason"] == "shutdown"
    finally:
        await simulator.stop()
        if stopping:
            await stopping[0]
        else:
            await server.stop()
    # The trail says the shutdown ended the wait, not a client.
    [declined] = [entry for entry in read_records(tmp_path / "a.db") if entry["effect"] == "declined"]
    assert declined["reason"].endswith("the gateway shut down before an answer came")
