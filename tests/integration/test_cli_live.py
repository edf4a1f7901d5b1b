"""`mcp-gateway slots` and `mcp-gateway call` against a running gateway, as a technician runs them."""

from __future__ import annotations

import asyncio
import sys

import orjson

from gateway.app import GatewayServer
from tests.conftest import Publishers
from tests.support.servers import demo_server


async def run_cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_slots_lists_connected_and_empty_slots(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    gateway.gateway.registry.slot("pump-9")  # a slot a client asked for, with no provider yet
    code, out, err = await run_cli("slots", "--url", gateway.url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["SLOT", "STATE", "TRANSPORT", "TOOLS", "PENDING"]
    assert lines[1].split() == ["pump-1", "ready", "websocket", "4", "0"]
    assert lines[2].split()[:2] == ["pump-9", "empty"]


async def test_call_prints_the_structured_result(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    code, out, err = await run_cli("call", "pump-1", "add", "a=2", "b=40", "--url", gateway.url)
    assert code == 0, err
    assert orjson.loads(out) == {"result": 42}


async def test_call_of_a_failing_tool_exits_1_and_shows_the_error(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    code, out, _ = await run_cli("call", "pump-1", "fail", "message=jammed", "--url", gateway.url)
    assert code == 1
    assert "Error executing tool fail" in out  # the SDK server hides the exception text itself


async def test_call_of_an_empty_slot_names_the_gateway_error(gateway: GatewayServer) -> None:
    code, _, err = await run_cli("call", "pump-7", "get_status", "--url", gateway.url)
    assert code == 1
    assert 'Provider "pump-7" not connected' in err
