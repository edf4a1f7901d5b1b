"""What the approver sees of a waiting call's arguments (docs/governance.md, "Confirmation of device
writes"): a GPIO pin number is shown, so two calls driving different outputs never look alike, and the
audit trail says which output was driven; a PIN code is still masked, and the approval names the keys
it masks, so the approver knows what it approves without seeing. A real gateway with a real stdio
GPIO server, SDK clients, and the real `mcp-gateway approve` and `mcp-gateway audit`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_governance import client, text_of
from tests.support.gateway_process import run_cli
from tests.support.refusals import refusal

AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)
DOOR_CODE = "SECRET-CODE-" + secrets.token_hex(6)
START_S = 20.0

GPIO_SERVER = '''
"""A board-like stdio MCP server: digital_write drives a GPIO pin, unlock opens a door by its code."""
from mcp.server.mcpserver import MCPServer

server = MCPServer("gpio")


@server.tool()
def digital_write(pin: int, value: int) -> str:
    """Drive GPIO `pin` to `value` (0 or 1)."""
    return f"GPIO {pin} set to {value}"


@server.tool()
def unlock(door: int, pin_code: str) -> str:
    """Open `door` with its code."""
    return f"door {door} open"


if __name__ == "__main__":
    server.run("stdio")
'''

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [
        {"principal": "token:agent", "role": "operator", "resources": ["/gpio"]},
        {"principal": "token:operator", "role": "operator", "resources": ["/gpio", "/_system/**"]},
    ],
    "confirm": [{"principal": "token:agent", "capabilities": ["tool.control"], "resources": ["/gpio"]}],
}


def trail_bytes(path: Path) -> bytes:
    """The trail's database file with its write-ahead log and shared memory."""
    return b"".join(file.read_bytes() for file in path.parent.glob(path.name + "*"))


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def gpio_gateway(gateway_factory: GatewayFactory, tmp_path: Path) -> GatewayServer:
    script = tmp_path / "gpio_server.py"
    script.write_text(GPIO_SERVER)
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": digest(AGENT)}, {"name": "operator", "sha256": digest(OPERATOR)}]},
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db")},
        upstreams={"stdio": [{"name": "gpio", "command": [sys.executable, str(script)]}]},
    )
    await wait_ready_slot(server, "gpio", START_S)
    return server


async def call(server: GatewayServer, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """The agent's call (a client that declares no elicitation): the refusal's (text, data) while it
    waits for approval, else the device's answer."""
    async with client(server, "/gpio/mcp", AGENT, "legacy") as agent:
        result = await agent.call_tool(tool, arguments)
    if result.is_error:
        return refusal(result)
    return text_of(result)


async def waiting_approval(server: GatewayServer, tool: str, arguments: dict[str, Any]) -> str:
    answer = await call(server, tool, arguments)
    assert isinstance(answer, tuple) and answer[1]["reason"] == "confirmation_required", answer
    return str(answer[1]["approval"])


async def approve(server: GatewayServer, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    credential = tmp_path / "operator.token"
    credential.write_text(OPERATOR)
    return await run_cli("approve", *args, "--url", server.url, "--token-file", str(credential))


async def gpio_records(trail: Path, count: int) -> list[dict[str, Any]]:
    """The gpio slot's records through `mcp-gateway audit`, once `count` are there, the last with its result."""
    for _ in range(50):
        code, out, err = await run_cli("audit", "--path", str(trail), "--slot", "gpio", "--format", "jsonl")
        assert code == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        if len(records) >= count and records[-1]["status"] is not None:
            return records
        await asyncio.sleep(0.1)
    raise AssertionError(f"the trail holds no {count} gpio records with the last one's result: {out}")


@pytest.mark.timeout(90)
async def test_the_approver_tells_two_pins_apart_and_the_trail_names_the_pin_driven(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await gpio_gateway(gateway_factory, tmp_path)
    five = await waiting_approval(server, "digital_write", {"pin": 5, "value": 1})
    twelve = await waiting_approval(server, "digital_write", {"pin": 12, "value": 1})

    code, out, err = await approve(server, tmp_path)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert '{"pin":5,"value":1}' in lines[five], out
    assert '{"pin":12,"value":1}' in lines[twelve], out
    assert "***" not in out and "masked" not in out, out

    code, out, err = await approve(server, tmp_path, "--json")
    assert code == 0, err
    listed = {item["id"]: item for item in json.loads(out)["approvals"]}
    assert listed[five]["arguments"] == {"pin": 5, "value": 1}
    assert listed[twelve]["arguments"] == {"pin": 12, "value": 1}
    assert listed[five]["masked"] == [] and listed[five]["masked_more"] == 0

    code, out, err = await approve(server, tmp_path, twelve)
    assert code == 0, err
    assert await call(server, "digital_write", {"pin": 12, "value": 1}) == "GPIO 12 set to 1"

    records = await gpio_records(tmp_path / "audit.db", 3)
    assert [(r["effect"], r["arguments"]) for r in records] == [
        ("wait-confirmation", {"pin": 5, "value": 1}),
        ("wait-confirmation", {"pin": 12, "value": 1}),
        ("allow", {"pin": 12, "value": 1}),
    ], records
    assert records[-1]["confirmed_by"] == "token:operator" and records[-1]["status"] == "ok"


@pytest.mark.timeout(90)
async def test_a_pin_code_stays_masked_and_the_approval_names_the_masked_key(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    server = await gpio_gateway(gateway_factory, tmp_path)
    first = await waiting_approval(server, "unlock", {"door": 1, "pin_code": DOOR_CODE})
    second = await waiting_approval(server, "unlock", {"door": 1, "pin_code": DOOR_CODE[::-1]})

    code, out, err = await approve(server, tmp_path, "--json")
    assert code == 0, err
    assert DOOR_CODE not in out and DOOR_CODE[::-1] not in out
    listed = {item["id"]: item for item in json.loads(out)["approvals"]}
    # Two calls that look alike: each says that its pin_code is hidden from the approver.
    for approval in (first, second):
        assert listed[approval]["arguments"] == {"door": 1, "pin_code": "***"}
        assert listed[approval]["masked"] == ["pin_code"] and listed[approval]["masked_more"] == 0

    code, out, err = await approve(server, tmp_path)
    assert code == 0, err
    assert DOOR_CODE not in out and out.count('{"door":1,"pin_code":"***"}  masked: pin_code  [') == 2, out
    assert DOOR_CODE.encode() not in trail_bytes(tmp_path / "audit.db")
