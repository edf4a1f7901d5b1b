"""Serial framing against JSON, and pump-1 over a pseudo-terminal against the same pump over WebSocket.

    python -m bench.serial            # framing, then 5 rounds of 400 calls per path and era; about 25 s
    python -m bench.serial --quick    # smoke run, a few seconds (figures not meaningful)

Framing, in this process (no I/O): three messages pump-1 and the gateway exchange, made by the pump's
own code (the simulator's dispatcher over device/schemas/pump-1.json): the gateway's `tools/call` of
`get_status`; its answer (structuredContent plus the same object as text, from the board's result
helper, for a running pump); the largest `tools/list` page the pump sends (the board pages at its
4096-byte frame cap, one tool a page). Per message, timeit loops of encode + decode:
- orjson: `orjson.dumps` + `orjson.loads`, the gateway's codec (gateway/core/jsonrpc.py);
- stdlib json: `JSONEncoder.encode(...).encode()` + `json.loads`, a second baseline;
- framing: `framing.wire_bytes` (a 0x00, then `encode_frame`: COBS of the JSON and its CRC-32, a
  0x00) + `FrameDecoder.feed` of those bytes in one read: what the gateway's serial port adds to
  the JSON of each message it writes and reads;
- the same, fed in 64-byte reads (a USB full-speed packet: what a USB serial adapter or an ESP32's
  USB-Serial/JTAG hands over at a time).
Repeats rotate the order; each figure is the median over the repeats, each ratio the median of the
per-repeat ratios.

Round trip, processes on loopback: a simulator with pump-2 on a new pseudo-terminal (`sim
--serial-pty --first 2`), the gateway serving that PTY (`python -m gateway.cli run --serial <pty>`),
a simulator with pump-1 over WebSocket (`sim --gateway`), and one SDK client per path and era in
this process. The call is `get_status` (no side effects), timed from `call_tool` to its parsed
result. A PTY has no baud rate, so the line adds no transmission time (a UART at 115200 baud would
add tens of milliseconds: the note under the framing table). Rounds alternate which path goes
first; each figure is the median over rounds, the ratio serial ÷ WebSocket the median of the
per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import signal
import sys
import timeit
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
from cobs import cobs
from mcpdevice import results

from bench.ports import free_port
from bench.processes import PUMP_TOOL, Child, gateway_env, start_simulator, wait_healthy, wait_slot_ready
from bench.pump_rounds import (
    LATENCY_ROWS,
    Figures,
    RoundOptions,
    add_round_arguments,
    all_rounds,
    round_options,
)
from bench.pump_rounds import render as render_rounds
from bench.report import markdown_table, median, round_ratios, spread
from gateway.southbound.serial import framing
from sim import firmware
from sim.pump import PumpSettings, SimulatedPump

REPO = Path(__file__).resolve().parent.parent
PATHS = {"websocket": "pump-1", "serial": "pump-2"}
PATH_LABELS = {"websocket": "websocket", "serial": "serial (pty)"}
SIM_ARGS = {"websocket": ["--first", "1"], "serial": ["--first", "2", "--serial-pty"]}
PTY_LINE = re.compile(r"serve it with: mcp-gateway run --serial (\S+)")
READ_BYTES = 64
BAUDS = (115_200, 921_600)
REQUEST_ID = "brk-1042"  # the gateway's own request ids are "brk-<n>" (integers for a provider that needs them)
RUNNING_STATUS = {
    "state": "running",
    "speed_rpm": 1450,
    "setpoint_rpm": 1450,
    "flow_lpm": 60.03,
    "pressure_bar": 1.0,
    "motor_temp_c": 41.7,
    "run_hours": 12.345,
    "fault": None,
    "uptime_s": 44_444,
}
"""get_status of a pump that has been running for a while (a fresh simulator's reads all zeros)."""


MAX_MIN_TIME_S = 60.0
"""The longest --min-time: each message and codec runs its loops that long, every repeat."""


@dataclass
class Options(RoundOptions):
    repeats: int
    min_time: float


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.serial", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, help="framing: repeats per message and codec (default 7; quick 3)")
    parser.add_argument(
        "--min-time", type=float, help="framing: seconds each timed loop runs at least (default 0.05; quick 0.005)"
    )
    add_round_arguments(parser, "round trip: alternating rounds")
    parser.add_argument("--quick", action="store_true", help="a smoke run: short loops, 1 round of 20 calls")
    args = parser.parse_args(argv)
    options = Options(
        **vars(round_options(parser, args)),
        repeats=args.repeats if args.repeats is not None else (3 if args.quick else 7),
        min_time=args.min_time if args.min_time is not None else (0.005 if args.quick else 0.05),
    )
    if options.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {options.repeats}")
    if not 0 < options.min_time <= MAX_MIN_TIME_S:
        parser.error(f"--min-time must be over 0 and at most {MAX_MIN_TIME_S:g} s, not {options.min_time}")
    return options


# -- framing: in this process ---------------------------------------------------------------------


def ask(pump: SimulatedPump, method: str, params: dict[str, Any]) -> tuple[bytes, bytes]:
    """(the request as the gateway serialises it, the pump's answer as the pump serialises it)."""
    request = orjson.dumps({"jsonrpc": "2.0", "id": REQUEST_ID, "method": method, "params": params})
    answer = pump.handle(request)
    if answer is None:
        raise RuntimeError(f"pump-1 did not answer {method}")
    return request, answer


def pump_messages() -> dict[str, bytes]:
    """The three messages, serialised as the gateway sends and receives them (compact JSON, UTF-8)."""
    pump = SimulatedPump("pump-1", firmware.load_registry(firmware.schema_file()), PumpSettings())
    ask(pump, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench"}})
    request, answer = ask(pump, "tools/call", {"name": PUMP_TOOL, "arguments": {}})
    answered = orjson.loads(answer)
    status = {**answered["result"]["structuredContent"], **RUNNING_STATUS}
    if status.keys() != answered["result"]["structuredContent"].keys():
        raise RuntimeError(f"pump-1's get_status no longer has the keys this benchmark fills: {answered!r}"[:300])
    answer = orjson.dumps({"jsonrpc": "2.0", "id": REQUEST_ID, "result": results.ok(status)})
    pages = [ask(pump, "tools/list", {})[1]]
    while (cursor := orjson.loads(pages[-1])["result"].get("nextCursor")) is not None:
        pages.append(ask(pump, "tools/list", {"cursor": cursor})[1])
    largest = max(pages, key=len)
    tool = orjson.loads(largest)["result"]["tools"][0]["name"]
    return {
        "tools/call get_status (request)": request,
        "get_status answer": answer,
        f"tools/list page ({tool})": largest,
    }


CODECS = {
    "orjson": "loads(dumps(value))",
    "json": "json_loads(json_encode(value).encode())",
    "framing": "feed(wire_bytes(raw))",
    "framing_reads": "wire_bytes(raw)\nfor piece in pieces:\n    feed(piece)",
}
"""What each timed loop runs per message: encode then decode, as the gateway does for one message."""


def codec_timers(raw: bytes) -> dict[str, timeit.Timer]:
    """One timer per codec, each framing loop with its own decoder (the port's, reused frame after frame)."""
    wire = framing.wire_bytes(raw)
    pieces = [wire[i : i + READ_BYTES] for i in range(0, len(wire), READ_BYTES)]
    timers: dict[str, timeit.Timer] = {}
    for codec, statement in CODECS.items():
        decoder = framing.FrameDecoder()
        delivered = [
            message for piece in (pieces if codec == "framing_reads" else [wire]) for message in decoder.feed(piece)
        ]
        if delivered != [raw] or decoder.dropped_total:
            raise RuntimeError(f"the frame of {raw[:60]!r} did not decode to its message")
        scope = {
            "loads": orjson.loads,
            "dumps": orjson.dumps,
            "json_loads": json.loads,
            "json_encode": json.JSONEncoder(separators=(",", ":")).encode,  # json.dumps would build one a call
            "value": orjson.loads(raw),
            "raw": raw,
            "wire_bytes": framing.wire_bytes,
            "feed": decoder.feed,
            "pieces": pieces,
        }
        timers[codec] = timeit.Timer(statement, globals=scope)
    return timers


def loops_for(timer: timeit.Timer, min_time: float) -> int:
    """Loops per timing that run at least `min_time` seconds (1, 2, 5, 10, 20, 50, ...)."""
    number = 1
    while True:
        for step in (1, 2, 5):
            if timer.timeit(number * step) >= min_time:
                return number * step
        number *= 10


# framing[message][codec] -> ns per message, one value per repeat
Framing = dict[str, dict[str, list[float]]]


def measure_framing(messages: dict[str, bytes], options: Options) -> Framing:
    figures: Framing = defaultdict(lambda: defaultdict(list))
    codecs = list(CODECS)
    for name, raw in messages.items():
        timers = codec_timers(raw)
        loops = {codec: loops_for(timer, options.min_time) for codec, timer in timers.items()}
        for index in range(options.repeats):
            for codec in codecs[index % len(codecs) :] + codecs[: index % len(codecs)]:
                figures[name][codec].append(timers[codec].timeit(loops[codec]) / loops[codec] * 1e9)
    return figures


def render_framing(figures: Framing, messages: dict[str, bytes]) -> str:
    header = [
        "message",
        "JSON (B)",
        "wire (B)",
        "orjson (ns)",
        "stdlib json (ns)",
        "framing (ns)",
        f"framing, {READ_BYTES} B reads (ns)",
        "framing/orjson",
        f"{READ_BYTES} B reads/orjson",
        "framing/stdlib",
        "ranges",
    ]
    lines: list[list[str]] = []
    for name, raw in messages.items():
        values = figures[name]
        pairs = (("framing", "orjson"), ("framing_reads", "orjson"), ("framing", "json"))
        ratios = [round_ratios(values[codec], values[baseline]) for codec, baseline in pairs]
        lines.append(
            [
                name,
                f"{len(raw):,}",
                f"{len(framing.wire_bytes(raw)):,}",
                *(f"{median(values[codec]):,.0f}" for codec in CODECS),
                *(f"{median(per_repeat):.2f}x" for per_repeat in ratios),
                " / ".join(spread(per_repeat) for per_repeat in ratios).strip(" /"),
            ]
        )
    return markdown_table(header, lines)


def wire_time_note(messages: dict[str, bytes]) -> str:
    request, answer = (len(framing.wire_bytes(raw)) for raw in list(messages.values())[:2])
    times = ", ".join(f"{(request + answer) * 10 / baud * 1000:.1f} ms at {baud} baud" for baud in BAUDS)
    return (
        f"On a real UART (8N1, 10 bits a byte) the {request} + {answer} wire bytes of one get_status call "
        f"alone take {times}; a PTY has no baud rate, so the round trip below has none of that."
    )


# -- round trip: processes ------------------------------------------------------------------------


class Stack:
    """The PTY simulator, the gateway serving its PTY, and the WebSocket simulator, each its own process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.children: dict[str, Child] = {}
        self.pty = ""

    async def start(self) -> None:
        # The PTY exists before the gateway starts: `run --serial` names it.
        line = await self._simulator("serial", [])
        found = PTY_LINE.search(line)
        if found is None:
            raise RuntimeError(f"the serial simulator printed no pseudo-terminal: {line!r}")
        self.pty = found.group(1)
        run = ["-m", "gateway.cli", "run", "--port", str(self.port), "--serial", self.pty]
        self.children["gateway"] = Child("gateway", run, REPO, env=gateway_env())
        await wait_healthy(f"{self.url}/readyz", self.children["gateway"])
        await self._simulator("websocket", ["--gateway", self.url])
        for slot in PATHS.values():
            await wait_slot_ready(self.url, slot)

    async def _simulator(self, path: str, target: list[str]) -> str:
        self.children[path], line = await start_simulator(path, [*target, *SIM_ARGS[path]], REPO)
        return line

    def stop(self) -> None:
        # The gateway closes its end of the PTY before the simulator that owns the PTY goes.
        for child in reversed(list(self.children.values())):
            child.stop()


ROWS = (
    *LATENCY_ROWS,
    ("cpu_gateway", "CPU per call, gateway", "us"),
    ("cpu_pump", "CPU per call, pump process", "us"),
)


def render_round_trip(figures: Figures, modes: Sequence[str]) -> str:
    return render_rounds(figures, modes, ROWS, PATH_LABELS, (("serial", "websocket", "ratio serial/ws"),))


async def round_trip(options: Options) -> Figures:
    # SIGTERM cancels the run as Ctrl-C does, so the `finally` below stops every process it started.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    stack = Stack()
    try:
        await stack.start()
        return await all_rounds(
            options,
            list(PATHS),
            lambda path: f"{stack.url}/{PATHS[path]}/mcp",
            lambda path: {"cpu_gateway": stack.children["gateway"].pid, "cpu_pump": stack.children[path].pid},
        )
    finally:
        stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    today = datetime.date.today().isoformat()
    versions = (
        f"Python {platform.python_version()}, orjson {version('orjson')}, cobs {version('cobs')} "
        f"({'C extension' if cobs._using_extension else 'pure Python'}), {os.cpu_count()} cores"
    )
    messages = pump_messages()
    framing_figures = measure_framing(messages, options)
    print(
        f"serial framing vs JSON, encode + decode per message: median of {options.repeats} repeats, {today}, {versions}"
    )
    print(render_framing(framing_figures, messages))
    print(wire_time_note(messages))
    print(flush=True)
    try:
        figures = asyncio.run(round_trip(options))
    except asyncio.CancelledError:
        print("bench.serial: stopped (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    print(
        f"pump-1 over a PTY vs WebSocket: {options.rounds} rounds x {options.calls} calls of {PUMP_TOOL} "
        f"per path and era, {today}, {versions}"
    )
    print(render_round_trip(figures, options.modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
