"""pump-1's telemetry on the real MicroPython Unix port (96 KB heap): `broker/telemetry` notifications in
mcp-broker's shape on every transport, a call's trace context echoed on what the call caused, the
bounded queue, and telemetry turned off. The board module itself (queue, trace context, frames) runs
here under MicroPython and under CPython, as the simulator runs it (docs/pump-1.md "Telemetry").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.ports import free_port
from gateway.southbound.serial import framing
from tests.device.conftest import DeviceFactory
from tests.device.harness import FakeGateway, FakeLink, is_telemetry, run_snippet
from tests.device.mqtt_harness import BrokerPeer
from tests.device.telemetry_wire import (
    CALLER_SPAN,
    CALLER_TRACE,
    SAMPLE_METRICS,
    TRACEPARENT,
    named,
    record_of,
    state_changes,
    traced,
)
from tests.device.test_device_mqtt import MqttDeviceFactory, board_on_peer, mqtt_devices  # noqa: F401
from tests.support.serial_ports import PtyPair

Message = dict[str, Any]


def records_of(messages: list[Message]) -> list[Message]:
    return [record_of(message) for message in messages]


async def records_until(
    messages: Callable[[], list[Message]], done: Callable[[list[Message]], object], timeout: float = 10.0
) -> list[Message]:
    """The records received so far, once `done(records)` holds; fails at the deadline with what came."""
    deadline = time.monotonic() + timeout
    while True:
        records = records_of(messages())
        if done(records):
            return records
        assert time.monotonic() < deadline, f"telemetry never got there; received: {records}"
        await asyncio.sleep(0.05)


async def call(link: FakeLink, tool: str, arguments: Message | None = None, traceparent: str | None = None) -> Message:
    params: Message = {"name": tool, "arguments": arguments or {}}
    answer = await link.request("tools/call", traced(params, traceparent) if traceparent else params)
    result: Message = answer["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]  # type: ignore[no-any-return]


# --- the module under MicroPython and CPython --------------------------------------------------------

SNIPPET = """
import asyncio, json
from mcpdevice.telemetry import Telemetry

telemetry = Telemetry(3, 0, 10)
for n in range(5):
    telemetry.event(b"test.event", {"n": n})
print(json.dumps({"queued": [record[2]["n"] for record in telemetry.queue], "dropped": telemetry.dropped}))
telemetry.size = 8  # room for what follows

CASES = [
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
    "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",
    12,
    None,
]
for case in CASES:
    telemetry.serving({"traceparent": case})
    print(json.dumps({"case": case, "context": telemetry.context}))
telemetry.serving([1])
print(json.dumps({"case": "not an object", "context": telemetry.context}))

telemetry.serving({"traceparent": CASES[0]})
telemetry.event(b"test.caused", {"who": "caller"}, b"error", "it broke")
telemetry.serving(None)
telemetry.sample(b"pump.", {"speed_rpm": 1450, "flow_lpm": 71.5, "state": "running", "ok": True, "temp": None})


class Sink:
    def __init__(self, fail=False):
        self.frames = []
        self.fail = fail

    async def send(self, parts):
        if self.fail:
            raise OSError("the link is gone")
        self.frames.append(b"".join(parts))


async def main():
    sink = Sink()
    task = asyncio.create_task(telemetry.report(sink))
    for _ in range(500):
        if not telemetry.queue:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    for frame in sink.frames:
        print(frame.decode())
    telemetry.event(b"test.lost", {})
    dropped = telemetry.dropped
    await telemetry.report(Sink(fail=True))  # returns: the link failed
    print(json.dumps({"after_failed_send": telemetry.dropped - dropped, "left": len(telemetry.queue)}))


asyncio.run(main())
"""


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
async def test_the_queue_keeps_the_newest_and_frames_follow_mcp_brokers_wire(
    runtime: str, micropython: str, tmp_path: Path
) -> None:
    script = tmp_path / "telemetry_snippet.py"
    script.write_text(SNIPPET)
    lines = await run_snippet(micropython if runtime == "micropython" else None, script)

    queue = lines[0]
    assert queue == {"queued": [2, 3, 4], "dropped": 2}, "the oldest records go, counted"

    contexts = {str(line["case"]): line["context"] for line in lines if "case" in line}
    assert contexts.pop(TRACEPARENT) == TRACEPARENT
    assert set(contexts.values()) == {None}, contexts  # every other form is refused

    records = records_of([line for line in lines if line.get("method") == "broker/telemetry"])
    assert [record["name"] for record in records] == ["test.event"] * 3 + ["test.caused", "pump.sample"]
    assert [record["attributes"] for record in records[:3]] == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert all(record["severity"] == "info" and "traceId" not in record for record in records[:3])
    caused, sample = records[3], records[4]
    assert (caused["traceId"], caused["spanId"]) == (CALLER_TRACE, CALLER_SPAN)
    assert (caused["severity"], caused["body"]) == ("error", "it broke")
    assert sample["points"] == {"pump.speed_rpm": 1450, "pump.flow_lpm": 71.5}  # None is left out
    assert sample["attributes"] == {"state": "running", "ok": True}
    assert lines[-1] == {"after_failed_send": 1, "left": 0}


# --- the board over WebSocket --------------------------------------------------------------------


async def test_state_changes_and_samples_reach_the_gateway_with_the_callers_trace(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    await devices(fake_gateway.url, telemetry={"sample_s": 0.5})
    link = await fake_gateway.accept()
    await link.handshake()
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    assert (await call(link, "start", {"speed_rpm": 600}, TRACEPARENT))["state"] == "starting"
    await records_until(
        lambda: link.telemetry,
        lambda records: named(records, "pump.state_change", "running") and named(records, "pump.sample"),
    )
    assert (await call(link, "stop", traceparent=other))["state"] == "stopping"
    records = await records_until(
        lambda: link.telemetry, lambda records: named(records, "pump.state_change", "stopped")
    )
    assert state_changes(records) == [
        ("stopped", "starting"),
        ("starting", "running"),
        ("running", "stopping"),
        ("stopping", "stopped"),
    ]

    starting, running, stopping, stopped = named(records, "pump.state_change")
    # Caused by a call: the caller's trace, under the span the call came with.
    assert (starting["traceId"], starting["spanId"]) == (CALLER_TRACE, CALLER_SPAN)
    assert (stopping["traceId"], stopping["spanId"]) == (other[3:35], other[36:52])
    # Caused by the control tick: no trace.
    assert "traceId" not in running and "traceId" not in stopped
    assert running["attributes"]["speed_rpm"] == 600 and stopped["attributes"]["speed_rpm"] == 0
    assert {event["severity"] for event in (starting, running, stopping, stopped)} == {"info"}
    assert all("body" not in event for event in (starting, running, stopping, stopped))

    sample = named(records, "pump.sample")[0]
    assert set(sample["points"]) == SAMPLE_METRICS, sample  # every reading is valid here
    assert sample["attributes"] == {"state": "running"} or sample["attributes"]["state"] in ("starting", "stopping")
    assert "traceId" not in sample


async def test_a_fault_transition_carries_its_code_and_an_error_status(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    # Nothing from the gateway for 1 s while the motor turns: the dead-man latches link_lost.
    device = await devices(fake_gateway.url, deadman_s=1, telemetry={"sample_s": 0})
    link = await fake_gateway.accept()
    await link.handshake()
    await call(link, "start", {"speed_rpm": 1200}, TRACEPARENT)
    await device.wait_event("fault", code="link_lost")
    records = await records_until(lambda: link.telemetry, lambda records: named(records, "pump.state_change", "fault"))
    fault = named(records, "pump.state_change", "fault")[0]
    assert fault["attributes"]["fault_code"] == "link_lost"
    assert fault["attributes"]["previous_state"] in ("starting", "running")
    assert fault["severity"] == "error"
    assert fault["body"].startswith("No request or ping from the gateway for 1 s")
    assert "traceId" not in fault  # the dead-man tripped on its own, not in a call
    assert not named(records, "pump.sample")  # sample_s 0: state changes only


async def test_a_link_that_is_down_leaves_the_newest_records_and_no_more(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    port = free_port()
    device = await devices(f"ws://127.0.0.1:{port}", heap_log_s=0.5, telemetry={"sample_s": 0.5, "queue_size": 3})
    # Samples pile up while nothing answers the dials: 3 kept, the older ones dropped. The heap log
    # lines tell the board's time.
    await device.wait_event("link_down")
    deadline = time.monotonic() + 20
    while not any(event["t"] >= 4 for event in device.named("heap")):
        assert device.process.returncode is None and time.monotonic() < deadline, device.output()
        await asyncio.sleep(0.05)
    came = time.time_ns()
    await fake_gateway.start(port)
    link = await fake_gateway.accept()
    records = await records_until(lambda: link.telemetry, lambda records: len(named(records, "pump.sample")) >= 5)
    taken = [record["time"] for record in named(records, "pump.sample")]
    assert taken == sorted(taken), taken
    # Sampling every 0.5 s for 4 s or more with room for 3: what was taken before the gateway came
    # is at most 3 samples, the newest ones (the oldest of them about 1.5 s before it came).
    before = [at for at in taken if at < came]
    assert 1 <= len(before) <= 3, taken
    assert came - before[0] < 2.5e9, (came, taken)


async def test_telemetry_off_sends_nothing(devices: DeviceFactory, fake_gateway: FakeGateway) -> None:
    await devices(fake_gateway.url, telemetry={"enabled": False, "sample_s": 0.2})
    link = await fake_gateway.accept()
    await link.handshake()
    assert (await call(link, "start", {"speed_rpm": 900}, TRACEPARENT))["state"] == "starting"
    status = await call(link, "get_status")
    deadline = time.monotonic() + 15
    while status["state"] != "running" or status["uptime_s"] < 3:  # time for 10 samples, were it on
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)
        status = await call(link, "get_status")
    assert (await call(link, "stop"))["state"] == "stopping"
    while (await call(link, "get_status"))["state"] != "stopped":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert link.telemetry == []


# --- the board over MQTT and on a serial line -------------------------------------------------------


async def test_telemetry_goes_up_the_mqtt_up_topic_beside_the_answers(
    peer: BrokerPeer,
    mqtt_devices: MqttDeviceFactory,  # noqa: F811
) -> None:
    await board_on_peer(mqtt_devices, peer, telemetry={"sample_s": 0.5})
    start = traced({"name": "start", "arguments": {"speed_rpm": 600}})
    assert (await peer.request("pump-1", "tools/call", start))["result"]["structuredContent"]["state"] == "starting"

    received: list[Message] = []

    def seen() -> list[Message]:
        for message in peer.telemetry:
            received.append(orjson.loads(message.payload))
            assert message.topic == peer.topic("pump-1", "up") and not message.retain
        peer.telemetry.clear()
        while not peer.raw.seen.empty():
            message = peer.raw.seen.get_nowait()
            if is_telemetry(message.payload):
                assert message.topic == peer.topic("pump-1", "up") and not message.retain
                received.append(orjson.loads(message.payload))
        return received

    records = await records_until(
        seen, lambda records: named(records, "pump.state_change", "running") and named(records, "pump.sample")
    )
    assert state_changes(records)[:2] == [("stopped", "starting"), ("starting", "running")]
    starting = named(records, "pump.state_change", "starting")[0]
    assert (starting["traceId"], starting["spanId"]) == (CALLER_TRACE, CALLER_SPAN)


class SerialPeer:
    """The gateway's end of a serial line, written by hand: COBS frames with the gateway's own codec."""

    def __init__(self, pair: PtyPair) -> None:
        self.pair = pair
        self.decoder = framing.FrameDecoder(1 << 16)
        self.messages: list[Message] = []
        asyncio.get_running_loop().add_reader(pair.master, self._readable)

    def _readable(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            for frame in self.decoder.feed(os.read(self.pair.master, 65_536)):
                self.messages.append(orjson.loads(frame))

    def send(self, message: Message) -> None:
        os.write(self.pair.master, framing.wire_bytes(orjson.dumps(message)))

    async def answer(self, request_id: int, timeout: float = 10.0) -> Message:
        deadline = time.monotonic() + timeout
        while True:
            for message in self.messages:
                if message.get("id") == request_id:
                    return message
            assert time.monotonic() < deadline, f"no answer to {request_id}: {self.messages}"
            await asyncio.sleep(0.02)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.pair.master)


@pytest.fixture
async def serial_peer() -> AsyncIterator[SerialPeer]:
    pair = PtyPair()
    serial = SerialPeer(pair)
    yield serial
    serial.close()
    pair.close()


async def test_telemetry_goes_down_the_serial_line_between_the_answers(
    devices: DeviceFactory, serial_peer: SerialPeer
) -> None:
    await devices(
        "ws://unused", transport="serial", serial={"path": serial_peer.pair.path}, telemetry={"sample_s": 0.5}
    )
    deadline = time.monotonic() + 10
    while not any(message.get("method") == "notifications/register" for message in serial_peer.messages):
        assert time.monotonic() < deadline, serial_peer.messages
        await asyncio.sleep(0.05)
    serial_peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
    assert "result" in await serial_peer.answer(1)
    serial_peer.send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": traced({"name": "start", "arguments": {"speed_rpm": 600}}),
        }
    )
    assert (await serial_peer.answer(2))["result"]["structuredContent"]["state"] == "starting"

    def telemetry() -> list[Message]:
        return [message for message in serial_peer.messages if message.get("method") == "broker/telemetry"]

    records = await records_until(
        telemetry, lambda records: named(records, "pump.state_change", "running") and named(records, "pump.sample")
    )
    starting = named(records, "pump.state_change", "starting")[0]
    assert (starting["traceId"], starting["spanId"]) == (CALLER_TRACE, CALLER_SPAN)
