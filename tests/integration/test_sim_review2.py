"""The simulator's second review: the C board and the simulator answer a quick sequence of commands
alike, the dead-man's text writes its seconds as '%g' on every board, `run --sim-pumps` admits all of
its pumps, `sim` warns about the per-peer slot limit, stops cleanly on a signal during start-up and
refuses what its options cannot take (periods over a day, MQTT port 0, baud rates out of range), and
`sim-fault` names itself in its errors. Real processes, real sockets on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from gateway.app import GatewayServer
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host, structured_call  # noqa: F401 (fixtures)
from tests.support.gateway_process import REPO, clean_environment, gateway_process, run_to_exit

C_SLOT = "c-pump"
NOTHING_LISTENS = "http://127.0.0.1:58583"  # in this test's port range; nothing is started on it


@contextlib.asynccontextmanager
async def simulated(server: GatewayServer, deadman_s: float = 90.0) -> AsyncIterator[Simulator]:
    pump = PumpSettings(deadman_s=deadman_s)
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=pump, backoff_min_s=0.05))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1", timeout=10)
        yield simulator
    finally:
        await simulator.stop()


async def quick_sequence(url: str) -> list[str]:
    """start, set_speed and, 20 ms later, stop, three times: the state each stop answers."""
    answers: list[str] = []
    async with Client(url, mode="legacy") as client:
        for _ in range(3):
            await structured_call(client, "start", {"speed_rpm": 1500})
            await structured_call(client, "set_speed", {"speed_rpm": 1600})
            # 20 ms: some rpm to ramp down on a millisecond clock, well inside the board's 100 ms tick.
            await asyncio.sleep(0.02)
            answers.append(str((await structured_call(client, "stop"))["state"]))
            for _ in range(100):  # the few rpm it reached ramp down within a tick or two
                if (await structured_call(client, "get_status"))["state"] == "stopped":
                    break
                await asyncio.sleep(0.05)
    return answers


async def test_a_stop_right_after_set_speed_answers_stopping_on_the_c_board_as_on_the_simulator(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    # The C board brings its model up to the time of the command, not to its last tick (up to 100 ms
    # old): the pump started a few milliseconds ago turns, so stop ramps it down ("stopping").
    server = await gateway_factory()
    await c_boards("--url", server.url, "--slot", C_SLOT)
    await wait_ready_slot(server, C_SLOT, timeout=10)
    async with simulated(server):
        c_board = await quick_sequence(f"{server.url}/{C_SLOT}/mcp")
        simulator = await quick_sequence(f"{server.url}/pump-1/mcp")
    assert simulator == ["stopping"] * 3
    assert c_board == simulator


async def test_the_dead_man_text_writes_fractional_seconds_alike_on_the_c_board_and_the_simulator(
    gateway_factory: GatewayFactory,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    server = await gateway_factory(providers={"heartbeat_interval_s": 60})  # no ping within the dead-man
    await c_boards("--url", server.url, "--slot", C_SLOT, "--deadman-s", "1.5")
    await wait_ready_slot(server, C_SLOT, timeout=10)
    async with simulated(server, deadman_s=1.5):
        texts = []
        for slot in (C_SLOT, "pump-1"):
            async with Client(f"{server.url}/{slot}/mcp", mode="legacy") as client:
                await structured_call(client, "start", {"speed_rpm": 1500})
        await asyncio.sleep(2.5)
        for slot in (C_SLOT, "pump-1"):
            async with Client(f"{server.url}/{slot}/mcp", mode="legacy") as client:
                fault = (await structured_call(client, "get_status"))["fault"]
                assert fault is not None and fault["code"] == "link_lost", (slot, fault)
                texts.append(fault["text"])
    assert texts[0].startswith("No request or ping from the gateway for 1.5 s while the motor turned"), texts
    assert texts[0] == texts[1]


async def test_run_with_more_simulated_pumps_than_the_per_peer_limit_admits_them_all(tmp_path: Path) -> None:
    pumps = 130  # over limits.max_slots_per_peer's default, 128
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    async with gateway_process("--port", "0", "--sim-pumps", str(pumps), "--sim-control-port", "0", env=env) as gw:
        await gw.wait_line(f"provider attached to slot pump-{pumps} ", timeout=60)
        await wait_for(lambda: sum("provider attached to slot" in line for line in gw.lines) >= pumps, 30, "all")
        assert not [line for line in gw.lines if "Too many slots" in line or "peer_limit" in line]


# `mcp-gateway sim` held at its logging set-up (after its options are checked, before its event loop
# runs) until the test has sent the signal.
HELD_AFTER_THE_COMMAND_LINE = """
import sys

import gateway.logs
from gateway.cli import main

setup = gateway.logs.setup_logging

def held(*args, **kwargs):
    print("command line read", flush=True)
    sys.stdin.readline()
    return setup(*args, **kwargs)

gateway.logs.setup_logging = held
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_sim_stopped_by_a_signal_after_its_command_line_is_read_exits_0(signum: int) -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", HELD_AFTER_THE_COMMAND_LINE, "sim", "--gateway", NOTHING_LISTENS),
        *("--control-port", "0"),
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(),
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line == b"command line read\n", line
        process.send_signal(signum)
        await asyncio.sleep(0.2)  # delivered while start-up is held
        process.stdin.write(b"\n")
        await process.stdin.drain()
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()


async def test_sim_warns_when_its_pumps_exceed_the_default_per_peer_limit() -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway.cli", "sim", "--pumps", "129", "--gateway", NOTHING_LISTENS),
        *("--control-port", "0"),
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(),
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        text = line.decode()
        assert "warning: --pumps 129" in text and "limits.max_slots_per_peer" in text, text
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0


@pytest.mark.parametrize("option", ["--deadman-s", "--dry-run-s", "--telemetry-period-s"])
@pytest.mark.parametrize("value", ["1e306", "86401"])
async def test_sim_refuses_a_period_over_a_day_naming_the_option(option: str, value: str) -> None:
    code, _, stderr = await run_to_exit("sim", "--gateway", NOTHING_LISTENS, option, value)
    assert code == 2, stderr
    assert re.search(
        rf"mcp-gateway sim: {option} must be .*at most 86400, got {re.escape(f'{float(value):g}')}", stderr
    ), stderr
    assert "Traceback" not in stderr


async def test_sim_takes_a_period_of_a_day() -> None:
    # The bound itself is taken: the usage check passes and the simulator starts (stopped at once).
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway.cli", "sim", "--gateway", NOTHING_LISTENS, "--control-port", "0"),
        *("--deadman-s", "86400", "--dry-run-s", "86400", "--telemetry-period-s", "86400"),
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=clean_environment(),
    )
    try:
        assert process.stderr is not None
        await asyncio.wait_for(process.stderr.readline(), 30)  # its first log line: it runs
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()


@pytest.mark.parametrize("command", [("sim",), ("run", "--port", "0")])
@pytest.mark.parametrize("url", ["mqtt://127.0.0.1:0", "mqtts://broker.lan:0"])
async def test_an_mqtt_url_with_port_0_is_refused(command: tuple[str, ...], url: str) -> None:
    code, _, stderr = await run_to_exit(*command, "--mqtt", url, timeout=30)
    assert code == 2, stderr
    assert "port 0 is no broker's port" in stderr, stderr


@pytest.mark.parametrize("baud", ["0", "12345678901", "99999999999999999999", "49", "12000001"])
async def test_sim_refuses_a_serial_baud_out_of_range(baud: str, tmp_path: Path) -> None:
    code, _, stderr = await run_to_exit("sim", "--serial", f"{tmp_path}/tty@{baud}")
    assert code == 2, stderr
    assert "BAUD must be from 50 to 12000000" in stderr, stderr


@pytest.mark.parametrize("command", [("sim-fault", "pump-1", "dry_run"), ("sim-status",)])
async def test_sim_fault_and_sim_status_name_themselves_when_the_endpoint_does_not_answer(
    command: tuple[str, ...],
) -> None:
    code, _, stderr = await run_to_exit(*command, "--control", NOTHING_LISTENS)
    assert code == 1, stderr
    assert stderr.startswith(f"mcp-gateway {command[0]}: the simulator's control endpoint did not answer"), stderr
