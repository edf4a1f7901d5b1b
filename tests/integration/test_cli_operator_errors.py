"""The operator commands' errors against real processes: a --url with a path, $MCP_GATEWAY_URL, an
unknown `_broker` tool (hidden by the policy), a --control without its scheme, a busy port for `run`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.ports import free_port
from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.support.gateway_process import run_cli
from tests.support.servers import demo_server

AGENT = secrets.token_urlsafe(32)
OPERATOR = secrets.token_urlsafe(32)
# The agent may use the pumps, and nothing on /_system/broker; the operator may act there too.
POLICY = (
    "[roles.observer]\n"
    'capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]\n'
    "[roles.operator]\n"
    'inherits = ["observer"]\n'
    'capabilities = ["tool.control"]\n'
    '[[assign]]\nprincipal = "token:agent"\nrole = "observer"\nresources = ["/pump-*"]\n'
    '[[assign]]\nprincipal = "token:operator"\nrole = "operator"\nresources = ["/**"]\n'
)


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
async def governed(gateway_factory: GatewayFactory, tmp_path: Path) -> AsyncIterator[tuple[GatewayServer, Path]]:
    """A gateway with tokens and a policy, and the directory holding agent.token and operator.token."""
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "agent.token").write_text(AGENT)
    (tmp_path / "operator.token").write_text(OPERATOR)
    server = await gateway_factory(
        auth={"tokens": [{"name": "agent", "sha256": sha(AGENT)}, {"name": "operator", "sha256": sha(OPERATOR)}]},
        policy={"file": str(tmp_path / "policy.toml")},
        audit={"path": str(tmp_path / "audit.db")},
    )
    yield server, tmp_path


async def test_approve_and_slots_with_a_token_not_granted_the_broker_tool_say_why(
    governed: tuple[GatewayServer, Path],
) -> None:
    server, directory = governed
    agent = str(directory / "agent.token")
    code, out, err = await run_cli("approve", "--url", server.url, "--token-file", agent, "3f9a01c2")
    assert (code, out) == (1, "")
    assert err == (
        "mcp-gateway approve: Unknown tool: broker_approve is not offered by _broker; call tools/list (code -32602); "
        "broker_approve exists only on a gateway with a [policy] and is hidden from a caller the policy does not "
        "grant it: this token may lack tool:broker_approve or tool.control on /_system/broker (docs/governance.md), "
        "or the gateway is older than this mcp-gateway\n"
    )
    # A script reads the refusal on stdout with --json.
    code, out, _ = await run_cli("approve", "--json", "--url", server.url, "--token-file", agent, "3f9a01c2")
    assert code == 1
    assert json.loads(out)["error"]["code"] == -32602, out
    code, out, err = await run_cli("slots", "--url", server.url, "--token-file", agent)
    assert (code, out) == (1, "")
    assert "Unknown tool: providers_list is not offered by _broker" in err
    assert "this token may lack tool:providers_list or tool.observe on /_system/broker" in err

    # The operator is granted them: no hint, the gateway's own answer.
    operator = str(directory / "operator.token")
    code, out, err = await run_cli("slots", "--url", server.url, "--token-file", operator)
    assert (code, err) == (0, "")
    code, out, err = await run_cli("approve", "--url", server.url, "--token-file", operator)
    assert (code, out, err) == (0, "", "mcp-gateway approve: No call waits for an approval you may give.\n")


async def test_an_unknown_tool_on_a_device_slot_gets_no_broker_hint(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    code, out, err = await run_cli("call", "--url", gateway.url, "pump-1", "no_such_tool")
    assert code == 1
    assert "Unknown tool: no_such_tool" in out + err
    assert "/_system/broker" not in out + err


async def test_a_url_with_the_slot_path_is_refused_before_any_request(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-3", demo_server("pump"))
    code, out, err = await run_cli("call", "--url", f"{gateway.url}/pump-3/mcp", "pump-3", "add", "a=1", "b=2")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "mcp-gateway call: error: argument --url: is the gateway's base URL, e.g. http://HOST:PORT, with no path; "
        f"got '{gateway.url}/pump-3/mcp'"
    )
    host_port = gateway.url.removeprefix("http://")
    code, out, err = await run_cli("call", "--url", host_port, "pump-3", "add", "a=1", "b=2")
    assert (code, out) == (2, "")
    assert "Traceback" not in err
    assert f"argument --url: must start with http:// or https://, e.g. http://HOST:PORT; got '{host_port}'" in err


async def test_mcp_gateway_url_finds_the_gateway(gateway: GatewayServer, publishers: Publishers) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    code, out, err = await run_cli("call", "pump-1", "add", "a=2", "b=40", env={"MCP_GATEWAY_URL": gateway.url})
    assert (code, err) == (0, "")
    assert '"result": 42' in out
    code, out, err = await run_cli("slots", env={"MCP_GATEWAY_URL": gateway.url})
    assert (code, err) == (0, "")
    assert out.splitlines()[1].split()[:2] == ["pump-1", "ready"]


async def test_sim_status_names_a_missing_scheme_and_reads_mcp_gateway_sim_control(gateway: GatewayServer) -> None:
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    simulator.start()
    try:
        control = await simulator.start_control(0)
        without_scheme = control.removeprefix("http://")
        code, out, err = await run_cli("sim-status", "--control", without_scheme)
        assert (code, out) == (2, "")
        assert err.splitlines()[-1] == (
            "mcp-gateway sim-status: error: argument --control: must start with http:// or https://, "
            f"e.g. http://127.0.0.1:3901; got '{without_scheme}'"
        )
        code, out, err = await run_cli("sim-status", env={"MCP_GATEWAY_SIM_CONTROL": control})
        assert (code, err) == (0, "")
        assert out.splitlines()[1].split()[0] == "pump-1"
    finally:
        await simulator.stop()


async def test_run_on_a_busy_port_says_what_to_do() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, _, err = await run_cli("run", "--port", str(port))
    assert code == 1
    assert "Traceback" not in err
    assert err.splitlines()[-1].endswith(
        "address already in use (another gateway running? choose another port with --port or MCP_GATEWAY_PORT)"
    )


async def test_a_url_of_some_other_web_server_is_named_as_such() -> None:
    # Python's own file server: it answers a POST with an HTML error page.
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await wait_for(lambda: port_open(port), what="the file server to listen")
        code, out, err = await run_cli("call", "--url", f"http://127.0.0.1:{port}", "pump-1", "get_status")
    finally:
        server.terminate()
        await server.wait()
    assert (code, out) == (1, "")
    assert err.strip().endswith(
        f"HTTP 501 from http://127.0.0.1:{port}/pump-1/mcp: a web page (text/html), not an MCP answer; "
        "is --url (or $MCP_GATEWAY_URL) the gateway's address?"
    ), err
    assert "<!DOCTYPE" not in err


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
