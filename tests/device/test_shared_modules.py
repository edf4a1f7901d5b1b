"""The shared pump-1 modules under CPython, as the simulator imports them: physics, controller,
tools, simulated hardware, dispatcher and registry, with a virtual clock instead of waiting."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import jsonschema  # type: ignore[import-untyped,unused-ignore]
import orjson
import pytest

from gateway.core.schema_hash import tools_hash
from tests.device.harness import DEVICE_DIR, SCHEMA_FILE

TOOLS: list[dict[str, Any]] = orjson.loads(SCHEMA_FILE.read_bytes())
STATUS_SCHEMA = TOOLS[0]["outputSchema"]


@pytest.fixture(scope="module")
def device_modules() -> Iterator[types.SimpleNamespace]:
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        yield types.SimpleNamespace(
            physics=importlib.import_module("pump1.physics"),
            controller=importlib.import_module("pump1.controller"),
            tools=importlib.import_module("pump1.tools"),
            hardware_sim=importlib.import_module("pump1.hardware_sim"),
            schema_hash=importlib.import_module("pump1.schema_hash"),
            dispatcher=importlib.import_module("mcpdevice.dispatcher"),
            schema_index=importlib.import_module("mcpdevice.schema_index"),
        )
    finally:
        sys.path.remove(str(DEVICE_DIR))


class Clock:
    """Virtual milliseconds: the test moves time, nothing sleeps."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def run(self, pump: Any, seconds: float, step_ms: int = 100, heard: bool = True) -> None:
        for _ in range(int(seconds * 1000 / step_ms)):
            self.now += step_ms
            if heard:
                pump.heard()
            pump.tick()


@pytest.fixture
def rig(device_modules: types.SimpleNamespace) -> types.SimpleNamespace:
    clock = Clock()
    hardware = device_modules.hardware_sim.SimulatedHardware()
    events: list[tuple[str, dict[str, Any]]] = []
    pump = device_modules.controller.PumpController(
        hardware, deadman_s=90, clock=clock, on_event=lambda event, **fields: events.append((event, fields))
    )
    return types.SimpleNamespace(
        clock=clock,
        hardware=hardware,
        pump=pump,
        tools=device_modules.tools.handlers(pump),
        events=events,
    )


def call(rig: types.SimpleNamespace, tool: str, **arguments: Any) -> dict[str, Any]:
    result: dict[str, Any] = rig.tools[tool](arguments)
    if not result.get("isError"):
        jsonschema.validate(result["structuredContent"], STATUS_SCHEMA)
        assert orjson.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result


def test_schema_hash_constant_matches_the_schema_file(device_modules: types.SimpleNamespace) -> None:
    assert tools_hash(TOOLS) == device_modules.schema_hash.SCHEMA_HASH, (
        "device/schemas/pump-1.json changed: run `mcp-gateway schema-hash device/schemas/pump-1.json` "
        "and update device/micropython/pump1/schema_hash.py"
    )


def test_schema_file_describes_every_tool_for_an_agent() -> None:
    assert [tool["name"] for tool in TOOLS] == ["get_status", "start", "set_speed", "stop", "reset_fault"]
    for tool in TOOLS:
        assert len(tool["description"]) > 100, tool["name"]
        assert tool["outputSchema"] == STATUS_SCHEMA
        assert tool["annotations"]["idempotentHint"] is True
        assert tool["inputSchema"]["additionalProperties"] is False
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(tool["outputSchema"])
    by_name = {tool["name"]: tool for tool in TOOLS}
    assert by_name["get_status"]["annotations"]["readOnlyHint"] is True
    for name in ("start", "set_speed"):
        speed = by_name[name]["inputSchema"]["properties"]["speed_rpm"]
        assert (speed["type"], speed["minimum"], speed["maximum"]) == ("integer", 300, 2900)
    assert by_name["set_speed"]["inputSchema"]["required"] == ["speed_rpm"]
    assert "required" not in by_name["start"]["inputSchema"]


def test_the_motor_ramps_at_600_rpm_per_second_and_flow_follows(rig: types.SimpleNamespace) -> None:
    assert call(rig, "start", speed_rpm=2900)["structuredContent"]["state"] == "starting"
    rig.clock.run(rig.pump, 1.0)
    one_second = call(rig, "get_status")["structuredContent"]
    assert one_second["speed_rpm"] == 600
    assert one_second["state"] == "starting"
    rig.clock.run(rig.pump, 4.0)
    full = call(rig, "get_status")["structuredContent"]
    assert (full["state"], full["speed_rpm"]) == ("running", 2900)
    assert full["flow_lpm"] == 120.0
    assert full["pressure_bar"] == 4.0
    call(rig, "stop")
    rig.clock.run(rig.pump, 2.0)
    assert call(rig, "get_status")["structuredContent"]["speed_rpm"] == 1700


def test_refusals_are_tool_errors_that_change_nothing(rig: types.SimpleNamespace) -> None:
    assert "out of range" in call(rig, "start", speed_rpm=3000)["content"][0]["text"]
    assert "whole number" in call(rig, "start", speed_rpm=None)["content"][0]["text"]
    assert "whole number" in call(rig, "set_speed", speed_rpm=False)["content"][0]["text"]
    assert "needs speed_rpm" in call(rig, "set_speed")["content"][0]["text"]
    assert "Call start" in call(rig, "set_speed", speed_rpm=1000)["content"][0]["text"]
    assert call(rig, "start", speed_rpm=1000.0)["structuredContent"]["setpoint_rpm"] == 1000  # a whole float is fine
    assert call(rig, "reset_fault")["structuredContent"]["fault"] is None  # nothing latched: nothing to do


def test_dead_man_trips_only_when_the_gateway_is_silent(rig: types.SimpleNamespace) -> None:
    call(rig, "start", speed_rpm=1500)
    rig.clock.run(rig.pump, 200, heard=True)
    assert rig.pump.status()["state"] == "running"
    rig.clock.run(rig.pump, 89, heard=False)
    assert rig.pump.status()["state"] == "running"
    rig.clock.run(rig.pump, 2, heard=False)
    status = rig.pump.status()
    assert status["state"] == "fault"
    assert status["fault"]["code"] == "link_lost"
    assert 0 < status["speed_rpm"] < 1500, "it ramps down, it does not cut the drive"
    assert rig.events[-1] == ("fault", {"code": "link_lost", "text": status["fault"]["text"]})
    rig.clock.run(rig.pump, 5)
    assert rig.pump.status()["speed_rpm"] == 0
    assert "link_lost" in call(rig, "start")["content"][0]["text"]
    assert call(rig, "reset_fault")["structuredContent"]["state"] == "stopped"


def test_a_stopped_pump_survives_silence(rig: types.SimpleNamespace) -> None:
    rig.clock.run(rig.pump, 500, heard=False)
    assert rig.pump.status()["fault"] is None


def test_overtemp_trips_and_resets_only_when_cool(rig: types.SimpleNamespace) -> None:
    physics = rig.hardware.physics
    call(rig, "start", speed_rpm=2900)
    physics.inject("overtemp")  # the simulator's control interface: cooling blocked
    rig.clock.run(rig.pump, 300)
    status = call(rig, "get_status")["structuredContent"]
    assert status["fault"]["code"] == "overtemp"
    assert status["motor_temp_c"] > 95
    physics.clear("overtemp")
    refused = call(rig, "reset_fault")
    assert refused["isError"] is True
    assert "above the reset limit of 85 C" in refused["content"][0]["text"]
    rig.clock.run(rig.pump, 600)
    assert call(rig, "reset_fault")["structuredContent"]["state"] == "stopped"


def test_sensor_failure_and_dry_run(rig: types.SimpleNamespace) -> None:
    physics = rig.hardware.physics
    call(rig, "start", speed_rpm=1500)
    rig.clock.run(rig.pump, 5)
    physics.inject("dry_run")
    rig.clock.run(rig.pump, 4)
    assert rig.pump.status()["fault"] is None, "a short dip is not a dry run"
    rig.clock.run(rig.pump, 2)
    assert rig.pump.status()["fault"]["code"] == "dry_run"
    assert "dry_run fault persists" in call(rig, "reset_fault")["content"][0]["text"]
    physics.clear("dry_run")
    assert call(rig, "reset_fault")["structuredContent"]["fault"] is None

    physics.inject("sensor_failure")
    rig.clock.run(rig.pump, 0.2)
    status = call(rig, "get_status")["structuredContent"]
    assert status["fault"]["code"] == "sensor_failure"
    assert (status["flow_lpm"], status["pressure_bar"]) == (None, None)
    assert "still reads nothing valid" in call(rig, "reset_fault")["content"][0]["text"]
    physics.clear("sensor_failure")
    rig.clock.run(rig.pump, 0.2)
    assert call(rig, "reset_fault")["structuredContent"]["fault"] is None


def test_dispatcher_under_cpython(device_modules: types.SimpleNamespace, rig: types.SimpleNamespace) -> None:
    dispatcher_module = device_modules.dispatcher
    registry = device_modules.schema_index.load(str(SCHEMA_FILE), dispatcher_module.tool_budget(4096))
    dispatcher = dispatcher_module.Dispatcher(registry, rig.tools, {"name": "pump-1", "version": "0"})
    listed: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        parts = dispatcher.handle(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}))
        frame = dispatcher_module.assemble(parts)
        assert len(frame) <= 4096
        page = orjson.loads(frame)["result"]
        listed += page["tools"]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert tools_hash(listed) == tools_hash(TOOLS)

    start = orjson.dumps(
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "start", "arguments": {}}}
    )
    first = dispatcher.handle(start)
    assert dispatcher.handle(start) == first
    assert dispatcher.counts["duplicates"] == 1
    assert orjson.loads(dispatcher.handle(b"\xff\xfe"))["error"]["code"] == -32700
    assert dispatcher.handle(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') is None


def test_esp32_backend_scales_pwm_and_4_20_ma(
    device_modules: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The board backend's arithmetic, with `machine` standing in for pins no CI machine has."""
    written: dict[str, Any] = {}
    microvolts = {34: 4.0e-3 * 120 * 1e6, 35: 12.0e-3 * 120 * 1e6, 32: 20.0e-3 * 120 * 1e6}

    class Pin:
        OUT = 1

        def __init__(self, number: int, mode: int | None = None, value: int | None = None) -> None:
            self.number = number
            if value is not None:
                written[f"pin{number}"] = value

        def value(self, level: int) -> None:
            written[f"pin{self.number}"] = level

    class PWM:
        def __init__(self, pin: Pin, freq: int, duty_u16: int) -> None:
            written["duty"] = duty_u16

        def duty_u16(self, duty: int) -> None:
            written["duty"] = duty

    class ADC:
        ATTN_11DB = 3

        def __init__(self, pin: Pin, atten: int) -> None:
            self.pin = pin.number

        def read_uv(self) -> float:
            return microvolts[self.pin]

    monkeypatch.setitem(sys.modules, "machine", types.SimpleNamespace(Pin=Pin, PWM=PWM, ADC=ADC))
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        backend_module = importlib.import_module("pump1.hardware_esp32")
        config_module = importlib.import_module("pump1.config")
    finally:
        sys.path.remove(str(DEVICE_DIR))
    board = backend_module.Esp32Hardware(config_module.DEFAULTS["esp32"])
    board.drive(1450, 0.1)
    assert written["duty"] == 32767
    assert written["pin26"] == 1
    flow, pressure, temp, failed = board.read()
    assert (flow, pressure, temp, failed) == (0.0, 3.0, 150.0, None)
    microvolts[35] = 1.0e-3 * 120 * 1e6  # 1 mA: a cut loop
    assert board.read()[1:] == (None, 150.0, "pressure")
    board.safe_stop()
    assert (written["duty"], written["pin26"]) == (0, 0)
    assert board.dry_run_persists() is False  # a stopped pump cannot show a dry run
