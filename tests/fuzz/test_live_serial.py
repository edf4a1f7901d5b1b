"""Live fuzzing of the serial way in (docs/protocol-serial-mqtt.md, "Serial way in") over real pseudo-terminals.

The gateway serves two ports, opened by path as it opens /dev/ttyUSB0: one framed only, one with
`debug_json_lines`. Each example writes one burst on one of them, as anyone on the cable can: frames
of any JSON (register frames naming slots or none, envelopes, bare JSON-RPC, responses to the
gateway's own requests, garbage), frames of bytes that are not JSON, frames at the port's cap,
console text and typed JSON lines, damaged frames, binary noise, long runs without a delimiter. The
test side of each line reads everything the gateway writes, as a board would.

What must hold: the gateway reads and handles the whole burst within 10 s (nothing hangs); no
exception escapes a handler or a task; the port stays open (noise never closes it) and holds no more
than its cap; everything the gateway writes on the line is a whole frame (CRC intact) of one JSON
object. Afterwards a good board registers on each port and an SDK client calls its tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from gateway.core.request_ids import LINGERING_MEDIA
from gateway.southbound.serial import framing
from gateway.southbound.serial.ports import SerialPort
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.live import READ_TIMEOUT_S, LiveGateway
from tests.fuzz.targets import LinePiece, line_pieces
from tests.support.serial_ports import FramedBoard, PtyPair

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

FRAME_CAP = 1024
PORTS = ("framed", "debug")


def framed(value: Any) -> LinePiece:
    message = fz.dumps(value)
    return LinePiece("frame", message, framing.wire_bytes(message))


ASKED = {"brk-next": 0, "brk-following": 1, "brk-latest": -1}
"""Placeholder ids and where the request they stand for lies from the gateway's next request number."""


def aimed(piece: LinePiece) -> LinePiece:
    """`piece` with its placeholder ids naming the gateway's request numbers as they stand now: a line
    numbers its requests from one process-wide sequence (gateway/core/request_ids.py), so a burst that
    registers a slot and answers `brk-next` answers that slot's initialize."""
    text = piece.wire if piece.message is None else piece.message
    if not any(placeholder.encode() in text for placeholder in ASKED):
        return piece
    upcoming = LINGERING_MEDIA.upcoming
    for placeholder, offset in ASKED.items():
        text = text.replace(f'"{placeholder}"'.encode(), f'"brk-{upcoming + offset}"'.encode())
    if piece.message is None:
        return LinePiece(piece.kind, None, text)
    wire = framing.wire_bytes(text) if piece.kind == "frame" else framing.encode_frame(text)
    return LinePiece(piece.kind, text, wire)


serial_slots = st.sampled_from(("fz-a", "fz-b", "pump-1", "_x", "", "a/b", "x" * 65, "é"))
registrations = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "method": st.just("notifications/register"),
        "params": st.fixed_dictionaries(
            {}, optional={"slot": st.one_of(serial_slots, fz.json_values), "aggregate": fz.json_values}
        ),
    }
)
board_messages = st.one_of(
    registrations,
    st.fixed_dictionaries(
        {"provider": st.one_of(serial_slots, fz.slot_names), "payload": st.one_of(registrations, fz.jsonrpc_messages)}
    ),
    # Answers to what the gateway asked, right and wrong: placeholders name its next, following or
    # latest request (`aimed`), the others ids it never sent.
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": st.sampled_from((*ASKED, "brk-1", 1))},
        optional={"result": fz.json_values, "error": fz.errors},
    ),
    fz.messages,
)


def typed(value: Any) -> LinePiece:
    """A message typed as one line (what debug_json_lines takes; a framed port drops it as text)."""
    return LinePiece("noise", None, fz.dumps(value) + b"\r\n")


bursts = st.lists(
    st.one_of(
        board_messages.map(framed),
        board_messages.map(typed),
        line_pieces,
        fz.line_noise().map(lambda noise: LinePiece("noise", None, noise)),
        st.integers(FRAME_CAP - 2, FRAME_CAP + 2)
        .map(fz.padded)
        .map(lambda message: LinePiece("frame", message, framing.wire_bytes(message))),
    ),
    min_size=1,
    max_size=6,
)


class LineSide:
    """The test's end of one line: reads what the gateway writes and checks every frame."""

    def __init__(self, pair: PtyPair) -> None:
        self.pair = pair
        self.decoder = framing.FrameDecoder(1 << 20)
        self.problems: list[str] = []
        self.frames = 0

    def start(self) -> None:
        asyncio.get_running_loop().add_reader(self.pair.master, self._readable)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.pair.master)

    def _readable(self) -> None:
        try:
            data = os.read(self.pair.master, 65536)
        except (BlockingIOError, OSError):
            return
        for payload in self.decoder.feed(data):
            self.frames += 1
            try:
                value = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.problems.append(f"the gateway wrote a frame that is not JSON: {payload[:80]!r}")
                continue
            if not isinstance(value, dict):
                self.problems.append(f"the gateway wrote a frame that is not an object: {payload[:80]!r}")
        if self.decoder.dropped_total:
            self.problems.append(f"the gateway wrote bytes that are not whole frames: {self.decoder.dropped}")

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.pair.master, view)
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            view = view[written:]


@dataclass
class Line:
    pair: PtyPair
    side: LineSide
    port: SerialPort
    handled: int = 0


@dataclass
class SerialRig:
    live: LiveGateway
    lines: dict[str, Line]


def watch(line: Line) -> None:
    """Count the messages the port has handled (its reader hands them to `_message` one by one)."""
    handle = line.port._message

    async def counted(data: bytes) -> None:
        try:
            await handle(data)
        finally:
            line.handled += 1

    line.port._message = counted  # type: ignore[method-assign]


async def set_up(rig: SerialRig) -> None:
    for line in rig.lines.values():
        line.side.start()
        watch(line)
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            if line.port.state == "open":
                break
            assert asyncio.get_running_loop().time() < deadline, f"{line.pair.path}: {line.port.last_error}"
            await asyncio.sleep(0.01)


async def play(rig: SerialRig, port: str, burst: list[LinePiece]) -> None:
    line = rig.lines[port]
    counters = line.port.counters
    data = b"".join(aimed(piece).wire for piece in burst)
    expected_bytes = counters.bytes_in + len(data)
    failures = counters.failures
    await line.side.write(data)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    while counters.bytes_in < expected_bytes or line.handled + counters.backlog < counters.frames_in:
        assert loop.time() < deadline, (
            f"port {port}: {counters.bytes_in}/{expected_bytes} bytes read, {line.handled} of "
            f"{counters.frames_in} messages handled after {READ_TIMEOUT_S}s"
        )
        await asyncio.sleep(0.002)
    assert line.port.state == "open" and counters.failures == failures, line.port.last_error
    assert line.port.decoder.buffered <= line.port.decoder.encoded_cap
    assert not line.side.problems, line.side.problems[0]


async def good_boards_are_served(rig: SerialRig) -> None:
    for name, line in rig.lines.items():
        line.side.stop()
        board = FramedBoard(line.pair)
        try:
            slot = f"after-fuzz-{name}"
            board.register(slot)
            await rig.live.wait_ready(slot)
            async with Client(f"{rig.live.url}/{slot}/mcp", mode="2026-07-28") as client:
                result = await client.call_tool("echo", {"text": "still here"})
            assert not result.is_error and "still here" in str(result.content)
        finally:
            board.stop()


@pytest.fixture(scope="module")
def rig() -> Iterator[SerialRig]:
    pairs = {name: PtyPair() for name in PORTS}
    config = {
        "limits": {"max_slots": 4096},
        "providers": {"initialize_timeout_ms": 1000, "takeover_probe_ms": 100},
        "serial": {
            "ports": [
                {"path": pairs["framed"].path, "frame_cap": FRAME_CAP},
                {"path": pairs["debug"].path, "frame_cap": FRAME_CAP, "debug_json_lines": True},
            ],
            "retry_initial_s": 0.05,
            "retry_max_s": 0.3,
        },
    }
    try:
        with LiveGateway(config) as live:
            assert live.server is not None and live.server.serial is not None
            ports = live.server.serial.ports
            lines = {name: Line(pair, LineSide(pair), ports[pair.path]) for name, pair in pairs.items()}
            rig = SerialRig(live, lines)
            live.run(set_up(rig))
            yield rig
            for line in lines.values():
                line.side.stop()
    finally:
        for pair in pairs.values():
            pair.close()


def test_no_burst_on_a_serial_line_breaks_the_port(rig: SerialRig) -> None:
    live = rig.live

    @fuzz_settings(150, deadline=None)
    @given(port=st.sampled_from(PORTS), burst=bursts)
    def fuzz(port: str, burst: list[LinePiece]) -> None:
        tally("live.serial (pseudo-terminals)")
        tally("live.serial frames and noise", len(burst))
        live.run(play(rig, port, burst))
        assert not live.all_crashes(), live.all_crashes()[0]

    fuzz()
    live.run(good_boards_are_served(rig), timeout=60)
    assert not live.all_crashes(), live.all_crashes()[0]
