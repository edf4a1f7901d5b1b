"""Stdio upstreams: configured commands run as supervised children, each serving its own slot.

Every child is a real process: tests/support/stdio_server.py (an SDK MCPServer on stdin/stdout that
misbehaves on command) or the MCP reference memory server from npm (.ci/install-upstream-fixtures).
Clients are real SDK clients of both eras; what is asserted is what they and an operator see: tool
results, error messages, provider_status, broker_diagnose, /metrics, and which processes still exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from gateway.core.broker.status import provider_status as status_view
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.southbound import provider_status, ws_url

REPO = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "tests.support.stdio_server"]
MODES = ["legacy", "2026-07-28"]
START_S = 20.0
"""How long a test waits for a Python child to import the SDK and answer (generous for a busy machine)."""
MEMORY_SERVER = REPO / ".ci" / "npm-servers" / "node_modules" / "@modelcontextprotocol" / "server-memory"
NODE = REPO / ".ci" / "node" / "node_modules" / ".bin" / "node"


def upstream(*args: str, name: str = "demo", **options: Any) -> dict[str, Any]:
    return {"name": name, "command": [*SERVER, *args], "cwd": str(REPO), **options}


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert block.type == "text"
    return block.text


def view(server: GatewayServer, slot: str = "demo") -> dict[str, Any]:
    """provider_status as _broker renders it, read in-process so a test can poll it cheaply."""
    return status_view(server.gateway, server.gateway.registry.slots[slot])


async def wait_view(
    server: GatewayServer, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = START_S
) -> dict[str, Any]:
    await wait_for(lambda: predicate(view(server)), timeout, what)
    return view(server)


async def diagnose(server: GatewayServer, slot: str = "demo") -> list[dict[str, Any]]:
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_diagnose", {"slot": slot})
    assert isinstance(result.structured_content, dict)
    problems: list[dict[str, Any]] = result.structured_content["problems"]
    return problems


def process_gone(pid: int) -> bool:
    """True when `pid` no longer runs: absent, or a zombie nobody reaped (container init may not reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


@contextlib.asynccontextmanager
async def own_gateway(**overrides: Any) -> AsyncIterator[GatewayServer]:
    """A gateway the test stops itself (to look at what is left afterwards)."""
    server = GatewayServer(GatewayConfig.model_validate({"port": 0, **overrides}))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


# -- serving ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_stdio_child_serves_its_slot_in_both_eras(gateway_factory: GatewayFactory, mode: str) -> None:
    server = await gateway_factory(upstreams={"stdio": [upstream(aggregate=True)]})
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode=mode) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"add", "echo", "sleep", "crash", "print_stdout", "flood_stderr"} <= tools
        assert text_of(await client.call_tool("add", {"a": 2, "b": 40})) == "42"
        assert text_of(await client.call_tool("echo", {"text": "über"})) == "über"
    async with Client(f"{server.url}/_all/mcp", mode=mode) as client:
        assert "demo-add" in {tool.name for tool in (await client.list_tools()).tools}
    status = await provider_status(server.url, "demo")
    assert status["transport"] == "stdio"
    assert status["state"] == "ready"
    child = status["upstream"]
    assert child["kind"] == "stdio"
    assert child["state"] == "ready"
    assert child["command"] == SERVER
    assert status["remote"] == f"pid {child['pid']}"
    # Where the provider comes from is the configured command, not a WebSocket URL to connect to.
    assert status["provider_url"] == "stdio: " + " ".join(SERVER)
    assert child["starts"] == 1 and child["restarts"] == 0
    assert child["crash_loop"] is False
    assert await diagnose(server) == []


async def test_a_board_cannot_claim_a_stdio_upstreams_slot(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(upstreams={"stdio": [upstream()]})
    await wait_ready_slot(server, "demo", START_S)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(ws_url(server.url, "/provider/demo")) as ws:
            closing = await ws.receive()
        assert closing.type is aiohttp.WSMsgType.CLOSE
        assert (closing.data, closing.extra) == (1008, 'Provider "demo" is managed by a stdio upstream')
        async with http.ws_connect(ws_url(server.url, "/providers")) as ws:
            await ws.send_bytes(orjson.dumps({"provider": "demo", "payload": {"jsonrpc": "2.0", "method": "x"}}))
            frame = orjson.loads((await ws.receive()).data)
    assert frame["provider"] == "demo"
    assert frame["payload"]["error"] == {"code": -32000, "message": 'Provider "demo" is managed by a stdio upstream'}
    # The child still holds its slot and serves.
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"
    assert view(server)["connects"] == 1


# -- faults -----------------------------------------------------------------------------------


async def test_a_child_that_crashes_mid_call_answers_every_caller_and_comes_back(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(upstreams={"stdio": [upstream(restart_initial_s=0.05)]})
    await wait_ready_slot(server, "demo", START_S)
    first_pid = view(server)["upstream"]["pid"]
    async with (
        Client(f"{server.url}/demo/mcp", mode="legacy") as one,
        Client(f"{server.url}/demo/mcp", mode="2026-07-28") as two,
    ):
        waiting = asyncio.create_task(one.call_tool("sleep", {"seconds": 30}))
        await wait_view(server, lambda s: s["pending"] == 1, "the first call to be pending")
        crashing = asyncio.create_task(two.call_tool("crash", {"after_s": 0.2, "code": 3}))
        for call in (waiting, crashing):
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(call, 10)
            assert failure.value.code == -32000
            assert failure.value.error.message.startswith('Provider "demo" disconnected: pid ')
            assert failure.value.error.message.endswith(" exited with code 3")
    status = await wait_view(server, lambda s: s["state"] == "ready" and s["upstream"]["starts"] == 2, "a restart")
    assert status["upstream"]["pid"] != first_pid
    assert status["upstream"]["restarts"] == 1
    assert f"pid {first_pid} exited with code 3" in status["upstream"]["last_exit"]
    assert (
        f"pid {first_pid} exited with code 3" in (await provider_status(server.url, "demo"))["last_disconnect_reason"]
    )
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("add", {"a": 3, "b": 4})) == "7"


async def test_a_child_that_hangs_on_start_is_killed_at_its_deadline_and_restarted(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "started-once"
    server = await gateway_factory(
        upstreams={"stdio": [upstream("--hang-once", str(marker), startup_timeout_s=3.0, restart_initial_s=1.0)]}
    )
    # The listener answers at once; the hanging child only keeps its own slot empty.
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{server.url}/healthz") as response:
            assert response.status == 200
        async with http.get(f"{server.url}/readyz") as response:
            assert response.status == 200
    first_pid = view(server)["upstream"]["pid"]
    status = await wait_view(server, lambda s: s["upstream"]["last_exit"] is not None, "the startup deadline")
    # Silent from the start, it never answered the probe: a hang cannot be told from a mute child.
    assert status["upstream"]["last_exit_kind"] == "discover_timeout"
    assert "answered nothing to server/discover within 3s (startup_timeout_s)" in status["upstream"]["last_exit"]
    assert "raise startup_timeout_s" in status["upstream"]["last_exit"]
    assert f"pid {first_pid} killed by SIGTERM" in status["upstream"]["last_exit"]
    assert process_gone(first_pid)
    problems = await diagnose(server)
    assert [problem["id"] for problem in problems] == ["upstream.startup_timeout"]
    assert "startup_timeout_s (3.0s)" in problems[0]["fix"]
    # The second child finds the marker and serves.
    status = await wait_view(server, lambda s: s["state"] == "ready", "the restarted child")
    assert status["upstream"]["starts"] == 2
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("add", {"a": 1, "b": 2})) == "3"


async def test_a_child_silent_to_server_discover_gets_initialize_from_its_next_start(
    gateway_factory: GatewayFactory,
) -> None:
    mute = {"name": "demo", "command": [sys.executable, "-m", "tests.support.mute_stdio_server"], "cwd": str(REPO)}
    server = await gateway_factory(upstreams={"stdio": [{**mute, "startup_timeout_s": 2.0, "restart_initial_s": 4.0}]})
    status = await wait_view(server, lambda s: s["upstream"]["last_exit"] is not None, "the startup deadline")
    child = status["upstream"]
    assert child["last_exit_kind"] == "discover_timeout"
    assert child["last_exit"].startswith(
        "the child answered nothing to server/discover within 2s (startup_timeout_s): a server of the session era "
        'that ignores unknown methods? its next start gets initialize only; pin it with era = "session"'
    )
    assert (child["era_setting"], child["era_from_silence"]) == ("session", True)
    [problem] = await diagnose(server)
    assert problem["id"] == "upstream.startup_timeout"
    assert "did not answer server/discover in time" in problem["summary"]
    assert 'pin it with era = "session"' in problem["fix"]
    # The next child is asked initialize first, answers it and serves; its stderr shows no probe.
    status = await wait_view(server, lambda s: s["state"] == "ready", "the restarted child")
    assert status["upstream"]["starts"] == 2
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("hi", {})) == "hi"
    tail = view(server)["upstream"]["stderr_tail"]
    assert tail.count("got server/discover") == 1 and tail.index("got server/discover") < tail.index("got initialize")
    assert await diagnose(server) == []


async def test_a_child_that_floods_stderr_keeps_only_a_bounded_tail(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory(upstreams={"stdio": [upstream(max_stderr_bytes=4096)]})
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        # About 2 MB of short lines, then lines far longer than any kept line.
        assert text_of(await client.call_tool("flood_stderr", {"lines": 20_000})) == "flooded"
        assert text_of(await client.call_tool("flood_stderr", {"lines": 3, "width": 100_000})) == "flooded"
        status = await wait_view(
            server, lambda s: s["upstream"]["stderr_tail"][-1:] == ["flood done"], "the last stderr line"
        )
        assert text_of(await client.call_tool("add", {"a": 5, "b": 5})) == "10"
    child = status["upstream"]
    assert child["stderr_bytes"] <= 4096
    assert sum(len(line.encode()) for line in child["stderr_tail"]) == child["stderr_bytes"]
    assert child["stderr_lines_dropped"] > 19_000
    assert child["stderr_lines_cut"] == 3
    assert all(len(line) <= 1001 for line in child["stderr_tail"])
    assert child["stderr_tail"][-2] == "e" * 1000 + "…"
    assert view(server)["connects"] == 1  # the same child throughout


async def test_non_json_and_oversized_stdout_lines_are_counted_and_the_link_survives(
    gateway_factory: GatewayFactory,
) -> None:
    server = await gateway_factory(upstreams={"stdio": [upstream()]}, limits={"max_frame_bytes": 65_536})
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        assert text_of(await client.call_tool("print_stdout", {"text": "debug: valve at 40%"})) == "printed"
        assert text_of(await client.call_tool("print_stdout", {"size": 300_000})) == "printed"
        assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"
    status = await provider_status(server.url, "demo")
    assert status["connects"] == 1
    assert status["counters"]["unparsable"] == 1
    child = status["upstream"]
    assert child["stdout_not_jsonrpc"] == 1
    assert child["stdout_not_jsonrpc_tail"] == ["debug: valve at 40%"]
    assert child["stdout_oversized_lines"] == 1
    problems = {problem["id"]: problem for problem in await diagnose(server)}
    assert "log to stderr" in problems["provider.unparsable_messages"]["fix"]
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
        metrics = await response.text()
    assert 'mcpgw_limit_hits_total{limit="max_frame_bytes"} 1.0' in metrics


async def test_a_child_that_exits_in_a_loop_backs_off_to_its_cap_and_is_diagnosed(
    gateway_factory: GatewayFactory,
) -> None:
    fatal = "fatal: config file /etc/demo.toml not found"
    server = await gateway_factory(
        upstreams={
            "stdio": [upstream("--stderr", fatal, "--exit-at-start", "2", restart_initial_s=0.05, restart_max_s=0.2)]
        }
    )
    status = await wait_view(server, lambda s: s["upstream"]["starts"] >= 6, "six starts", timeout=30)
    delays = status["upstream"]["recent_backoff_s"]
    assert len(delays) >= 5
    for failure, delay in enumerate(delays):
        ceiling = min(0.2, 0.05 * 2**failure)  # doubles per failure in a row, then stays at restart_max_s
        assert ceiling / 2 - 0.001 <= delay <= ceiling + 0.001, (failure, delays)
    problems = await diagnose(server)
    assert [problem["id"] for problem in problems] == ["upstream.crash_loop"]
    loop = problems[0]
    assert loop["severity"] == "error"
    assert fatal in loop["evidence"]
    assert "exited with code 2" in loop["evidence"]
    assert shlex.join(SERVER) in loop["fix"].replace("'", "")
    child = (await provider_status(server.url, "demo"))["upstream"]
    assert child["crash_loop"] is True
    assert child["stderr_tail"][-1] == fatal


async def test_a_child_that_dies_in_its_handshake_leaves_only_the_gateways_own_warning(
    gateway_factory: GatewayFactory,
) -> None:
    # It reads the gateway's first request and exits before answering, on every start.
    dies = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(1)"]
    crashy = {"name": "demo", "command": dies, "restart_initial_s": 0.05, "restart_max_s": 0.1}
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        server = await gateway_factory(upstreams={"stdio": [crashy]})
        await wait_view(server, lambda s: s["upstream"]["starts"] >= 4, "four starts", timeout=30)
        gc.collect()  # a task whose failure nobody read is reported when it is collected
        await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(previous)
    assert [context.get("message") for context in unhandled] == []
    assert view(server)["upstream"]["last_exit"].endswith("exited with code 1")


async def test_a_call_waiting_for_a_child_that_dies_in_its_handshake_is_told_it_was_not_sent(
    gateway_factory: GatewayFactory,
) -> None:
    # The child reads the gateway's first request, stays up a moment (the call arrives and waits for
    # the handshake), then exits without answering.
    dies = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(2); sys.exit(1)"]
    server = await gateway_factory(upstreams={"stdio": [{"name": "demo", "command": dies, "restart_initial_s": 30}]})
    await wait_view(server, lambda s: s["state"] == "initializing", "the child in its handshake")
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("add", {"a": 1, "b": 2})
    message = str(refused.value)
    assert message.startswith('Provider "demo" not connected: its provider ended before it was ready (')
    assert message.endswith("exited with code 1); the request was not sent")
    assert refused.value.error.data["reason"] == "not_connected"


async def test_shutdown_stops_children_and_their_grandchildren() -> None:
    stubborn = upstream("--hang-at-start", "--ignore-sigterm", name="stubborn", stop_grace_s=0.5)
    async with own_gateway(upstreams={"stdio": [upstream(), stubborn]}) as server:
        await wait_ready_slot(server, "demo", START_S)
        async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
            grandchild = int(text_of(await client.call_tool("spawn_grandchild", {})))
            child = view(server)["upstream"]["pid"]
            stubborn_child = view(server, "stubborn")["upstream"]["pid"]
            pending = asyncio.create_task(client.call_tool("sleep", {"seconds": 30}))
            await wait_view(server, lambda s: s["pending"] == 1, "the call to be pending")
            await server.stop()
            with pytest.raises(MCPError) as failure:
                await asyncio.wait_for(pending, 10)
            assert failure.value.error.message == 'Provider "demo" disconnected: the gateway is shutting down'
        assert process_gone(child)
        assert process_gone(grandchild), "a grandchild in the child's process group outlived the gateway"
        assert process_gone(stubborn_child), "a child that ignores SIGTERM must be killed after stop_grace_s"
        supervisors = {supervisor.name: supervisor.status_extra() for supervisor in server.stdio_upstreams.supervisors}
        assert "Gateway shutting down" in supervisors["demo"]["last_exit"]
        assert f"pid {stubborn_child} killed by SIGKILL" in supervisors["stubborn"]["last_exit"]
        assert {status["state"] for status in supervisors.values()} == {"stopped"}


async def test_the_child_sees_only_its_allow_listed_environment(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPGW_TEST_SECRET", "the-gateway-secret-must-not-leak")
    monkeypatch.setenv("MCPGW_TEST_PASSED", "handed over")
    server = await gateway_factory(
        upstreams={
            "stdio": [
                upstream(
                    env={"DEMO_MODE": "plant", "MCPGW_TEST_PASSED": "explicit wins"},
                    env_passthrough=["MCPGW_TEST_PASSED", "MCPGW_TEST_ABSENT", "HOME"],
                )
            ]
        }
    )
    await wait_ready_slot(server, "demo", START_S)
    async with Client(f"{server.url}/demo/mcp", mode="legacy") as client:
        environment = json.loads(text_of(await client.call_tool("environment", {})))
    assert "MCPGW_TEST_SECRET" not in environment
    assert environment["DEMO_MODE"] == "plant"
    assert environment["MCPGW_TEST_PASSED"] == "explicit wins"
    assert environment["PATH"] == os.environ["PATH"]
    # Python may set LC_CTYPE itself (PEP 538); nothing else beyond the allow-list appears.
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "DEMO_MODE", "MCPGW_TEST_PASSED", "LC_CTYPE"}
    assert set(environment) <= allowed
    child = (await provider_status(server.url, "demo"))["upstream"]
    assert "the-gateway-secret" not in json.dumps(child)
    assert "explicit wins" not in json.dumps(child)  # names are shown, values never
    assert "MCPGW_TEST_PASSED" in child["env"]
    assert child["env_missing"] == ["MCPGW_TEST_ABSENT"]


# -- the command line -------------------------------------------------------------------------


async def test_the_stdio_flag_runs_an_upstream_from_the_command_line() -> None:
    port = free_port()
    command = shlex.join(SERVER)
    gateway = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "run",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--stdio",
        f"demo={command}",
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        status: dict[str, Any] = {}

        async def ready() -> bool:
            nonlocal status
            with contextlib.suppress(Exception):
                status = await provider_status(url, "demo")
            return status.get("state") == "ready"

        for _ in range(int(START_S * 10)):
            if gateway.returncode is not None or await ready():
                break
            await asyncio.sleep(0.1)
        assert status.get("state") == "ready", status
        async with Client(f"{url}/demo/mcp", mode="2026-07-28") as client:
            assert text_of(await client.call_tool("add", {"a": 20, "b": 22})) == "42"
        child = status["upstream"]["pid"]
        assert status["upstream"]["command"] == SERVER
    finally:
        if gateway.returncode is None:
            gateway.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(gateway.communicate(), 30)
    assert gateway.returncode == 0, stderr.decode()
    assert process_gone(child)


# -- the MCP reference memory server (npm) ----------------------------------------------------


async def test_the_npm_reference_memory_server_runs_behind_the_gateway(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    entry = MEMORY_SERVER / "dist" / "index.js"
    # Never skipped: CI installs it (scripts/test runs .ci/install-upstream-fixtures).
    assert entry.is_file() and NODE.is_file(), "run .ci/install-upstream-fixtures (needs npm) to install it"
    memory = {
        "name": "memory",
        "command": [str(NODE), str(entry)],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
        "startup_timeout_s": START_S,
    }
    server = await gateway_factory(upstreams={"stdio": [memory]})
    await wait_ready_slot(server, "memory", START_S)
    entity = {"name": "pump-1", "entityType": "pump", "observations": ["installed in hall 2"]}
    async with Client(f"{server.url}/memory/mcp", mode="legacy") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"create_entities", "read_graph", "search_nodes"} <= tools
        created = await client.call_tool("create_entities", {"entities": [entity]})
        assert not created.is_error, created
    async with Client(f"{server.url}/memory/mcp", mode="2026-07-28") as client:
        found = await client.call_tool("search_nodes", {"query": "hall 2"})
    assert not found.is_error, found
    assert "pump-1" in text_of(found)
    status = await provider_status(server.url, "memory")
    assert status["server_info"]["name"] == "memory-server"
    assert "MEMORY_FILE_PATH" in status["upstream"]["env"]


# -- log messages ------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["session", "auto"])
async def test_a_stateless_caller_gets_the_log_messages_of_its_call_to_a_stdio_child(
    gateway_factory: GatewayFactory, era: str
) -> None:
    """A stdio child's log messages name no request; while one call is in flight they are its, also
    when the child speaks the session era (the 2026-07-28 caller has no GET stream to get them on)."""
    server = await gateway_factory(upstreams={"stdio": [upstream(era=era)]})
    await wait_ready_slot(server, "demo", START_S)
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params.data)

    async with Client(f"{server.url}/demo/mcp", mode="2026-07-28", logging_callback=on_log, log_level="info") as client:
        assert text_of(await client.call_tool("log_lines", {"count": 3})) == "logged 3"
    assert logs == ["line 1", "line 2", "line 3"]
