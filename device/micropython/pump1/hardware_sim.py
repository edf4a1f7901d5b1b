"""The simulated hardware backend: pump-1's drive and sensors backed by the physics model."""

# Used by the board when config says "hardware": "sim" (and always on the Unix port) and by the
# simulator under CPython, so it must stay plain Python.
#
# API: SimulatedHardware(physics=None)   (a fresh pump1.physics.PumpPhysics by default)
#     .physics            the model, for the simulator's fault injection (.inject/.clear)
#     .drive(rpm, dt_s)   the motor follows the speed reference for dt_s seconds
#     .read() -> (flow_lpm, pressure_bar, motor_temp_c, failed)
#     .safe_stop()        the motor coasts to zero at once
#     .dry_run_persists() True while the simulator's dry-run condition is injected: the model knows
#                         the suction side is still dry, so reset_fault is refused until it is cleared

from pump1.physics import PumpPhysics


class SimulatedHardware:
    def __init__(self, physics=None):
        self.physics = physics if physics is not None else PumpPhysics()

    def drive(self, rpm, dt_s):
        self.physics.step(dt_s, rpm)

    def read(self):
        flow = self.physics.flow_lpm()
        pressure = self.physics.pressure_bar()
        temp = self.physics.temperature_c()
        failed = []
        if flow is None:
            failed.append("flow")
        if pressure is None:
            failed.append("pressure")
        if temp is None:
            failed.append("temperature")
        return flow, pressure, temp, (" and ".join(failed) if failed else None)

    def safe_stop(self):
        self.physics.speed_rpm = 0.0

    def dry_run_persists(self):
        return self.physics.injected("dry_run")
