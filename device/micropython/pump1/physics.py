"""The pump-1 physics model: one centrifugal pump on a variable-speed drive (docs/pump-1.md "Behaviour")."""

# This is the only model of the pump. The board's simulated hardware backend and the simulator
# (`sim/`, under CPython) both use it, so it must stay plain Python that MicroPython and CPython 3.11
# both run: no `machine`, no `network`, no float formatting tricks, no annotations.
#
# API
# ---
# Constants (the pump's ratings, shared with the tool logic):
#     MIN_RPM = 300, MAX_RPM = 2900          speed range of the drive
#     RAMP_RPM_PER_S = 600                   fastest speed change the drive allows
#     RATED_FLOW_LPM = 120.0                 flow at MAX_RPM (flow is proportional to speed)
#     RATED_PRESSURE_BAR = 4.0               pressure at MAX_RPM (pressure goes with speed squared)
#     AMBIENT_C = 25.0                       motor temperature at standstill
#     TRIP_C = 95.0                          the drive trips with fault `overtemp` above this
#     RESET_C = 85.0                         an `overtemp` fault can be reset below this
#     FAULTS = ("dry_run", "sensor_failure", "overtemp")   what `inject` accepts
#
# ramp_toward(current, target, dt_s, rate=RAMP_RPM_PER_S) -> float
#     The next speed of a ramp that moves `current` toward `target` by at most `rate * dt_s`.
#
# PumpPhysics(ambient_c=AMBIENT_C, thermal_tau_s=THERMAL_TAU_S)
#     .step(dt_s, drive_rpm)   advance the model by dt_s seconds with the drive commanding
#                              drive_rpm (already ramped by the caller); the motor follows it
#     .speed_rpm               actual speed (float)
#     .motor_temp_c            winding temperature (float); the simulator may set it directly
#     .flow_lpm() / .pressure_bar() / .temperature_c()
#                              what the sensors read: a float, or None while `sensor_failure`
#                              is injected (pressure and flow read nothing, as with a cut loop)
#     .inject(kind) / .clear(kind) / .injected(kind)
#                              fault injection for the simulator's control interface:
#                              dry_run (no water: no flow, no pressure), sensor_failure (flow and
#                              pressure sensors read nothing), overtemp (cooling blocked: the motor
#                              heats toward TRIP_C + 30 whatever the speed)

import math

MIN_RPM = 300
MAX_RPM = 2900
RAMP_RPM_PER_S = 600
RATED_FLOW_LPM = 120.0
RATED_PRESSURE_BAR = 4.0
AMBIENT_C = 25.0
TRIP_C = 95.0
RESET_C = 85.0
TEMP_RISE_AT_MAX_C = 45.0  # steady-state rise at full speed: 70 degC, well below the trip
THERMAL_TAU_S = 60.0  # first-order lag of the winding temperature
BLOCKED_COOLING_EXTRA_C = 80.0  # what injected overtemp adds to the steady state
DRY_PRESSURE_BAR = 0.05  # a dry pump churns air: next to no head

FAULTS = ("dry_run", "sensor_failure", "overtemp")


def ramp_toward(current, target, dt_s, rate=RAMP_RPM_PER_S):
    step = rate * dt_s
    if target > current:
        return target if target - current <= step else current + step
    return target if current - target <= step else current - step


class PumpPhysics:
    def __init__(self, ambient_c=AMBIENT_C, thermal_tau_s=THERMAL_TAU_S):
        self.ambient_c = ambient_c
        self.thermal_tau_s = thermal_tau_s
        self.speed_rpm = 0.0
        self.motor_temp_c = ambient_c
        self._injected = []

    def step(self, dt_s, drive_rpm):
        if dt_s <= 0:
            return
        # An ideal drive: the motor follows the (already ramped) speed reference.
        self.speed_rpm = float(max(0, min(MAX_RPM, drive_rpm)))
        load = self.speed_rpm / MAX_RPM
        steady = self.ambient_c + TEMP_RISE_AT_MAX_C * load * load
        if "overtemp" in self._injected:
            steady += BLOCKED_COOLING_EXTRA_C
        self.motor_temp_c += (steady - self.motor_temp_c) * (1.0 - math.exp(-dt_s / self.thermal_tau_s))

    def flow_lpm(self):
        if "sensor_failure" in self._injected:
            return None
        if "dry_run" in self._injected:
            return 0.0
        return RATED_FLOW_LPM * self.speed_rpm / MAX_RPM

    def pressure_bar(self):
        if "sensor_failure" in self._injected:
            return None
        ratio = self.speed_rpm / MAX_RPM
        if "dry_run" in self._injected:
            return DRY_PRESSURE_BAR * ratio
        return RATED_PRESSURE_BAR * ratio * ratio

    def temperature_c(self):
        return self.motor_temp_c

    def inject(self, kind):
        if kind not in FAULTS:
            raise ValueError("unknown fault %r; known: %s" % (kind, ", ".join(FAULTS)))
        if kind not in self._injected:
            self._injected.append(kind)

    def clear(self, kind):
        if kind in self._injected:
            self._injected.remove(kind)

    def injected(self, kind):
        return kind in self._injected
