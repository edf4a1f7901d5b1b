"""The pump-1 state machine: setpoint, ramp, faults, dead-man and the status object (docs/pump-1.md)."""

# Shared by the board and the simulator: plain Python that MicroPython and CPython 3.11 both run.
# It drives a hardware backend and never touches pins itself.
#
# API
# ---
# PumpController(hardware, deadman_s=90, default_setpoint_rpm=1450, dry_run_s=5.0,
#                clock=None, on_event=None, telemetry=None)
#     hardware       a backend with .drive(rpm, dt_s) and .read() (see "Hardware backends")
#     deadman_s      silence from the gateway after which a turning motor is stopped (link_lost)
#     clock          a function returning integer milliseconds (default: mcpdevice.clock.ticks_ms);
#                    the simulator may pass a virtual clock
#     on_event       optional function(event, **fields), told about faults ("fault", code=, text=)
#     telemetry      optional mcpdevice.telemetry.Telemetry (settable later), told about every
#                    change of .state: event "pump.state_change" with attributes state,
#                    previous_state, speed_rpm; a change to "fault" is severity error with the
#                    fault's code (fault_code) and its text as the body (docs/pump-1.md "Telemetry")
#
# Commands (each first advances the model to now and counts as contact with the gateway):
#     .get_status() -> None
#     .start(speed_rpm=None) -> None, or the refusal as text for an isError result
#     .set_speed(speed_rpm) -> None or refusal text
#     .stop() -> None (always allowed)
#     .reset_fault() -> None or refusal text
# Other:
#     .status() -> dict   the status object of the outputSchema, an OrderedDict whose keys come in
#                         this order on every runtime (MicroPython's dict would not keep it): state,
#                         speed_rpm, setpoint_rpm, flow_lpm, pressure_bar, motor_temp_c, run_hours,
#                         fault, uptime_s
#     .tick()             advance ramp, hardware, counters, fault detection and dead-man to now;
#                         call it every ~100 ms so the ramp is smooth and faults are caught
#     .heard()            the gateway said something (a request or a ping): feeds the dead-man
#     .at_rest() -> bool  the drive stands still (stopped, or a fault ramped down to 0)
#     .sample()           tell the telemetry the status now: its numbers as gauges pump.<field>, its
#                         state (and fault_code while a fault is latched) as their attributes
#     .check_speed(v) -> None or refusal text (the device enforces its own limits)
#
# Hardware backends (pump1.hardware_sim.SimulatedHardware, pump1.hardware_esp32.Esp32Hardware):
#     .drive(rpm, dt_s)   apply the ramped speed reference (0 = off) for the last dt_s seconds
#     .read() -> (flow_lpm, pressure_bar, motor_temp_c, failed)
#                         floats or None (no valid reading); `failed` names failed sensors or is None
#     .safe_stop()        reference to zero and drive disabled at once (shutdown paths)
#     .dry_run_persists() -> bool
#                         the backend knows the pump still has no water (the simulated one: the
#                         injected condition); a real board cannot tell while the pump stands still
#                         and says False, so reset_fault allows the reset and the fault latches again
#                         after dry_run_s of running dry

import json
import math
from collections import OrderedDict

from mcpdevice import clock as _clock
from pump1.physics import MAX_RPM, MIN_RPM, RATED_FLOW_LPM, RESET_C, TRIP_C, ramp_toward

STOPPED = "stopped"
STARTING = "starting"
RUNNING = "running"
STOPPING = "stopping"
FAULT = "fault"

DRY_FLOW_RATIO = 0.2  # flow below this share of the expected flow counts as running dry


class PumpController:
    def __init__(
        self,
        hardware,
        deadman_s=90,
        default_setpoint_rpm=1450,
        dry_run_s=5.0,
        clock=None,
        on_event=None,
        telemetry=None,
    ):
        if self.check_speed(default_setpoint_rpm) is not None:
            raise ValueError("default_setpoint_rpm must be between %d and %d" % (MIN_RPM, MAX_RPM))
        self.hardware = hardware
        self.deadman_ms = int(deadman_s * 1000)
        self.dry_run_ms = int(dry_run_s * 1000)
        self._now = clock or _clock.ticks_ms
        self._on_event = on_event
        self.telemetry = telemetry
        self.state = STOPPED
        self.setpoint_rpm = int(default_setpoint_rpm)
        self.speed = 0.0  # the ramped speed reference, which the motor follows
        self.fault = None
        self.flow_lpm = None
        self.pressure_bar = None
        self.motor_temp_c = None
        self.failed_sensors = None
        now = self._now()
        self._last_ms = now
        self._heard_ms = now
        # Whole seconds plus a millisecond remainder: exact for years, and small ints on a board.
        self._uptime_s = 0
        self._uptime_rem_ms = 0
        self._run_s = 0
        self._run_rem_ms = 0
        self._dry_ms = 0
        self.tick()

    # -- time -----------------------------------------------------------------------------------

    def heard(self):
        self._heard_ms = self._now()

    def at_rest(self):
        """The drive stands still and nothing will start it without a new command."""
        return self.speed == 0 and self.state in (STOPPED, FAULT)

    def tick(self):
        now = self._now()
        dt_ms = _clock.ticks_diff(now, self._last_ms)
        self._last_ms = now
        dt_ms = max(dt_ms, 0)
        dt_s = dt_ms / 1000
        if self.state in (STARTING, RUNNING) and _clock.ticks_diff(now, self._heard_ms) > self.deadman_ms:
            self._trip(
                "link_lost",
                "No request or ping from the gateway for %g s while the motor turned, so the device stopped it. "
                "Check the network and the gateway, then call reset_fault and start." % (self.deadman_ms / 1000),
            )
        target = self.setpoint_rpm if self.state in (STARTING, RUNNING) else 0
        self.speed = ramp_toward(self.speed, target, dt_s)
        self.hardware.drive(self.speed, dt_s)
        self.flow_lpm, self.pressure_bar, self.motor_temp_c, self.failed_sensors = self.hardware.read()
        self._uptime_s, self._uptime_rem_ms = _add_ms(self._uptime_s, self._uptime_rem_ms, dt_ms)
        if self.speed > 0:
            self._run_s, self._run_rem_ms = _add_ms(self._run_s, self._run_rem_ms, dt_ms)
        if self.state == STARTING and self.speed == self.setpoint_rpm:
            self._enter(RUNNING)
        elif self.state == STOPPING and self.speed == 0:
            self._enter(STOPPED)
        if self.fault is None:
            self._detect_faults(dt_ms)

    def _detect_faults(self, dt_ms):
        if self.failed_sensors:
            self._trip(
                "sensor_failure",
                "Sensor %s reads nothing valid (open or shorted loop), so the device stopped the pump. "
                "Check the sensor wiring, then call reset_fault." % self.failed_sensors,
            )
            return
        temp = self.motor_temp_c
        if temp is not None and temp > TRIP_C:
            self._trip(
                "overtemp",
                "Motor temperature %.1f C is above the trip limit of %d C, so the drive stopped the pump. "
                "Let the motor cool below %d C, then call reset_fault." % (temp, TRIP_C, RESET_C),
            )
            return
        expected = RATED_FLOW_LPM * self.speed / MAX_RPM
        flow = self.flow_lpm
        if self.state == RUNNING and flow is not None and flow < DRY_FLOW_RATIO * expected:
            self._dry_ms += dt_ms
            if self._dry_ms >= self.dry_run_ms:
                self._trip(
                    "dry_run",
                    "Flow stayed below %d%% of the expected %.0f L/min while running: the pump is running dry. "
                    "Check priming and the suction side, then call reset_fault."
                    % (int(DRY_FLOW_RATIO * 100), expected),
                )
        else:
            self._dry_ms = 0

    def _trip(self, code, text):
        self.fault = OrderedDict(code=code, text=text)
        self._enter(FAULT)
        self._dry_ms = 0
        if self._on_event is not None:
            self._on_event("fault", code=code, text=text)

    # -- commands -------------------------------------------------------------------------------

    def _command(self):
        self.heard()
        self.tick()

    def get_status(self):
        self._command()

    def start(self, speed_rpm=None):
        self._command()
        if speed_rpm is not None:
            refusal = self.check_speed(speed_rpm)
            if refusal is not None:
                return refusal
        if self.fault is not None:
            return "The pump is in fault %s: %s" % (self.fault["code"], self.fault["text"])
        if speed_rpm is not None:
            self.setpoint_rpm = int(speed_rpm)
        if self.state in (STOPPED, STOPPING):
            self._enter(STARTING)
        return None

    def set_speed(self, speed_rpm):
        self._command()
        refusal = self.check_speed(speed_rpm)
        if refusal is not None:
            return refusal
        if self.fault is not None:
            return "The pump is in fault %s: %s" % (self.fault["code"], self.fault["text"])
        if self.state in (STOPPED, STOPPING):
            return "The pump is %s; set_speed only changes a running pump. Call start with speed_rpm to run it." % (
                self.state
            )
        self.setpoint_rpm = int(speed_rpm)
        return None

    def stop(self):
        self._command()
        if self.state in (STARTING, RUNNING):
            self._enter(STOPPED if self.speed == 0 else STOPPING)

    def reset_fault(self):
        self._command()
        fault = self.fault
        if fault is None:
            return None
        code = fault["code"]
        if code == "overtemp":
            temp = self.motor_temp_c
            if temp is None:
                return "The overtemp fault cannot be reset: the motor temperature sensor reads nothing valid."
            if temp >= RESET_C:
                return (
                    "The overtemp fault persists: the motor is at %.1f C, above the reset limit of %d C. "
                    "Let it cool, then call reset_fault again." % (temp, RESET_C)
                )
        elif code == "sensor_failure" and self.failed_sensors:
            return (
                "The sensor_failure fault persists: sensor %s still reads nothing valid. "
                "Check its wiring, then call reset_fault again." % self.failed_sensors
            )
        elif code == "dry_run" and self.hardware.dry_run_persists():
            return (
                "The dry_run fault persists: the pump still has no water on its suction side. "
                "Prime it and check the suction side, then call reset_fault again."
            )
        # link_lost: this very request proves the link is back. dry_run on a board that cannot tell
        # while stopped: a new start shows it, and the fault latches again if the pump still runs dry.
        self.fault = None
        self._enter(STOPPED if self.speed == 0 else STOPPING)
        if self._on_event is not None:
            self._on_event("fault_reset", code=code)
        return None

    def _enter(self, state):
        previous = self.state
        self.state = state
        telemetry = self.telemetry
        if state != previous and telemetry is not None:
            attributes = {"state": state, "previous_state": previous, "speed_rpm": int(self.speed + 0.5)}
            if state != FAULT:
                telemetry.event(b"pump.state_change", attributes)
                return
            attributes["fault_code"] = self.fault["code"]
            telemetry.event(b"pump.state_change", attributes, b"error", self.fault["text"])

    def sample(self):
        status = self.status()
        del status["fault"]
        if self.fault is not None:
            status["fault_code"] = self.fault["code"]
        self.telemetry.sample(b"pump.", status)

    # -- values -----------------------------------------------------------------------------------

    @staticmethod
    def check_speed(value):
        # bool is an int in CPython but not in MicroPython; refuse it on both.
        if type(value) is bool or not isinstance(value, (int, float)):
            return "speed_rpm must be a whole number of rpm between %d and %d, got %s" % (
                MIN_RPM,
                MAX_RPM,
                json.dumps(value),
            )
        if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
            return "speed_rpm must be a whole number of rpm between %d and %d, got %s" % (MIN_RPM, MAX_RPM, value)
        if value < MIN_RPM or value > MAX_RPM:
            return "speed_rpm %d is out of range: this pump runs between %d and %d rpm." % (value, MIN_RPM, MAX_RPM)
        return None

    def status(self):
        return OrderedDict(
            state=self.state,
            speed_rpm=int(self.speed + 0.5),
            setpoint_rpm=self.setpoint_rpm,
            flow_lpm=_reading(self.flow_lpm, 1, 0.0),
            pressure_bar=_reading(self.pressure_bar, 2, 0.0),
            motor_temp_c=_reading(self.motor_temp_c, 1, None),
            run_hours=round((self._run_s + self._run_rem_ms / 1000) / 3600, 3),
            fault=self.fault,
            uptime_s=self._uptime_s,
        )


def _add_ms(seconds, rem_ms, dt_ms):
    rem_ms += dt_ms
    if rem_ms >= 1000:
        seconds += rem_ms // 1000
        rem_ms %= 1000
    return seconds, rem_ms


def _reading(value, digits, floor):
    if value is None:
        return None
    # The floor keeps a small negative sensor offset out of a schema that says minimum 0.
    if floor is not None and value < floor:
        value = floor
    return round(value, digits)
