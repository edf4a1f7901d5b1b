"""reset_fault of a dry run under the real MicroPython (96 KB heap), on both hardware backends.

The simulated backend knows a dry run persists (the condition is injected), so reset_fault is
refused until the injection is cleared. The ESP32 backend cannot tell while the pump stands still
(a dry run shows only as missing flow while it turns): the reset is allowed and the fault latches
again once the pump runs dry. The ESP32 backend runs here on a stand-in `machine` module whose ADC
reads a fixed loop current per pin. Time is virtual: the script moves the controller's clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.device.harness import run_snippet

PRELUDE = """
import json, sys
now = [0]
def clock():
    return now[0]
def run(pump, seconds):
    for _ in range(int(seconds * 10)):
        now[0] += 100
        pump.heard()
        pump.tick()
def call(handlers, pump, label, name, **arguments):
    result = handlers[name](arguments)
    print(json.dumps({"label": label, "error": bool(result.get("isError")), "text": result["content"][0]["text"],
                      "status": pump.status()}))
"""

SIMULATED = """
from pump1 import controller, hardware_sim, tools
hardware = hardware_sim.SimulatedHardware()
pump = controller.PumpController(hardware, dry_run_s=1, clock=clock)
handlers = tools.handlers(pump)
call(handlers, pump, "started", "start", speed_rpm=1500)
run(pump, 4)
hardware.physics.inject("dry_run")
run(pump, 1.5)
call(handlers, pump, "tripped", "get_status")
run(pump, 4)  # the drive ramps the motor down
call(handlers, pump, "reset_while_injected", "reset_fault")
hardware.physics.clear("dry_run")
call(handlers, pump, "reset_after_clear", "reset_fault")
call(handlers, pump, "restarted", "start")
"""

ESP32 = """
class Pin:
    OUT = 1
    def __init__(self, number, mode=None, value=None):
        self.number = number
    def value(self, level):
        pass
class PWM:
    def __init__(self, pin, freq, duty_u16):
        pass
    def duty_u16(self, duty):
        pass
MILLIAMPS = {34: 4.0, 35: 12.0, 32: 8.0}  # flow 0 L/min (dry), pressure 3 bar, motor 37.5 degC
class ADC:
    ATTN_11DB = 3
    def __init__(self, pin, atten):
        self.pin = pin.number
    def read_uv(self):
        return MILLIAMPS[self.pin] * 120 * 1000
class machine:
    pass
machine.Pin, machine.PWM, machine.ADC = Pin, PWM, ADC
sys.modules["machine"] = machine
from pump1 import config, controller, hardware_esp32, tools
hardware = hardware_esp32.Esp32Hardware(config.DEFAULTS["esp32"])
pump = controller.PumpController(hardware, dry_run_s=1, clock=clock)
handlers = tools.handlers(pump)
call(handlers, pump, "started", "start", speed_rpm=1500)
run(pump, 4)
call(handlers, pump, "tripped", "get_status")
run(pump, 4)
call(handlers, pump, "reset_while_dry", "reset_fault")
call(handlers, pump, "restarted", "start")
run(pump, 4)
call(handlers, pump, "tripped_again", "get_status")
"""


async def run_script(micropython: str | None, tmp_path: Path, body: str) -> dict[str, dict[str, Any]]:
    """The script's records by label, under MicroPython, or under this CPython when `micropython` is None."""
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + body)
    return {record["label"]: record for record in await run_snippet(micropython, script)}


async def test_simulated_backend_refuses_the_reset_while_dry_run_is_injected(micropython: str, tmp_path: Path) -> None:
    seen = await run_script(micropython, tmp_path, SIMULATED)
    assert seen["tripped"]["status"]["fault"]["code"] == "dry_run"
    refused = seen["reset_while_injected"]
    assert refused["error"] is True
    # The same style as overtemp and sensor_failure: what persists, what to do, call again.
    assert refused["text"] == (
        "The dry_run fault persists: the pump still has no water on its suction side. "
        "Prime it and check the suction side, then call reset_fault again."
    )
    assert refused["status"]["fault"]["code"] == "dry_run"
    assert refused["status"]["speed_rpm"] == 0
    reset = seen["reset_after_clear"]
    assert (reset["error"], reset["status"]["fault"], reset["status"]["state"]) == (False, None, "stopped")
    assert seen["restarted"]["status"]["state"] == "starting"


async def test_esp32_backend_allows_the_reset_and_the_fault_latches_again(micropython: str, tmp_path: Path) -> None:
    seen = await run_script(micropython, tmp_path, ESP32)
    tripped = seen["tripped"]["status"]
    assert (tripped["fault"]["code"], tripped["flow_lpm"]) == ("dry_run", 0.0)
    reset = seen["reset_while_dry"]
    assert (reset["error"], reset["status"]["fault"], reset["status"]["state"]) == (False, None, "stopped")
    assert seen["restarted"]["status"]["state"] == "starting"
    again = seen["tripped_again"]["status"]
    assert (again["state"], again["fault"]["code"]) == ("fault", "dry_run")
