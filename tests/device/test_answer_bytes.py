"""The real board's answers are the simulator's, byte for byte: the MicroPython Unix port (96 KB heap)
and the simulator (the board's code under CPython) each on a link to a scripted gateway, asked the
same frames in the same states, their answer frames compared as they arrive.

Both runtimes must write every object with the same key order (MicroPython's dict iterates in hash
order, CPython's in insertion order), in the status object's text and in its structuredContent alike.
Only the readings that depend on how long each pump has been up (uptime_s, run_hours,
motor_temp_c) are masked; everything else, numbers included, must match.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.device.conftest import DeviceFactory
from tests.device.harness import Device, FakeGateway, FakeLink

DEADMAN_S = 3
TIMED = re.compile(rb'("(?:uptime_s|run_hours|motor_temp_c)\\?"):-?[0-9.e+-]+')


def masked(frame: bytes) -> bytes:
    """The frame with the readings that depend on each pump's own clock replaced by a mark."""
    return TIMED.sub(rb"\1:#", frame)


def call(request_id: str, tool: str, arguments: dict[str, Any] | None = None) -> bytes:
    params = {"name": tool, "arguments": arguments or {}}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


@pytest.fixture
async def simulator(fake_gateway: FakeGateway) -> AsyncIterator[Simulator]:
    settings = SimulatorSettings(pumps=1, pump=PumpSettings(deadman_s=DEADMAN_S), backoff_min_s=0.05, backoff_max_s=0.2)
    simulator = Simulator(fake_gateway.url, settings)
    simulator.start()
    yield simulator
    await simulator.stop()


class Pair:
    """The board's link and the simulator's, asked the same frames."""

    def __init__(self, board: FakeLink, sim: FakeLink) -> None:
        self.board = board
        self.sim = sim

    async def ask(self, frame: bytes) -> tuple[bytes, bytes]:
        board_text, _ = await self.board.exchange(frame)
        sim_text, _ = await self.sim.exchange(frame)
        return board_text.encode(), sim_text.encode()

    async def same(self, frame: bytes, mask: bool = True) -> Any:
        """Both answer `frame` with the same bytes (timed readings masked); the board's answer."""
        board, sim = await self.ask(frame)
        compared = (masked(board), masked(sim)) if mask else (board, sim)
        assert compared[0] == compared[1], f"for {frame!r}\nboard:     {board!r}\nsimulator: {sim!r}"
        return orjson.loads(board)

    async def status_until(self, state: str, speed_rpm: int) -> None:
        """get_status on both until both pumps are in `state` at `speed_rpm` (each call is contact)."""
        for number in range(400):
            board, sim = await self.ask(call(f"poll-{number}", "get_status"))
            statuses = [orjson.loads(text)["result"]["structuredContent"] for text in (board, sim)]
            if all(status["state"] == state and status["speed_rpm"] == speed_rpm for status in statuses):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the pumps never reached {state} at {speed_rpm} rpm: {statuses}")


async def links(fake_gateway: FakeGateway) -> tuple[FakeLink, FakeLink]:
    """The two links that dialled the scripted gateway, told apart by their hello."""
    accepted = [await fake_gateway.accept(timeout=15), await fake_gateway.accept(timeout=15)]
    by_device = {link.first_frame["params"]["hello"]["device_id"]: link for link in accepted}  # type: ignore[index]
    return by_device["unix-pump-1"], by_device["sim-pump-1"]


async def test_the_board_answers_every_call_with_the_simulators_bytes(
    devices: DeviceFactory, fake_gateway: FakeGateway, simulator: Simulator
) -> None:
    board_device: Device = await devices(fake_gateway.url, deadman_s=DEADMAN_S)
    board, sim = await links(fake_gateway)
    pair = Pair(board, sim)
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
    answer = await pair.same(
        orjson.dumps({"jsonrpc": "2.0", "id": "brk-1", "method": "initialize", "params": initialize}), mask=False
    )
    assert list(answer) == ["jsonrpc", "id", "result"]
    for link in (board, sim):
        await link.ws.send_str('{"jsonrpc":"2.0","method":"notifications/initialized"}')

    status = (await pair.same(call("brk-2", "get_status")))["result"]
    assert list(status) == ["content", "structuredContent"]
    assert list(status["content"][0]) == ["type", "text"]
    keys = ["state", "speed_rpm", "setpoint_rpm", "flow_lpm", "pressure_bar", "motor_temp_c", "run_hours", "fault"]
    assert list(status["structuredContent"]) == [*keys, "uptime_s"]
    assert list(orjson.loads(status["content"][0]["text"])) == [*keys, "uptime_s"]

    assert (await pair.same(call("brk-3", "start", {"speed_rpm": 1200})))["result"]["structuredContent"]["state"] == (
        "starting"
    )
    refusal = (await pair.same(call("brk-4", "start", {"speed_rpm": 5000}), mask=False))["result"]
    assert list(refusal) == ["content", "isError"]
    error = await pair.same(call("brk-5", "nope"), mask=False)
    assert list(error) == ["jsonrpc", "id", "error"]
    assert list(error["error"]) == ["code", "message"]

    await pair.status_until("running", 1200)
    stopping = (await pair.same(call("brk-6", "stop")))["result"]["structuredContent"]
    assert (stopping["state"], stopping["speed_rpm"], stopping["flow_lpm"]) == ("stopping", 1200, 49.7)
    await pair.status_until("stopped", 0)

    # A latched fault: both dead-men stop a pump that hears nothing while it turns.
    await pair.same(call("brk-7", "start", {"speed_rpm": 300}))
    sim_pump = simulator.pumps["pump-1"]
    await wait_for(lambda: sim_pump.controller.fault is not None, DEADMAN_S + 10, "the simulator's dead-man")
    await board_device.wait_event("fault", timeout=DEADMAN_S + 10, code="link_lost")
    await pair.status_until("fault", 0)
    fault = (await pair.same(call("brk-8", "get_status")))["result"]["structuredContent"]["fault"]
    assert list(fault) == ["code", "text"]
    assert fault["code"] == "link_lost"
