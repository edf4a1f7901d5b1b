"""`mcp-gateway tools SLOT` against a real gateway: an MCP server written with the SDK, the simulated
pump (the board's own code) through `_all`, the JSON form, and the hint an unknown `_all` name gets."""

from __future__ import annotations

import orjson

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import Publishers, wait_ready_slot
from tests.support.gateway_process import run_cli
from tests.support.servers import demo_server


async def test_a_servers_tools_are_listed_with_their_arguments_as_call_takes_them(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "lab-1", demo_server("lab"))
    code, out, err = await run_cli("tools", "--url", gateway.url, "lab-1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "add a=INTEGER b=INTEGER" in lines
    assert lines[lines.index("add a=INTEGER b=INTEGER") + 1] == "    Add two integers."
    assert "fail [message=STRING]" in lines  # a default makes it optional
    # What it lists is what call takes.
    code, out, err = await run_cli("call", "--url", gateway.url, "lab-1", "add", "a=2", "b=3")
    assert (code, err) == (0, "")


async def test_all_lists_the_pumps_tools_by_their_aggregate_names_and_an_unknown_name_points_there(
    gateway: GatewayServer,
) -> None:
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(gateway, "pump-1", timeout=10)
        code, out, err = await run_cli("tools", "--url", gateway.url, "_all")
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert "pump-1-start [speed_rpm=INTEGER 300..2900]" in lines
        assert "pump-1-set_speed speed_rpm=INTEGER 300..2900" in lines
        assert lines[lines.index("pump-1-stop") + 1].startswith("    Ramp the motor down to standstill")

        code, out, err = await run_cli("tools", "--url", gateway.url, "--json", "pump-1")
        assert (code, err) == (0, "")
        tools = orjson.loads(out)
        assert [tool["name"] for tool in tools] == ["get_status", "start", "set_speed", "stop", "reset_fault"]
        assert tools[1]["inputSchema"]["properties"]["speed_rpm"]["maximum"] == 2900

        code, out, err = await run_cli("call", "--url", gateway.url, "_all", "pump-1_get_status")
        assert (code, out) == (1, "")
        assert "Unknown tool: pump-1_get_status is not offered by _all" in err
        assert "mcp-gateway tools _all lists them, with their arguments" in err
    finally:
        await simulator.stop()


async def test_a_slot_without_a_provider_is_named(gateway: GatewayServer) -> None:
    code, out, err = await run_cli("tools", "--url", gateway.url, "pump-7")
    assert (code, out) == (1, "")
    assert 'Provider "pump-7" not connected' in err
    assert "Traceback" not in err
