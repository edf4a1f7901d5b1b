"""pump-1 through the gateway over MQTT (each profile) against the same pump over WebSocket, in one run.

    python -m bench.mqtt            # 5 rounds of 400 calls per path and era, well under a minute
    python -m bench.mqtt --quick    # smoke run, a few seconds (figures not meaningful)

Processes on free loopback ports: mosquitto (the Debian package, persistence off), the gateway
(`python -m gateway.cli run --mqtt mqtt://127.0.0.1:<port>`), and three simulators running the same
pump code: pump-1 over WebSocket (`sim --gateway`), pump-2 over the plain profile (`sim --mqtt
--profile plain`, MQTT 3.1.1) and pump-3 over MCP over MQTT (`sim --mqtt --profile mcp`, MQTT 5). The
benchmark holds one SDK client per path. The call is `get_status` (no side effects), timed from
`call_tool` to its parsed result; an MQTT call crosses the broker twice (request and answer) where
the WebSocket call goes straight to the pump. Rounds rotate which path goes first; each figure is
the median over rounds, each ratio path ÷ WebSocket the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.ports import free_port
from bench.processes import (
    PUMP_TOOL,
    Child,
    gateway_env,
    run_interruptible,
    start_simulator,
    stop_process,
    wait_healthy,
    wait_slot_ready,
)
from bench.pump_rounds import (
    LATENCY_ROWS,
    Figures,
    RoundOptions,
    add_round_arguments,
    all_rounds,
    round_options,
)
from bench.pump_rounds import render as render_rounds

REPO = Path(__file__).resolve().parent.parent
PATHS = {"websocket": "pump-1", "mqtt plain": "pump-2", "mqtt mcp": "pump-3"}
SIM_ARGS = {
    "websocket": ["--first", "1"],
    "mqtt plain": ["--first", "2", "--profile", "plain"],
    "mqtt mcp": ["--first", "3", "--profile", "mcp"],
}


def parse_options(argv: Sequence[str] | None) -> RoundOptions:
    parser = argparse.ArgumentParser(prog="python -m bench.mqtt", description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, "rounds, each path once per era")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 20 calls")
    return round_options(parser, parser.parse_args(argv))


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or next(
        (path for path in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(path, os.X_OK)), None
    )
    if found is None:
        raise SystemExit("bench.mqtt: mosquitto is not installed (scripts/bootstrap test installs it)")
    return found


class Broker:
    """mosquitto on a free loopback port (anonymous, persistence off), its log in `work`; start()
    again after stop() brings it back on the same port, as a restarted broker would."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        config = self.work / "mosquitto.conf"
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "persistence false"]
        lines.append("set_tcp_nodelay true")
        if os.geteuid() == 0:
            lines.append("user root")
        config.write_text("\n".join(lines) + "\n")
        with (self.work / "mosquitto.log").open("ab") as log:
            self.process = subprocess.Popen(
                [mosquitto_binary(), "-c", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None


class Stack:
    """mosquitto, the gateway and one simulator per path, each its own process."""

    def __init__(self, work: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.broker = Broker(work)
        self.children: dict[str, Child] = {}

    async def start(self) -> None:
        self.broker.start()
        run = ["-m", "gateway.cli", "run", "--port", str(self.port), "--mqtt", self.broker.url]
        self.children["gateway"] = Child("gateway", run, REPO, env=gateway_env())
        await wait_healthy(f"{self.url}/readyz", self.children["gateway"])
        for path, extra in SIM_ARGS.items():
            target = ["--gateway", self.url] if path == "websocket" else ["--mqtt", self.broker.url]
            self.children[path], _ = await start_simulator(path, [*target, *extra], REPO)
        for slot in PATHS.values():
            await wait_slot_ready(self.url, slot)

    def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            child.stop()
        self.broker.stop()


ROWS = (*LATENCY_ROWS, ("cpu_gateway", "CPU per call, gateway", "us"))
RATIOS = (("mqtt plain", "websocket", "ratio plain/ws"), ("mqtt mcp", "websocket", "ratio mcp/ws"))


def render(figures: Figures, modes: Sequence[str]) -> str:
    return render_rounds(figures, modes, ROWS, {path: path for path in PATHS}, RATIOS)


async def run(options: RoundOptions) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            await stack.start()
            return await all_rounds(
                options,
                list(PATHS),
                lambda path: f"{stack.url}/{PATHS[path]}/mcp",
                lambda path: {"cpu_gateway": stack.children["gateway"].pid},
            )
        finally:
            stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    figures = run_interruptible(run(options), "bench.mqtt interrupted")
    if figures is None:
        return 130
    today = datetime.date.today().isoformat()
    print(
        f"pump-1 over MQTT vs WebSocket: {options.rounds} rounds x {options.calls} calls of {PUMP_TOOL} "
        f"per path and era, {today}, Python {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(render(figures, options.modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
