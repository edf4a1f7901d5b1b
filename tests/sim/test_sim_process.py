"""The commands as a user runs them: `mcp-gateway run --sim-pumps 1` and `mcp-gateway sim`, real processes."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import orjson
import pytest

from bench.ports import free_port
from gateway.app import GatewayServer
from tests.conftest import wait_ready_slot
from tests.integration.test_event_loop import broker_info
from tests.integration.test_shutdown import wait_until_ready
from tests.sim.conftest import cli
from tests.support.gateway_process import run_to_exit
from tests.support.southbound import provider_status

REPO = Path(__file__).resolve().parents[2]
CONTROL_URL = re.compile(rb"http://127\.0\.0\.1:\d+")


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def line_matching(stream: asyncio.StreamReader | None, pattern: re.Pattern[bytes], timeout: float = 10) -> bytes:
    assert stream is not None
    seen: list[bytes] = []
    async with asyncio.timeout(timeout):
        while True:
            line = await stream.readline()
            assert line, f"the process closed its output before {pattern.pattern!r}: {b''.join(seen).decode()}"
            seen.append(line)
            if pattern.search(line):
                return line


async def wait_connected(url: str, slot: str, timeout: float = 10) -> dict[str, object]:
    async with asyncio.timeout(timeout):
        while True:
            status = await provider_status(url, slot)
            if status["state"] == "ready":
                return status
            await asyncio.sleep(0.05)


async def stop(process: asyncio.subprocess.Process) -> int:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise


async def test_run_with_a_simulated_pump_answers_the_readme_calls() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = await spawn("run", "--port", str(port), "--sim-pumps", "1", "--sim-control-port", "0")
    try:
        await wait_until_ready(url, gateway)
        control = CONTROL_URL.search(await line_matching(gateway.stderr, re.compile(rb"simulated pump-1 attached")))
        assert control is not None
        status = await wait_connected(url, "pump-1")
        assert status["transport"] == "websocket"  # the real path, not an in-process shortcut

        code, out, err = await cli("call", "pump-1", "get_status", "--url", url)
        assert (code, err) == (0, "")
        assert orjson.loads(out)["state"] == "stopped"
        code, out, _ = await cli("call", "pump-1", "start", "speed_rpm=1200", "--url", url)
        assert code == 0
        assert orjson.loads(out)["setpoint_rpm"] == 1200

        code, out, _ = await cli("sim-status", "--control", control.group().decode())
        assert code == 0
        assert out.splitlines()[1].split()[:2] == ["pump-1", "up"]
    finally:
        assert await stop(gateway) == 0
    assert gateway.stderr is not None
    shutdown_log = (await gateway.stderr.read()).decode()
    assert "pump-1 link down (closed by the gateway, code 1001" in shutdown_log
    assert "dialling again" not in shutdown_log  # its own gateway is going away: nothing to dial


async def wait_connects(url: str, slot: str, connects: int, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while True:
            status = await provider_status(url, slot)
            if status["connects"] >= connects and status["state"] == "ready":
                return
            await asyncio.sleep(0.05)


async def test_link_drop_and_reboot_cut_the_link_on_the_gateways_own_loop() -> None:
    # `run --sim-pumps` runs its pumps on the gateway's event loop, uvloop by default, whose sockets
    # are stand-ins: the cut must end the connection there as it does on asyncio's loop.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = await spawn("run", "--port", str(port), "--sim-pumps", "1", "--sim-control-port", "0")
    try:
        await wait_until_ready(url, gateway)
        found = CONTROL_URL.search(await line_matching(gateway.stderr, re.compile(rb"simulated pump-1 attached")))
        assert found is not None
        control = found.group().decode()
        assert (await wait_connected(url, "pump-1"))["connects"] == 1
        assert (await broker_info(url))["event_loop"].startswith("uvloop")

        code, _, err = await cli("sim-fault", "pump-1", "link_drop", "--control", control)
        assert (code, err) == (0, "")
        await wait_connects(url, "pump-1", 2)
        assert (await provider_status(url, "pump-1"))["last_disconnect_reason"] is not None

        code, _, err = await cli("sim-fault", "pump-1", "reboot", "--control", control)
        assert (code, err) == (0, "")
        await wait_connects(url, "pump-1", 3)
        code, out, _ = await cli("sim-status", "--control", control)
        assert code == 0
        assert out.splitlines()[1].split()[:2] == ["pump-1", "up"]
    finally:
        assert await stop(gateway) == 0


HELD_IN_START_UP = """
import sys

from gateway.cli import main
from sim.simulator import Simulator

original = Simulator.start_control


async def start_control(self, port, flag="--control-port"):
    print("starting up", flush=True)
    sys.stdin.readline()  # held here, mid start-up, until the test has sent SIGTERM
    return await original(self, port, flag)


Simulator.start_control = start_control
sys.exit(main(sys.argv[1:]))
"""


async def test_sigterm_during_sim_start_up_stops_it_cleanly() -> None:
    simulator = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HELD_IN_START_UP,
        "sim",
        "--gateway",
        f"http://127.0.0.1:{free_port()}",
        "--control-port",
        "0",
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await line_matching(simulator.stdout, re.compile(rb"^starting up"))
        simulator.send_signal(signal.SIGTERM)  # pending before the line below lets start-up go on
        assert simulator.stdin is not None
        simulator.stdin.write(b"\n")
        await simulator.stdin.drain()
        assert await asyncio.wait_for(simulator.wait(), 10) == 0
        assert simulator.stderr is not None
        assert "simulator stopped" in (await simulator.stderr.read()).decode()
    finally:
        if simulator.returncode is None:
            simulator.kill()
            await simulator.wait()


async def test_sim_command_publishes_n_pumps_into_a_gateway_and_stops_cleanly(gateway: GatewayServer) -> None:
    ws_url = gateway.url.replace("http://", "ws://")  # ws:// is accepted as well as http://
    simulator = await spawn(
        "sim", "--gateway", ws_url, "--pumps", "2", "--first", "3", "--control-port", "0", "--no-telemetry"
    )
    try:
        first = await line_matching(simulator.stdout, re.compile(rb"^simulator: "))
        assert b"2 pump(s), pump-3 ... pump-4" in first
        control = CONTROL_URL.search(await line_matching(simulator.stdout, re.compile(rb"^control: ")))
        assert control is not None
        for slot in ("pump-3", "pump-4"):
            await wait_ready_slot(gateway, slot, timeout=10)

        code, out, _ = await cli("sim-fault", "--control", control.group().decode(), "pump-4", "sensor_failure")
        assert code == 0
        state = orjson.loads(out)
        assert state["status"]["fault"]["code"] == "sensor_failure"
        assert state["telemetry"] is None  # --no-telemetry
    finally:
        assert await stop(simulator) == 0
    status = await provider_status(gateway.url, "pump-3")
    assert status["connected"] is False
    assert "1001" in str(status["last_disconnect_reason"])  # a polite close: going away


async def test_sim_command_refuses_a_url_it_cannot_dial() -> None:
    code, _, err = await cli("sim", "--gateway", "ftp://127.0.0.1:3000", "--pumps", "2")
    assert code == 2
    assert "--gateway must start with http://, https://, ws:// or wss://" in err
    code, _, err = await cli("sim", "--gateway", "http://127.0.0.1:3000/pump-1/mcp")  # it dials its own paths
    assert code == 2
    assert "--gateway is the gateway's base URL, e.g. http://HOST:PORT, with no path" in err
    for flags, named in (
        (("--pumps", "0"), "sim: --pumps must be between 1 and 1000, got 0\n"),
        (("--deadman-s", "0"), "sim: --deadman-s must be above 0 and at most 86400, got 0\n"),
        (("--first", "-1", "--dry-run-s", "-2"), "--first must be 0 or more, got -1; --dry-run-s must be above 0"),
    ):
        code, _, err = await cli("sim", *flags)
        assert code == 2
        assert named in err  # the bad value named, and only that
    code, _, err = await cli("sim", "--telemetry-period-s", "-1")
    assert code == 2
    assert "--telemetry-period-s must be 0 (no samples) or more" in err
    with pytest.raises(SystemExit) as caught:  # a usage error (tests/unit/test_cli_option_values.py: its words)
        await cli("run", "--sim-pumps", "-1")
    assert caught.value.code == 2


@pytest.mark.timeout(60)
async def test_sim_command_needs_a_port_and_names_its_own_token_flag() -> None:
    """docs/simulator.md: --gateway has a host and a port; a user@ in it points at --provider-token-file, the
    flag sim takes its secret with (a real process: a simulator that runs instead would dial until killed)."""
    for url in ("http://127.0.0.1", "ws://127.0.0.1/"):
        code, out, err = await run_to_exit("sim", "--gateway", url, "--control-port", "0", timeout=20)
        assert (code, out) == (2, "")
        assert err == f"mcp-gateway sim: --gateway has no valid port (1-65535), e.g. http://HOST:PORT; got {url!r}\n"
    code, _, err = await run_to_exit("sim", "--gateway", "http://u@127.0.0.1:3000", "--control-port", "0", timeout=20)
    assert code == 2
    assert err == (
        "mcp-gateway sim: --gateway carries a user or password (user@ before the host); give the gateway's base "
        "URL as http://HOST:PORT, and a token with --provider-token-file\n"
    )
