"""`mcp-gateway run` stopped by a signal during start-up, a real process: it stops cleanly and exits 0."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import pytest

from bench.ports import free_port

REPO = Path(__file__).resolve().parents[2]

# Start-up is held at one point (printing "starting up", then reading a line from stdin) so the
# signal deterministically arrives there: the test sends it, then releases start-up.
HELD_IN_START_UP = """
import sys

from gateway.cli import main
import gateway.app
import gateway.cli.run
import sim.simulator

where = sys.argv.pop(1)
if where == "config":  # before the event loop: run is loading its configuration
    load = gateway.cli.run._load

    def held_load(args):
        print("starting up", flush=True)
        sys.stdin.readline()  # held here until the test has sent the signal
        return load(args)

    gateway.cli.run._load = held_load
else:
    owner = {"sim-control": sim.simulator.Simulator, "listener": gateway.app.GatewayServer}[where]
    name = "start_control" if where == "sim-control" else "start"
    original = getattr(owner, name)

    async def held(self, *args, **kwargs):
        print("starting up", flush=True)
        sys.stdin.readline()  # held here until the test has sent the signal
        return await original(self, *args, **kwargs)

    setattr(owner, name, held)
sys.exit(main(sys.argv[1:]))
"""


async def line_matching(stream: asyncio.StreamReader | None, pattern: re.Pattern[bytes], timeout: float = 10) -> None:
    assert stream is not None
    async with asyncio.timeout(timeout):
        while True:
            line = await stream.readline()
            assert line, f"the process closed its output before {pattern.pattern!r}"
            if pattern.search(line):
                return


STOPS = [
    # --sim-pumps: the simulator's control port is opened before the gateway's start-up.
    ("sim-control", ("--sim-pumps", "1", "--sim-control-port", "0"), signal.SIGTERM),
    ("sim-control", ("--sim-pumps", "1", "--sim-control-port", "0"), signal.SIGINT),
    # Before the listener is up: what start-up opens is stopped again.
    ("listener", (), signal.SIGTERM),
    ("listener", ("--sim-pumps", "1", "--sim-control-port", "0"), signal.SIGTERM),
    # Before the event loop runs (modules and configuration loading): the signal is kept until it does.
    ("config", (), signal.SIGTERM),
    ("config", (), signal.SIGINT),
]


async def signalled_in_start_up(
    where: str, flags: tuple[str, ...], signum: signal.Signals
) -> asyncio.subprocess.Process:
    """`mcp-gateway run` held in start-up at `where`, sent `signum` there, then let go on."""
    gateway = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HELD_IN_START_UP,
        where,
        "run",
        "--port",
        str(free_port()),
        *flags,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await line_matching(gateway.stdout, re.compile(rb"^starting up"))
        gateway.send_signal(signum)  # pending before the line below lets start-up go on
        assert gateway.stdin is not None
        gateway.stdin.write(b"\n")
        await gateway.stdin.drain()
    except BaseException:
        gateway.kill()
        await gateway.wait()
        raise
    return gateway


@pytest.mark.parametrize(
    ("where", "flags", "signum"),
    STOPS,
    ids=[
        "sim-control-sigterm",
        "sim-control-sigint",
        "listener-sigterm",
        "listener-sim-sigterm",
        "config-sigterm",
        "config-sigint",
    ],
)
async def test_a_signal_during_start_up_stops_the_gateway_cleanly_with_exit_0(
    where: str, flags: tuple[str, ...], signum: signal.Signals
) -> None:
    gateway = await signalled_in_start_up(where, flags, signum)
    try:
        code = await asyncio.wait_for(gateway.wait(), 10)
        assert gateway.stderr is not None
        err = (await gateway.stderr.read()).decode()
        assert code == 0, err
        assert "Traceback" not in err
        assert "stopped" in err
        assert "attached over WebSocket" not in err  # no pump is started once the gateway is stopping
    finally:
        if gateway.returncode is None:
            gateway.kill()
            await gateway.wait()


@pytest.mark.parametrize("where", ["config", "listener"])
async def test_a_sighup_during_start_up_reloads_once_the_gateway_is_up(where: str) -> None:
    # Not the default action (killed, 129): the configuration is read again once the gateway is up,
    # as a SIGHUP to a running gateway does, and the gateway goes on serving.
    gateway = await signalled_in_start_up(where, (), signal.SIGHUP)
    try:
        await line_matching(gateway.stderr, re.compile(rb"SIGHUP during start-up"))
        await line_matching(gateway.stderr, re.compile(rb"configuration reloaded from .*: nothing changed"))
        assert gateway.returncode is None
        gateway.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(gateway.wait(), 10) == 0
    finally:
        if gateway.returncode is None:
            gateway.kill()
            await gateway.wait()
