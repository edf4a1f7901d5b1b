"""`mcp-gateway slots` and `mcp-gateway call` against a running gateway, as a technician runs them."""

from __future__ import annotations

import sys

import orjson

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.gateway_process import run_cli
from tests.support.servers import demo_server


async def test_slots_lists_connected_and_empty_slots(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    gone = await publishers.start(gateway, "pump-2", demo_server("pump"))
    await gone.stop()  # a board that was here: its slot stays listed, empty, until it comes back
    await wait_for(lambda: gateway.gateway.registry.slots["pump-2"].live is None, what="pump-2 to leave")
    code, out, err = await run_cli("slots", "--url", gateway.url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["SLOT", "STATE", "TRANSPORT", "TOOLS", "PENDING"]
    assert lines[1].split() == ["pump-1", "ready", "websocket", "4", "0"]
    assert lines[2].split() == ["pump-2", "empty", "-", "0", "0"]
    assert len(lines) == 3


async def test_slots_counts_names_only_asked_for_and_lists_them_with_all(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    never_starts = {
        "name": "files",
        "command": [sys.executable, "-c", "raise SystemExit(3)"],
        "restart_initial_s": 30.0,  # one try while the test runs
    }
    gateway = await gateway_factory(slots={"declared": {"pump-3": {}}}, upstreams={"stdio": [never_starts]})
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    # Two names no provider ever held: one mistyped by a technician, one a client asked for.
    code, _, err = await run_cli("call", "pmup-1", "get_status", "--url", gateway.url)
    assert code == 1
    assert 'Provider "pmup-1" not connected' in err
    gateway.gateway.registry.slot("pump-9")

    code, out, err = await run_cli("slots", "--url", gateway.url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["SLOT", "STATE", "TRANSPORT", "TOOLS", "PENDING"]
    # A configured upstream and a declared slot stay listed without a provider; the typos do not.
    assert [line.split()[:2] for line in lines[1:]] == [["files", "empty"], ["pump-1", "ready"], ["pump-3", "empty"]]
    assert err == "mcp-gateway slots: 2 names asked for with no provider (see mcp-gateway slots --all)\n"
    # The gateway still holds and counts them (for diagnosis); only the listing leaves them out.
    assert {"pmup-1", "pump-9"} <= set(gateway.gateway.registry.slots)

    code, out, err = await run_cli("slots", "--all", "--url", gateway.url)
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["files", "empty"],
        ["pmup-1", "empty"],
        ["pump-1", "ready"],
        ["pump-3", "empty"],
        ["pump-9", "empty"],
    ]


async def test_slots_of_a_gateway_with_only_names_asked_for(gateway: GatewayServer) -> None:
    gateway.gateway.registry.slot("pump-9")
    code, out, err = await run_cli("slots", "--url", gateway.url)
    assert code == 0, err
    assert out == "no slots yet\n"
    assert err == "mcp-gateway slots: 1 name asked for with no provider (see mcp-gateway slots --all)\n"


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
