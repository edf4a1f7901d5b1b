"""pump-1 through the gateway: the MicroPython board (Unix port) against the simulator, same call.

    python -m bench.pump_paths            # 5 rounds of 400 calls per path and era, about 15 s
    python -m bench.pump_paths --quick    # smoke run, a few seconds (figures not meaningful)

Four processes on free loopback ports: the gateway (`python -m gateway.cli run`), pump-1 as the
MicroPython provider on the Unix port (`micropython -X heapsize=96K device/micropython/main.py`,
simulated hardware), and pump-2 from the simulator (`python -m gateway.cli sim --first 2`); the
benchmark process holds one SDK client per path. Both pumps run the same pump code and list the
same tools, so what differs is the runtime and the transport code: MicroPython with the device's own
WebSocket client against CPython with aiohttp. The call is `get_status` (no side effects), timed from
`call_tool` to the parsed result. Rounds alternate which path goes first; each figure is the median
over rounds, the ratio is board / simulator as the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson

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
DEVICE_DIR = REPO / "device" / "micropython"
SCHEMA_FILE = REPO / "device" / "schemas" / "pump-1.json"
PATHS = {"board": "pump-1", "simulator": "pump-2"}


def parse_options(argv: Sequence[str] | None) -> RoundOptions:
    parser = argparse.ArgumentParser(prog="python -m bench.pump_paths", description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, "alternating board/simulator rounds")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 20 calls")
    args = parser.parse_args(argv)
    return round_options(parser, args)


def micropython() -> str:
    beside = Path(sys.executable).parent / "micropython"
    return str(beside) if beside.exists() else "micropython"


class Stack:
    """The gateway, the board on the Unix port and the simulator, each its own process."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.children: list[Child] = []
        self.board: subprocess.Popen[bytes] | None = None
        self.board_log = work / "board.log"

    @property
    def gateway(self) -> Child:
        return self.children[0]

    @property
    def simulator(self) -> Child:
        return self.children[1]

    def pid(self, path: str) -> int:
        if path == "board":
            assert self.board is not None
            return self.board.pid
        return self.simulator.pid

    async def start(self) -> None:
        run = ["-m", "gateway.cli", "run", "--port", str(self.port)]
        self.children.append(Child("gateway", run, REPO, env=gateway_env()))
        await wait_healthy(f"{self.url}/readyz", self.gateway)
        await asyncio.to_thread(self._launch_board)
        simulator, _ = await start_simulator("simulator", ["--gateway", self.url, "--first", "2"], REPO)
        self.children.append(simulator)
        for slot in PATHS.values():
            await self._wait_slot_ready(slot)

    def _launch_board(self) -> None:
        config = self.work / "board.json"
        config.write_bytes(orjson.dumps({"gateway_url": self.url, "schema_path": str(SCHEMA_FILE), "slot": "pump-1"}))
        with self.board_log.open("wb") as log:
            self.board = subprocess.Popen(
                [micropython(), "-X", "heapsize=96K", str(DEVICE_DIR / "main.py"), "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "MICROPYPATH": f".frozen:{DEVICE_DIR}"},
            )

    async def _wait_slot_ready(self, slot: str) -> None:
        try:
            await wait_slot_ready(self.url, slot)
        except RuntimeError as exc:
            board = self.board_log.read_text(errors="replace")[-2000:] if slot == "pump-1" else ""
            raise RuntimeError(f"{exc}\n{board}") from None

    def stop(self) -> None:
        if self.board is not None:
            stop_process(self.board)
        for child in reversed(self.children):
            child.stop()


ROWS = (
    *LATENCY_ROWS,
    ("cpu_device", "CPU per call, pump process", "us"),
    ("cpu_gateway", "CPU per call, gateway", "us"),
)
COLUMNS = {"board": "board (MicroPython)", "simulator": "simulator (CPython)"}
RATIOS = (("board", "simulator", "ratio board/sim"),)


def render(figures: Figures, modes: Sequence[str]) -> str:
    return render_rounds(figures, modes, ROWS, COLUMNS, RATIOS)


async def run(options: RoundOptions) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            await stack.start()
            return await all_rounds(
                options,
                ("board", "simulator"),
                lambda path: f"{stack.url}/{PATHS[path]}/mcp",
                lambda path: {"cpu_gateway": stack.gateway.pid, "cpu_device": stack.pid(path)},
            )
        finally:
            stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    figures = run_interruptible(run(options), "bench.pump_paths interrupted")
    if figures is None:
        return 130
    today = datetime.date.today().isoformat()
    print(
        f"pump-1 through the gateway, board vs simulator: {options.rounds} rounds x {options.calls} calls of "
        f"{PUMP_TOOL} per path and era, {today}, Python {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(render(figures, options.modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
