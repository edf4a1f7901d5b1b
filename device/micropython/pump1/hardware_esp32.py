"""The ESP32 hardware backend: speed reference as PWM out, run enable, sensors as 4-20 mA ADC inputs."""

# Only the board imports this module (it needs `machine`). Wiring and calibration: docs/device-micropython.md.
#
# API: Esp32Hardware(settings)   settings: the "esp32" section of the config
#     .drive(rpm, dt_s)   duty = rpm / 2900 of full scale; enable output high while rpm > 0
#     .read() -> (flow_lpm, pressure_bar, motor_temp_c, failed)
#                         a loop current below 3.6 mA or above 21 mA (NAMUR NE 43) is a failed sensor
#                         and reads None; a sensor whose pin is null is not fitted and reads None
#     .safe_stop()        duty 0 and enable low at once
#     .dry_run_persists() False: a dry run shows only as missing flow while the pump turns, so a stopped
#                         pump cannot tell; the reset is allowed and the fault latches again after
#                         dry_run_s if the pump still runs dry

from machine import ADC, PWM, Pin

from pump1.physics import MAX_RPM

_FULL_SCALE = 65535
_LOW_MA = 3.6
_HIGH_MA = 21.0


class Esp32Hardware:
    def __init__(self, settings):
        self.pwm = PWM(Pin(settings["pwm_pin"]), freq=settings["pwm_freq_hz"], duty_u16=0)
        enable = settings["enable_pin"]
        self.enable = Pin(enable, Pin.OUT, value=0) if enable is not None else None
        self.shunt_ohm = settings["shunt_ohm"]
        self.sensors = []
        for name in ("flow", "pressure", "temp"):
            pin = settings[name + "_pin"]
            low, high = settings[name + "_range"]
            adc = ADC(Pin(pin), atten=ADC.ATTN_11DB) if pin is not None else None
            self.sensors.append((name, adc, low, high))

    def drive(self, rpm, dt_s):
        duty = int(rpm * _FULL_SCALE / MAX_RPM)
        self.pwm.duty_u16(max(0, min(_FULL_SCALE, duty)))
        if self.enable is not None:
            self.enable.value(1 if rpm > 0 else 0)

    def read(self):
        values = []
        failed = []
        for name, adc, low, high in self.sensors:
            if adc is None:
                values.append(None)
                continue
            milliamps = adc.read_uv() / self.shunt_ohm / 1000
            if milliamps < _LOW_MA or milliamps > _HIGH_MA:
                values.append(None)
                failed.append(name)
                continue
            share = max(0.0, (milliamps - 4.0) / 16.0)
            values.append(low + share * (high - low))
        return values[0], values[1], values[2], (" and ".join(failed) if failed else None)

    def safe_stop(self):
        self.pwm.duty_u16(0)
        if self.enable is not None:
            self.enable.value(0)

    def dry_run_persists(self):
        return False
